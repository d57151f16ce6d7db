"""Multiple-choice tasks (reward `multiple_choice`): CommonsenseQA (HEAL's general domain), MedXpertQA and MedBullets
(medicine), `medicine` (both, with disjoint train/test splits made by a hash of each question stem: `medicine_split`) and
its per-source views `medicine-medbullets` / `medicine-medxpertqa`, C-Eval's physics subsets (physics).

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
    return _medxpertqa_rows(spec, data, num_samples, seed, question_column, answer_column)


def _medxpertqa_rows(spec, data, num_samples=None, seed=0, question_column=None, answer_column=None):
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
    return _medbullets_rows(spec, data, num_samples, seed, question_column, answer_column)


def _medbullets_rows(spec, data, num_samples=None, seed=0, question_column=None, answer_column=None):
    option_cols = [c for c in ("opa", "opb", "opc", "opd", "ope") if c in data.column_names]
    if len(option_cols) < 2:
        require_columns(data, ["opa", "opb", "opc", "opd"], spec.name)
    data, q_col, a_col = _load_rest(
        spec, data, num_samples, seed, question_column, answer_column, ("question",), ("answer_idx", "answer")
    )

    def row(example):
        return mc_row(example[q_col], [example[c] for c in option_cols], example[a_col])

    return build(data, row, spec.name, _FEATURES)


# ------------------------------------------------------------------------------------------------------- medicine
MEDICINE_SOURCES = ("medbullets", "medxpertqa")
_SPECS: dict = {}  # name -> TaskSpec of the tasks `register` registered
"""The sources of HEAL's Medicine domain (HEAL §4.1, App. B), by their healtrl task names."""
MEDICINE_TEST_PERCENT = 20
"""Share (in %) of each source's questions in the `test` split of the `medicine` tasks."""
MEDICINE_SPLIT_SALT = "healtrl-medicine-v2"
"""Salt of the split hash: changing it (or the question format) moves questions between the splits. v1 hashed the
whole prompt (question plus options), which put the 4- and 5-option versions of a MedBullets question on opposite
sides (issue #27); v2 hashes the question stem."""


def medicine_split(prompt) -> str:
    """ "train" or "test": the side of the Medicine split that a question (its task prompt) belongs to.

    The bucket is SHA-256(`MEDICINE_SPLIT_SALT` + `healtrl.tasks.keys.stem_key(prompt)`) mod 100; buckets below
    `MEDICINE_TEST_PERCENT` are "test". The key is the normalised question stem (options and their number left out)
    that the hygiene check compares, so two rows that the check would call the same question (e.g. the 4- and the
    5-option version of a MedBullets question) always fall on the same side: the splits are disjoint by construction,
    and a question's side depends on its stem only (not on its options, the order, the size or the Hub split of the
    source).
    """
    import hashlib

    from .keys import stem_key

    digest = hashlib.sha256(f"{MEDICINE_SPLIT_SALT}:{stem_key(prompt)}".encode()).hexdigest()
    return "test" if int(digest[:8], 16) % 100 < MEDICINE_TEST_PERCENT else "train"


def _source_file(folder: str, source: str, task: str) -> str:
    import glob
    import os

    matches = sorted(
        f for f in glob.glob(os.path.join(os.path.expanduser(folder), f"{source}.*")) if not f.endswith(".lock")
    )
    if not matches:
        raise ValueError(
            f"Task '{task}': the folder '{folder}' has no '{source}.<ext>' file. A local copy of the Medicine data is "
            f"a folder holding {' and '.join(f'{s}.jsonl' for s in MEDICINE_SOURCES)} (any of json, jsonl, parquet, "
            "csv), each in its Hub dataset's format."
        )
    return matches[0]


def _medicine_source(task: str, source: str, path: str | None):
    """Every question of one Medicine source (all of its Hub splits, or its file in the folder `path`), mapped."""
    spec = _SPECS[source]
    rows = _medbullets_rows if source == "medbullets" else _medxpertqa_rows
    if path is not None:
        return rows(spec, load_source(spec, "train", _source_file(path, source, task)))
    every = load_source(spec, None, None)  # a DatasetDict of all splits
    parts = list(every.values()) if isinstance(every, datasets.DatasetDict) else [every]
    return rows(spec, datasets.concatenate_datasets(parts))


