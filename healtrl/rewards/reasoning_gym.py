"""Reward for any `reasoning-gym` generator: the generator's own scorer on the completion's final answer, run out of
process and made strict.

**Reading the answer** (in the trainer, linear time, issue #25): the last `\\boxed{}` as in `healtrl.rewards.math`,
else the last `<answer>...</answer>` (str.find), else the last line; stripped. An answer longer than
`RG_MAX_ANSWER_CHARS` is not sent to the scorer: it scores 0 and counts as malformed.

**Scoring out of process.** Nothing in the trainer process calls reasoning-gym code on completion text (several of its
scorers `eval` or `sympify` the answer: n_queens, polynomial_multiplication, countdown, puzzle24...). The entry is
regenerated here (`rg_lookup`: reasoning-gym's generator on the trusted `rg_entry` spec, no completion text; here
because some generators depend on the process's hash seed, so only the process that generated the prompt regenerates
its entry exactly) and sent, with the answer, to a pool of persistent scorer workers (`healtrl.rewards._scorer_pool`,
`_scorer_worker`), which score the answer in a forked child that is thrown away afterwards, in a temporary directory,
under CPU, memory and audit-hook limits, with /dev/null on its fds 0-2 and every other fd closed but its result pipe,
and whose reply counts only with the request's nonce (stated, with the residual risk, in `_scorer_worker`). A scorer
that evaluates answer text still runs it in that child, so the audit marks such datasets unsafe (below).

**Bounds.** Each answer's scorer gets at most `RG_SCORE_TIMEOUT_S` seconds of wall-clock time (the child is killed
past it); a batch of n completions is scored in parallel on `RG_SCORER_WORKERS` workers, and the scoring of the whole
batch stops `max(RG_SCORE_TIMEOUT_S, RG_SECONDS_PER_COMPLETION * n)` seconds after it began (plus the time spent
starting workers, once per process, and preparing entries, which no completion controls). A worker that runs past
its deadline, dies or replies anything malformed is killed and replaced; its completion scores 0 and is counted as a
scorer failure (`scorer_failure_counts()`, and `rewards/reasoning_gym/scorer_failures` through TRL's `log_metric` in
every batch that reached the scorers). Completions left when the batch's deadline passes count the same way.

**Strict scores (default).** 1.0 when the generator's scorer returns exactly 1.0 (its own exact check), else 0.0: no
prefix, substring or closeness credit (reasoning-gym's default scorer pays `len(gold) / len(answer)` for an answer that
contains the gold; complex_arithmetic pays `exp(-distance)`; coin_flip's prefix credit returns 1.0 itself, so its worker
reports a 1.0 only when coin_flip's tolerance check, made relative, passes: `_scorer_worker._EXACT_CHECKS`). An answer
that names a NaN or an infinity ("nan", "inf", "infinity", "∞", any case, "nan + nan i", "1e999") scores 0 without
reaching the scorer unless the gold answer names one too. **Partial credit** (the scorer's value clipped to [0, 1]) is
an explicit opt-in, per reward or per task, off in every shipped config: build the reward with
`make_reasoning_gym_reward(partial=True)`, or load the task as `rg/<generator>?partial_credit` (its rows' `rg_entry`
then carry `"partial_credit": true`). Which datasets pay a fixed answer even in strict mode is measured by
`benchmarks/rg_audit.py`, which also marks every dataset whose scorer may evaluate answer text as code (a static scan
for eval, exec, sympify, parse_expr...); `healtrl.tasks.load_task` refuses both by default.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import pickle
import threading
from collections import Counter

from ._common import clean_text, column, fold_case, logger, report
from ._scorer_pool import ScorerPool, default_workers
from .math import extract_boxed

__all__ = [
    "RG_MAX_ANSWER_CHARS",
    "RG_SCORER_WORKERS",
    "RG_SCORE_TIMEOUT_S",
    "RG_SECONDS_PER_COMPLETION",
    "make_reasoning_gym_reward",
    "reasoning_gym_reward",
    "reset_scorer_failure_counts",
    "rg_lookup",
    "scorer_failure_counts",
]

RG_SCORE_TIMEOUT_S = 1.0
"""Wall-clock seconds reasoning-gym's scorer may spend on one answer (in its worker's child process, killed past it;
the answer scores 0 and counts as a scorer failure). Every dataset's gold answer scores well inside it on a loaded
2-core machine (`benchmarks/results/rg_audit.md` states the slowest); together with `RG_SCORER_WORKERS` >= 2 it keeps
a batch of hostile answers (`9**9**9` for a sympy scorer) within `RG_SECONDS_PER_COMPLETION` per completion."""

RG_SCORER_WORKERS = default_workers()
"""Scorer worker processes (`min(4, CPU cores)`): each holds reasoning-gym (~100 MB) and scores one answer at a time;
more than 4 buys little (a batch is scored in well under a second when answers are ordinary) and costs memory."""

RG_SECONDS_PER_COMPLETION = 0.5
"""The batch budget: scoring a batch of n completions stops `max(RG_SCORE_TIMEOUT_S, this * n)` seconds after it
began (worker start-up and entry preparation not counted); completions not scored by then score 0 (counted)."""

RG_MAX_ANSWER_CHARS = 20_000
"""Longest final answer sent to a scorer (characters); longer ones score 0 and count as malformed. Twice the longest
gold answer of any reasoning-gym dataset in the audit (`benchmarks/rg_audit.py`) is well below it."""

_WORKER_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_scorer_worker.py")
_SCORER_FAILURES = ("timeout", "died", "garbage", "deadline", "prepare-timeout")

_lock = threading.Lock()
_pool_lock = threading.Lock()
_pool: ScorerPool | None = None
_FAILURES: Counter = Counter()


def scorer_failure_counts() -> dict[str, int]:
    """Completions whose scorer failed in this process (ran past its deadline, died, replied garbage), by cause."""
    with _lock:
        return dict(_FAILURES)


def reset_scorer_failure_counts() -> None:
    """Set the scorer-failure counters back to zero."""
    with _lock:
        _FAILURES.clear()


def scorer_pool() -> ScorerPool:
    """The process's reasoning-gym scorer pool (created on first use; workers start when first needed)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ScorerPool("reasoning-gym", _WORKER_FILE, RG_SCORER_WORKERS)
        return _pool


