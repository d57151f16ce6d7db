"""Where the study's results live: the repository's `benchmarks/results/` folders and the run cache's name.

The committed study (its run caches, tables, figures, claims and pre-registration) sits in `benchmarks/results/` of
the source checkout that holds this package. `RESULTS_DIR` and `STUDY_DIR` are those folders' paths whether or not
they exist; `results_dir()` returns `RESULTS_DIR` and refuses, naming the option to give, when the package runs from
an installation without the checkout (a wheel), so that no command writes to or reads from a folder the user did not
choose.
"""

from __future__ import annotations

import os

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS_DIR = os.path.join(REPOSITORY, "benchmarks", "results")
STUDY_DIR = os.path.join(RESULTS_DIR, "reasoning_study")  # the reasoning world's study (`--task countdown`)
RUNS_SUBDIR = "toy_study_runs"  # the run cache, one JSON file per run, inside a study's output folder
# The reasoning study's run caches the claims read: the 85-step study (and the earlier 100-step one), set A (AER and
# GRPO, 175 steps) and set B (the paper regime of PosAdv's Fig. 5, 140 steps) of issue #40's pre-registration, and
# OPEFO's diagnostic runs with the exact estimator (`opefo_exact/`, written by the command in its toy_study.md).
DEFAULT_RUNS = tuple(
    os.path.join(STUDY_DIR, sub, RUNS_SUBDIR) if sub else os.path.join(STUDY_DIR, RUNS_SUBDIR)
    for sub in ("", "horizon175", "paper_regime140", "opefo_exact")
)
WORK_DIR = os.path.join(REPOSITORY, "outputs", "toy_study_work")  # scratch: trainer outputs, HEAL's selections


def results_dir(option: str = "--output-dir") -> str:
    """`RESULTS_DIR`, when this package runs from a source checkout that has it.

    Raises:
        SystemExit: naming `option` when the folder is missing (an installed package has no `benchmarks/`).
    """
    if not os.path.isdir(RESULTS_DIR):
        raise SystemExit(
            f"{RESULTS_DIR} does not exist: healtrl runs from an installation, not from its source checkout, so the "
            f"study has no default folder; give {option}."
        )
    return RESULTS_DIR
