"""The papers' claims that the reasoning world can test, each against its control (issues #26 and #40).

A thin wrapper: the claims, their statistics and the verdict rule are `healtrl.study.claims` (its docstring states
the rule), and `healtrl study --claims` is the same command. This script keeps the command lines of the results files
working; the files it writes name the command as `python benchmarks/claims.py ...`.

    python benchmarks/claims.py --output benchmarks/results/reasoning_study/claims.md \\
        --diagnostics diagnostics.md --readme README.md
"""

from __future__ import annotations

from healtrl.study.command import claims_main

if __name__ == "__main__":
    claims_main()
