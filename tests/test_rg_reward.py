"""reasoning-gym's reward (issue #39): scorers out of process, strict scores, bounded time, the audit's refusals."""

from __future__ import annotations

import importlib.util
import json
import time

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("reasoning_gym") is None, reason="reasoning-gym not installed (the `tasks` extra)"
)

import healtrl.rewards.math as math_module  # noqa: E402
from healtrl.rewards import reasoning_gym as rg  # noqa: E402


def entry(dataset: str, index: int = 0, size: int = 10, **extra) -> str:
    return json.dumps({"dataset": dataset, "seed": 3, "size": size, "index": index, "config": {}, **extra})


def gold(spec: str) -> str:
    return str(rg.rg_lookup(spec)[1]["answer"])


def boxed(answer: str) -> str:
    return f"The answer is \\boxed{{{answer}}}"


def test_hostile_n_queens_answer_cannot_touch_the_trainer(tmp_path):
    """n_queens' scorer `eval`s the answer: in the trainer this would set a module attribute, write a file and read
    the expected board from the scorer's frame. Scored out of process, none of it reaches the trainer; it scores 0."""
    target = tmp_path / "pwned.txt"
    attacks = [
        "__import__('healtrl.rewards.math').rewards.math.__setattr__('grade_math', lambda *a, **k: 1.0)",
        f"open({str(target)!r}, 'w').write('x')",
        "__import__('sys')._getframe(1).f_locals['entry']['metadata']['valid_answers']",
        "(lambda: [x for x in ()].__class__)() or __import__('os').system('touch " + str(target) + "')",
    ]
    original = math_module.grade_math
    spec = entry("n_queens")
    scores = rg.reasoning_gym_reward(completions=[f"<answer>{a}</answer>" for a in attacks], rg_entry=[spec] * 4)
    assert scores == [0.0] * 4
    assert math_module.grade_math is original
    assert not target.exists()
    assert rg.reasoning_gym_reward(completions=[f"<answer>{gold(spec)}</answer>"], rg_entry=[spec]) == [1.0]


def test_power_tower_on_polynomial_multiplication_is_bounded():
    spec = entry("polynomial_multiplication")
    rg.reasoning_gym_reward(completions=[boxed(gold(spec))], rg_entry=[spec])  # worker start-up, not measured
    rg.reset_scorer_failure_counts()
    start = time.monotonic()
    scores = rg.reasoning_gym_reward(completions=[boxed("9**9**9")], rg_entry=[spec])
    elapsed = time.monotonic() - start
    assert scores == [0.0]
    assert elapsed < rg.RG_SCORE_TIMEOUT_S + 2
    assert rg.scorer_failure_counts() == {"timeout": 1}


def test_batch_of_hostile_answers_shares_one_deadline():
    spec = entry("polynomial_multiplication")
    n = 4
    rg.reasoning_gym_reward(completions=[boxed(gold(spec))], rg_entry=[spec])
    start = time.monotonic()
    scores = rg.reasoning_gym_reward(completions=[boxed("9**9**9")] * n, rg_entry=[spec] * n)
    elapsed = time.monotonic() - start
    assert scores == [0.0] * n
    budget = max(rg.RG_SCORE_TIMEOUT_S, rg.RG_SECONDS_PER_COMPLETION * n)
    assert elapsed < budget + rg.RG_SCORE_TIMEOUT_S + 2


@pytest.mark.parametrize(
    "dataset, answer",
    [
        ("complex_arithmetic", "nan"),
        ("complex_arithmetic", "NaN+NaNi"),
        ("complex_arithmetic", "nan + nan i"),
        ("complex_arithmetic", "-INF"),
        ("complex_arithmetic", "∞"),
        ("complex_arithmetic", "1e999"),
        ("coin_flip", "0"),
        ("isomorphic_strings", "TrueFalse"),
        ("isomorphic_strings", "YesNo"),
        ("basic_arithmetic", "<gold>7"),
        ("chain_sum", "<gold><gold>"),
    ],
)
def test_degenerate_answers_score_zero(dataset, answer):
    specs = [entry(dataset, index=i) for i in range(4)]
    completions = [boxed(answer.replace("<gold>", gold(spec))) for spec in specs]
    assert rg.reasoning_gym_reward(completions=completions, rg_entry=specs) == [0.0] * 4


@pytest.mark.parametrize("dataset", ["complex_arithmetic", "coin_flip", "isomorphic_strings", "basic_arithmetic"])
def test_gold_answers_score_one(dataset):
    specs = [entry(dataset, index=i) for i in range(4)]
    assert rg.reasoning_gym_reward(completions=[boxed(gold(s)) for s in specs], rg_entry=specs) == [1.0] * 4


