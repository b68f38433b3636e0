"""``hybridrl export CHECKPOINT_DIR OUT_DIR``: a checkpoint's actor as a Hugging Face directory."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

from hybridrl.checkpoint.dcp_io import read_full_model
from hybridrl.checkpoint.manager import STATE, role_dir
from hybridrl.models.loader import auto_tokenizer_mismatch, config_for_export, load_tokenizer

logger = logging.getLogger(__name__)


def export_actor(checkpoint_dir: str | Path, out_dir: str | Path) -> Path:
    """Read the actor's full weights (either checkpoint format, any layout) and save them with the model's
    config and tokenizer (kept in the checkpoint), loadable with ``from_pretrained``."""
    checkpoint_dir, out_dir = Path(checkpoint_dir), Path(out_dir)
    if not (checkpoint_dir / STATE).exists():
        raise FileNotFoundError(
            f"{checkpoint_dir} is not a complete checkpoint (no {STATE}); pass a "
            f"global_step_<k> directory (in trainer.default_local_dir)."
        )
    actor_dir = role_dir(checkpoint_dir, "actor_rollout")
    hf_meta = actor_dir / "hf"
    if not hf_meta.exists():
        raise FileNotFoundError(f"{checkpoint_dir} has no actor (missing {hf_meta}).")
    state = read_full_model(actor_dir)
    # Never the network (a local directory); checkpoints before config_for_export saved use_cache=False.
    config = config_for_export(AutoConfig.from_pretrained(hf_meta, local_files_only=True))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(state, strict=False, assign=True)
    missing = [n for n, p in model.named_parameters() if p.is_meta]
    if missing:
        raise ValueError(
            f"Checkpoint {checkpoint_dir} lacks actor weights {missing[:3]}...: incomplete or not this model."
        )
    model.tie_weights()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    if (hf_meta / "generation_config.json").exists():
        GenerationConfig.from_pretrained(hf_meta, local_files_only=True).save_pretrained(out_dir)
    tokenizer = load_tokenizer(str(hf_meta))
    tokenizer.save_pretrained(out_dir)
    mismatch = auto_tokenizer_mismatch(out_dir, tokenizer)
    if mismatch:
        logger.warning(
            "%s: %s. Load its tokenizer with PreTrainedTokenizerFast.from_pretrained (or "
            "hybridrl.models.loader.load_tokenizer) to get the training tokenizer.",
            out_dir,
            mismatch,
        )
    logger.info("Exported %s to %s", checkpoint_dir, out_dir)
    return out_dir
