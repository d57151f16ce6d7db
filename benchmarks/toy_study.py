"""The study on a toy world: every method x {few-shot, full target data} x seeds, figures and one table.

A thin wrapper: the study is `healtrl.study` (`healtrl/study/command.py` has the options and what they do), and
`healtrl study` is the same command. This script keeps the command lines of the results files working; its report
names the command as `python benchmarks/toy_study.py ...`.

    python benchmarks/toy_study.py --task countdown --pairs claims --seeds 0 1 2 3 4 --steps 175 --jobs 2 \\
        --output-dir benchmarks/results/reasoning_study/horizon175      # = healtrl study --task countdown ...
    python benchmarks/toy_study.py --task countdown --report-only       # = healtrl study --task countdown --report
"""

from __future__ import annotations

from healtrl.study.command import main

if __name__ == "__main__":
    main()
