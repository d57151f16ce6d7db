"""Verifiable rewards for the tasks of `healtrl.tasks`, in TRL's reward-function convention.

| reward | reads | scores |
|---|---|---|
| `math_reward` | `answer` (+ optional `answer_format`) | math-verify on the final answer, in the row's answer format (boxed by default) |
| `math_boxed_reward`, `math_answer_line_reward`, `math_lenient_reward` | `answer` | the same in one fixed format |
| `multiple_choice_reward` | `answer`, `choices` | exactly one chosen option (letter or option text) |
| `code_reward` | `tests` | the program passes every test, run in `healtrl.rewards.sandbox` |
| `reasoning_gym_reward` | `rg_entry` | the reasoning-gym generator's own scorer |
| `task_reward` | `task` (+ its task's columns) | each row with the reward of its own task (mixed datasets) |

Each is registered in `healtrl.data.REWARD_FUNCS` ("math", "math_boxed", "math_answer_line", "math_lenient",
"multiple_choice", "code", "reasoning_gym", "task"). None raises on
a malformed completion (empty, longer than `MAX_COMPLETION_CHARS`, invalid unicode, wrong type): it scores 0.0 and is
counted (`malformed_counts()`, and `rewards/<name>/malformed` through TRL's `log_metric`). Programs that the code
sandbox itself failed to run also score 0.0 and are counted apart (`sandbox_error_counts()`,
`rewards/sandbox_errors`).

Reading a completion is linear in its length, and math-verify runs in a worker process under a hard timeout that
holds in any thread (the bounds are stated in `healtrl.rewards.math`).

What it holds: one module per reward (`math`, `multiple_choice`, `code`, `reasoning_gym`, `task`); the code sandbox,
the package `healtrl.rewards.sandbox` (the isolated execution of untrusted programs: namespaces, resource limits,
its guarantees stated in its docstring; standard library only); and private modules used only inside this package:
`_common` (completion text, column alignment, malformed-completion accounting, normalisation), `_boxes` (the boxes
of a completion, read for `math` and `multiple_choice`), `_assert_tests` and `_plain` (the judge of assert-style code
tests and the plain-data format it receives), `_math_verify_pool` / `_math_verify_worker` and `_scorer_pool` /
`_scorer_worker` (the worker processes of math-verify and of reasoning-gym's scorers).

What it may import: the standard library, numpy and its third-party scorers (math-verify in its worker processes,
reasoning-gym there and on first use); of healtrl, modules of its own layer (`healtrl.toy.tasks` for a completion's
text; `healtrl.data` and `healtrl.tasks` inside `task_reward`, for each row's task) and the layers below it, never
the trainers, the evaluation or the command line (`pyproject.toml`'s import contract).
"""

from ._common import MAX_COMPLETION_CHARS, malformed_counts, reset_malformed_counts
from .code import code_reward, extract_code, make_code_reward, run_tests
from .math import (
    ANSWER_FORMATS,
    answers_match,
    extract_boxed,
    extract_final_answer,
    grade_math,
    math_answer_line_reward,
    math_boxed_reward,
    math_lenient_reward,
    math_reward,
)
from .multiple_choice import extract_choice, multiple_choice_reward
from .reasoning_gym import reasoning_gym_reward
from .sandbox import (
    SandboxLimits,
    SandboxResult,
    isolation_gaps,
    isolation_level,
    reset_sandbox_error_counts,
    run_python,
    sandbox_error_counts,
)
from .task import task_reward

__all__ = [
    "ANSWER_FORMATS",
    "MAX_COMPLETION_CHARS",
    "SandboxLimits",
    "SandboxResult",
    "answers_match",
    "code_reward",
    "extract_boxed",
    "extract_choice",
    "extract_code",
    "extract_final_answer",
    "grade_math",
    "isolation_gaps",
    "isolation_level",
    "make_code_reward",
    "malformed_counts",
    "math_answer_line_reward",
    "math_boxed_reward",
    "math_lenient_reward",
    "math_reward",
    "multiple_choice_reward",
    "reasoning_gym_reward",
    "reset_malformed_counts",
    "reset_sandbox_error_counts",
    "run_python",
    "run_tests",
    "sandbox_error_counts",
    "task_reward",
]
