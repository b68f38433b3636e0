"""Peak matmul throughput of the device a worker runs on, for MFU.

Why a table plus calibration: datasheet peaks are the MFU convention on known GPUs, while CPUs
(and unlisted accelerators) vary too much by SKU, ISA and thread count for a table, so they are
measured once with a short matmul and cached.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import re
import tempfile
import time
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

#: Dense (no 2:4 sparsity) peak TFLOPS per (name pattern, dtype) from vendor datasheets.
#: Patterns are matched case-insensitively at word boundaries against the torch device name, in
#: order, so specific variants come first ("A100" does not match "A10", "L40S" does not match "L4").
#: "fp32" is the plain FP32 (CUDA-core / non-tensor) peak; "tf32" is the TF32 tensor-core peak,
#: used for float32 matmuls only when torch allows TF32 (see ``_tf32_enabled``). bf16/fp16 are the
#: tensor-core peaks with fp32 accumulation (what PyTorch uses, which matters on GeForce cards).
#: A missing dtype (e.g. bf16 on V100, which is emulated) falls back to calibration.
_GPU_PEAK_TFLOPS: list[tuple[str, str, dict[str, float]]] = [
    # entry,        regex,           {dtype: dense TFLOPS}
    ("H200 NVL", r"H200 NVL", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    ("H200", r"H200", {"bf16": 989.5, "fp16": 989.5, "tf32": 494.5, "fp32": 67.0}),
    ("H100 PCIe", r"H100 PCIe", {"bf16": 756.5, "fp16": 756.5, "tf32": 378.0, "fp32": 51.0}),
    ("H100 NVL", r"H100 NVL", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    ("H100 SXM", r"H100", {"bf16": 989.5, "fp16": 989.5, "tf32": 494.5, "fp32": 67.0}),
    ("A100", r"A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("A10", r"A10", {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}),
    ("L40S", r"L40S", {"bf16": 362.05, "fp16": 362.05, "tf32": 183.0, "fp32": 91.6}),
    ("L4", r"L4", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    ("RTX 4090", r"RTX 4090", {"bf16": 165.2, "fp16": 165.2, "tf32": 82.6, "fp32": 82.6}),
    ("V100 PCIe", r"V100-PCIE", {"fp16": 112.0, "fp32": 14.0}),
    ("V100", r"V100", {"fp16": 125.0, "fp32": 15.7}),
    # ROCm reports device_type "cuda" too. No tf32 entry: PyTorch on ROCm runs fp32 matmuls as fp32.
    ("MI300X", r"MI300X", {"bf16": 1307.4, "fp16": 1307.4, "fp32": 163.4}),
]

_DTYPE_KEYS = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


def _tf32_enabled() -> bool:
    """Whether float32 CUDA matmuls may use TF32 (new ``fp32_precision`` API first, then legacy)."""
    try:
        precision = getattr(torch.backends.cuda.matmul, "fp32_precision", "none")
        if precision in ("tf32", "ieee"):
            return precision == "tf32"
        return torch.get_float32_matmul_precision() != "highest"
    except Exception:  # mixed legacy/new API use raises; assume the safe (lower) fp32 peak
        return False


def lookup_gpu_peak(device_name: str, dtype: torch.dtype, allow_tf32: bool = False) -> tuple[float, str] | None:
    """Table peak in FLOP/s and its entry name, or None when the GPU or dtype is not listed."""
    key = _DTYPE_KEYS.get(dtype)
    if key is None:
        return None
    for entry, pattern, peaks in _GPU_PEAK_TFLOPS:
        if re.search(rf"(?<![A-Za-z0-9]){pattern}(?![A-Za-z0-9])", device_name, flags=re.IGNORECASE):
            use = "tf32" if key == "fp32" and allow_tf32 and "tf32" in peaks else key
            if use not in peaks:
                return None
            return peaks[use] * 1e12, f"{entry} {use}"
    return None


def default_cache_path() -> Path:
    """``$HYBRIDRL_CACHE_DIR/device_peak.json``, default ``~/.cache/hybridrl/device_peak.json``."""
    root = os.environ.get("HYBRIDRL_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "hybridrl")
    return Path(root) / "device_peak.json"


def cpu_model_name() -> str:
    """CPU model from /proc/cpuinfo, else ``platform.processor()`` / ``platform.machine()``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown-cpu"


def _cache_key(device_type: str, device_name: str, dtype: torch.dtype) -> str:
    dtype_name = str(dtype).removeprefix("torch.")
    return f"{device_type}|{device_name}|torch={torch.__version__}|threads={torch.get_num_threads()}|{dtype_name}"


