"""Audit every reasoning-gym dataset for answers that pay without solving anything (issue #39).

For each name in `reasoning_gym.factory.DATASETS` (healtrl's `rg/<name>` accepts any), over `--items` generated items,
the mean reward of degenerate answers and of the gold answer, through the real reward path
(`healtrl.rewards.reasoning_gym.score_completion_lists`: the answer reading, scorer worker pool, isolation and strict
rule of `reasoning_gym_reward`, with the answers of one item scored in one child). Each answer is sent as
`<answer>...</answer>`. Degenerate answers: the fixed strings of `FIXED_ANSWERS` and, per item, the gold with a
character appended ("1"), the gold with its last character removed, and the gold twice. An item whose gold equals a
degenerate answer (after stripping) is left out of that answer's mean: a constant answer that is right is not a scorer
flaw (the table gives how many items were left out).

A dataset is **unsafe** when a degenerate answer averages more than `THRESHOLD`, or the gold's mean is below 1.0, or
its generator fails to build or to generate an item, or its scorer may evaluate answer text as code
(`evaluating_calls`: a static scan of the source of the dataset's module and of the functions its `score_answer`
calls from other modules for `EVALUATING_CALLS`; a completion could then run code in the scoring child, which
`healtrl.rewards._scorer_worker` contains but cannot make harmless: the code can steer its own scorer). The script
writes the table (`benchmarks/results/rg_audit.md`, with date, machine, load, versions and the command) and the verdicts
that `healtrl.tasks.load_task` reads (`healtrl/tasks/rg_audit.json`).

    python benchmarks/rg_audit.py                       # every dataset, 50 items
    python benchmarks/rg_audit.py --datasets coin_flip,basic_arithmetic --items 20 --no-write
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FIXED_ANSWERS = ("", "0", "1", "nan", "inf", "True", "False", "Yes", "No", "TrueFalse", "YesNo", "01")
GOLD_FORMS = ("gold+char", "gold-last", "gold twice")
THRESHOLD = 0.05
AUDIT_SEED = 39
VERDICTS = ROOT / "healtrl" / "tasks" / "rg_audit.json"
TABLE = ROOT / "benchmarks" / "results" / "rg_audit.md"


EVALUATING_CALLS = ("eval", "exec", "sympify", "parse_expr", "parse_latex", "latex2sympy", "simplify")
"""Calls that evaluate text as code (`simplify` sympifies a string argument). The scan is deliberately broad: a dataset
module that calls one anywhere (generator included) is marked, since telling the scorer's use from the generator's
by reading code is not reliable; `rg/<name>?allow_unsafe` loads a marked dataset after a human read its scorer."""
EVAL_REASON = "its scorer evaluates answer text as code (eval/sympify); a completion can run code in the scorer"
_EVALUATING_RE = re.compile(r"\b(" + "|".join(EVALUATING_CALLS) + r")\s*\(")


def evaluating_calls(name: str) -> list[str]:
    """The `EVALUATING_CALLS` found in reasoning-gym dataset `name`'s scorer code (sorted, empty when none): the whole
    source of the module that defines its dataset class, plus the source of `score_answer` and of each plain
    function it names (one level) when they live in another module. Comments are stripped before the scan; a call
    written inside a string literal still counts (it is broad on purpose). `ast.literal_eval` does not match."""
    import inspect
    import tokenize
    from io import StringIO

    from reasoning_gym.factory import DATASETS

    cls = DATASETS[name][0]
    sources = [inspect.getsource(sys.modules[cls.__module__])]
    scorer = cls.score_answer
    if scorer.__module__ != cls.__module__:
        sources.append(inspect.getsource(scorer))
    for called in scorer.__code__.co_names:
        target = scorer.__globals__.get(called)
        if inspect.isfunction(target) and target.__module__ != cls.__module__:
            sources.append(inspect.getsource(target))
    found = set()
    for source in sources:
        tokens = tokenize.generate_tokens(StringIO(source).readline)
        code = " ".join(tok.string for tok in tokens if tok.type != tokenize.COMMENT)
        found.update(match.group(1) for match in _EVALUATING_RE.finditer(code))
    return sorted(found)


def degenerate(form: str, gold: str) -> str:
    if form == "gold+char":
        return gold + "1"
    if form == "gold-last":
        return gold[:-1]
    if form == "gold twice":
        return gold + gold
    return form


def audit_dataset(name: str, items: int) -> dict:
    """The audit row of one dataset."""
    from healtrl.rewards.reasoning_gym import rg_lookup, score_completion_lists, scorer_failure_counts

    evaluates = evaluating_calls(name)
    specs, golds = [], []
    try:
        for index in range(items):
            spec = {"dataset": name, "seed": AUDIT_SEED, "size": items, "index": index, "config": {}}
            golds.append(str(rg_lookup(spec)[1]["answer"]).strip())
            specs.append(json.dumps(spec))
    except Exception as exc:
        reason = f"the generator fails: {type(exc).__name__}: {str(exc)[:200]}"
        reason = f"{EVAL_REASON}; {reason}" if evaluates else reason
        return {"safe": False, "reason": reason, "evaluates": evaluates}
    forms = ("gold", *FIXED_ANSWERS, *GOLD_FORMS)
    lists, keys = [], []
    for gold in golds:
        row_forms = [f for f in forms if f == "gold" or degenerate(f, gold).strip() != gold]
        lists.append([f"<answer>{gold if f == 'gold' else degenerate(f, gold)}</answer>" for f in row_forms])
        keys.append(row_forms)
    failures_before = sum(scorer_failure_counts().values())
    start = time.monotonic()
    scored = score_completion_lists(specs, lists)
    seconds = time.monotonic() - start
    sums: dict[str, list[float]] = {form: [] for form in forms}
    for row_forms, rewards in zip(keys, scored):
        for form, reward in zip(row_forms, rewards):
            sums[form].append(reward)
    means = {form: (sum(values) / len(values) if values else 0.0) for form, values in sums.items()}
    left_out = {form: items - len(values) for form, values in sums.items() if form != "gold" and len(values) < items}
    worst = max((form for form in forms if form != "gold"), key=lambda form: means[form])
    row = {
        "gold": round(means["gold"], 4),
        "worst": {"answer": worst, "mean": round(means[worst], 4)},
        "means": {form: round(value, 4) for form, value in means.items()},
        "left_out": left_out,
        "scorer_failures": sum(scorer_failure_counts().values()) - failures_before,
        "seconds": round(seconds, 2),
        "max_gold_chars": max(len(g) for g in golds),
    }
    row["evaluates"] = evaluates
    reasons = [EVAL_REASON] if evaluates else []
    reasons += [f"the gold answer scores {means['gold']:.3f} on average (< 1)"] if means["gold"] < 1.0 else []
    reasons += [
        f"the answer {shown(form)} scores {means[form]:.3f} on average (> {THRESHOLD})"
        for form in forms
        if form != "gold" and means[form] > THRESHOLD
    ]
    row["safe"] = not reasons
    if reasons:
        row["reason"] = "; ".join(reasons)
    return row


def shown(form: str) -> str:
    return f'"{form}"' if form not in GOLD_FORMS else f"<{form}>"


def write_table(rows: dict, args, wall: float, load_before: str, load_after: str) -> None:
    import reasoning_gym

    from healtrl.rewards import reasoning_gym as rg

    forms = ("gold", *FIXED_ANSWERS, *GOLD_FORMS)
    unsafe = sorted(name for name, row in rows.items() if not row["safe"])
    evaluating = sorted(name for name, row in rows.items() if row.get("evaluates"))
    lines = [
        "# reasoning-gym audit: answers that pay without solving",
        "",
        f"Generated by `{' '.join(['python benchmarks/rg_audit.py', *sys.argv[1:]])}` on "
        f"{datetime.date.today().isoformat()}, {platform.node() or 'unknown host'} ({platform.machine()}, "
        f"{os.cpu_count()} cores), Python {platform.python_version()}, reasoning-gym {reasoning_gym.__version__}. "
        f"{args.items} items per dataset (seed {AUDIT_SEED}), scored through `reasoning_gym_reward` (strict, "
        f"{rg.RG_SCORER_WORKERS} scorer workers, {rg.RG_SCORE_TIMEOUT_S:g} s per answer). Wall time "
        f"{wall / 60:.1f} min; load average (`uptime`) before: {load_before}; after: {load_after}.",
        "",
        f"A dataset is **unsafe** when a degenerate answer averages more than {THRESHOLD} or the gold answer's mean "
        "is below 1, or when its scorer may evaluate answer text as code (a static scan of its module's source "
        f"for {', '.join(f'`{c}(`' for c in EVALUATING_CALLS)}: `evaluating_calls` in `benchmarks/rg_audit.py`); "
        "`load_task('rg/<name>')` refuses it unless loaded as `rg/<name>?allow_unsafe`. Items whose gold "
        "equals a degenerate answer are left out of that answer's mean. Columns: the mean reward of each answer "
        '(`gold+char`: the gold with "1" appended; `gold-last`: without its last character; `gold twice`). '
        "`fail`: scorer failures (timeouts, killed children) in the dataset's batch; `s`: seconds for the batch.",
        "",
        f"{len(rows)} datasets, {len(unsafe)} unsafe: {', '.join(unsafe) or 'none'}.",
        "",
        f"Marked by the scan (the scorer may evaluate answer text), {len(evaluating)}: "
        + (", ".join(f"{n} ({', '.join(rows[n]['evaluates'])})" for n in evaluating) or "none")
        + ".",
        "",
        "| dataset | verdict | " + " | ".join(f"`{f}`" if f else '`""`' for f in forms) + " | fail | s | reason |",
        "|---|---|" + "---:|" * (len(forms) + 2) + "---|",
    ]
    for name in sorted(rows):
        row = rows[name]
        if "means" not in row:
            lines.append(f"| {name} | unsafe |" + " |" * (len(forms) + 2) + f" {row['reason']} |")
            continue
        cells = [f"{row['means'][f]:.2f}" for f in forms]
        verdict = "safe" if row["safe"] else "**unsafe**"
        reason = row.get("reason", "").replace("|", "\\|")
        lines.append(
            f"| {name} | {verdict} | " + " | ".join(cells) + f" | {row['scorer_failures']} | {row['seconds']} | "
            f"{reason} |"
        )
    TABLE.parent.mkdir(parents=True, exist_ok=True)
    TABLE.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=50, help="generated items per dataset (default 50)")
    parser.add_argument("--datasets", default="", help="comma-separated names (default: every DATASETS name)")
    parser.add_argument("--jobs", type=int, default=0, help="scorer workers (default: RG_SCORER_WORKERS)")
    parser.add_argument("--no-write", action="store_true", help="print the rows; write neither table nor verdicts")
    args = parser.parse_args(argv)
    from reasoning_gym.factory import DATASETS

    from healtrl.rewards import reasoning_gym as rg

    if args.jobs:
        rg.RG_SCORER_WORKERS = args.jobs
    names = [n for n in args.datasets.split(",") if n] or sorted(DATASETS)
    load_before = os.getloadavg()
    start = time.monotonic()
    rows = {}
    for name in names:
        rows[name] = audit_dataset(name, args.items)
        row = rows[name]
        print(
            f"{name:32s} {'safe' if row['safe'] else 'UNSAFE':6s} gold={row.get('gold', '-')} "
            f"worst={row.get('worst', '-')} s={row.get('seconds', '-')} {row.get('reason', '')}",
            flush=True,
        )
    wall = time.monotonic() - start
    load_after = os.getloadavg()
    if args.no_write:
        return 0

    def fmt(load):
        return ", ".join(f"{x:.2f}" for x in load)

    write_table(rows, args, wall, fmt(load_before), fmt(load_after))
    import reasoning_gym

    verdicts = {
        "reasoning_gym_version": reasoning_gym.__version__,
        "date": datetime.date.today().isoformat(),
        "items": args.items,
        "threshold": THRESHOLD,
        "table": "benchmarks/results/rg_audit.md",
        "datasets": {
            name: {k: row[k] for k in ("safe", "gold", "worst", "reason", "evaluates") if k in row}
            for name, row in rows.items()
        },
    }
    if args.datasets and VERDICTS.exists():  # a partial run updates the rows it audited
        old = json.loads(VERDICTS.read_text(encoding="utf-8"))
        verdicts["datasets"] = {**old.get("datasets", {}), **verdicts["datasets"]}
    VERDICTS.write_text(json.dumps(verdicts, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {TABLE.relative_to(ROOT)} and {VERDICTS.relative_to(ROOT)} ({wall / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
