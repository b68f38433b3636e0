"""Per-process resource use over a window (a training step, a rollout) for the step metrics.

Why start/stop deltas rather than a sampling thread: a step is seconds long and the workers
already sit in Ray actors; two snapshots cost nothing and need no background thread.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import torch

try:
    import resource
except ImportError:  # Windows has no resource module
    resource = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

_GIB = float(2**30)  # "gb" keys are GiB, as nvidia-smi and verl's memory logs report


def available_cpus() -> int:
    """Logical cores this process may run on (affinity / cgroup cpuset), not the host's."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, psutil.cpu_count(logical=True) or 1)


def peak_rss_bytes() -> float | None:
    """Lifetime peak RSS of this process (``ru_maxrss``: kB on Linux, bytes on macOS)."""
    if resource is None:  # Windows
        return None
    maxrss = float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return maxrss if sys.platform == "darwin" else maxrss * 1024.0


class PeakRSS:
    """This process's RSS high-water mark over a window (Linux: ``VmHWM``, reset by writing 5 to
    ``/proc/self/clear_refs``), for per-phase peaks that ``ru_maxrss`` (a lifetime peak) cannot give."""

    STATUS = Path("/proc/self/status")

    @staticmethod
    def _status_kb(field: str) -> int:
        for line in PeakRSS.STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise RuntimeError(f"{PeakRSS.STATUS} has no {field}")

    @staticmethod
    def reset() -> None:
        Path("/proc/self/clear_refs").write_text("5")

    @staticmethod
    def peak() -> int:
        return PeakRSS._status_kb("VmHWM") * 1024

    @staticmethod
    def current() -> int:
        return PeakRSS._status_kb("VmRSS") * 1024


_nvml: Any = None
_nvml_failed = False


def _nvml_module() -> Any:
    """Import and init pynvml once; None when absent or NVML is unusable (e.g. ROCm)."""
    global _nvml, _nvml_failed
    if _nvml is None and not _nvml_failed:
        try:
            import pynvml  # noqa: PLC0415 - optional (hybridrl[gpu]), absent on CPU/ROCm machines

            pynvml.nvmlInit()
            _nvml = pynvml
        except Exception as exc:  # missing package, no driver, ROCm
            _nvml_failed = True
            logger.debug("NVML unavailable, no gpu_util_pct/gpu_mem_gb: %s", exc)
    return _nvml


def _nvml_handle(nvml: Any, cuda_index: int) -> Any:
    """NVML handle for torch's CUDA device: by UUID, since NVML ignores CUDA_VISIBLE_DEVICES."""
    try:
        uuid = str(torch.cuda.get_device_properties(cuda_index).uuid)
        if not uuid.startswith("GPU-"):
            uuid = "GPU-" + uuid
        return nvml.nvmlDeviceGetHandleByUUID(uuid)
    except Exception:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        entries = [e.strip() for e in visible.split(",") if e.strip()]
        index = cuda_index
        if cuda_index < len(entries) and entries[cuda_index].isdigit():
            index = int(entries[cuda_index])
        return nvml.nvmlDeviceGetHandleByIndex(index)


def gpu_metrics(reset_peak: bool = False) -> dict[str, float]:
    """CUDA allocator peak and NVML utilisation/memory of the current device; {} without CUDA.

    ``gpu_util_pct`` is NVML's own recent-sample utilisation at the moment of the call, and
    ``gpu_mem_gb`` is device-wide used memory (includes other processes and the CUDA context).
    """
    if not torch.cuda.is_available():
        return {}
    out: dict[str, float] = {}
    try:
        index = torch.cuda.current_device()
        out["gpu_max_allocated_gb"] = torch.cuda.max_memory_allocated(index) / _GIB
        if reset_peak:
            torch.cuda.reset_peak_memory_stats(index)
    except Exception as exc:
        logger.debug("torch.cuda memory stats failed: %s", exc)
        return out
    nvml = _nvml_module()
    if nvml is not None:
        try:
            handle = _nvml_handle(nvml, index)
            out["gpu_util_pct"] = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            out["gpu_mem_gb"] = nvml.nvmlDeviceGetMemoryInfo(handle).used / _GIB
        except Exception as exc:
            logger.debug("NVML query failed: %s", exc)
    return out


class ProcessSampler:
    """Measures this process between ``start()`` and ``stop()``; also a context manager.

    ``stop()`` returns metric name -> float: ``cpu_util_pct`` (CPU seconds / wall / available
    cores, so 100 means every allowed core busy), ``rss_gb``, ``peak_rss_gb`` (process lifetime
    peak: ru_maxrss cannot be reset), and on CUDA ``gpu_max_allocated_gb`` (peak within the window,
    the allocator peak is reset at ``start()``), ``gpu_util_pct``, ``gpu_mem_gb``. Keys that
    cannot be measured are absent. ``process``, ``clock`` and ``num_cpus`` are injectable for tests.
    """

    def __init__(
        self,
        process: psutil.Process | None = None,
        clock: Callable[[], float] = time.perf_counter,
        num_cpus: int | None = None,
        cuda: bool | None = None,
    ) -> None:
        self._process = process if process is not None else psutil.Process()
        self._clock = clock
        self._num_cpus = num_cpus if num_cpus is not None else available_cpus()
        self._cuda = torch.cuda.is_available() if cuda is None else cuda
        self._t0: float | None = None
        self._cpu0 = 0.0
        self.metrics: dict[str, float] = {}

    def _cpu_seconds(self) -> float:
        times = self._process.cpu_times()
        return float(times.user + times.system)

    def start(self) -> ProcessSampler:
        self._cpu0 = self._cpu_seconds()
        if self._cuda:
            gpu_metrics(reset_peak=True)
        self._t0 = self._clock()
        return self

    def stop(self) -> dict[str, float]:
        if self._t0 is None:
            raise RuntimeError("ProcessSampler.stop() called before start()")
        wall = self._clock() - self._t0
        cpu = self._cpu_seconds() - self._cpu0
        self._t0 = None
        out: dict[str, float] = {}
        if wall > 0:
            out["cpu_util_pct"] = 100.0 * cpu / wall / self._num_cpus
        out["rss_gb"] = self._process.memory_info().rss / _GIB
        peak = peak_rss_bytes()
        if peak is not None:
            out["peak_rss_gb"] = peak / _GIB
        if self._cuda:
            out.update(gpu_metrics())
        self.metrics = out
        return out

    def __enter__(self) -> ProcessSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
