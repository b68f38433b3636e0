"""Load models and tokenizers from local Hugging Face directories (never from a hub)."""

from __future__ import annotations

import copy
import inspect
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from hybridrl.models.packed_attention import register as register_packed_attention
from hybridrl.models.weights import WeightSource, params_on_meta


def _check_dir(path: str, what: str) -> None:
    if not Path(path).is_dir():
        raise FileNotFoundError(
            f"{what} directory '{path}' does not exist; give a local Hugging Face model directory "
            f"(downloads from a hub are not attempted)."
        )


def load_tokenizer(path: str, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    _check_dir(path, "Tokenizer")
    config_file = Path(path) / "tokenizer_config.json"
    saved_class = json.loads(config_file.read_text()).get("tokenizer_class") if config_file.exists() else None
    if saved_class in ("TokenizersBackend", "PreTrainedTokenizerFast"):
        # A tokenizer saved from a plain tokenizers.Tokenizer: AutoTokenizer (transformers 5) would pick the
        # class of config.json's model_type (e.g. Qwen2Tokenizer) and replace its pre-tokenizer.
        tokenizer = PreTrainedTokenizerFast.from_pretrained(path, local_files_only=True)
    else:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=True)
    for load_time_only in ("local_files_only", "is_local"):  # else save_pretrained writes them into exports
        tokenizer.init_kwargs.pop(load_time_only, None)
    tokenizer.padding_side = "left"  # generation continues prompts from their right edge
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(path: str, trust_remote_code: bool = False, dtype: torch.dtype = torch.float32) -> PreTrainedModel:
    _check_dir(path, "Model")
    model = AutoModelForCausalLM.from_pretrained(
        path,
        dtype=dtype,
        trust_remote_code=trust_remote_code,
        local_files_only=True,
        attn_implementation="sdpa",
    )
    model.config.use_cache = False  # training forward passes; generation turns the cache back on
    return model


def attention_implementation(packed: bool) -> str:
    """``sdpa`` for padded rows. Packed rows get ``PACKED_ATTENTION`` on every device: each document
    attends on its own (flash-attn's or PyTorch's variable-length kernel on a GPU in half precision,
    per-document SDPA elsewhere), never through a (tokens x tokens) block-diagonal mask."""
    # The kernel is chosen per call, from the device and dtype of the tensors it gets.
    return register_packed_attention() if packed else "sdpa"


def empty_causal_lm(
    path: str, trust_remote_code: bool = False, dtype: torch.dtype = torch.float32, attn_implementation: str = "sdpa"
) -> tuple[PreTrainedModel, WeightSource]:
    """The causal LM of ``path`` with its parameters on the meta device, and where its weights are."""
    _check_dir(path, "Model")
    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=True)
    with params_on_meta():
        model = AutoModelForCausalLM.from_config(
            config, dtype=dtype, trust_remote_code=trust_remote_code, attn_implementation=attn_implementation
        )
    if (Path(path) / "generation_config.json").exists():  # from_pretrained reads it too (EOS ids, sampling)
        model.generation_config = GenerationConfig.from_pretrained(path, local_files_only=True)
    model.config.use_cache = False
    return model, WeightSource(path)


SAMPLE_TEXT = "Tokenizer check: 12 + 34 = 46.\n#### 46"


def auto_tokenizer_mismatch(directory: str | Path, trained: PreTrainedTokenizerBase) -> str | None:
    """Why ``AutoTokenizer.from_pretrained(directory)`` would not tokenize as ``trained`` did (a different
    class, or different ids on a sample), or None. transformers 5 picks some classes by the config's
    model_type whatever the tokenizer config says (every ``qwen2`` model gets ``Qwen2Tokenizer``), so an
    export can load differently from the tokenizer it was trained with; the export says so."""
    loaded = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    if type(loaded) is not type(trained):
        return f"AutoTokenizer loads it as {type(loaded).__name__}, training used {type(trained).__name__}"
    if loaded(SAMPLE_TEXT)["input_ids"] != trained(SAMPLE_TEXT)["input_ids"]:
        return "AutoTokenizer's ids differ from the training tokenizer's on a sample text"
    return None


def config_for_export(config: PretrainedConfig) -> PretrainedConfig:
    """A copy of ``config`` fit to publish: training turns the KV cache off (``use_cache=False``) for its
    forward passes, and an exported model must generate with it on, as the original did."""
    exported = copy.deepcopy(config)
    exported.use_cache = True
    return exported


