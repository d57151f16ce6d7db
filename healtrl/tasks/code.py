"""Code tasks (reward `code`): HumanEval / HumanEval+ and LiveCodeBench.

Rows: `prompt`, `answer` (the canonical solution where the dataset has one, else ""), `tests` (the JSON test
specification of `healtrl.rewards.code`) and `entry_point` (function name; "" for stdin programs).

Prompts: HumanEval(+) uses EvalPlus's instruction ("Please provide a self-contained Python script that solves the
following problem in a markdown code block"); LiveCodeBench uses its generation format (the question, then either the
starter code to complete or the instruction to read stdin and write stdout, with the code in a ```python block).

HumanEval+ as EvalPlus reports it (HEAL's "HEval+ Pass@1", HEAL (arXiv:2604.17928) §4.1): one greedy completion per
problem, `healtrl eval --tasks humanevalplus --k 1 --temperature 0 --max_new_tokens 768` (EvalPlus's `--greedy` sets
temperature 0 and one sample; 768 is its default generation budget). pass@1 is then the fraction of problems whose
program passes every base and plus test (the Hub dataset's `test` holds both in `check`). What differs from EvalPlus's
own harness: it prefills the assistant turn with "Below is a Python script with a self-contained function that
solves the problem and passes corresponding tests:\n```python\n" and stops at "\nif __name__" / "\ndef main(" /
"\nprint("; healtrl generates the whole assistant turn from the chat template's generation prompt and runs the last
```python block of the completion (`healtrl.rewards.code.extract_code`). Base models without a chat template get
EvalPlus's direct-completion prompt there, the instruction here.

LiveCodeBench v5 Pass@10 (HEAL): `--tasks livecodebench-v5 --k 10`, pass@10 being the unbiased estimator with n = k =
10 (any of the 10 samples passes).
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib

from ._common import build, load_source, reject_column_mapping, require_columns, require_test_split, subset, user_prompt

HUMANEVAL_INSTRUCTION = (
    "Please provide a self-contained Python script that solves the following problem in a markdown code block:\n"
)
LCB_INTRO = (
    "You will be given a question (problem specification) and will generate a correct Python program that matches "
    "the specification and passes all tests.\n\n"
)
LCB_STARTER = (
    "You will use the following starter code to write the solution to the problem and enclose your code within "
    "delimiters.\n```python\n{starter}\n```"
)
LCB_STDIN = (
    "Read the inputs from stdin, solve the problem and write the answer to stdout (do not directly test on the sample "
    "inputs). Enclose your code within delimiters as follows.\n```python\n# YOUR CODE HERE\n```"
)


def humaneval_row(example) -> dict | None:
    """A HumanEval-format row (`prompt`, `test`, `entry_point`, `canonical_solution`) as a task row."""
    prompt, test, entry_point = example.get("prompt"), example.get("test"), example.get("entry_point")
    if not prompt or not test or not entry_point:
        return None
    spec = {"kind": "assert", "prompt": prompt, "test": test, "entry_point": entry_point}
    return {
        "prompt": user_prompt(f"{HUMANEVAL_INSTRUCTION}```\n{prompt.strip()}\n```"),
        "answer": str(example.get("canonical_solution") or ""),
        "tests": json.dumps(spec),
        "entry_point": entry_point,
    }


def load_humanevalplus(spec, split, path, *, num_samples=None, seed=0, question_column=None, answer_column=None):
    """HumanEval+ (EvalPlus): columns task_id, prompt, canonical_solution, entry_point, test (its `check` holds the
    extra tests)."""
    reject_column_mapping(spec, question_column, answer_column, ": its rows need the dataset's own test columns")
    data = load_source(spec, split, path)
    require_columns(data, ["prompt", "test", "entry_point"], spec.name)
    return build(subset(data, num_samples, seed), humaneval_row, spec.name)


class _NoObjects(pickle.Unpickler):
    """LiveCodeBench pickles plain strings; refuse anything that would import or call code."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a test file")


