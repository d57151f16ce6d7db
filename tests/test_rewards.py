"""Tests of `healtrl.rewards`: answer extraction and equivalence (math), option extraction (multiple choice), the code
sandbox against hostile completions, and the malformed-completion contract (score 0, count, never raise)."""

from __future__ import annotations

import glob
import json
import os
import resource
import threading
import time

import pytest

from healtrl.data import REWARD_FUNCS, get_reward_func
from healtrl.rewards import (
    MAX_COMPLETION_CHARS,
    SandboxLimits,
    answers_match,
    code_reward,
    extract_boxed,
    extract_choice,
    extract_code,
    extract_final_answer,
    isolation_level,
    make_code_reward,
    malformed_counts,
    math_lenient_reward,
    math_reward,
    multiple_choice_reward,
    reasoning_gym_reward,
    reset_malformed_counts,
    run_python,
    run_tests,
)
from healtrl.rewards.sandbox import runner as sandbox_runner
from tests.helpers import sandbox_expected

needs_sandbox = pytest.mark.skipif(not sandbox_expected(), reason="the code sandbox is built for Linux")

MALFORMED = [
    "",
    "   \n ",
    None,
    42,
    {"role": "assistant"},
    [{"role": "assistant", "content": None}],
    "x" * (MAX_COMPLETION_CHARS + 1),
    "\\boxed{7} \ud800",  # a lone surrogate: not valid unicode text
    [{"role": "assistant", "content": [{"type": "image"}]}],
]


# ---------------------------------------------------------------------------------------------------------------- math
@pytest.mark.parametrize(
    "text, expected",
    [
        ("so \\boxed{\\frac{1}{2}} then \\boxed{\\frac{3}{4}}", "\\frac{3}{4}"),  # the last box
        ("nested \\boxed{\\sqrt{x^{2}}}", "\\sqrt{x^{2}}"),
        ("\\fbox{12}", "12"),
        ("\\boxed 5 apples", "5"),
        ("Work...\nAnswer: $\\frac{7}{2}$", "\\frac{7}{2}"),  # DAPO's "Answer:" line
        ("**Final Answer:** 12.", "12"),
        ("Thus the answer is 3/4.", "3/4"),
        ("3 apples plus 1,200 pears make 1,203 fruits", "1203"),  # the last number
        ("no answer here", None),
        ("\\boxed{unbalanced", None),
    ],
)
def test_extract_final_answer(text, expected):
    # the lenient format reads each of these forms; `math`'s default format (boxed) only the boxes
    assert extract_final_answer(text, "lenient") == expected


def test_extract_boxed_all():
    assert extract_boxed("\\boxed{a}\\boxed{b{c}}\\boxed 7") == ["a", "b{c}", "7"]


@pytest.mark.parametrize(
    "prediction, gold, equal",
    [
        ("\\frac{1}{2}", "0.5", True),
        ("\\dfrac12", "\\frac{1}{2}", True),
        ("1,000", "1000", True),
        ("27", "27.0", True),
        ("(x+1)^2", "x^2+2x+1", True),
        ("\\text{B}", "B", True),
        ("[1,2)", "[1,2)", True),
        ("2, -2", "-2, 2", True),
        ("3", "4", False),
        ("\\frac{1}{3}", "0.33", False),
        ("(1,2)", "[1,2]", False),
        ("", "1", False),
        (None, "1", False),
    ],
)
def test_answers_match(prediction, gold, equal):
    assert answers_match(prediction, gold) is equal


def test_math_reward_scores_and_formats():
    completions = [
        "We get \\boxed{\\frac{3}{4}}.",
        [{"role": "assistant", "content": "Answer: 0.75"}],
        "The total is 1,200.",
        "\\boxed{5}",
        "I give up.",
    ]
    answers = ["0.75", "\\frac34", "1200", "6", "2"]
    assert math_lenient_reward(completions=completions, answer=answers) == [1.0, 1.0, 1.0, 0.0, 0.0]
    # `math` reads the boxed format unless the row says otherwise: the "Answer:" line and the bare number do not count
    assert math_reward(completions=completions, answer=answers) == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert math_reward(completions=["\\boxed{2}"] * 3, answer="2") == [1.0] * 3  # a scalar column broadcasts
    with pytest.raises(ValueError, match="one value per completion"):
        math_reward(completions=["1", "2"], answer=["1"])


def test_math_reward_off_the_main_thread():
    """math-verify's signal-based timeouts only work in the main thread: rewards must work in threads too."""
    out = {}
    thread = threading.Thread(
        target=lambda: out.setdefault("r", math_reward(completions=["\\boxed{x^2}"], answer="x*x"))
    )
    thread.start()
    thread.join()
    assert out["r"] == [1.0]


