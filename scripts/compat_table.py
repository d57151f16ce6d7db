"""Render the README's "TRL compatibility" table from the matrix of `tests/test_trl_compat.py`.

    python scripts/compat_table.py           # print the table
    python scripts/compat_table.py --write   # rewrite it in README.md (between its markers)
    python scripts/compat_table.py --check   # exit 1 when README.md's table differs from the rendered one

The matrix (trainers x TRL usage scenarios, and the expected outcome of each case) is defined once, in the test module;
`tests/test_trl_compat.py::test_matrix` checks every case, and `test_readme_table_is_generated_from_the_matrix` fails
when the README's table is stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the table in README.md")
    mode.add_argument("--check", action="store_true", help="exit 1 when README.md's table is stale")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    from tests.test_trl_compat import readme_table, render_table, write_readme_table

    if args.write:
        print("README.md updated." if write_readme_table() else "README.md already up to date.")
        return 0
    if args.check:
        if readme_table() != render_table():
            print("README.md's TRL compatibility table is stale: run python scripts/compat_table.py --write")
            return 1
        print("README.md's TRL compatibility table is up to date.")
        return 0
    print(render_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
