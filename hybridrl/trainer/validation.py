"""Validation: generate on held-out prompts with ``rollout.val_kwargs`` and score them.

Metric names follow verl: ``val-core/{data_source}/reward/mean@{n}`` (and best@n / worst@n when n > 1).
A few generations per validation are saved to ``<output_dir>/val_generations/step_<k>.jsonl``.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from hybridrl.cluster.role_clients import ActorRolloutClient, RolloutClient
from hybridrl.config.schema import Config
from hybridrl.data.dataset import PromptDataset
from hybridrl.generation.generation import generation_inputs
from hybridrl.protocol import Batch
from hybridrl.seeds import validation_seed
from hybridrl.trainer.rewarding import RewardStep


def run_validation(
    cfg: Config,
    actor: ActorRolloutClient | RolloutClient,
    reward: RewardStep,
    dataset: PromptDataset,
    step: int,
    output_dir: Path | None,
) -> dict[str, float]:
    val_kwargs = cfg.actor_rollout_ref.rollout.val_kwargs
    n = val_kwargs.n
    sampling = val_kwargs.sampling()
    chunk = max(1, cfg.data.train_batch_size)
    batches = []
    extras: list[dict[str, torch.Tensor]] = []
    for start in range(0, len(dataset), chunk):
        prompts = dataset.collate(list(range(start, min(start + chunk, len(dataset)))))
        batch = prompts.repeat(n, interleave=True)
        gen_in = generation_inputs(batch, cfg.actor_rollout_ref.rollout.multi_turn.enable)
        # A fixed seed per validation chunk: the same prompts get the same samples at every step's validation.
        gen_in.meta = {"seed": validation_seed(cfg.trainer.seed, start), "sampling": sampling}
        batch.union(actor.generate(gen_in))
        rewards = reward(batch)
        batch.tensors["scores"] = rewards.scores
        extras.append(rewards.extras)
        batches.append(batch.select(tensor_keys=["scores"], meta_keys=[]))
    merged = Batch.concat(batches)
    scores = merged.tensors["scores"].view(-1, n)  # (prompts, n)
    sources = merged.non_tensors["data_source"][::n]
    by_source: dict[str, list[int]] = defaultdict(list)
    for i, source in enumerate(sources):
        by_source[str(source)].append(i)
    # A reward function's extra keys (verl's dict return, e.g. "acc"), NaN for samples without them.
    extra_values = {
        key: torch.cat([e.get(key, torch.full((len(b),), math.nan)) for e, b in zip(extras, batches)]).view(-1, n)
        for key in sorted({k for e in extras for k in e})
    }
    metrics: dict[str, float] = {}
    for source, rows in sorted(by_source.items()):
        index = torch.tensor(rows)
        s = scores[index]
        metrics[f"val-core/{source}/reward/mean@{n}"] = float(s.mean())
        if n > 1:
            metrics[f"val-aux/{source}/reward/best@{n}/mean"] = float(s.max(dim=1).values.mean())
            metrics[f"val-aux/{source}/reward/worst@{n}/mean"] = float(s.min(dim=1).values.mean())
        for key, values in extra_values.items():
            metrics[f"val-core/{source}/{key}/mean@{n}"] = float(values[index].nanmean())
    if output_dir is not None and cfg.trainer.val_generations_to_log > 0:
        _save_generations(merged, cfg.trainer.val_generations_to_log, step, output_dir)
    return metrics


def _save_generations(batch: Batch, count: int, step: int, output_dir: Path) -> None:
    folder = output_dir / "val_generations"
    folder.mkdir(parents=True, exist_ok=True)
    nt = batch.non_tensors
    with open(folder / f"step_{step}.jsonl", "w", encoding="utf-8") as out:
        for i in range(min(count, len(batch))):
            out.write(
                json.dumps(
                    {
                        "step": step,
                        "data_source": str(nt["data_source"][i]),
                        "prompt": nt["prompt_text"][i],
                        "response": nt["response_text"][i],
                        "ground_truth": _plain(nt["ground_truth"][i]),
                        "score": float(batch.tensors["scores"][i]),
                    }
                )
                + "\n"
            )


def _plain(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)
