"""The normalised prompt key that the data-hygiene check (`healtrl.hygiene`) and the Medicine split compare prompts by.

A conversation is reduced to the contents of its user messages, the instruction texts healtrl's task adapters wrap
around a question (`INSTRUCTION_TEXTS`) are removed, the text is NFKC-normalised, lower-cased and its whitespace runs
collapsed; the key is the first 16 hex digits of its SHA-256 (`healtrl.hygiene`'s docstring says why). It lives with the
tasks because a task's split (`multiple_choice.medicine_split`) depends on it.

`question_stem` / `stem_key` go one step further for multiple-choice prompts: the lettered options (everything from
"Answer Choices:" on) are cut off, so the same question asked with 4 and with 5 options has one key.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Mapping, Sequence

DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem."
)
DAPO_SUFFIX = 'Remember to put your answer on its own line after "Answer:".'

INSTRUCTION_TEXTS: list[str] = [DAPO_PREFIX, DAPO_SUFFIX]
"""Instruction texts removed from a prompt before it is hashed (the `*_INSTRUCTION` strings of
`healtrl.tasks._common` and `healtrl.tasks.code` are added on first use). Append your own prompt wrappers here."""

_WHITESPACE = re.compile(r"\s+")


def instruction_texts() -> list[str]:
    texts = list(INSTRUCTION_TEXTS)
    try:
        from . import _common, code

        for module in (_common, code):
            texts += [v for k, v in vars(module).items() if k.endswith("_INSTRUCTION") and isinstance(v, str)]
    except ImportError:  # pragma: no cover - the tasks package is part of healtrl
        pass
    return sorted({t for t in texts if t.strip()}, key=len, reverse=True)  # longest first: no partial removal


def normalise_prompt(prompt, instructions: Sequence[str] | None = None) -> str:
    """The text two prompts are compared by (module docstring): user contents, instructions removed, NFKC,
    lower case, whitespace collapsed."""
    if isinstance(prompt, str):
        text = prompt
    elif isinstance(prompt, Sequence) and all(isinstance(m, Mapping) for m in prompt):
        text = "\n".join(str(m.get("content") or "") for m in prompt if m.get("role", "user") == "user")
    else:
        raise TypeError(
            f"A prompt must be a string or a conversation (a list of {{'role', 'content'}} messages), got "
            f"{type(prompt).__name__}."
        )
    for instruction in instruction_texts() if instructions is None else instructions:
        text = text.replace(instruction, " ")
    text = unicodedata.normalize("NFKC", text).lower()
    return _WHITESPACE.sub(" ", text).strip()


OPTIONS_MARKER = "answer choices:"
"""Where the options of a multiple-choice prompt start, in normalised text (`healtrl.tasks._common.mc_prompt` writes
"Answer Choices:"; MedXpertQA's questions carry the same header)."""


def question_stem(prompt, instructions: Sequence[str] | None = None) -> str:
    """The normalised question without its options: `normalise_prompt`, cut at the first "answer choices:". A prompt
    without options is its whole normalised text."""
    text = normalise_prompt(prompt, instructions)
    cut = text.find(OPTIONS_MARKER)
    return text if cut <= 0 else text[:cut].strip()


def stem_key(prompt, instructions: Sequence[str] | None = None) -> str:
    """First 16 hex digits of SHA-256 of `question_stem(prompt)`: equal for two prompts that ask the same question
    with other options, another number of options or another option order."""
    return hashlib.sha256(question_stem(prompt, instructions).encode()).hexdigest()[:16]


def prompt_key(prompt, instructions: Sequence[str] | None = None) -> str:
    """The normalised prompt hash: first 16 hex digits of SHA-256 of `normalise_prompt(prompt)`."""
    return hashlib.sha256(normalise_prompt(prompt, instructions).encode()).hexdigest()[:16]
