import math
from types import SimpleNamespace

import pytest
import torch

from hybridrl.observability.perf.utilization import ProcessSampler, available_cpus


class FakeProcess:
    def __init__(self):
        self.cpu = [SimpleNamespace(user=10.0, system=2.0), SimpleNamespace(user=13.0, system=3.0)]
        self.rss = 3 * 2**30

    def cpu_times(self):
        return self.cpu.pop(0)

    def memory_info(self):
        return SimpleNamespace(rss=self.rss)


def test_hand_computed_cpu_and_rss():
    clock = iter([100.0, 102.0]).__next__
    sampler = ProcessSampler(process=FakeProcess(), clock=clock, num_cpus=4, cuda=False)
    sampler.start()
    m = sampler.stop()
    # 4 CPU-seconds over 2 s wall on 4 cores = 50 %
    assert m["cpu_util_pct"] == 50.0
    assert m["rss_gb"] == 3.0
    assert "gpu_util_pct" not in m and "gpu_mem_gb" not in m


def test_real_process_on_cpu():
    with ProcessSampler() as sampler:
        x = torch.randn(64, 64)
        for _ in range(20):
            x = x @ x.T / 64
    m = sampler.metrics
    assert m["cpu_util_pct"] >= 0.0 and math.isfinite(m["cpu_util_pct"])
    assert m["rss_gb"] > 0
    assert m["peak_rss_gb"] >= m["rss_gb"] * 0.99
    if not torch.cuda.is_available():
        assert not any(k.startswith("gpu_") for k in m)
    assert available_cpus() >= 1


def test_stop_without_start():
    with pytest.raises(RuntimeError):
        ProcessSampler(cuda=False).stop()
