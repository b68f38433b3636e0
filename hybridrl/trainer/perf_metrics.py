"""Model FLOPs and MFU per step, from the model's config and the devices' peak throughput."""

from __future__ import annotations

import logging

import torch
from transformers import AutoConfig

from hybridrl.cluster.worker_group import WorkerGroup
from hybridrl.config.choices import Precision
from hybridrl.config.roles import critic_enabled, ref_enabled
from hybridrl.config.schema import Config
from hybridrl.perf.device_peak import mfu, peak_flops
from hybridrl.perf.flops import FlopsModel
from hybridrl.protocol import Batch

logger = logging.getLogger(__name__)


class StepPerf:
    """Counts the matmul FLOPs a PPO step performs and relates them to the workers' peak.

    Forward passes per step: generation (counted as one forward over the whole sequences: with a KV
    cache each token is processed once), old log-probs, reference log-probs, values; training passes
    (forward + backward = 3 forwards) per PPO epoch for the actor and the critic.
    """

    def __init__(self, cfg: Config, flops: FlopsModel, peak_per_worker: list[float], peak_source: str) -> None:
        self.flops = flops
        self.peak_total = sum(peak_per_worker)
        self.num_workers = len(peak_per_worker)
        self.peak_source = peak_source
        critic = critic_enabled(cfg)
        self.forward_passes = 2 + int(ref_enabled(cfg)) + int(critic)
        self.train_passes = cfg.actor_rollout_ref.actor.ppo_epochs + (cfg.critic.ppo_epochs if critic else 0)
        if cfg.algorithm.filter_groups.enable or cfg.algorithm.adv_estimator == "remax":
            logger.info("MFU counts one generation per step; extra generation rounds are not counted.")

    @classmethod
    def create(cls, cfg: Config, model_path: str, groups: list[WorkerGroup]) -> StepPerf:
        model_config = AutoConfig.from_pretrained(
            model_path, trust_remote_code=cfg.actor_rollout_ref.model.trust_remote_code, local_files_only=True
        )
        dtype = torch.bfloat16 if cfg.actor_rollout_ref.actor.precision == Precision.bf16 else torch.float32
        peaks, sources = [], set()
        for group in groups:
            for info in group.node_info:
                peak, source = peak_flops(info["device_type"], dtype, info.get("device_name"))
                peaks.append(peak)
                sources.add(source)
        perf = cls(cfg, FlopsModel.from_hf_config(model_config), peaks, ",".join(sorted(sources)))
        logger.info(
            "Peak for MFU: %.1f TFLOP/s over %d workers (%s)", perf.peak_total / 1e12, len(peaks), perf.peak_source
        )
        return perf

    def metrics(self, batch: Batch, step_seconds: float) -> dict[str, float]:
        seq_lens = batch.tensors["attention_mask"].sum(-1).tolist()
        total = self.flops.step_flops(seq_lens, self.forward_passes, self.train_passes)
        achieved = total / step_seconds
        return {
            "perf/flops_per_step": total,
            "perf/tflops_per_s_per_worker": achieved / self.num_workers / 1e12,
            "perf/mfu": mfu(achieved, self.peak_total),
        }
