"""Math tasks (reward `math`): GSM8K, MATH-500, AIME 2024/2025, AMC 2023 (math-ai/amc23, 40 problems), AIMO's AMC
validation set (AI-MO/aimo-validation-amc, 83 problems: AER's "AMC23"), Minerva Math, OlympiadBench, DeepScaleR,
DAPO-Math-17k, and WebInstruct's physics subset (free-form answers, domain "physics").

Prompt: the problem followed by "Let's think step by step and output the final answer within \\boxed{}." (the
DeepScaleR / verl math format; answer format "boxed"), except DAPO-Math-17k, whose rows carry their own prompt (an
"Answer: $Answer" last line; answer format "answer_line"), kept as is. `<task>@answer_line` / `<task>@boxed` asks any
of them in the other format (`healtrl.tasks.get_task`); the rows' `answer_format` column tells the `math` reward which
format to grade.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import partial

from ._common import load_source, math_prompt, resolve_column, subset, user_prompt

_DOLLARS = re.compile(r"^\$+(.*?)\$+$", re.S)


def clean_answer(value) -> str:
    """A ground-truth answer as a string: lists joined with ", ", surrounding `$...$` removed."""
    if isinstance(value, (list, tuple)):
        return ", ".join(clean_answer(v) for v in value)
    if isinstance(value, float) and value.is_integer():  # AMC 2023's answers are floats such as 27.0
        value = int(value)
    text = str(value).strip()
    match = _DOLLARS.match(text)
    return match.group(1).strip() if match else text


def olympiad_answer(value) -> str:
    """OlympiadBench's `final_answer`: a list of answers (sometimes stringified), joined with ", "."""
    if isinstance(value, str) and value.strip().startswith("[") and value.strip().endswith("]"):
        try:
            value = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            pass
    return clean_answer(value)


def gsm8k_answer(solution: str) -> str:
    """The final answer of a GSM8K solution: the text after "####", without thousands separators."""
    if "####" not in str(solution):
        return ""
    return str(solution).rsplit("####", 1)[1].strip().replace(",", "")


def webinstruct_question(text: str) -> str:
    """WebInstruct marks LaTeX with {eq}...{/eq}; turn it into $...$."""
    return str(text).replace("{eq}", "$").replace("{/eq}", "$")


@dataclass(frozen=True)
class MathSource:
    """Where a math task's question and answer live in its Hub rows.

    Attributes:
        questions: Candidate question columns, first present wins.
        answers: Candidate answer columns.
        answer_fn: Maps the raw answer value to the answer string.
        question_fn: Maps the raw question value to the problem text.
        keep: Row filter (`keep(example) -> bool`), applied before subsetting.
        hub_split: Maps the requested split to the Hub split (e.g. AIME 2024 ships one "train" split).
    """

    questions: tuple[str, ...]
    answers: tuple[str, ...]
    answer_fn: object = clean_answer
    question_fn: object = str
    keep: object = None
    hub_split: dict | None = None


def load_math(
    spec, split, path, *, source: MathSource, num_samples=None, seed=0, question_column=None, answer_column=None
):
    """Load a math task: rows `prompt`, `answer` (and `solution` when the source has one)."""
    from ._common import build

    hub_split = (source.hub_split or {}).get(split, split)
    data = load_source(spec, hub_split, path)
    q_col = resolve_column(data, source.questions, question_column, "question", spec.name, "question_column")
    a_col = resolve_column(data, source.answers, answer_column, "answer", spec.name, "answer_column")
    if source.keep is not None:
        data = data.filter(source.keep)
    data = subset(data, num_samples, seed)
    answer_fn = source.answer_fn if answer_column is None else clean_answer
    question_fn = source.question_fn if question_column is None else str

    def row(example):
        answer = answer_fn(example[a_col])
        problem = question_fn(example[q_col])
        if not answer or not problem:
            return None
        return {"prompt": math_prompt(problem), "answer": answer}

    return build(data, row, spec.name)


def load_dapo(spec, split, path, *, num_samples=None, seed=0, question_column=None, answer_column=None):
    """DAPO-Math-17k: the rows' own conversation prompt, answer `reward_model.ground_truth`, duplicates removed (the
    Hub copy repeats each of its ~17k problems many times)."""
    from ._common import build

    data = load_source(spec, split, path)
    q_col = resolve_column(data, ("prompt",), question_column, "prompt", spec.name, "question_column")
    a_col = resolve_column(data, ("reward_model",), answer_column, "answer", spec.name, "answer_column")

    def answer_of(example):
        value = example[a_col]
        return clean_answer(value.get("ground_truth", "")) if isinstance(value, dict) else clean_answer(value)

    def text_of(example):
        value = example[q_col]
        if isinstance(value, list):
            users = [m.get("content", "") for m in value if isinstance(m, dict) and m.get("role") == "user"]
            return users[-1] if users else ""
        return str(value)

    seen: set = set()

    def first(example):
        key = (text_of(example), answer_of(example))
        if key in seen:
            return False
        seen.add(key)
        return True

    data = data.filter(first)
    data = subset(data, num_samples, seed)

    def row(example):
        text, answer = text_of(example), answer_of(example)
        if not text or not answer:
            return None
        if isinstance(example[q_col], list) and question_column is None:
            return {"prompt": user_prompt(text), "answer": answer}  # DAPO's own prompt, kept as is
        return {"prompt": math_prompt(text, "answer_line"), "answer": answer}  # a bare problem: DAPO's template

    return build(data, row, spec.name)