@pytest.mark.parametrize(
    "reward, columns",
    [
        (math_reward, {"answer": "7"}),
        (multiple_choice_reward, {"answer": "B", "choices": [["x", "y"]]}),
        (reasoning_gym_reward, {"rg_entry": json.dumps({"dataset": "chain_sum", "seed": 0, "size": 2, "index": 0})}),
    ],
)
def test_malformed_completions_score_zero_and_are_counted(reward, columns):
    reset_malformed_counts()
    logged = []
    n = len(MALFORMED)
    cols = {k: (v * n if isinstance(v, list) else v) for k, v in columns.items()}
    scores = reward(completions=MALFORMED, log_metric=lambda name, value: logged.append((name, value)), **cols)
    assert scores == [0.0] * n
    name = reward.__name__.removesuffix("_reward")
    assert malformed_counts()[name] == n
    assert logged == [(f"rewards/{name}/malformed", float(n))]
    # without TRL's hook the count goes to `logging`, and a broken hook is not fatal either
    cols = {k: (v * 2 if isinstance(v, list) else v) for k, v in columns.items()}
    assert reward(completions=MALFORMED[:2], log_metric=lambda *a: 1 / 0, **cols) == [0.0, 0.0]
    assert malformed_counts()[name] == n + 2


def test_unreadable_ground_truth_is_malformed():
    reset_malformed_counts()
    assert math_reward(completions=["\\boxed{1}", "\\boxed{1}"], answer=[None, ""]) == [0.0, 0.0]
    assert multiple_choice_reward(completions=["B"], answer=["Z"], choices=[["a", "b"]]) == [0.0]
    bad_entry = json.dumps({"dataset": "no_such_generator", "seed": 0, "size": 1, "index": 0})
    assert reasoning_gym_reward(completions=["\\boxed{1}"], rg_entry=[bad_entry]) == [0.0]
    assert malformed_counts() == {"math": 2, "multiple_choice": 1, "reasoning_gym": 1}


# ------------------------------------------------------------------------------------------------------ multiple choice
OPTIONS = ["Paris", "London", "Rome", "Berlin"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("\\boxed{B}", "B"),
        ("\\boxed{\\text{(C)}}", "C"),
        ("\\boxed{B} ... checking again \\boxed{B}", "B"),
        ("\\boxed{A} or maybe \\boxed{B}", None),  # two different answers
        ("\\boxed{A, C}", None),
        ("The answer is (B).", "B"),
        ("Answer: B. London", "B"),
        ("Answer: London", "B"),  # the option text
        ("Final answer: rome", "C"),
        ("Answer: A or C", None),
        ("Answer: I am not sure", None),
        ("I think the answer is C because A is wrong", "C"),
        ("A man walks in. Answer: (D)", "D"),
        ("(A) is my choice", "A"),
        ("B", "B"),
        ("Berlin", "D"),
        ("E", None),  # out of range for 4 options
        ("A long essay " * 40, None),
    ],
)
def test_extract_choice(text, expected):
    assert extract_choice(text, OPTIONS) == expected


def test_multiple_choice_reward():
    completions = ["\\boxed{B}", "Answer: London", "\\boxed{A}\\boxed{B}", "\\boxed{C}", "\\boxed{2}"]
    scores = multiple_choice_reward(completions=completions, answer=["B", "B", "B", "B", "B"], choices=[OPTIONS] * 5)
    assert scores == [1.0, 1.0, 0.0, 0.0, 0.0]
    # gold as a 0-based index or as the option text; one option list shared by all completions
    assert multiple_choice_reward(completions=["\\boxed{C}", "\\boxed{C}"], answer=[2, "Rome"], choices=OPTIONS) == [
        1.0,
        1.0,
    ]
    # without options, letters only
    assert multiple_choice_reward(completions=["(D)", "Berlin"], answer=["D", "D"]) == [1.0, 0.0]


def test_rewards_are_registered():
    for name, column in (
        ("math", "answer"),
        ("multiple_choice", "choices"),
        ("code", "tests"),
        ("reasoning_gym", "rg_entry"),
    ):
        assert column in REWARD_FUNCS[name].columns and callable(get_reward_func(name))


# ---------------------------------------------------------------------------------------------------------------- code
ADD = {
    "kind": "assert",
    "prompt": 'def add(a, b):\n    """Add two numbers."""\n',
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-4, 4) == 0\n",
    "entry_point": "add",
}
STDIO = {"kind": "stdio", "inputs": ["1 2\n", "10 -3\n"], "outputs": ["3\n", "7"]}
FUNCTIONAL = {
    "kind": "functional",
    "fn_name": "pair",
    "inputs": ["[1, 2, 3]\n4", "[5, 5]\n10"],
    "outputs": ["[0, 2]", "[0, 1]"],
}


