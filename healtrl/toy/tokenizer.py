"""A character-level tokenizer with a compact chat template, built offline with the `tokenizers` library.

Every printable ASCII character, newline and tab is one token; anything else becomes `<|unk|>`. The chat template
renders `[{"role": "user", "content": "3+5="}]` with `add_generation_prompt=True` as

    <|user|>3+5=<|assistant|>

(6 tokens), and an assistant turn ends with `<|end|>`, which is the tokenizer's `eos_token`: generation stops there.
The result is a plain `PreTrainedTokenizerFast`, so it saves as `tokenizer.json` + `tokenizer_config.json` and
`AutoTokenizer.from_pretrained` (or vLLM) loads it back without custom code.
"""

from __future__ import annotations

import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD_TOKEN = "<|pad|>"
UNK_TOKEN = "<|unk|>"
EOS_TOKEN = "<|end|>"  # ends an assistant turn; the generation stop token
USER_TOKEN = "<|user|>"
ASSISTANT_TOKEN = "<|assistant|>"
SYSTEM_TOKEN = "<|system|>"
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, EOS_TOKEN, USER_TOKEN, ASSISTANT_TOKEN, SYSTEM_TOKEN)

# Printable ASCII (space to "~"), then newline and tab. Ids follow the special tokens, in this order.
CHARACTERS = tuple(chr(code) for code in range(32, 127)) + ("\n", "\t")

# User and system turns are not closed (the next role marker closes them) to keep prompts short; assistant turns end
# with <|end|> so that a trained model learns to emit the stop token. `content` may be a string or a list of
# {"type": "text", "text": ...} blocks.
CHAT_TEMPLATE = (
    "{%- macro text(content) -%}"
    "{%- if content is string -%}{{ content }}"
    "{%- elif content is not none -%}"
    "{%- for part in content -%}{%- if part['type'] == 'text' -%}{{ part['text'] }}{%- endif -%}{%- endfor -%}"
    "{%- endif -%}"
    "{%- endmacro -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}" + SYSTEM_TOKEN + "{{ text(message['content']) }}"
    "{%- elif message['role'] == 'user' -%}" + USER_TOKEN + "{{ text(message['content']) }}"
    "{%- elif message['role'] == 'assistant' -%}"
    + ASSISTANT_TOKEN
    + "{% generation %}{{ text(message['content']) }}"
    + EOS_TOKEN
    + "{% endgeneration %}"
    "{%- else -%}{{ raise_exception('The toy chat template has no role ' ~ message['role']) }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}" + ASSISTANT_TOKEN + "{%- endif -%}"
)


def build_tokenizer(model_max_length: int = 256) -> PreTrainedTokenizerFast:
    """Build the toy character-level tokenizer (103 tokens: 6 special tokens, then 97 characters).

    Args:
        model_max_length: Longest sequence the tokenizer declares (`tokenizer.model_max_length`).

    Returns:
        A `PreTrainedTokenizerFast` with `pad_token="<|pad|>"`, `eos_token="<|end|>"`, `unk_token="<|unk|>"`, no BOS
        token, and `chat_template` set. `pad_token_id` is 0.
    """
    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK_TOKEN))
    # Each character is its own "word"; `[\s\S]` also matches newlines, which `.` would not.
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()  # concatenate tokens instead of joining them with spaces
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        chat_template=CHAT_TEMPLATE,
        model_max_length=model_max_length,
        padding_side="left",  # what batched generation needs; TRL pads prompts itself either way
    )


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, save_directory: str | os.PathLike) -> None:
    """Save `tokenizer` in the most portable layout: `tokenizer.json` + `tokenizer_config.json`.

    Unlike a plain `tokenizer.save_pretrained`, the chat template goes inside `tokenizer_config.json` (not a separate
    `chat_template.jinja`) and the class is recorded as `PreTrainedTokenizerFast`, which transformers 4 and 5 and vLLM
    all resolve without custom code.
    """
    tokenizer.save_pretrained(save_directory, save_jinja_files=False)
    config_path = os.path.join(save_directory, "tokenizer_config.json")
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    with open(config_path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
        f.write("\n")
