"""Prompt and end-of-sequence handling shared by `healtrl select` and `healtrl eval`: token ids as TRL's
GRPOTrainer builds them for generation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def is_conversational(prompt) -> bool:
    """Whether `prompt` is a conversation: a non-empty list of `{"role": ..., "content": ...}` messages."""
    return (
        isinstance(prompt, (list, tuple))
        and len(prompt) > 0
        and all(isinstance(m, Mapping) and "role" in m for m in prompt)
    )


def tokenize_prompts(tokenizer, prompts: Sequence, *, no_template_hint: str = "") -> list[list[int]]:
    """Prompt token ids: the chat template (with the generation prompt) for conversations, the tokenizer for strings.

    Args:
        tokenizer: The model's tokenizer.
        prompts: All conversations or all strings.
        no_template_hint: Appended to the error raised when conversations meet a tokenizer without a chat template.

    Raises:
        ValueError: mixed or unknown prompt kinds, conversations without a chat template, or a prompt with no tokens.
    """
    prompts = list(prompts)
    if not prompts:
        return []
    conversational = [is_conversational(p) for p in prompts]
    if all(conversational):
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(
                f"The prompts are conversations, but the tokenizer has no chat template. {no_template_hint}"
            )
        encoded = tokenizer.apply_chat_template(prompts, add_generation_prompt=True, tokenize=True, return_dict=True)
        encoded = encoded["input_ids"]
    elif all(isinstance(p, str) for p in prompts):
        encoded = tokenizer(text=prompts)["input_ids"]
    else:
        kinds = sorted({type(p).__name__ for p in prompts})
        raise ValueError(
            "Every prompt must be a string or a conversation (a list of {'role', 'content'} messages), all of one "
            f"kind; got {kinds}."
        )
    encoded = [list(ids) for ids in encoded]
    empty = [i for i, ids in enumerate(encoded) if not ids]
    if empty:
        raise ValueError(f"The prompt {prompts[empty[0]]!r} has no tokens: every prompt needs at least one.")
    return encoded


def eos_token_ids(tokenizer, model=None) -> list[int]:
    """End-of-sequence ids: the tokenizer's, plus those of the model's generation config (as TRL collects them)."""
    ids = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if config_eos is not None:
        ids += [int(i) for i in (config_eos if isinstance(config_eos, (list, tuple)) else [config_eos])]
    ids = list(dict.fromkeys(ids))
    if not ids:
        raise ValueError("Neither the tokenizer nor the model's generation config names an end-of-sequence token.")
    return ids