def enable_activation_checkpointing(model: nn.Module) -> None:
    """Recompute each decoder layer in backward instead of keeping its activations (~14 GB per 4k-token
    sequence at 7B without it). Hugging Face's per-layer checkpointing wraps a layer's ``forward``, not its
    ``__call__``, so FSDP2's hooks and the megatron stages' direct layer calls stay outside the recompute;
    non-reentrant, so no input needs ``requires_grad``. Applies to every Hugging Face model inside ``model``
    (a causal LM, or a critic's backbone)."""
    found = [m for m in model.modules() if isinstance(m, PreTrainedModel)]
    if not found:
        raise ValueError(f"{type(model).__name__} holds no Hugging Face model to checkpoint.")
    kwargs = {"use_reentrant": False}
    if hasattr(found[0], "activation_checkpointing_enable"):  # transformers >= 5.2x's name
        found[0].activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        found[0].gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def cache_keyword(model: nn.Module) -> str | None:
    """The name under which ``model.forward`` takes a key/value cache of earlier positions (transformers 5.2x
    renamed ``past_key_values`` to ``cache``), or None if it takes none."""
    parameters = inspect.signature(model.forward).parameters
    return next((name for name in ("cache", "past_key_values") if name in parameters), None)


def checkpoints_activations(model: nn.Module) -> bool:
    """Whether ``enable_activation_checkpointing`` was applied inside ``model`` (any transformers version)."""
    return any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


class ValueModel(nn.Module):
    """A causal-LM backbone with a scalar value head on every position (the PPO critic)."""

    def __init__(self, backbone: nn.Module, hidden_size: int, init_std: float = 0.0) -> None:
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(hidden_size, 1)
        if init_std > 0:
            nn.init.normal_(self.value_head.weight, std=init_std)
        else:
            nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        position_ids: torch.Tensor,
        past_key_values: Any = None,
        use_cache: bool = False,
    ) -> torch.Tensor:
        """``attention_mask`` None: packed rows told apart by their restarting ``position_ids``.
        ``past_key_values``: a cache of earlier positions the rows continue (``parallel.prompt_sharing``)."""
        cache = {} if past_key_values is None else {cache_keyword(self.backbone) or "past_key_values": past_key_values}
        hidden = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=use_cache, **cache
        ).last_hidden_state  # (B, T, H)
        # clone: FSDP2 cannot hook a view returned by the root module (it warns of wrong gradients).
        return self.value_head(hidden).squeeze(-1).clone()  # (B, T)


def value_head_init(hidden_size: int, init_std: float, seed: int) -> dict[str, torch.Tensor]:
    """The value head's initial weights: those ``ValueModel`` draws under ``seed`` (same RNG use)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        head = ValueModel(nn.Identity(), hidden_size, init_std).value_head
    return {f"value_head.{name}": tensor.detach() for name, tensor in head.state_dict().items()}


def empty_value_model(
    path: str,
    trust_remote_code: bool = False,
    init_std: float = 0.0,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    attn_implementation: str = "sdpa",
) -> tuple[ValueModel, WeightSource]:
    """The critic with its parameters on the meta device; the backbone reads a causal LM's ``model.*``
    weights (or a bare backbone's), the value head starts from ``value_head_init``."""
    _check_dir(path, "Critic model")
    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=True)
    with params_on_meta():
        backbone = AutoModel.from_config(
            config, dtype=dtype, trust_remote_code=trust_remote_code, attn_implementation=attn_implementation
        )
        model = ValueModel(backbone, config.hidden_size, init_std).to(dtype)
    source = WeightSource(
        path,
        prefixes=(("backbone.", "model."), ("backbone.", "")),
        initial=lambda: value_head_init(config.hidden_size, init_std, seed),
    )
    return model, source


def load_value_model(path: str, trust_remote_code: bool = False, init_std: float = 0.0, seed: int = 0) -> ValueModel:
    _check_dir(path, "Critic model")
    backbone = AutoModel.from_pretrained(
        path,
        dtype=torch.float32,
        trust_remote_code=trust_remote_code,
        local_files_only=True,
        attn_implementation="sdpa",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return ValueModel(backbone, backbone.config.hidden_size, init_std)
