"""Two runs of one config, one metric at a time: are the learning metrics bitwise the same at every step?

A move of code (a refactor) must not change what a run computes. Run the default run at two commits
(``bench/same_metrics.sh`` does both, on 1 and 2 workers), then compare their ``metrics.jsonl``: every
metric that does not measure time or the machine (timings, throughput, MFU, memory, CPU) must be equal
to the last bit at every step.

    python bench/same_metrics.py RUN_DIR_A RUN_DIR_B
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from hybridrl.observability.metrics import machine_metric

logger = logging.getLogger("same_metrics")


def rows(run_dir: Path) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        out.setdefault(int(row["step"]), {}).update(row)
    return out


def compare(a: Path, b: Path) -> tuple[int, list[str], list[str]]:
    """(learning metrics compared, keys that differ somewhere, keys only one run has)."""
    ra, rb = rows(a), rows(b)
    if sorted(ra) != sorted(rb):
        return 0, [f"steps differ: {sorted(ra)} vs {sorted(rb)}"], []
    keys: set[str] = set()
    differ: set[str] = set()
    lonely: set[str] = set()
    for step in ra:
        ka = {k for k in ra[step] if not machine_metric(k) and k != "step"}
        kb = {k for k in rb[step] if not machine_metric(k) and k != "step"}
        lonely |= ka ^ kb
        for k in ka & kb:
            keys.add(k)
            if ra[step][k] != rb[step][k]:
                differ.add(f"{k} (step {step}: {ra[step][k]!r} vs {rb[step][k]!r})")
    return len(keys), sorted(differ), sorted(lonely)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    a, b = Path(sys.argv[1]), Path(sys.argv[2])
    n, differ, lonely = compare(a, b)
    logger.info("%s vs %s: %d learning metrics over %d steps", a, b, n, len(rows(a)))
    for line in differ:
        logger.info("DIFFERS %s", line)
    for key in lonely:
        logger.info("ONLY IN ONE RUN %s", key)
    logger.info("bitwise equal" if not differ and not lonely and n else "NOT equal")
    return 0 if not differ and not lonely and n else 1


if __name__ == "__main__":
    sys.exit(main())
