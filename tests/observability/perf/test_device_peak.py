import json
import math

import pytest
import torch

from hybridrl.observability.perf import device_peak
from hybridrl.observability.perf.device_peak import default_cache_path, lookup_gpu_peak, mfu, peak_flops


@pytest.mark.parametrize(
    "name,dtype,tf32,expected,entry",
    [
        ("NVIDIA H200", torch.bfloat16, False, 989.5e12, "H200 bf16"),
        ("NVIDIA H100 80GB HBM3", torch.float16, False, 989.5e12, "H100 SXM fp16"),
        ("NVIDIA H100 PCIe", torch.bfloat16, False, 756.5e12, "H100 PCIe bf16"),
        ("NVIDIA A100-SXM4-80GB", torch.float32, False, 19.5e12, "A100 fp32"),
        ("NVIDIA A100-SXM4-80GB", torch.float32, True, 156e12, "A100 tf32"),
        ("NVIDIA A10", torch.bfloat16, False, 125e12, "A10 bf16"),
        ("NVIDIA L40S", torch.bfloat16, False, 362.05e12, "L40S bf16"),
        ("NVIDIA L4", torch.bfloat16, False, 121e12, "L4 bf16"),
        ("NVIDIA GeForce RTX 4090", torch.bfloat16, False, 165.2e12, "RTX 4090 bf16"),
        ("Tesla V100-SXM2-32GB", torch.float16, False, 125e12, "V100 fp16"),
        ("AMD Instinct MI300X", torch.float32, True, 163.4e12, "MI300X fp32"),
    ],
)
def test_gpu_table(name, dtype, tf32, expected, entry):
    assert lookup_gpu_peak(name, dtype, allow_tf32=tf32) == (expected, entry)
    assert peak_flops("cuda", dtype, name, allow_tf32=tf32) == (expected, f"table:{entry}")


@pytest.mark.parametrize(
    "name,dtype",
    [
        ("NVIDIA A10G", torch.bfloat16),  # not the A10 (word boundary)
        ("NVIDIA L40", torch.bfloat16),  # neither L40S nor L4
        ("NVIDIA GH200 480GB", torch.bfloat16),
        ("Tesla V100-SXM2-32GB", torch.bfloat16),  # dtype not listed (emulated)
        ("NVIDIA H100", torch.float64),
    ],
)
def test_gpu_table_misses(name, dtype):
    assert lookup_gpu_peak(name, dtype) is None


def test_default_cache_path(monkeypatch, tmp_path):
    monkeypatch.setenv("HYBRIDRL_CACHE_DIR", str(tmp_path))
    assert default_cache_path() == tmp_path / "device_peak.json"


def test_cpu_calibration_then_cache(tmp_path):
    path = tmp_path / "sub" / "peak.json"
    flops, source = peak_flops("cpu", torch.float32, cache_path=path, calibration_size=64)
    assert source == "calibrated"
    assert math.isfinite(flops) and flops > 0
    data = json.loads(path.read_text())
    (key,) = data
    assert f"threads={torch.get_num_threads()}" in key and key.endswith("|float32") and key.startswith("cpu|")
    assert data[key]["flops"] == flops
    assert peak_flops("cpu", torch.float32, cache_path=path, calibration_size=64) == (flops, "cache")
    # another dtype is another key
    _, source = peak_flops("cpu", torch.bfloat16, cache_path=path, calibration_size=64)
    assert source == "calibrated"
    assert len(json.loads(path.read_text())) == 2


def test_corrupt_cache_recalibrates(tmp_path):
    path = tmp_path / "peak.json"
    path.write_text("not json")
    _, source = peak_flops("cpu", torch.float32, cache_path=path, calibration_size=64)
    assert source == "calibrated"


def test_unknown_gpu_falls_back_to_calibration(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(device_peak, "calibrate_matmul_flops", lambda dev, dt, size: calls.append((dev, dt)) or 5e12)
    path = tmp_path / "peak.json"
    assert peak_flops("cuda", torch.bfloat16, "Mystery GPU", cache_path=path) == (5e12, "calibrated")
    assert peak_flops("cuda", torch.bfloat16, "Mystery GPU", cache_path=path) == (5e12, "cache")
    assert calls == [("cuda", torch.bfloat16)]


def test_calibrate_small_is_positive():
    flops = device_peak.calibrate_matmul_flops("cpu", torch.float32, size=32, repeats=2, budget_s=0.1)
    assert math.isfinite(flops) and flops > 0


def test_mfu():
    assert mfu(250e12, 1000e12) == 0.25
    with pytest.raises(ValueError):
        mfu(1.0, 0.0)
