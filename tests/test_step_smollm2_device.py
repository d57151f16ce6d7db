"""`benchmarks/step_smollm2.py`'s `--device` / `--model` options: the configs and the report (no run, no model)."""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHMARKS = os.path.join(HERE, "..", "benchmarks")
_spec = importlib.util.spec_from_file_location("bench_step", os.path.join(BENCHMARKS, "step_smollm2.py"))
bench = importlib.util.module_from_spec(_spec)
# The script imports `_bench` from its own folder, which `python benchmarks/step_smollm2.py` puts first on sys.path
sys.path.insert(0, BENCHMARKS)
try:
    _spec.loader.exec_module(bench)
finally:
    sys.path.remove(BENCHMARKS)


def test_config_fields_follow_the_device():
    cpu = bench.config_fields("base", 8, 2, 2)
    assert cpu["use_cpu"] is True and cpu["bf16"] is False
    cuda = bench.config_fields("trl", 8, 2, 2, device="cuda")
    assert cuda["use_cpu"] is False and cuda["bf16"] is True
    assert "inspect_every_steps" not in cuda and cuda["generation_kwargs"] == {"min_new_tokens": 8}


def _row(trainer, step, **kw):
    row = dict(
        trainer=trainer, round=0, load=0.5, step=step, generation=step / 2, training=step / 2, completion_len=256.0,
        process_peak_mib=3000.0, train_peak_extra_mib=1000.0, end="2026-01-01T00:00:00+00:00",
    )  # fmt: skip
    return {**row, **kw}


def test_cuda_report_uses_the_gpu_memory_and_says_random_weights():
    cuda = dict(device="cuda", device_name="NVIDIA H100 80GB HBM3", model="random", dtype="bfloat16", reward=0.0)
    res = {
        "trl": [_row("trl", 4.0, cuda_training_peak_mib=10000.0, cuda_training_extra_mib=9000.0, **cuda)],
        "base": [_row("base", 3.0, cuda_training_peak_mib=7000.0, cuda_training_extra_mib=6000.0, **cuda)],
    }
    # a row of an earlier version of the script (no training-part peak) counts for the times only
    res["trl"].append(_row("trl", 6.0, **cuda, round=1))
    res["base"].append(_row("base", 3.0, **cuda, round=1))
    args = argparse.Namespace(
        device="cuda", model="random", shape_dir=".gpu/shape", force_length=True, prompts=16, generations=8,
        rounds=1, threads=1, parallel=False,
    )  # fmt: skip
    now = datetime.datetime.now(datetime.timezone.utc)
    text = bench.report(256, ["trl", "base"], res, now, now, args)
    assert "random weights (cost only)" in text.splitlines()[0]
    assert "- device: cuda (NVIDIA H100 80GB HBM3), bfloat16" in text and "COST ONLY" in text
    assert "| CUDA peak, training part (MiB) | CUDA training-part extra (MiB) |" in text
    base = next(line for line in text.splitlines() if line.startswith("| base |"))
    # step: median of 3.0 / 4.0 and 3.0 / 6.0; memory ratios from the round that has them
    assert "| 3.00 |" in base and "| 7000 | 6000 |" in base and "| 0.700 | 0.667 |" in base and base.endswith("yes |")
    assert "0.625 vs trl [0.75, 0.50]" in base


def _table(text: str) -> dict[str, dict[str, str]]:
    """The report's results table: trainer -> {column: cell}."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]  # the |---| line starts otherwise
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    return {cells[0]: dict(zip(rows[0], cells, strict=True)) for cells in rows[1:]}


def test_cpu_report_reads_the_process_memory():
    """On the CPU the memory columns are the process's RSS (no CUDA reading), each trainer's cells its own rows'."""
    res = {"trl": [_row("trl", 40.0)], "base": [_row("base", 30.0, process_peak_mib=2400.0)]}
    args = argparse.Namespace(
        device="cpu", model="offline", shape_dir=None, force_length=True, prompts=4, generations=4, rounds=1,
        threads=1, parallel=False,
    )  # fmt: skip
    now = datetime.datetime.now(datetime.timezone.utc)
    text = bench.report(64, ["trl", "base"], res, now, now, args)
    table = _table(text)
    assert set(table) == {"trl", "base"} and "CUDA" not in text
    base = table["base"]
    memory = (base["process peak RSS (MiB)"], base["train peak extra (MiB)"])
    assert base["step (s)"] == "30.0" and memory == ("2400", "1000")
    assert (base["step vs ref [per round]"], base["peak RSS vs ref"]) == ("0.750 vs trl [0.75]", "0.800")
    assert table["trl"]["step vs ref [per round]"] == "(reference)"


def test_bad_options_are_refused_before_any_run(tmp_path, capsys):
    cases = [
        (["--model", "random", "--shape-dir", str(tmp_path)], "no config.json there"),
        (["--shape-dir", str(tmp_path)], "no config.json there"),
    ]
    (tmp_path / "shape").mkdir()
    (tmp_path / "shape" / "config.json").write_text("{}")
    cases.append((["--shape-dir", str(tmp_path / "shape")], "--shape-dir is read only with --model random"))
    if not torch.cuda.is_available():
        cases.append((["--device", "cuda"], "torch.cuda.is_available() is False"))
    for argv, message in cases:
        with pytest.raises(SystemExit) as info:
            bench.main(argv)
        assert info.value.code == 2 and message in capsys.readouterr().err, argv
