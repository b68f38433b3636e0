"""``hybridrl export CHECKPOINT_DIR OUT_DIR``: a checkpoint's actor as a Hugging Face directory."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from peft import LoraConfig
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

from hybridrl.checkpoint.dcp_io import iter_full_model, read_full_model
from hybridrl.checkpoint.hf_files import DEFAULT_SHARD_BYTES, ShardedWeightsWriter
from hybridrl.checkpoint.manager import STATE, role_dir
from hybridrl.models.loader import auto_tokenizer_mismatch, config_for_export, load_tokenizer
from hybridrl.models.lora import merged_weights, peft_adapter_state, read_adapter_config, uniform_scalings
from hybridrl.models.weights import tied_aliases

logger = logging.getLogger(__name__)


def export_actor(
    checkpoint_dir: str | Path, out_dir: str | Path, adapter: bool = False, max_shard_bytes: int = DEFAULT_SHARD_BYTES
) -> Path:
    """Read the actor's full weights (either checkpoint format, any layout) and save them with the model's
    config and tokenizer (kept in the checkpoint), loadable with ``from_pretrained``. A LoRA actor is
    exported merged (``W + alpha / r * B @ A``), or with ``adapter`` as a PEFT adapter directory (loaded on
    top of the base model with ``PeftModel.from_pretrained``). The weights stream from the checkpoint into
    files of at most ``max_shard_bytes`` (``hf_files``): this process holds about three files' worth, not the
    model."""
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
    lora_config = read_adapter_config(hf_meta)
    if adapter:
        return _export_adapter(read_full_model(actor_dir), lora_config, hf_meta, out_dir, checkpoint_dir)
    # Never the network (a local directory); checkpoints before config_for_export saved use_cache=False.
    config = config_for_export(AutoConfig.from_pretrained(hf_meta, local_files_only=True))
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    state = skeleton.state_dict(keep_vars=True)
    wanted = set(state) - set(tied_aliases(state))  # as save_pretrained: tied weights once, under the first name
    stream = iter_full_model(actor_dir, max_shard_bytes)
    if lora_config is not None:
        stream = merged_weights(stream, uniform_scalings(lora_config))
    out_dir.mkdir(parents=True, exist_ok=True)
    writer = ShardedWeightsWriter(out_dir, 0, 1, max_shard_bytes)
    written = set()
    for name, tensor in stream:
        if name in wanted:
            writer.add(name, tensor)
            written.add(name)
    missing = sorted(wanted - written)
    if missing:
        writer.abort()
        raise ValueError(
            f"Checkpoint {checkpoint_dir} lacks actor weights {missing[:3]}...: incomplete or not this model."
        )
    writer.finish()
    config.save_pretrained(out_dir)
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
