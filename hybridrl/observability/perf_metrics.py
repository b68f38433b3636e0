"""Model FLOPs and MFU per step, from the model's config and the devices' peak throughput."""

from __future__ import annotations

import logging
from typing import Any

import torch
from transformers import AutoConfig

from hybridrl.config.choices import Precision
from hybridrl.config.schema import Config
from hybridrl.observability.perf.device_peak import mfu, peak_flops
from hybridrl.observability.perf.flops import TRAIN_PASS_MULTIPLIER, FlopsModel
from hybridrl.protocol import Batch

logger = logging.getLogger(__name__)


class StepPerf:
    """Counts the matmul FLOPs each phase of a PPO step runs and relates them to the workers' peak.

    What runs, per phase, over the step's sequences (prompt + response tokens): generation (one forward:
    with a KV cache each token is processed once; logits once per sampled token), the old-log-prob and
    reference passes (logits only where a response token is predicted), the critic's values (no vocabulary
    head), and per PPO epoch a training pass (forward + backward = 3 forwards) of the actor and the critic.
    A phase counts only in a step that ran it (a step whose engine log-probs stand in for the old-log-prob
    pass has no ``old_log_prob`` time). Attention counts the full causal square, as verl and Megatron do.
    """

    #: phase (its ``timing_s/`` name) -> (passes, whether its logits are computed at the response tokens)
    PHASES: dict[str, tuple[str, bool]] = {
        "gen": ("forward", True),
        "old_log_prob": ("forward", True),
        "ref": ("forward", True),
        "values": ("forward", False),
        "update_actor": ("actor_train", True),
        "update_critic": ("critic_train", False),
    }

    def __init__(self, cfg: Config, flops: FlopsModel, peak_per_worker: list[float], peak_source: str) -> None:
        self.flops = flops
        self.peak_total = sum(peak_per_worker)
        self.num_workers = len(peak_per_worker)
        self.peak_source = peak_source
        self.passes = {
            "forward": 1,
            "actor_train": TRAIN_PASS_MULTIPLIER * cfg.actor_rollout_ref.actor.ppo_epochs,
            "critic_train": TRAIN_PASS_MULTIPLIER * cfg.critic.ppo_epochs,
        }
        if cfg.algorithm.filter_groups.enable or cfg.algorithm.adv_estimator == "remax":
            logger.info("MFU counts one generation per step; extra generation rounds are not counted.")

    @classmethod
    def create(cls, cfg: Config, model_path: str, node_info: list[dict[str, Any]]) -> StepPerf:
        """From the model's config and every worker's ``node_info`` (device type and name)."""
        model_config = AutoConfig.from_pretrained(
            model_path, trust_remote_code=cfg.actor_rollout_ref.model.trust_remote_code, local_files_only=True
        )
        dtype = torch.bfloat16 if cfg.actor_rollout_ref.actor.precision == Precision.bf16 else torch.float32
        peaks, sources = [], set()
        for info in node_info:
            peak, source = peak_flops(info["device_type"], dtype, info.get("device_name"))
            peaks.append(peak)
            sources.add(source)
        perf = cls(cfg, FlopsModel.from_hf_config(model_config), peaks, ",".join(sorted(sources)))
        logger.info(
            "MFU: the model's %s; peak %.1f TFLOP/s over %d workers (%s)",
            perf.flops.describe(),
            perf.peak_total / 1e12,
            len(peaks),
            perf.peak_source,
        )
        return perf

    def phase_flops(self, batch: Batch, timings: dict[str, float]) -> dict[str, float]:
        """FLOPs of each phase the step ran (``timings`` has its time)."""
        seq_lens = batch.tensors["attention_mask"].sum(-1).tolist()
        response_tokens = int(batch.tensors["response_mask"].sum())
        out = {}
        for phase, (passes, logits) in self.PHASES.items():
            if timings.get(phase, 0.0) > 0:
                forward = self.flops.forward_flops(seq_lens, head_tokens=response_tokens if logits else 0)
                out[phase] = forward * self.passes[passes]
        return out

    def _at_least(self, observed: float) -> None:
        """A measured peak (a CPU's, an unlisted accelerator's) calibrated while the host was busy can sit below
        what a step then achieves, and MFU above 1 says nothing. A peak is at least what was achieved: raise
        it for the rest of the run. A datasheet peak stays (exceeding it means the FLOP count is wrong)."""
        if observed <= self.peak_total or any(s.startswith("table:") for s in self.peak_source.split(",")):
            return
        logger.warning(
            "MFU: the %s peak of %.3g TFLOP/s is below the %.3g this step achieved (measured on a busy host?); "
            "using the achieved throughput as the peak from now on",
            self.peak_source,
            self.peak_total / 1e12,
            observed / 1e12,
        )
        self.peak_total = observed

    def metrics(self, batch: Batch, timings: dict[str, float]) -> dict[str, float]:
        """``perf/mfu`` over the step's wall time, and ``perf/mfu/<phase>`` over each phase's own time."""
        phases = self.phase_flops(batch, timings)
        total = sum(phases.values())
        achieved = total / timings["step"]
        self._at_least(max([achieved, *(flops / timings[phase] for phase, flops in phases.items())]))
        out = {
            "perf/flops_per_step": total,
            "perf/tflops_per_s_per_worker": achieved / self.num_workers / 1e12,
            "perf/mfu": mfu(achieved, self.peak_total),
        }
        for phase, flops in phases.items():
            out[f"perf/mfu/{phase}"] = mfu(flops / timings[phase], self.peak_total)
        return out