@functools.lru_cache(maxsize=64)
def _dataset(name: str, seed: int, size: int, config: str):
    import reasoning_gym

    return reasoning_gym.create_dataset(name, seed=seed, size=size, **json.loads(config))


def rg_lookup(spec: dict | str) -> tuple[object, dict]:
    """The reasoning-gym dataset and entry that a `rg_entry` column value names, regenerated in this process (for
    data loading and inspection; never used to score a completion).

    Args:
        spec: `{"dataset": name, "seed": int, "size": int, "index": int, "config": {...}}` or its JSON string; the
            entry is regenerated exactly (reasoning-gym's generators are deterministic in `(seed, index)`).

    Returns:
        `(dataset, entry)`.
    """
    spec = json.loads(spec) if isinstance(spec, str) else spec
    config = json.dumps(spec.get("config") or {}, sort_keys=True)
    with _lock:  # generators hold state (their random stream)
        dataset = _dataset(spec["dataset"], int(spec["seed"]), int(spec["size"]), config)
        entry = dataset[int(spec["index"])]
    return dataset, entry


def _answer_tags(text: str) -> list[str]:
    """The contents of every `<answer>...</answer>` of `text` (case-insensitive tags; each closed by the first closing
    tag after it), in order. str.find on the case-folded text: linear (a lazy regex rescans to the end of the text
    from every unclosed tag)."""
    out, pos, folded = [], 0, fold_case(text)
    while (start := folded.find("<answer>", pos)) >= 0:
        end = folded.find("</answer>", start + len("<answer>"))
        if end < 0:
            break
        out.append(text[start + len("<answer>") : end])
        pos = end + len("</answer>")
    return out


