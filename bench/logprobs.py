"""Benchmark: peak memory of the log-prob pass over a micro-batch's logits, chunked vs the direct fp32 copy,
at a 32k and a 152k vocabulary. A figure, not a test.

    .venv/bin/python bench/logprobs.py [--rows 4] [--length 1024]

The logits are a (rows, length, vocab) bf16 tensor, as a bf16 model produces them; the figures are the
RSS the pass adds on top of them (``VmHWM`` reset before each pass), for a forward-only pass (old
log-probs, reference) and for a training pass (log-probs + entropy with gradients, then backward),
without and with ``actor.entropy_checkpointing``. The process tunes malloc as worker processes do
(``hybridrl.workers.host_memory``); without it glibc keeps freed chunks and the figures mean little.
"""

from __future__ import annotations

import argparse
import gc
import logging
from collections.abc import Callable

import torch

from hybridrl.algorithms.token_logprobs import entropy_from_logits, log_probs_from_logits, token_log_probs
from hybridrl.observability.perf.utilization import PeakRSS
from hybridrl.workers.host_memory import return_freed_memory

logger = logging.getLogger("bench.logprobs")
GB = 2**30


def direct(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Before: the whole slice upcast to fp32, then log-probs and entropy row by row."""
    z = logits.float()
    return log_probs_from_logits(z, labels), entropy_from_logits(z)


def chunked(checkpoint: bool) -> Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]]:
    return lambda logits, labels: token_log_probs(logits, labels, with_entropy=True, checkpoint=checkpoint)


def added_peak(fn: Callable, logits: torch.Tensor, labels: torch.Tensor, train: bool) -> float:
    """GB the pass adds to RSS at its peak."""
    gc.collect()
    x = logits.detach().requires_grad_(train)
    base = PeakRSS.current()
    PeakRSS.reset()
    with torch.set_grad_enabled(train):
        lp, ent = fn(x, labels)
        if train:
            (lp.sum() + ent.sum()).backward()
    peak = PeakRSS.peak()
    del lp, ent, x
    return (peak - base) / GB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--length", type=int, default=1024)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    return_freed_memory()  # as every worker process does: freed chunks go back to the OS
    logger.info("%-8s %-10s %-22s %12s", "vocab", "pass", "method", "added GB")
    for vocab in (32_768, 151_936):
        g = torch.Generator().manual_seed(0)
        logits = torch.randn(args.rows, args.length, vocab, generator=g, dtype=torch.bfloat16)
        labels = torch.randint(0, vocab, (args.rows, args.length), generator=g)
        logger.info("logits %s bf16: %.2f GB", tuple(logits.shape), logits.numel() * 2 / GB)
        for train in (False, True):
            methods = {"direct fp32 copy": direct, "chunked": chunked(False)}
            if train:
                methods["chunked + checkpointing"] = chunked(True)
            results = {name: added_peak(fn, logits, labels, train) for name, fn in methods.items()}
            for name, added in results.items():
                logger.info("%-8d %-10s %-22s %12.2f", vocab, "train" if train else "forward", name, added)
            best = min(v for k, v in results.items() if k != "direct fp32 copy")
            logger.info("  -> %.1fx less than the direct copy", results["direct fp32 copy"] / max(best, 1e-3))
        del logits, labels


if __name__ == "__main__":
    main()