def _read_cache(path: Path) -> dict[str, dict]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_cache(path: Path, key: str, flops: float) -> None:
    """Merge one entry and replace the file atomically (workers may race; last one wins)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _read_cache(path)
        data[key] = {"flops": flops, "measured_at": time.time()}
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".device_peak.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:
        logger.warning("could not write device peak cache %s: %s", path, exc)


def _synchronize(device: torch.device) -> None:
    module = getattr(torch, device.type, None)
    sync = getattr(module, "synchronize", None)
    if device.type != "cpu" and callable(sync):
        sync()


def calibrate_matmul_flops(
    device: torch.device | str, dtype: torch.dtype, size: int = 1024, repeats: int = 5, budget_s: float = 0.4
) -> float:
    """Best-of-``repeats`` FLOP/s of a ``size``x``size`` matmul on the current thread count.

    Bounded in time: the size grows from 128 by doubling only while the next size (8x the
    work) is predicted to fit the per-matmul budget, so slow dtypes (e.g. fp16 on CPUs without
    native support, a few GFLOP/s) measure at a smaller size; repeats stop once the budget is spent. Best-of rather than
    mean, because a peak is wanted and the host is shared.
    """
    device = torch.device(device)
    per_matmul_budget = budget_s / (repeats + 2)

    def timed(a: torch.Tensor, b: torch.Tensor) -> float:
        _synchronize(device)
        t0 = time.perf_counter()
        torch.matmul(a, b)
        _synchronize(device)
        return time.perf_counter() - t0

    def operands(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.randn(n, n, device=device).to(dtype), torch.randn(n, n, device=device).to(dtype))

    n = min(size, 128)
    a, b = operands(n)
    timed(a, b)  # first call pays kernel selection / JIT
    t = timed(a, b)
    while n < size and 8 * t <= per_matmul_budget:  # doubling n costs ~8x
        n = min(2 * n, size)
        a, b = operands(n)
        timed(a, b)
        t = timed(a, b)
    size = n
    flop = 2.0 * size**3
    best = math.inf
    deadline = time.perf_counter() + budget_s
    for _ in range(max(1, repeats)):
        best = min(best, timed(a, b))
        if time.perf_counter() > deadline:
            break
    best = max(best, 1e-9)
    logger.debug("calibrated %s %s: size=%d best=%.4fs -> %.3g FLOP/s", device, dtype, size, best, flop / best)
    return flop / best


def peak_flops(
    device_type: str,
    dtype: torch.dtype,
    device_name: str | None = None,
    *,
    cache_path: Path | str | None = None,
    allow_tf32: bool | None = None,
    calibration_size: int = 1024,
) -> tuple[float, str]:
    """Peak FLOP/s for ``dtype`` matmuls on this device, and where the number came from.

    Source is ``"table:<entry>"`` for a listed GPU, else ``"calibrated"`` (just measured) or
    ``"cache"`` (measured earlier for the same CPU/GPU model, torch version, threads and dtype).
    ``allow_tf32=None`` reads torch's float32 matmul precision setting.
    """
    if device_type == "cuda":
        if device_name is None:
            device_name = torch.cuda.get_device_name() if torch.cuda.is_available() else "unknown-gpu"
        tf32 = _tf32_enabled() if allow_tf32 is None else allow_tf32
        hit = lookup_gpu_peak(device_name, dtype, allow_tf32=tf32)
        if hit is not None:
            return hit[0], f"table:{hit[1]}"
        logger.info("no table peak for %r %s; calibrating", device_name, dtype)
    elif device_name is None:
        device_name = cpu_model_name() if device_type == "cpu" else device_type

    path = Path(cache_path) if cache_path is not None else default_cache_path()
    key = _cache_key(device_type, device_name, dtype)
    cached = _read_cache(path).get(key)
    if isinstance(cached, dict):
        value = cached.get("flops")
        if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
            return float(value), "cache"
    flops = calibrate_matmul_flops(device_type, dtype, size=calibration_size)
    _write_cache(path, key, flops)
    return flops, "calibrated"


def mfu(achieved_flops_per_s: float, peak: float) -> float:
    """Model FLOPs utilisation as a fraction (0.42 means 42 %) of ``peak`` FLOP/s."""
    if not (math.isfinite(peak) and peak > 0):
        raise ValueError(f"peak must be a positive finite FLOP/s, got {peak}")
    return achieved_flops_per_s / peak
