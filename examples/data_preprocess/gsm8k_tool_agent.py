#!/usr/bin/env python
"""Convert GSM8K to verl-format parquet for multi-turn rollouts with verl's gsm8k tool.

    python examples/data_preprocess/gsm8k_tool_agent.py --input gsm8k_train.jsonl --split-name train \
        --output-dir data/gsm8k_tool_agent

The rows of ``gsm8k.py`` (same columns, same prompt, same reward) with what verl's tool datasets add:
``agent_name`` ``tool_agent`` (the row's agent loop) and ``extra_info.tools_kwargs.calc_gsm8k_reward.create_kwargs.ground_truth`` (what
the tool is created with), and ``extra_info.interaction_kwargs`` for verl's GSM8K user
(``gsm8k_interaction_config.yaml``). The model learns of the tool from the chat template, which hybridrl renders with
the tools' schemas (Qwen's lists them in its system block), so the rows add no system message. Train with ``actor_rollout_ref.rollout.multi_turn.enable=true`` and
``multi_turn.tool_config_path`` naming verl's ``gsm8k_tool_config.yaml`` (its class
``verl.tools.gsm8k_tool.Gsm8kTool`` runs as ``hybridrl.tools.gsm8k.Gsm8kTool``).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

_spec = importlib.util.spec_from_file_location("gsm8k_preprocess", Path(__file__).with_name("gsm8k.py"))
assert _spec is not None and _spec.loader is not None
gsm8k = importlib.util.module_from_spec(_spec)
sys.modules["gsm8k_preprocess"] = gsm8k
_spec.loader.exec_module(gsm8k)

TOOL = "calc_gsm8k_reward"


def convert_row(row: dict[str, Any], index: int, split: str) -> dict[str, Any]:
    """One GSM8K row -> one verl-format tool-agent row; ValueError naming the row when it is unusable."""
    out = gsm8k.convert_row(row, index, split)
    out["agent_name"] = "tool_agent"
    ground_truth = out["reward_model"]["ground_truth"]
    out["extra_info"] = {
        **out["extra_info"],
        "tools_kwargs": {TOOL: {"create_kwargs": {"ground_truth": ground_truth}}},
        # verl's gsm8k user (multi_turn.interaction_config_path), for runs that add one
        "interaction_kwargs": {"name": "gsm8k", "query": row["question"], "ground_truth": ground_truth},
    }
    return out


def main(argv: list[str] | None = None) -> Path:
    return gsm8k.convert_main(
        argv, convert_row, gsm8k.HUB_NAME, gsm8k.HUB_CONFIG, "GSM8K", "data/gsm8k_tool_agent", __doc__.split("\n\n")[0]
    )


if __name__ == "__main__":
    main()