def test_extract_code():
    assert extract_code("text\n```python\nx = 1\n```\nmore\n```python\ny = 2\n```") == "y = 2\n"
    assert extract_code("```\nz = 3\n```") == "z = 3\n"
    assert extract_code("```python\nunterminated = 1\n") == "unterminated = 1\n"
    assert extract_code("plain = 1") == "plain = 1"


@needs_sandbox
def test_run_tests_kinds():
    assert run_tests("def add(a, b):\n    return a + b\n", ADD).all_passed
    assert run_tests("    return a + b\n", ADD).all_passed  # a body completing the prompt's function
    assert not run_tests("def add(a, b):\n    return a * b\n", ADD).all_passed
    report = run_tests("a, b = map(int, input().split())\nprint(a + b)", STDIO)
    assert (report.passed, report.total) == (2, 2)
    assert run_tests("import sys\na, b = map(int, sys.stdin.buffer.read().split())\nprint(a + b)", STDIO).all_passed
    assert run_tests("a, b = map(int, open(0).read().split())\nprint(a + b)", STDIO).all_passed
    assert run_tests("a, b = map(int, input().split())\nprint(a - b)", STDIO).passed == 0
    solution = "class Solution:\n    def pair(self, nums: List[int], t: int) -> List[int]:\n"
    solution += "        seen = {}\n        for i, x in enumerate(nums):\n"
    solution += "            if t - x in seen:\n                return [seen[t - x], i]\n            seen[x] = i\n"
    assert run_tests(solution, FUNCTIONAL).all_passed
    assert run_tests("def pair(nums, t):\n    return [0, 1]\n", FUNCTIONAL).passed == 1  # a plain function works too
    assert run_tests("x", "not json").status == "bad_spec"


@needs_sandbox
def test_code_reward_partial_and_exits():
    exits = [
        "import os\nos._exit(0)",
        "import sys\nsys.exit(0)",
        "raise SystemExit",
        "print('PASS')\nimport os\nos._exit(0)",
    ]
    completions = ["```python\ndef add(a, b):\n    return a + b\n```"] + [f"```python\n{c}\n```" for c in exits]
    assert code_reward(completions=completions, tests=[json.dumps(ADD)] * len(completions)) == [1.0, 0, 0, 0, 0]
    half = make_code_reward(partial=True)
    assert half(completions=["```python\nprint(3)\n```"], tests=[json.dumps(STDIO)]) == [0.5]


# Hostile completions: each must score 0 within the time limit and leave the test process unharmed.
HOSTILE = {
    "infinite loop": "while True:\n    pass",
    "sleep": "import time\ntime.sleep(60)",
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    "huge allocation": "x = bytearray(50 * 1024 ** 3)",
    "growing allocation": "chunks = []\nwhile True:\n    chunks.append(bytearray(10 ** 7))",
    "huge file": "with open('big', 'wb') as f:\n    f.write(b'x' * (64 << 20))",
    "many files": "i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'x' * (1 << 19))\n    i += 1",
    "write outside cwd": "open('/tmp/healtrl-escape', 'wb').write(b'x' * (4 << 20))",
    "os._exit": "import os\nos._exit(0)",
    "segfault": "import ctypes\nctypes.string_at(0)",
    "read stdin": "import sys\ndata = sys.stdin.read()\nprint(data)",
    "print gigabytes": "import sys\nwhile True:\n    sys.stdout.write('x' * 100000)",
    "delete files": "import os\nfor name in os.listdir('.'):\n    os.remove(name)",
    "socket connect": "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)\nprint('connected')",
    "fake pass line": "print('PASS')\nprint('0' * 32 + ' PASS')\nimport os\nos._exit(0)",
}


def _sandbox_dirs():
    return set(glob.glob(os.path.join(os.environ.get("TMPDIR", "/tmp"), "healtrl-sandbox-*")))