def _final_answer(text: str) -> str:
    boxed = extract_boxed(text)
    if boxed:
        return boxed[-1].strip()
    tagged = _answer_tags(text)
    if tagged:
        return tagged[-1].strip()
    return text.strip().splitlines()[-1].strip()


def _read_spec(value) -> dict | None:
    """The `rg_entry` value as a spec dict, or None when it is not one (missing keys, wrong types)."""
    try:
        spec = json.loads(value) if isinstance(value, (str, bytes)) else value
        if not isinstance(spec, dict):
            return None
        out = {
            "dataset": str(spec["dataset"]),
            "seed": int(spec["seed"]),
            "size": int(spec["size"]),
            "index": int(spec["index"]),
            "config": spec.get("config") or {},
        }
        if not isinstance(out["config"], dict):
            return None
        json.dumps(out["config"])
        return {**out, "partial_credit": spec.get("partial_credit") is True}
    except (KeyError, TypeError, ValueError):
        return None


def _strict(value: float, partial: bool) -> float:
    if partial:
        return min(max(value, 0.0), 1.0) if value == value else 0.0
    return 1.0 if value == 1.0 else 0.0


def make_reasoning_gym_reward(partial: bool = False):
    """A reasoning-gym reward (see the module docstring).

    Args:
        partial: Pay the generator's scorer value clipped to [0, 1] (prefix, substring and closeness credit included)
            instead of the strict 1.0-or-0. Off by default and in every shipped config; rows whose `rg_entry` holds
            `"partial_credit": true` get it either way.

    Returns:
        `reasoning_gym_reward(prompts=None, completions=None, rg_entry=None, log_metric=None, **kwargs)`.
    """

    def reasoning_gym_reward(prompts=None, completions=None, rg_entry=None, log_metric=None, **kwargs) -> list[float]:
        """The reasoning-gym generator's score of the completion's final answer: 1.0 when its scorer returns exactly
        1.0, else 0.0 (partial credit only when opted in; see `healtrl.rewards.reasoning_gym`).

        The final answer is the last `\\boxed{}`, else the last `<answer>...</answer>`, else the last line.
        Malformed completions, answers over `RG_MAX_ANSWER_CHARS`, unreadable `rg_entry` values and answers the
        scorer raised on score 0.0, never raise, and are counted (`rewards/reasoning_gym/malformed`); scorer
        failures (timeouts, dead workers) score 0.0 and are counted (`rewards/reasoning_gym/scorer_failures`).

        Args:
            prompts: Unused.
            completions: Strings or conversations.
            rg_entry: JSON `{"dataset", "seed", "size", "index", "config"}` (and optionally `"partial_credit"`)
                naming the generated problem (see `healtrl.tasks.load_task("rg/<name>")`), one per completion.
            log_metric: TRL's metric hook.
            **kwargs: Other dataset columns, ignored.

        Returns:
            One float per completion.
        """
        completions = list(completions) if completions is not None else []
        specs = column(rg_entry, len(completions), "rg_entry")
        rewards = [0.0] * len(completions)
        bad, requests, where = 0, [], []
        for i, completion in enumerate(completions):
            text = clean_text(completion)
            spec = _read_spec(specs[i]) if text is not None and specs[i] is not None else None
            answer = _final_answer(text) if spec is not None else None
            if answer is None or len(answer) > RG_MAX_ANSWER_CHARS:
                bad += 1
                continue
            try:  # regenerated here, where the prompt was (some generators depend on the hash seed)
                entry = base64.b64encode(pickle.dumps(rg_lookup(spec)[1])).decode("ascii")
            except Exception as exc:
                logger.debug("Reward 'reasoning_gym' cannot regenerate %r: %r", spec, exc)
                bad += 1
                continue
            where.append((i, partial or spec["partial_credit"]))
            spec = {k: v for k, v in spec.items() if k != "partial_credit"}
            requests.append({"spec": spec, "entry": entry, "answer": answer})
        failures: Counter = Counter()
        if requests:
            budget = max(RG_SCORE_TIMEOUT_S, RG_SECONDS_PER_COMPLETION * len(requests))
            replies = scorer_pool().run_batch(requests, RG_SCORE_TIMEOUT_S, budget)
            for (i, pays_partial), reply in zip(where, replies):
                if "score" in reply:
                    rewards[i] = _strict(float(reply["score"]), pays_partial)
                elif reply.get("failure") in _SCORER_FAILURES:
                    failures[reply["failure"]] += 1
                elif reply.get("failure") != "nan":  # "raised", or an "error" preparing the entry
                    bad += 1
        report("reasoning_gym", bad, len(completions), log_metric)
        if requests:
            _count_failures(failures, len(requests), log_metric)
        return rewards

    if partial:
        reasoning_gym_reward.__name__ = reasoning_gym_reward.__qualname__ = "reasoning_gym_partial_reward"
    return reasoning_gym_reward


