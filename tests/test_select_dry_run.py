"""`healtrl select --dry_run`: a selection config is validated (settings, model name, reward, data mapping on a local
sample) without loading a model and without the Hub; broken configs fail naming the option."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from healtrl.cli import main
from healtrl.cli.select import select_main

REPO = Path(__file__).resolve().parents[1]
TOY_SELECT = REPO / "configs" / "select_toy.yaml"


@pytest.fixture
def offline(monkeypatch, no_network):
    """No network (tests/conftest.py), and no model may be loaded."""
    import healtrl.models as models

    def no_model(*args, **kwargs):
        raise AssertionError("the select dry run loaded a model")

    monkeypatch.setattr(models, "load_model_and_tokenizer", no_model)


def dry(argv, capsys):
    code = select_main([*argv, "--dry_run"])
    captured = capsys.readouterr()
    return code, " ".join(captured.out.split()), captured.err


def test_toy_config_dry_run_reports_what_would_run(offline, tmp_path, capsys):
    code, out, err = dry(["--config", str(TOY_SELECT), "--output_dir", str(tmp_path / "sel")], capsys)
    assert code == 0, err
    assert "model: toy qwen2 warmed up on add+compare" in out
    assert "reward: toy (reads answer)" in out
    assert "pool: healtrl-toy/compare [train]: toy data" in out and "80 questions scored (pool of 1000)" in out
    assert "top 32 questions by Uncertainty x Diversity" in out and "Dry run OK" in out
    assert not (tmp_path / "sel").exists()  # nothing is written
    assert main(["select", "--config", str(TOY_SELECT), "--dry_run"]) == 0  # through the `healtrl` command


def test_hub_pool_is_mapped_from_the_tasks_local_sample(offline, capsys):
    code, out, err = dry(["--config", str(REPO / "configs/select_commonsenseqa_qwen3_1.7b.yaml"), "--use_vllm"], capsys)
    assert code == 0, err
    assert "model: Hub id Qwen/Qwen3-1.7B-Base, downloaded from the Hub at launch (not checked)" in out
    assert "task 'commonsenseqa' mapped from the local sample" in out and "reward's columns are present" in out


@pytest.mark.parametrize(
    "override, message",
    [
        ({"top_fraction": 1.5}, "--top_fraction must be <= 1"),
        ({"num_rollouts": 1}, "--num_rollouts must be >= 2"),
        ({"dtype": "float8"}, "--dtype must be one of"),
        ({"model": "./no/such/model"}, "model_name_or_path: './no/such/model' looks like a local path"),
        ({"model": "healtrl-toy/qwen2-nosuchfamily"}, "model_name_or_path:"),
        ({"reward": "no_such_reward"}, "--reward: Unknown reward function 'no_such_reward'"),
        ({"question_column": "no_such_column"}, "names the column(s) ['no_such_column'], which the pool lacks"),
        ({"top_k": 500}, "--top_k 500 is larger than the pool (80 questions after --max_questions)"),
        ({"dataset": "healtrl-toy/nosuchfamily"}, "--dataset 'healtrl-toy/nosuchfamily'"),
        ({"push_to_hub": True}, "--push_to_hub needs --hub_dataset_id"),
    ],
)
def test_broken_configs_fail_naming_the_option(override, message, offline, tmp_path, capsys):
    config = yaml.safe_load(TOY_SELECT.read_text())
    config.update(override)
    path = tmp_path / "select.yaml"
    path.write_text(yaml.safe_dump(config))
    code, out, err = dry(["--config", str(path)], capsys)
    assert code == 2, out
    assert message in err, err
    assert "Dry run FAILED" in out


def test_yaml_type_errors_and_unknown_keys_are_found(offline, tmp_path, capsys):
    path = tmp_path / "select.yaml"
    path.write_text("model: healtrl-toy/qwen2-add\ntop_k: many\n")
    assert select_main(["--config", str(path), "--dry_run"]) == 2
    assert "'top_k' in" in capsys.readouterr().err
    path.write_text("model: healtrl-toy/qwen2-add\ntopk: 3\n")
    assert select_main(["--config", str(path), "--dry_run"]) == 2
    err = capsys.readouterr().err
    assert "unknown option 'topk'" in err and "Did you mean 'top_k'" in err
    path.write_text("dry_run: true\n")  # the mode is a command-line flag, not a setting of the selection
    assert select_main(["--config", str(path), "--dry_run"]) == 2
    assert "unknown option 'dry_run'" in capsys.readouterr().err


def test_required_options_are_named(offline, capsys):
    code, out, err = dry([], capsys)
    assert code == 2 and "--model is required" in err