@needs_sandbox
def test_hostile_completions_score_zero(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("mine")
    before_dirs = _sandbox_dirs()
    limits = SandboxLimits(
        timeout=2.0,
        memory_bytes=512 << 20,
        max_processes=4,
        file_size_bytes=1 << 20,
        disk_bytes=8 << 20,
        max_output_bytes=1 << 16,
    )
    hostile = dict(HOSTILE)
    if not _limits_enforced():  # an unbounded fork bomb would harm the machine, not just the run
        hostile.pop("fork bomb")
    reward = make_code_reward(limits=limits, workers=len(hostile))
    completions = [f"```python\n{src}\n```" for src in hostile.values()]
    start = time.monotonic()
    scores = reward(completions=completions, tests=[json.dumps(ADD)] * len(hostile))
    elapsed = time.monotonic() - start
    assert scores == [0.0] * len(hostile), dict(zip(hostile, scores))
    assert elapsed < 2.0 + 6.0, elapsed  # all within the time limit (plus start-up on a busy machine)
    assert (tmp_path / "keep.txt").read_text() == "mine" and os.getcwd() == str(tmp_path)
    assert _sandbox_dirs() <= before_dirs  # every working directory removed
    if isolation_level() == "namespaces":
        assert not os.path.exists("/tmp/healtrl-escape")  # the sandbox's /tmp is private
    elif os.path.exists("/tmp/healtrl-escape"):  # "rlimits" isolation bounds the file (RLIMIT_FSIZE), not its place
        assert os.path.getsize("/tmp/healtrl-escape") <= limits.file_size_bytes
        os.remove("/tmp/healtrl-escape")
    # the same sandbox still works afterwards
    assert reward(completions=["```python\ndef add(a, b):\n    return a + b\n```"], tests=[json.dumps(ADD)]) == [1.0]


def _limits_enforced() -> bool:
    """RLIMIT_NPROC binds: the sandbox runs as an unprivileged uid (root switches to one)."""
    isolation_level()
    return os.geteuid() != 0 or sandbox_runner._uid_mode in ("per-slot", "nobody")


@needs_sandbox
def test_sandbox_statuses():
    limits = SandboxLimits(timeout=1.5, max_output_bytes=1000, memory_bytes=256 << 20)
    result = run_python("import sys\nprint(sys.stdin.read().upper())", stdin="abc", limits=limits)
    assert (result.status, result.stdout) == ("ok", "ABC\n")
    assert run_python("while True: pass", limits=limits).status == "timeout"
    assert run_python("print('x' * 5000)", limits=limits).status == "output_limit"
    crashed = run_python("import ctypes\nctypes.string_at(0)", limits=limits)
    assert crashed.status == "error" and crashed.returncode == -11
    memory = run_python("x = bytearray(1 << 30)", limits=limits)
    assert memory.status == "error" and "MemoryError" in memory.stderr
    env = run_python("import os\nprint(sorted(k for k in os.environ if 'PROXY' in k.upper() or 'TOKEN' in k.upper()))")
    assert env.stdout.strip() == "[]"
    with pytest.raises(ValueError, match="timeout must be positive"):
        SandboxLimits(timeout=0)


@needs_sandbox
def test_sandbox_bounds_processes():
    if not _limits_enforced():
        pytest.skip("running as root without an unprivileged uid: RLIMIT_NPROC is not enforced")
    program = (
        "import os, time\nn = 0\nfor _ in range(40):\n    try:\n        pid = os.fork()\n    except OSError:\n"
        "        break\n    if pid == 0:\n        time.sleep(5)\n        os._exit(0)\n    n += 1\nprint(n)\n"
    )
    result = run_python(program, limits=SandboxLimits(timeout=10, max_processes=3))
    assert result.status == "ok" and int(result.stdout) == 3, result  # exactly max_processes children


@needs_sandbox
def test_sandbox_kills_escaped_processes():
    if isolation_level() != "namespaces":
        pytest.skip("only the namespace isolation guarantees that detached processes die with the run")
    marker = f"healtrl-orphan-{os.getpid()}-{time.monotonic_ns()}"
    program = (
        "import os, sys\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(30)', {marker!r}])\n"
        "    os._exit(0)\nprint('parent done')\n"
    )
    assert run_python(program, limits=SandboxLimits(timeout=5)).stdout == "parent done\n"
    time.sleep(0.2)
    survivors = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if marker.encode() in handle.read():
                    survivors.append(pid)
        except OSError:
            pass
    assert survivors == []


@needs_sandbox
def test_sandbox_network_is_unreachable():
    if isolation_level() != "namespaces":
        pytest.skip("network isolation is only guaranteed with namespaces")
    program = (
        "import ctypes, socket\ns = socket.socket()\ns.settimeout(1)\n"
        "print(s.connect_ex(('1.1.1.1', 80)))\nprint(socket.gethostbyname('localhost'))\n"
    )
    result = run_python(program, limits=SandboxLimits(timeout=5))
    assert result.stdout.splitlines()[0] != "0"  # even the raw connect fails (ENETUNREACH)


@needs_sandbox
def test_code_reward_does_not_touch_the_trainer_limits():
    before = {kind: resource.getrlimit(kind) for kind in (resource.RLIMIT_AS, resource.RLIMIT_NPROC)}
    code_reward(completions=["```python\nx = 1\n```"], tests=[json.dumps(ADD)])
    assert {kind: resource.getrlimit(kind) for kind in before} == before


@needs_sandbox
def test_sandbox_runs_an_interpreter_linked_from_tmp(tmp_path, monkeypatch):
    """A virtual environment under /tmp: its python is a link the sandbox's private /tmp would hide."""
    import sys

    link = tmp_path / "venv-python"
    link.symlink_to(os.path.realpath(sys.executable))
    monkeypatch.setattr(sys, "executable", str(link))
    result = run_python("print(6 * 7)")
    assert (result.status, result.stdout.strip()) == ("ok", "42"), result