def score_completion_lists(rg_entries: list, completion_lists: list[list]) -> list[list[float]]:
    """Strict rewards of several completions per entry, each entry's completions scored one after another in one
    scoring child (within `RG_SCORE_TIMEOUT_S` per completion): the audit's path (`benchmarks/rg_audit.py`), the same
    answer reading, scorer, isolation from the trainer and strict rule as `reasoning_gym_reward`, with one fork per
    entry instead of one per completion. Not for training: the completions of one entry share a child.

    Returns:
        One list of rewards per entry; malformed completions and failures score 0.0 (failures are counted).
    """
    requests, shapes = [], []
    for value, completions in zip(rg_entries, completion_lists):
        spec = _read_spec(value)
        if spec is None:
            raise ValueError(f"Not a readable rg_entry: {value!r}")
        answers = []
        for completion in completions:
            text = clean_text(completion)
            answer = _final_answer(text) if text is not None else None
            answers.append(answer if answer is not None and len(answer) <= RG_MAX_ANSWER_CHARS else None)
        entry = base64.b64encode(pickle.dumps(rg_lookup(spec)[1])).decode("ascii")
        spec = {k: v for k, v in spec.items() if k != "partial_credit"}
        sent = [a for a in answers if a is not None]
        requests.append({"spec": spec, "entry": entry, "answers": sent})
        shapes.append(answers)
    n = sum(len(r["answers"]) for r in requests)
    budget = max(RG_SCORE_TIMEOUT_S, RG_SECONDS_PER_COMPLETION * n)
    timeout = RG_SCORE_TIMEOUT_S * max((len(r["answers"]) for r in requests), default=1)
    replies = scorer_pool().run_batch(requests, timeout, max(budget, timeout))
    out, failures = [], Counter()
    for answers, reply in zip(shapes, replies):
        scores = iter(reply.get("scores") or [])
        if "scores" not in reply and reply.get("failure") in _SCORER_FAILURES:
            failures[reply["failure"]] += 1
        row = []
        for answer in answers:
            value = next(scores, None) if answer is not None else None
            row.append(_strict(float(value), False) if value is not None else 0.0)
        out.append(row)
    if failures:
        with _lock:
            _FAILURES.update(failures)
    return out


def _count_failures(failures: Counter, n: int, log_metric) -> None:
    total = sum(failures.values())
    if total:
        with _lock:
            _FAILURES.update(failures)
        logger.warning(
            "Reward 'reasoning_gym': the scorer failed on %d of %d answers (%s); they scored 0.",
            total,
            n,
            ", ".join(f"{cause}: {k}" for cause, k in sorted(failures.items())),
        )
    if callable(log_metric):
        try:
            log_metric("rewards/reasoning_gym/scorer_failures", float(total))
        except Exception:  # a logging hook must not take the reward down
            pass


reasoning_gym_reward = make_reasoning_gym_reward()
