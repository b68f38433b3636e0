"""A character-level tokenizer over printable ASCII with a small chat template, built locally.

Every character is one token (anything outside printable ASCII is ``<unk>``), so token counts in
tests are character counts.
"""

import string

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_char_tokenizer(chat_template: str | None = CHAT_TEMPLATE):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(string.printable))
    vocab = {tok: i for i, tok in enumerate(["<pad>", "<eos>", "<unk>"] + chars)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )
    if chat_template is not None:
        tok.chat_template = chat_template
    return tok
