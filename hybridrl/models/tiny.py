"""The embedded default model: a tiny Qwen2-architecture model and a character-level tokenizer.

Both are real Hugging Face artefacts, saved with ``save_pretrained`` to a directory, so the workers
load them exactly as they would load a user's model from ``actor_rollout_ref.model.path``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

logger = logging.getLogger(__name__)

SPECIAL_TOKENS = ["<pad>", "<eos>", "<unk>"]
CHARACTERS = list("0123456789=+- ")
_MARKER = "hybridrl_tiny.json"


# A chat template for multi-turn rollouts (hybridrl/generation/agent_loop.py): messages back to back, each
# assistant turn closed by <eos>, a tool's answer between <tool_response> tokens (a task that uses tools adds
# them to the vocabulary), and no assistant header.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'tool' -%}<tool_response>{{ message['content'] }}</tool_response>"
    "{%- elif message['role'] == 'assistant' -%}{{ message['content'] }}<eos>"
    "{%- else -%}{{ message['content'] }}"
    "{%- endif -%}"
    "{%- endfor -%}"
)


def build_tokenizer(extra_tokens: tuple[str, ...] = ()):
    """A character-level tokenizer built with the ``tokenizers`` library; ``extra_tokens`` are whole words
    after the characters (a built-in task's tool-call markers), never split."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + CHARACTERS + list(extra_tokens))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_tokens([AddedToken(tok, normalized=False) for tok in extra_tokens])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model_config(
    tokenizer,
    hidden_size: int,
    num_hidden_layers: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    intermediate_size: int,
):
    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )


def ensure_tiny_model(
    directory: str | Path,
    *,
    hidden_size: int,
    num_hidden_layers: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    intermediate_size: int,
    seed: int,
    extra_tokens: tuple[str, ...] = (),
) -> str:
    """Write the tiny model + tokenizer to ``directory`` unless the same spec is already there;
    ``extra_tokens``: words the task's vocabulary adds (``build_tokenizer``)."""
    directory = Path(directory)
    spec = dict(
        hidden_size=hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        intermediate_size=intermediate_size,
        seed=seed,
        characters="".join(CHARACTERS),
        extra_tokens=list(extra_tokens),
        chat_template=CHAT_TEMPLATE,
    )
    marker = directory / _MARKER
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return str(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(extra_tokens)
    config = build_model_config(
        tokenizer, hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, intermediate_size
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    marker.write_text(json.dumps(spec))
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("Built the tiny model (%d parameters) in %s", n_params, directory)
    return str(directory)