def load_medicine(spec, split, path, *, sources=MEDICINE_SOURCES, **kwargs):
    """HEAL's Medicine data: MedBullets + MedXpertQA (Text), every question of every Hub split of both, divided into
    "train" and "test" by `medicine_split` (a hash of the question: disjoint by construction). Adds `source` (the
    source task's name). `path`: a folder holding `medbullets.<ext>` and `medxpertqa.<ext>` in the Hub formats."""
    if split not in ("train", "test"):
        raise ValueError(f"Task '{spec.name}' has the splits 'train' and 'test', not '{split}'.")
    if kwargs.get("question_column") or kwargs.get("answer_column"):
        raise ValueError(f"Task '{spec.name}' combines fixed source formats; it takes no column mapping.")
    parts = []
    for source in sources:
        data = _medicine_source(spec.name, source, path)
        keep = [i for i, prompt in enumerate(data["prompt"]) if medicine_split(prompt) == split]
        data = data.select(keep)
        parts.append(data.add_column("source", [source] * len(data)))
    data = datasets.concatenate_datasets(parts)
    if len(data) == 0:
        raise ValueError(f"Task '{spec.name}': no question falls in the '{split}' split ({', '.join(sources)}).")
    return data


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

    def keep(spec, loader):  # registered, and remembered for `_medicine_source`
        _SPECS[spec.name] = register_task(spec, loader)

    keep(
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
    keep(
        TaskSpec(
            "medxpertqa",
            "medicine",
            "multiple_choice",
            "multiple_choice",
            "TsinghuaC3I/MedXpertQA",
            "MedXpertQA Text, 10 options (Hub TsinghuaC3I/MedXpertQA, config Text, splits dev (5 rows)/test (2450); "
            "columns question with the options listed, options{A..J}, label). Its only sizeable split is 'test': for "
            "training, use the task 'medicine' (MedBullets + MedXpertQA with disjoint train/test splits).",
            config="Text",
            split="test",
        ),
        load_medxpertqa,
    )
    keep(
        TaskSpec(
            "medbullets",
            "medicine",
            "multiple_choice",
            "multiple_choice",
            "LangAGI-Lab/medbullets",
            "MedBullets USMLE-style questions, 4-5 options (Hub LangAGI-Lab/medbullets, splits train (492)/test (124); "
            "columns question, opa..ope, answer_idx, answer, explanation). Schema read from the dataset card; the "
            "letter format of answer_idx is not confirmed (a letter or a 0-based index are accepted). The Hub copy "
            "appears to hold each of MedBullets' 308 questions twice, once with 4 and once with 5 options (492 + 124 "
            "= 616 = 2 x 308; issue #27, not verified here: the data cannot be downloaded on the development "
            "machine); if so, its Hub train and test splits share every question. The task 'medicine' keys its split "
            "on the question stem, so both versions fall on the same side (and both are scored, counting the "
            "question twice).",
            split="test",
        ),
        load_medbullets,
    )
    split_text = (
        f"Split (healtrl's, not the paper's): every question of every Hub split of both sources, hashed "
        f"(SHA-256 of '{MEDICINE_SPLIT_SALT}' + the normalised question stem of healtrl.hygiene: options and their "
        f"number left out, so the 4- and 5-option versions of a MedBullets question fall together); "
        f"{MEDICINE_TEST_PERCENT}% of the buckets are 'test', the rest 'train', so the splits are disjoint by "
        "construction and a question's side depends on its stem only. HEAL (§4.1, App. B) splits MedBullets + MedXpertQA with the "
        "Open-Medical-R1 pipeline of Qiu et al. 2025, whose split is not published on the Hub (their public code "
        "draws random subsets, e.g. 490 MedXpertQA questions, with no released seed), so the questions on each side "
        "differ from the paper's; the MedBullets test questions also differ from its Hub 'test' split."
    )
    from functools import partial

    keep(
        TaskSpec(
            "medicine",
            "medicine",
            "multiple_choice",
            "multiple_choice",
            "LangAGI-Lab/medbullets,TsinghuaC3I/MedXpertQA",
            "HEAL's Medicine domain: MedBullets (LangAGI-Lab/medbullets) + MedXpertQA Text (TsinghuaC3I/MedXpertQA), "
            "splits 'train' (few-shot and full-shot training data) and 'test'; column `source` names the source. "
            + split_text,
            split="test",
        ),
        load_medicine,
    )
    for source in MEDICINE_SOURCES:
        keep(
            TaskSpec(
                f"medicine-{source}",
                "medicine",
                "multiple_choice",
                "multiple_choice",
                "LangAGI-Lab/medbullets" if source == "medbullets" else "TsinghuaC3I/MedXpertQA",
                f"The {source} questions of the task 'medicine' (same splits): the per-benchmark evaluation sets of "
                "HEAL's Medicine tables (evaluate split 'test'). " + split_text,
                split="test",
            ),
            partial(load_medicine, sources=(source,)),
        )
    keep(
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