def test_nonfinite_answers_are_recognised():
    from healtrl.rewards._scorer_worker import names_nonfinite

    for text in ("nan", "NaN", "-inf", "Infinity", "∞", "NaN+NaNi", "nan + nan i", "1e999", "2.5E+400", "ｎａｎ"):
        assert names_nonfinite(text), text
    for text in ("banana", "infinite", "information", "12", "1e9", "3+4i"):
        assert not names_nonfinite(text), text


def test_partial_credit_is_an_opt_in():
    spec = entry("basic_arithmetic")
    near = gold(spec) + "7"  # contains the gold: reasoning-gym's substring credit
    strict = rg.reasoning_gym_reward(completions=[boxed(near)], rg_entry=[spec])
    partial = rg.make_reasoning_gym_reward(partial=True)(completions=[boxed(near)], rg_entry=[spec])
    per_row = rg.reasoning_gym_reward(
        completions=[boxed(near)], rg_entry=[entry("basic_arithmetic", partial_credit=True)]
    )
    assert strict == [0.0]
    assert 0.0 < partial[0] < 1.0 and per_row == partial


def test_killed_scorer_counted_and_replaced():
    """A worker that dies is killed and replaced; its completion scores 0 and is counted."""
    pool = rg.scorer_pool()
    spec = entry("chain_sum")
    rg.reasoning_gym_reward(completions=[boxed(gold(spec))], rg_entry=[spec])
    worker = pool._idle[-1]
    worker.process.kill()
    worker.process.wait()
    rg.reset_scorer_failure_counts()
    logged = []
    spec_list = [spec] * (2 * pool.size)
    scores = rg.reasoning_gym_reward(
        completions=[boxed(gold(spec))] * len(spec_list),
        rg_entry=spec_list,
        log_metric=lambda name, value: logged.append((name, value)),
    )
    assert worker not in pool._idle
    assert scores.count(0.0) == 1 and scores.count(1.0) == len(spec_list) - 1
    assert rg.scorer_failure_counts() == {"died": 1}
    assert ("rewards/reasoning_gym/scorer_failures", 1.0) in logged
    assert rg.reasoning_gym_reward(completions=[boxed(gold(spec))] * 3, rg_entry=[spec] * 3) == [1.0] * 3


def test_long_answers_are_not_sent():
    spec = entry("chain_sum")
    assert rg.reasoning_gym_reward(completions=[boxed("1" * (rg.RG_MAX_ANSWER_CHARS + 1))], rg_entry=[spec]) == [0.0]


# --------------------------------------------------------------------------------------------------------- the audit
def test_audit_covers_every_dataset():
    from reasoning_gym.factory import DATASETS

    from healtrl.tasks.offline import rg_audit_verdicts

    verdicts = rg_audit_verdicts()["datasets"]
    assert set(DATASETS) <= set(verdicts)
    assert all(isinstance(row["safe"], bool) and (row["safe"] or row["reason"]) for row in verdicts.values())


def test_unsafe_dataset_is_refused_with_its_audit_row():
    from healtrl.tasks import load_task
    from healtrl.tasks.offline import rg_audit_verdicts

    verdicts = rg_audit_verdicts()["datasets"]
    assert verdicts["coin_flip"]["safe"] is False
    with pytest.raises(ValueError, match=r"coin_flip.*unsafe.*rg_audit\.md.*rg/coin_flip\?allow_unsafe") as info:
        load_task("rg/coin_flip", num_samples=2)
    assert verdicts["coin_flip"]["reason"] in str(info.value)
    data = load_task("rg/coin_flip?allow_unsafe", num_samples=2)
    assert len(data) == 2 and "partial_credit" not in json.loads(data[0]["rg_entry"])
    data = load_task("rg/chain_sum?partial_credit", num_samples=2)
    assert json.loads(data[0]["rg_entry"])["partial_credit"] is True
    with pytest.raises(ValueError, match="unknown option 'unsafe'"):
        load_task("rg/coin_flip?unsafe", num_samples=2)


def test_dataset_missing_from_the_audit_is_refused(monkeypatch):
    from healtrl.tasks import offline

    monkeypatch.setattr(offline, "rg_audit_verdicts", lambda: {"datasets": {}, "reasoning_gym_version": "0"})
    with pytest.raises(ValueError, match=r"not in healtrl's audit.*rg_audit\.py --datasets chain_sum"):
        offline.check_rg_audit("rg/chain_sum", "chain_sum", allow_unsafe=False)


