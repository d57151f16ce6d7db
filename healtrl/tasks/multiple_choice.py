"""Multiple-choice tasks (reward `multiple_choice`): CommonsenseQA (HEAL's general domain), MedXpertQA and MedBullets
(medicine), C-Eval's physics subsets (physics).

Rows: `prompt` (question, lettered options, "Let's think step by step and output the letter of the correct option
within \\boxed{}."), `answer` (the correct letter) and `choices` (the option texts in letter order).
"""

from __future__ import annotations

import ast
import json

import datasets

from ._common import LETTERS, build, load_source, mc_prompt, require_columns, resolve_column, subset

_FEATURES = {"choices": datasets.List(datasets.Value("string"))}


def _letter(value, n_options: int) -> str | None:
    """A gold answer as a letter: "B", "(B)", or a 0-based index."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return LETTERS[value] if 0 <= value < n_options else None
    text = str(value).strip().strip("()").strip().rstrip(".")
    if len(text) == 1 and text.upper() in LETTERS[:n_options]:
        return text.upper()
    if text.isdigit() and int(text) < n_options:
        return LETTERS[int(text)]
    return None


def mc_row(question, options, gold, options_in_question=False) -> dict | None:
    """A task row, or None when the question, the options or the answer is unusable."""
    options = [str(o).strip() for o in options if o is not None and str(o).strip()]
    if not question or len(options) < 2:
        return None
    letter = _letter(gold, len(options))
    if letter is None:  # the gold answer may be the option text
        matches = [k for k, o in enumerate(options) if o.lower() == str(gold).strip().lower()]
        letter = LETTERS[matches[0]] if len(matches) == 1 else None
    if letter is None:
        return None
    return {"prompt": mc_prompt(str(question), options, options_in_question), "answer": letter, "choices": options}


def load_commonsenseqa(spec, split, path, *, num_samples=None, seed=0, question_column=None, answer_column=None):
    """CommonsenseQA: `question`, `choices` = {label: [...], text: [...]}, `answerKey` (empty in the test split)."""
    data = load_source(spec, split, path)
    require_columns(data, ["choices"], spec.name)
    if "answerKey" in data.column_names and answer_column is None and not any(data["answerKey"]):
        raise ValueError(
            f"Task '{spec.name}': split '{split}' has no answers (CommonsenseQA hides its test labels); use 'train' "
            "or 'validation'."
        )
    data, q_col, a_col = _load_rest(
        spec, data, num_samples, seed, question_column, answer_column, ("question",), ("answerKey",)
    )

    def row(example):
        choices = example["choices"] or {}
        labels, texts = list(choices.get("label") or []), list(choices.get("text") or [])
        if labels and labels != list(LETTERS[: len(labels)]):  # reorder to A, B, C...
            order = sorted(range(len(labels)), key=lambda k: labels[k])
            labels, texts = [labels[k] for k in order], [texts[k] for k in order]
        return mc_row(example[q_col], texts, example[a_col])

    return build(data, row, spec.name, _FEATURES)


def _load_rest(spec, data, num_samples, seed, question_column, answer_column, questions, answers):
    q_col = resolve_column(data, questions, question_column, "question", spec.name, "question_column")
    a_col = resolve_column(data, answers, answer_column, "answer", spec.name, "answer_column")
    return subset(data, num_samples, seed), q_col, a_col


def _options_dict(value) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = ast.literal_eval(value)
    if isinstance(value, dict):
        return [value[k] for k in sorted(value) if value[k] is not None and str(value[k]).strip()]
    return list(value or [])


def load_medxpertqa(spec, split, path, *, num_samples=None, seed=0, question_column=None, answer_column=None):
    """MedXpertQA (Text): `question` (already listing "Answer Choices: (A) ..."), `options` = {"A": ..., ...},
    `label` (the letter)."""
    data = load_source(spec, split, path)
    require_columns(data, ["options"], spec.name)
    data, q_col, a_col = _load_rest(
        spec, data, num_samples, seed, question_column, answer_column, ("question",), ("label",)
    )

    def row(example):
        question = str(example[q_col])
        return mc_row(question, _options_dict(example["options"]), example[a_col], "Answer Choices:" in question)

    return build(data, row, spec.name, _FEATURES)


def load_medbullets(spec, split, path, *, num_samples=None, seed=0, question_column=None, answer_column=None):
    """MedBullets: `question`, options `opa`..`ope` (`ope` empty for 4-option questions), `answer_idx` (the letter)."""
    data = load_source(spec, split, path)
    option_cols = [c for c in ("opa", "opb", "opc", "opd", "ope") if c in data.column_names]
    if len(option_cols) < 2:
        require_columns(data, ["opa", "opb", "opc", "opd"], spec.name)
    data, q_col, a_col = _load_rest(
        spec, data, num_samples, seed, question_column, answer_column, ("question",), ("answer_idx", "answer")
    )

    def row(example):
        return mc_row(example[q_col], [example[c] for c in option_cols], example[a_col])

    return build(data, row, spec.name, _FEATURES)


CEVAL_PHYSICS = ("college_physics", "high_school_physics", "middle_school_physics")


def load_ceval_physics(spec, split, path, *, num_samples=None, seed=0, question_column=None, answer_column=None):
    """C-Eval physics: the configs college_physics, high_school_physics and middle_school_physics together; columns
    `question`, `A`..`D`, `answer` (the letter; empty in the hidden-label test split)."""
    if path is not None:
        data = load_source(spec, split, path)
    else:
        data = datasets.concatenate_datasets([load_source(spec, split, None, config=c) for c in CEVAL_PHYSICS])
    require_columns(data, ["A", "B", "C", "D"], spec.name)
    if "answer" in data.column_names and answer_column is None and not any(data["answer"]):
        raise ValueError(
            f"Task '{spec.name}': split '{split}' has no answers (C-Eval hides its test labels); use 'val'."
        )
    data, q_col, a_col = _load_rest(
        spec, data, num_samples, seed, question_column, answer_column, ("question",), ("answer",)
    )

    def row(example):
        return mc_row(example[q_col], [example[c] for c in "ABCD"], example[a_col])

    return build(data, row, spec.name, _FEATURES)


def register(register_task, TaskSpec) -> None:
    """Register the multiple-choice tasks."""
    register_task(
        TaskSpec(
            "commonsenseqa",
            "commonsense",
            "multiple_choice",
            "multiple_choice",
            "tau/commonsense_qa",
            "CommonsenseQA, 5 options, HEAL's general-domain data (Hub tau/commonsense_qa, splits train/validation; "
            "the test split has no labels; columns question, choices{label,text}, answerKey).",
            split="train",
        ),
        load_commonsenseqa,
    )
    register_task(
        TaskSpec(
            "medxpertqa",
            "medicine",
            "multiple_choice",
            "multiple_choice",
            "TsinghuaC3I/MedXpertQA",
            "MedXpertQA Text, 10 options (Hub TsinghuaC3I/MedXpertQA, config Text, splits dev (5 rows)/test (2450); "
            "columns question with the options listed, options{A..J}, label). HEAL's train/test split of Open-Medical-"
            "RL is not on the Hub: draw few-shot sets from 'test' with a seed and keep them out of evaluation.",
            config="Text",
            split="test",
        ),
        load_medxpertqa,
    )
    register_task(
        TaskSpec(
            "medbullets",
            "medicine",
            "multiple_choice",
            "multiple_choice",
            "LangAGI-Lab/medbullets",
            "MedBullets USMLE-style questions, 4-5 options (Hub LangAGI-Lab/medbullets, splits train (492)/test (124); "
            "columns question, opa..ope, answer_idx, answer, explanation). Schema read from the dataset card; the "
            "letter format of answer_idx is not confirmed (a letter or a 0-based index are accepted).",
            split="test",
        ),
        load_medbullets,
    )
    register_task(
        TaskSpec(
            "ceval-physics",
            "physics",
            "multiple_choice",
            "multiple_choice",
            "ceval/ceval-exam",
            "C-Eval physics (Chinese), configs college_physics + high_school_physics + middle_school_physics of Hub "
            "ceval/ceval-exam; splits dev/val (test labels are hidden); columns question, A, B, C, D, answer.",
            split="val",
        ),
        load_ceval_physics,
    )
