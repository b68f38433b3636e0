"""Load a sequence-classification reward model (one scalar per sequence) from a local HF directory.

A reward model here is any ``AutoModelForSequenceClassification`` checkpoint with ``num_labels=1``
(e.g. a Qwen2/Llama ``...ForSequenceClassification``). Its tokenizer is loaded from its own
directory, because it may differ from the policy's.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen2ForSequenceClassification,
)

from hybridrl.models.loader import load_tokenizer
from hybridrl.models.tiny import build_model_config, build_tokenizer
from hybridrl.models.weights import WeightSource, params_on_meta, safetensors_keys

logger = logging.getLogger(__name__)


def _check_dir(path: str | Path | None, what: str) -> str:
    if not path or not Path(path).is_dir():
        raise FileNotFoundError(
            f"{what} directory '{path}' does not exist; give a local Hugging Face model directory "
            f"(downloads from a hub are not attempted)."
        )
    return str(path)


def load_reward_tokenizer(path: str, trust_remote_code: bool = False):
    """The reward model's tokenizer, right-padded (HF picks the score at the last non-pad token)."""
    path = _check_dir(path, "Reward model tokenizer")
    tokenizer = load_tokenizer(str(path), trust_remote_code)
    tokenizer.padding_side = "right"
    tokenizer.truncation_side = "left"  # keep the end of the text: the response is what is scored
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"The reward model tokenizer in '{path}' has neither a pad nor an eos token.")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _scoring_config(config: PretrainedConfig, tokenizer: PreTrainedTokenizerBase) -> None:
    """The pad id HF's pooling looks for (the logit at the rightmost non-pad token), on the text config
    too for multimodal models; no KV cache (the model only scores)."""
    config.pad_token_id = tokenizer.pad_token_id
    text_config = config.get_text_config()
    if text_config is not config:
        text_config.pad_token_id = tokenizer.pad_token_id
    config.use_cache = False


def load_reward_model(
    path: str,
    trust_remote_code: bool = False,
    *,
    tokenizer_path: str | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """``(model, tokenizer)``: a ``num_labels=1`` sequence classifier and its (right-padding) tokenizer.

    ``model.config.pad_token_id`` is set from the tokenizer, so that HF's pooling (the logit at the
    rightmost non-pad token) works on padded batches. Weights missing from the checkpoint (a
    classification head on a plain LM checkpoint) are initialised under ``seed``, identically on
    every rank, and a warning is logged: such a "reward model" is untrained.
    """
    path = _check_dir(path, "Reward model")
    tokenizer = load_reward_tokenizer(tokenizer_path or path, trust_remote_code)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model, info = AutoModelForSequenceClassification.from_pretrained(
            path,
            num_labels=1,
            dtype=dtype,
            trust_remote_code=trust_remote_code,
            local_files_only=True,
            attn_implementation="sdpa",
            output_loading_info=True,
        )
    if info.get("missing_keys"):
        logger.warning(
            "Reward model '%s' lacks weights %s: they are randomly initialised (an untrained head?).",
            path,
            sorted(info["missing_keys"]),
        )
    _scoring_config(model.config, tokenizer)
    model.eval()
    return model, tokenizer


def empty_reward_model(
    path: str,
    trust_remote_code: bool = False,
    *,
    tokenizer_path: str | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, WeightSource]:
    """``load_reward_model`` with the parameters on the meta device, and where the weights are; a head the
    files lack starts from Hugging Face's initialisation under ``seed`` (as ``from_pretrained`` does)."""
    path = _check_dir(path, "Reward model")
    tokenizer = load_reward_tokenizer(tokenizer_path or path, trust_remote_code)
    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=True)
    config.num_labels = 1
    _scoring_config(config, tokenizer)
    with params_on_meta():
        model = AutoModelForSequenceClassification.from_config(
            config, dtype=dtype, trust_remote_code=trust_remote_code, attn_implementation="sdpa"
        )
    model.eval()
    missing = sorted(set(dict(model.named_parameters())) - safetensors_keys(path))
    if missing:
        logger.warning(
            "Reward model '%s' lacks weights %s: they are randomly initialised (an untrained head?).", path, missing
        )
    return model, tokenizer, WeightSource(path, initial=lambda: _initial_values(model, missing, seed))


def _initial_values(model: PreTrainedModel, names: list[str], seed: int) -> dict[str, torch.Tensor]:
    """Full values of the parameters ``names`` under Hugging Face's init, drawn on CPU copies of their
    (small) modules so that no rank builds the whole model."""
    owners = sorted({name.rpartition(".")[0] for name in names}, key=list(dict(model.named_modules())).index)
    values: dict[str, torch.Tensor] = {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for owner in owners:
            module = copy.deepcopy(model.get_submodule(owner)).to_empty(device="cpu")
            model._init_weights(module)
            for name, tensor in module.named_parameters():
                values[f"{owner}.{name}" if owner else name] = tensor.detach()
    return {name: values[name] for name in names}


def build_tiny_reward_model(
    directory: str | Path,
    seed: int = 0,
    *,
    hidden_size: int = 32,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    intermediate_size: int = 64,
) -> str:
    """Save a tiny random ``Qwen2ForSequenceClassification`` (num_labels=1) + the tiny tokenizer."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    config = build_model_config(
        tokenizer, hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, intermediate_size
    )
    config.num_labels = 1
    config.pad_token_id = tokenizer.pad_token_id
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForSequenceClassification(config)
        # The default init (std 0.02) makes every score ~0; a larger head spreads them for tests.
        nn.init.normal_(model.score.weight, std=1.0)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)