# ------------------------------------------------------------------------------------- code run inside the scorer
# Evaluated by the scorer (n_queens: `eval`; polynomial_multiplication: sympy's `parse_expr`, whose namespace holds
# `preview`), each reaches `os` and writes lines that would pay 1.0 to the fds given that are open (`os.path.exists` is
# true for an open fd): 3..63 (the result pipe among them), or 1 (the worker's reply channel to the trainer before the
# fix), then exits cleanly. Spelled out per fd: `parse_expr` mangles names and passed functions.
_OS = {"n_queens": "__import__('os')", "polynomial_multiplication": "preview.__globals__['os']"}


def _write_everywhere(dataset: str, payload: bytes, fds=range(3, 64)) -> str:
    os_ = _OS[dataset]
    writes = ", ".join(f"({os_}.path.exists({k}) and {os_}.write({k}, {payload!r}))" for k in fds)
    return boxed(f"({writes}) and {os_}._exit(0)")


def _allowed_unsafe_entries(dataset: str, n: int) -> list[str]:
    from healtrl.tasks import load_task

    data = load_task(f"rg/{dataset}?allow_unsafe", num_samples=n)
    return [data[i]["rg_entry"] for i in range(n)]


@pytest.mark.parametrize("dataset", ["n_queens", "polynomial_multiplication"])
def test_answer_cannot_forge_its_own_score(dataset):
    """The child's reply needs the request's nonce: a bare "1.0" (or a guessed nonce) written to the result pipe by
    the evaluated answer is garbage; the answer scores 0 and counts as a scorer failure."""
    specs = _allowed_unsafe_entries(dataset, 2)
    rg.reset_scorer_failure_counts()
    for payload in (b"1.0\n", b"0123456789abcdef0123456789abcdef 1.0\n"):
        scores = rg.reasoning_gym_reward(completions=[_write_everywhere(dataset, payload)] * 2, rg_entry=specs)
        assert scores == [0.0, 0.0]
    assert rg.scorer_failure_counts() == {"garbage": 4}


@pytest.mark.parametrize("dataset", ["n_queens", "polynomial_multiplication"])
def test_answer_cannot_pay_other_completions(dataset):
    """Replies injected for the worker's channel (fd 1 in the worker) reach /dev/null in the child: the other wrong
    answers of the batch, and of the next batch, still score 0, and the golds 1."""
    n = 2 * rg.scorer_pool().size + 2
    specs = _allowed_unsafe_entries(dataset, n)
    golds = [boxed(gold(spec)) for spec in specs]
    injected = b'{"score": 1.0}\n' + b'{"entry": true}\n{"score": 1.0}\n' * 8
    batch = [_write_everywhere(dataset, injected, fds=[1])] + [boxed("wrong")] * (n - 1)
    assert rg.reasoning_gym_reward(completions=batch, rg_entry=specs) == [0.0] * n
    following = [boxed("wrong")] * n
    assert rg.reasoning_gym_reward(completions=following, rg_entry=specs) == [0.0] * n
    assert rg.reasoning_gym_reward(completions=golds, rg_entry=specs) == [1.0] * n


def test_answer_cannot_read_proc():
    """Opening or listing /proc (the child's memory, its fds, its parent's), directly or through /dev/fd, ends the
    child: the answer scores 0 and counts as "died"."""
    spec = entry("n_queens")
    attacks = ["open('/proc/self/mem', 'rb')", "__import__('os').listdir('/dev/fd')", "open('/dev/stdin').read()"]
    rg.reset_scorer_failure_counts()
    scores = rg.reasoning_gym_reward(completions=[boxed(a) for a in attacks], rg_entry=[spec] * 3)
    assert scores == [0.0] * 3
    assert rg.scorer_failure_counts() == {"died": 3}


def test_child_reply_needs_the_nonce():
    from healtrl.rewards._scorer_worker import _parse_child_reply

    nonce, ok = b"ab" * 16, 0
    assert _parse_child_reply(nonce + b" 1.0\n" + nonce + b" nan\n", nonce, 2, ok) == {"scores": [1.0, None]}
    for data in (b"1.0\n", b"ba" * 16 + b" 1.0\n", nonce + b"1.0\n", nonce + b" 1.0", nonce + b" 1.0\n" * 2):
        assert _parse_child_reply(data, nonce, 1, ok) == {"failure": "garbage"}, data


def test_evaluating_datasets_are_refused():
    from healtrl.tasks import load_task
    from healtrl.tasks.offline import rg_audit_verdicts

    verdicts = rg_audit_verdicts()["datasets"]
    reason = "its scorer evaluates answer text as code"
    for name in (
        "n_queens",
        "binary_matrix",
        "spiral_matrix",
        "string_insertion",
        "polynomial_multiplication",
        "puzzle24",
        "countdown",
    ):
        assert verdicts[name]["safe"] is False and reason in verdicts[name]["reason"], name
        with pytest.raises(ValueError, match=rf"{name}.*unsafe.*{reason}"):
            load_task(f"rg/{name}", num_samples=2)