SOURCES = {
    "gsm8k": MathSource(("question",), ("answer",), answer_fn=gsm8k_answer),
    "math500": MathSource(("problem",), ("answer",)),
    "aime24": MathSource(("problem", "Problem"), ("answer", "Answer"), hub_split={"test": "train"}),
    "aime25": MathSource(("problem",), ("answer",)),
    "amc23": MathSource(("question", "problem"), ("answer",)),
    "aimo-validation-amc": MathSource(("problem",), ("answer",), hub_split={"test": "train"}),
    "minerva": MathSource(("question", "problem"), ("answer",)),
    "olympiadbench": MathSource(
        ("question",), ("final_answer",), answer_fn=olympiad_answer, hub_split={"test": "train"}
    ),
    "deepscaler": MathSource(("problem",), ("answer",)),
    "webinstruct-physics": MathSource(
        ("question",), ("answer",), question_fn=webinstruct_question, keep=lambda x: x.get("category") == "Physics"
    ),
}


def register(register_task, TaskSpec) -> None:
    """Register the math tasks."""
    tasks = [
        (
            "gsm8k",
            "math",
            "openai/gsm8k",
            "main",
            "test",
            "GSM8K grade-school word problems (Hub openai/gsm8k, config 'main', splits train/test; columns question, "
            "answer with the final answer after '####').",
        ),
        (
            "math500",
            "math",
            "HuggingFaceH4/MATH-500",
            None,
            "test",
            "MATH-500 (Hub HuggingFaceH4/MATH-500, split test; columns problem, solution, answer, subject, level).",
        ),
        (
            "aime24",
            "math",
            "HuggingFaceH4/aime_2024",
            None,
            "test",
            "AIME 2024, 30 problems (Hub HuggingFaceH4/aime_2024, whose only split 'train' is served as 'test'; columns "
            "problem, answer).",
        ),
        (
            "aime25",
            "math",
            "math-ai/aime25",
            None,
            "test",
            "AIME 2025, 30 problems (Hub math-ai/aime25, split test; columns problem, answer).",
        ),
        (
            "amc23",
            "math",
            "math-ai/amc23",
            None,
            "test",
            "AMC 2023, 40 problems (Hub math-ai/amc23, split test; columns question, answer). The AMC23 of HEAL and "
            "OPEFO (40 problems in both papers) and of PosAdv; AER's is aimo-validation-amc (83).",
        ),
        (
            "aimo-validation-amc",
            "math",
            "AI-MO/aimo-validation-amc",
            None,
            "test",
            "AIMO validation AMC, 83 problems of AMC 12 2022 and 2023 rewritten to integer answers (Hub "
            "AI-MO/aimo-validation-amc, whose only split 'train' is served as 'test'; columns id, problem, answer as a "
            "float such as 27.0, url). AER's 'AMC23' benchmark (AER Appendix B); HEAL and OPEFO use amc23 (40).",
        ),
        (
            "minerva",
            "math",
            "math-ai/minervamath",
            None,
            "test",
            "Minerva Math, 272 MIT OCW STEM problems (Hub math-ai/minervamath, split test; columns question, answer).",
        ),
        (
            "olympiadbench",
            "math",
            "Hothan/OlympiadBench",
            "OE_TO_maths_en_COMP",
            "test",
            "OlympiadBench, English text-only open-ended math (Hub Hothan/OlympiadBench, config OE_TO_maths_en_COMP, "
            "whose only split 'train' is served as 'test'; columns question, final_answer as a list, joined with ', ').",
        ),
        (
            "deepscaler",
            "math",
            "agentica-org/DeepScaleR-Preview-Dataset",
            None,
            "train",
            "DeepScaleR-Preview, ~40k competition problems for training (Hub agentica-org/DeepScaleR-Preview-Dataset, "
            "split train; columns problem, answer, solution).",
        ),
        (
            "webinstruct-physics",
            "physics",
            "TIGER-Lab/WebInstruct-verified",
            None,
            "test",
            "WebInstruct-verified, rows of category 'Physics' (Hub TIGER-Lab/WebInstruct-verified, splits train/test; "
            "columns question with {eq}..{/eq} LaTeX, answer, answer_type, category, difficulty). Free-form answers: "
            "math-verify plus normalized string equality; answers with units may be under-credited.",
        ),
    ]
    for name, domain, hub_id, config, split, description in tasks:
        register_task(
            TaskSpec(name, domain, "math", "math", hub_id, description, config=config, split=split),
            partial(load_math, source=SOURCES[name]),
        )
    register_task(
        TaskSpec(
            "dapo-math-17k",
            "math",
            "math",
            "math",
            "BytedTsinghua-SIA/DAPO-Math-17k",
            "DAPO-Math-17k (Hub BytedTsinghua-SIA/DAPO-Math-17k, split train; columns prompt as a conversation with "
            "DAPO's own instruction, reward_model.ground_truth). Duplicate rows are dropped. The prompt asks for an "
            "'Answer: ...' last line (answer format 'answer_line'), which the math reward reads.",
            split="train",
            answer_format="answer_line",
        ),
        load_dapo,
    )
