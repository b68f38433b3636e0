"""``hybridrl export CHECKPOINT_DIR OUT_DIR``: a checkpoint's actor as a Hugging Face directory."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from peft import LoraConfig
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

from hybridrl.checkpoint.dcp_io import read_full_model
from hybridrl.checkpoint.manager import STATE, role_dir
from hybridrl.models.loader import auto_tokenizer_mismatch, config_for_export, load_tokenizer
from hybridrl.models.lora import merged_state, peft_adapter_state, read_adapter_config

logger = logging.getLogger(__name__)


def export_actor(checkpoint_dir: str | Path, out_dir: str | Path, adapter: bool = False) -> Path:
    """Read the actor's full weights (either checkpoint format, any layout) and save them with the model's
    config and tokenizer (kept in the checkpoint), loadable with ``from_pretrained``. A LoRA actor is
    exported merged (``W + alpha / r * B @ A``), or with ``adapter`` as a PEFT adapter directory (loaded on
    top of the base model with ``PeftModel.from_pretrained``)."""
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
    lora_config = read_adapter_config(hf_meta)
    if adapter:
        return _export_adapter(state, lora_config, hf_meta, out_dir, checkpoint_dir)
    if lora_config is not None:
        state = merged_state(state, lora_config)
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


def _export_adapter(
    state: dict[str, torch.Tensor], config: LoraConfig | None, hf_meta: Path, out_dir: Path, checkpoint_dir: Path
) -> Path:
    if config is None:
        raise ValueError(
            f"{checkpoint_dir}'s actor has no LoRA adapters (trained with model.lora_rank=0): export it without --adapter."
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(str(out_dir))
    save_file(peft_adapter_state(state), str(out_dir / "adapter_model.safetensors"))
    load_tokenizer(str(hf_meta)).save_pretrained(out_dir)
    logger.info("Exported %s's LoRA adapters to %s", checkpoint_dir, out_dir)
    return out_dir