def decode_lcb_tests(value) -> list[dict]:
    """LiveCodeBench test cases: a JSON list, or (private tests) base64(zlib(pickle(JSON string)))."""
    if isinstance(value, list):
        return value
    if not value:
        return []
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        pass
    raw = _NoObjects(io.BytesIO(zlib.decompress(base64.b64decode(value)))).load()
    return json.loads(raw) if isinstance(raw, (str, bytes)) else list(raw)


def lcb_row(example) -> dict | None:
    """A LiveCodeBench row (question_content, starter_code, public/private_test_cases, metadata) as a task row."""
    cases = decode_lcb_tests(example.get("public_test_cases")) + decode_lcb_tests(example.get("private_test_cases"))
    if not cases or not example.get("question_content"):
        return None
    testtype = cases[0].get("testtype", "stdin")
    inputs = [str(c.get("input", "")) for c in cases]
    outputs = [str(c.get("output", "")) for c in cases]
    starter = str(example.get("starter_code") or "").strip()
    if testtype == "functional":
        metadata = example.get("metadata") or "{}"
        fn_name = (json.loads(metadata) if isinstance(metadata, str) else dict(metadata)).get("func_name")
        if not fn_name:
            return None
        spec = {"kind": "functional", "fn_name": fn_name, "inputs": inputs, "outputs": outputs}
    else:
        fn_name = ""
        spec = {"kind": "stdio", "inputs": inputs, "outputs": outputs}
    form = LCB_STARTER.format(starter=starter) if starter else LCB_STDIN
    text = f"{LCB_INTRO}Question: {str(example['question_content']).strip()}\n\n{form}"
    return {"prompt": user_prompt(text), "answer": "", "tests": json.dumps(spec), "entry_point": fn_name}


LCB_RELEASE_FILES = {f"v{k}": ("test.jsonl" if k == 1 else f"test{k}.jsonl") for k in range(1, 7)}
"""LiveCodeBench code_generation_lite: the problems added by each release (release_vN = files of v1..vN)."""


def load_livecodebench(
    spec, split, path, *, releases, num_samples=None, seed=0, question_column=None, answer_column=None
):
    """LiveCodeBench code generation: the jsonl files of the given releases of livecodebench/code_generation_lite."""
    reject_column_mapping(spec, question_column, answer_column, ": its rows need the dataset's own test columns")
    require_test_split(spec, split)
    files = None if path is not None else [LCB_RELEASE_FILES[r] for r in releases]
    data = load_source(spec, split, path, data_files=files)
    require_columns(data, ["question_content", "public_test_cases"], spec.name)
    return build(subset(data, num_samples, seed), lcb_row, spec.name)


def register(register_task, TaskSpec) -> None:
    """Register the code tasks."""
    from functools import partial

    register_task(
        TaskSpec(
            "humanevalplus",
            "code",
            "code",
            "code",
            "evalplus/humanevalplus",
            "HumanEval+ (Hub evalplus/humanevalplus, split test, 164 problems; columns task_id, prompt, "
            "canonical_solution, entry_point, test). EvalPlus prompt; pass@1 = all tests of `check` pass. EvalPlus's "
            "protocol: greedy pass@1, `--k 1 --temperature 0 --max_new_tokens 768` (see healtrl.tasks.code).",
            split="test",
        ),
        load_humanevalplus,
    )
    register_task(
        TaskSpec(
            "livecodebench-v1-v4",
            "code",
            "code",
            "code",
            "livecodebench/code_generation_lite",
            "LiveCodeBench problems of releases v1-v4 (HEAL's code training set): files test.jsonl..test4.jsonl of "
            "Hub livecodebench/code_generation_lite; columns question_content, starter_code, public_test_cases, "
            "private_test_cases (base64/zlib/pickled JSON), metadata{func_name}. Public + private tests.",
            split="test",
        ),
        partial(load_livecodebench, releases=("v1", "v2", "v3", "v4")),
    )
    register_task(
        TaskSpec(
            "livecodebench-v5",
            "code",
            "code",
            "code",
            "livecodebench/code_generation_lite",
            "LiveCodeBench problems added in release v5 (HEAL's code benchmark): file test5.jsonl of Hub "
            "livecodebench/code_generation_lite; same columns as livecodebench-v1-v4.",
            split="test",
        ),
        partial(load_livecodebench, releases=("v5",)),
    )
