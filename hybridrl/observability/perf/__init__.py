"""Performance accounting: model FLOPs, device peaks / MFU, process utilisation, straggler detection.

Why a separate package: these are pure measurement helpers with no dependency on Ray or the
trainer, so they can be unit-tested on CPU and reused by any worker or the driver.
"""

from hybridrl.observability.perf.device_peak import calibrate_matmul_flops, default_cache_path, mfu, peak_flops
from hybridrl.observability.perf.flops import FlopsModel
from hybridrl.observability.perf.stragglers import Straggler, find_stragglers, format_warning
from hybridrl.observability.perf.utilization import ProcessSampler

__all__ = [
    "FlopsModel",
    "ProcessSampler",
    "Straggler",
    "calibrate_matmul_flops",
    "default_cache_path",
    "find_stragglers",
    "format_warning",
    "mfu",
    "peak_flops",
]
