from hybridrl.tracking.tracker import Tracker

__all__ = ["Tracker"]
