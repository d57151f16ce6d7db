"""Reward throughput of two versions of healtrl's rewards, measured side by side in one run.

OLD is the rewards as of `--old-commit` (default 51effa0, before issue #25's bounded parsing; 53c88d6 is the commit
before issue #39's second pass): every `healtrl/rewards/*.py` of that commit read with `git show` and imported as a
temporary package. NEW is the working tree. Both score the same
completions in the same process, alternately, in --rounds rounds; a case's time is the median over rounds of the
mean time per completion.

Ordinary completions: reasoning prose with inline LaTeX, numbers and a few braces, of 500, 4,000 and 16,000
characters, ending in a correct final answer (`\\boxed{...}` for `math_reward`, an "Answer: ..." line for
`math_answer_line_reward` and `multiple_choice_reward`, a ```python block for `extract_code`). The `boxed` rows
whose answer equals the ground truth as a string never reach math-verify; the `math-verify` rows state the answer
in another form (`\\frac{3}{4}` for 0.75), so both sides call math-verify: in-process before, through the worker
process after.

Pathological completions: OLD runs them at --old-chars characters (it is quadratic or worse: larger sizes take
minutes), NEW at those and at 1,000,000 characters (`MAX_COMPLETION_CHARS`). The power tower is timed once in the
main thread (OLD: math-verify's 5 s signal timeout; in a worker thread it never returns, so it is not run there).

    python benchmarks/reward_throughput.py                      # ~1 min on 2 shared CPU cores
    python benchmarks/reward_throughput.py --old-commit 53c88d6 # issue #39: before / after the second pass
    python benchmarks/reward_throughput.py --rounds 3 --quick   # a quick look
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

from _bench import rotation

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

OLD_COMMIT = "51effa0"


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", ROOT, *args], check=True, capture_output=True, text=True).stdout


def load_old(commit: str):
    """The reward modules of `commit` (every `healtrl/rewards/*.py` but its `__init__`) as a temporary package
    `healtrl_rewards_old`, registered in `sys.modules` from its folder (`sys.path` is left as it is)."""
    folder = tempfile.mkdtemp(prefix="rewards_old_")
    package = os.path.join(folder, "healtrl_rewards_old")
    os.makedirs(package)
    open(os.path.join(package, "__init__.py"), "w").close()
    names = [
        os.path.basename(path)[:-3]
        for path in _git("ls-tree", "--name-only", commit, "healtrl/rewards/").split()
        if path.endswith(".py") and not path.endswith("/__init__.py")
    ]
    for name in names:
        source = subprocess.run(
            ["git", "-C", ROOT, "show", f"{commit}:healtrl/rewards/{name}.py"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        with open(os.path.join(package, f"{name}.py"), "w", encoding="utf-8") as f:
            f.write(source)
    spec = importlib.util.spec_from_file_location(
        "healtrl_rewards_old", os.path.join(package, "__init__.py"), submodule_search_locations=[package]
    )
    sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules[spec.name])
    return {
        name: importlib.import_module(f"healtrl_rewards_old.{name}") for name in ("math", "multiple_choice", "code")
    }


def load_new():
    return {name: importlib.import_module(f"healtrl.rewards.{name}") for name in ("math", "multiple_choice", "code")}


WORDS = (
    "we consider the sum of the first terms and note that each factor divides the product so the remainder is fixed "
    "by the congruence hence the value follows after simplifying both sides of the equation"
).split()
LATEX = ["$x^2 + 3x = 10$", "$\\frac{a}{b}$", "\\(n \\geq 2\\)", "$2^{10} = 1024$", "{a, b}", "$\\sqrt{2}$", "(3, 4)"]


def prose(chars: int, rng: random.Random) -> str:
    """Reasoning-like text of about `chars` characters: words, numbers, inline LaTeX, line breaks."""
    parts, size = [], 0
    while size < chars:
        roll = rng.random()
        part = rng.choice(LATEX) if roll < 0.08 else str(rng.randint(0, 999)) if roll < 0.15 else rng.choice(WORDS)
        part += "\n" if rng.random() < 0.05 else " "
        parts.append(part)
        size += len(part)
    return "".join(parts)[:chars]


def ordinary_cases(sizes, rng):
    """(name, size, reward key, completion, gold) of the ordinary completions."""
    cases = []
    for size in sizes:
        body = prose(size - 60, rng)
        cases += [
            ("math_reward boxed", size, "math", body + "\nSo the answer is \\boxed{42}.", "42"),
            (
                "math_reward boxed, math-verify",
                size,
                "math",
                body + "\nSo the answer is \\boxed{\\frac{3}{4}}.",
                "0.75",
            ),
            ("math_answer_line_reward", size, "math_answer_line", body + "\nAnswer: 42", "42"),
            ("multiple_choice_reward", size, "multiple_choice", body + "\nAnswer: (B)", "B"),
            ("extract_code", size, "code", body + "\n```python\nprint(sum(range(10)))\n```\n", None),
        ]
    return cases


def pathological(chars: int):
    """(name, reward key, completion, gold) of the hostile completions at `chars` characters."""

    def fill(unit):
        return unit * (chars // len(unit))

    depth = chars // 2 - 8
    return [
        ('"```" * n (fence bomb)', "code", fill("```"), None),
        ('"Answer:" + "\\n" * n', "multiple_choice", "Answer:" + "\n" * (chars - 7), "B"),
        ('"Answer:" + "\\n" * n', "math_answer_line", "Answer:" + "\n" * (chars - 7), "4"),
        ('"the answer is" + "\\n" * n', "math_lenient", "the answer is" + "\n" * (chars - 13), "4"),
        ('"Answer: 4\\n" * n', "math_answer_line", fill("Answer: 4\n"), "4"),
        ('"\\boxed{" * n (unclosed)', "math", fill("\\boxed{"), "4"),
        ('"\\boxed{" + "{" * n + "}" * n', "math", "\\boxed{" + "{" * depth + "4" + "}" * depth + "}", "4"),
        ('"\\boxed 5 " * n', "math", fill("\\boxed 5 "), "4"),
        ('"$" * n', "math_lenient", fill("$"), "4"),
        ('"\\(" * n', "math_lenient", fill("\\("), "4"),
    ]


def scorer(modules, key):
    math_module, mc, code = modules["math"], modules["multiple_choice"], modules["code"]
    functions = {
        "math": math_module.math_reward,
        "math_answer_line": math_module.math_answer_line_reward,
        "math_lenient": math_module.math_lenient_reward,
        "multiple_choice": mc.multiple_choice_reward,
    }
    if key == "code":
        return lambda completions, gold: [code.extract_code(c) for c in completions]
    if key == "multiple_choice":
        return lambda completions, gold: functions[key](
            completions=completions, answer=[gold] * len(completions), choices=[["a", "b", "c", "d"]] * len(completions)
        )
    return lambda completions, gold: functions[key](completions=completions, answer=[gold] * len(completions))


def per_completion(fn, completion, gold, repeats: int) -> float:
    batch = [completion] * repeats
    start = time.perf_counter()
    fn(batch, gold)
    return (time.perf_counter() - start) / repeats


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--old-chars", type=int, default=20_000, help="size of the pathological inputs for OLD")
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--old-commit", default=OLD_COMMIT, help="the commit whose rewards are OLD")
    args = parser.parse_args(argv)
    old, new = load_old(args.old_commit), load_new()
    print(
        f"OLD: healtrl/rewards of {args.old_commit}; NEW: the working tree ({_git('rev-parse', '--short', 'HEAD').strip()}"
        f"{' + changes' if _git('status', '--porcelain', 'healtrl/rewards').strip() else ''})\n"
    )
    rng = random.Random(0)
    scale = 0.25 if args.quick else 1.0

    print("## Ordinary completions (completions per second, median of rounds)\n")
    print("| reward | chars | OLD /s | NEW /s | NEW / OLD |")
    print("|---|---|---|---|---|")
    for name, size, key, completion, gold in ordinary_cases([500, 4_000, 16_000], rng):
        fns = {"old": scorer(old, key), "new": scorer(new, key)}
        results = {side: fns[side]([completion], gold) for side in fns}  # warm-up (imports, worker start)
        assert results["old"] == results["new"], (name, results)
        repeats = max(4, int(scale * (60 if "math-verify" in name else 400_000 // size)))
        times = {"old": [], "new": []}
        for r in range(args.rounds):
            for side in rotation(("old", "new"), r):
                times[side].append(per_completion(fns[side], completion, gold, repeats))
        rate = {side: 1 / statistics.median(values) for side, values in times.items()}
        print(f"| {name} | {size:,} | {rate['old']:,.0f} | {rate['new']:,.0f} | {rate['new'] / rate['old']:.2f} |")

    print(f"\n## Pathological completions (seconds for one completion; OLD at {args.old_chars:,} characters)\n")
    print(f"| completion | reward | OLD at {args.old_chars:,} | NEW at {args.old_chars:,} | NEW at 1,000,000 | score |")
    print("|---|---|---|---|---|---|")
    small, large = pathological(args.old_chars), pathological(1_000_000)
    for (name, key, text, gold), (_, _, big, _) in zip(small, large):
        old_fn, new_fn = scorer(old, key), scorer(new, key)
        old_s = per_completion(old_fn, text, gold, 1)
        new_s = min(per_completion(new_fn, text, gold, 1) for _ in range(3))
        new_big = min(per_completion(new_fn, big, gold, 1) for _ in range(3))
        score = new_fn([big], gold)[0] if key != "code" else "-"
        print(f"| {name} | {key} | {old_s:.3f} | {new_s:.4f} | {new_big:.4f} | {score} |")
    tower = "\\boxed{9^{9^{9^{9}}}}"
    old_s = per_completion(scorer(old, "math"), tower, "1", 1)
    new_s = per_completion(scorer(new, "math"), tower, "1", 1)
    print(
        f"| `{tower}` (main thread) | math | {old_s:.3f} | {new_s:.4f} | - | {scorer(new, 'math')([tower], '1')[0]} |"
    )


if __name__ == "__main__":
    main()
