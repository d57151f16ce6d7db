"""The main job (`python train.py` with no --config): selection, HEAL, GRPO of the same budget, one PNG."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from healtrl.cli import main
from healtrl.cli.config import DEFAULT_CONFIG_YAML, resolve
from healtrl.cli.main_job import MAIN_SELECT_YAML, PANELS, _layout, grpo_counterpart, summarize

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def load(name: str) -> dict:
    return yaml.safe_load((CONFIGS / name).read_text())


def test_embedded_configs_match_the_files():
    assert load("main.yaml") == yaml.safe_load(DEFAULT_CONFIG_YAML)
    assert load("main_select.yaml") == yaml.safe_load(MAIN_SELECT_YAML)
    # The selection step is configs/select_toy.yaml's, written elsewhere; the HEAL run trains on what it writes.
    select_toy = load("select_toy.yaml")
    assert {**select_toy, "output_dir": "outputs/main/select"} == load("main_select.yaml")
    assert load("main.yaml")["general_dataset_name"] == os.path.join(load("main_select.yaml")["output_dir"], "selected")


def test_grpo_counterpart_has_the_same_budget_and_is_the_shipped_baseline():
    heal = resolve([], default=DEFAULT_CONFIG_YAML)
    grpo = grpo_counterpart(heal, "outputs/main/grpo")
    h, g = heal.trainer_args, grpo.trainer_args
    assert grpo.trainer_name == "grpo" and type(g).__name__ == "GRPOBaselineConfig"
    assert g.general_dataset_name is None and not hasattr(g, "eda_weight")  # few-shot: the target rows alone
    # same model, target data, steps, learning rate and rollouts per step
    assert grpo.model_args.model_name_or_path == heal.model_args.model_name_or_path
    assert grpo.script_args.dataset_name == heal.script_args.dataset_name == "healtrl-toy/add"
    assert grpo.script_args.num_train_samples == heal.script_args.num_train_samples == 8
    for name in ("max_steps", "learning_rate", "per_device_train_batch_size", "temperature", "beta", "seed"):
        assert getattr(g, name) == getattr(h, name), name
    assert g.generation_batch_size == h.generation_batch_size == 128
    # 8 problems cannot fill 16 distinct prompts per batch: each batch holds the 8 problems with 16 rollouts
    assert (h.num_generations, g.num_generations) == (8, 16)
    shipped = load("baseline_few_shot_toy.yaml")
    assert {"trainer": "grpo", **grpo.values} == shipped


def test_grpo_counterpart_rejects_a_budget_it_cannot_match():
    heal = resolve(["--per_device_train_batch_size", "60", "--num_generations", "4"], default=DEFAULT_CONFIG_YAML)
    with pytest.raises(ValueError, match=r"60 rollouts per generation batch are not a multiple of the 8 target"):
        grpo_counterpart(heal, "x")


def test_summary_table_reads_both_runs():
    heal = [{"step": s, "heal/entropy_target": 1.0 - 0.1 * s, "heal/reward_target": 0.1 * s, "reward": 9.0} for s in
            range(1, 6)]  # fmt: skip
    grpo = [{"step": s, "entropy": 0.5 / s, "reward": 0.2 * s} for s in range(1, 6)]
    table = summarize({"GRPO": grpo, "HEAL": heal}, window=2)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in table.splitlines()[2:]}
    # GRPO: entropy first 0.5, last two (0.125 + 0.1) / 2; reward first 0.2, last two (0.8 + 1.0) / 2
    assert rows["GRPO"] == ["0.500", "0.113", "0.200", "0.900"]
    # HEAL: its target-domain keys win over `reward` (which holds the EDA bonus)
    assert rows["HEAL"] == ["0.900", "0.550", "0.100", "0.450"]
    assert len(PANELS) == 2


@pytest.mark.parametrize("flag", [["--output_dir", "runs/x"], ["--output_dir=runs/x"], ["--output-dir", "runs/x"]])
def test_output_dir_names_the_root_in_every_spelling(flag):
    root, heal_argv, select = _layout(["--max_steps", "3", *flag])
    assert root == "runs/x" and select
    args = resolve(heal_argv, default=DEFAULT_CONFIG_YAML).trainer_args
    assert args.output_dir == "runs/x/heal" and args.general_dataset_name == "runs/x/select/selected"
    assert args.max_steps == 3


def test_given_general_data_skips_the_selection():
    root, heal_argv, select = _layout(["--general_dataset_name", "my/data"])
    assert root == "outputs/main" and not select
    assert resolve(heal_argv, default=DEFAULT_CONFIG_YAML).trainer_args.general_dataset_name == "my/data"


def test_bad_override_fails_before_any_work(tmp_path, capsys):
    assert main(["train", "--max_stepz", "3", "--output_dir", str(tmp_path / "main")]) == 2
    err = capsys.readouterr().err
    assert "Unknown key `max_stepz`" in err and "`max_steps`" in err
    assert not (tmp_path / "main").exists()


def test_main_job_refuses_several_processes(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["train", "--output_dir", str(tmp_path / "main")]) == 2
    assert "WORLD_SIZE is 2" in capsys.readouterr().err and not (tmp_path / "main").exists()


@pytest.mark.slow  # two end-to-end training runs (~40 s); the checks above cover the main job's wiring
def test_main_job_end_to_end(tmp_path):
    """`python train.py` with a few steps: selection, both runs, the PNG and the summary."""
    root = tmp_path / "main"
    args = ["--max_steps", "4", "--logging_steps", "2", "--output_dir", str(root)]
    result = subprocess.run(
        [sys.executable, "train.py", *args],
        cwd=REPO,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    for step in ("[1/4] Selecting", "[2/4] HEAL: 4 steps", "[3/4] GRPO, same budget: 4 steps", "[4/4]"):
        assert step in out, step
    assert "128 rollouts per step (8 prompts x 16)" in out
    selected = root / "select" / "selected"
    from datasets import load_from_disk

    assert len(load_from_disk(str(selected))) == 32  # top_k of configs/main_select.yaml
    heal_config = yaml.safe_load((root / "heal" / "config.yaml").read_text())
    grpo_config = yaml.safe_load((root / "grpo" / "config.yaml").read_text())
    assert heal_config["trainer"] == "heal" and heal_config["general_dataset_name"] == str(selected)
    assert grpo_config["trainer"] == "grpo" and grpo_config["num_generations"] == 16
    assert "general_dataset_name" not in grpo_config and grpo_config["max_steps"] == 4
    png = root / "heal_vs_grpo.png"
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    table = out[out.index("| run |") :]
    rows = re.findall(r"^\| (GRPO|HEAL) \| ([^\n]*)\|$", table, flags=re.M)
    assert [name for name, _ in rows] == ["GRPO", "HEAL"]
    for _, cells in rows:
        values = [float(c) for c in cells.split("|")]
        assert len(values) == 4 and all(0.0 <= v <= 5.0 for v in values)
    # both runs logged steps 2 and 4 of the curves the PNG draws
    for run, key in (("heal", "heal/entropy_target"), ("grpo", "entropy")):
        history = [json.loads(line) for line in (root / run / "metrics.jsonl").read_text().splitlines()]
        assert [e["step"] for e in history if key in e] == [2, 4], run


@pytest.mark.slow
def test_readme_first_command_keeps_more_target_entropy_with_heal(tmp_path):
    """The README's main job as shipped (300 steps): HEAL ends with more target-domain entropy than GRPO."""
    from healtrl.cli.main_job import _mean_last
    from healtrl.views.curves import read_metrics

    root = tmp_path / "main"
    result = subprocess.run(
        [sys.executable, "train.py", "--output_dir", str(root)], cwd=REPO, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stderr[-3000:]
    keys = PANELS["entropy of target-domain rollouts"]
    heal = _mean_last(read_metrics(root / "heal"), keys, 10)
    grpo = _mean_last(read_metrics(root / "grpo"), keys, 10)
    assert heal > 2 * grpo, (heal, grpo)
