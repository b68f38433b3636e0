from hybridrl.observability.tracking.tracker import Tracker

__all__ = ["Tracker"]
