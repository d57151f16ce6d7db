"""`train.py` and `healtrl train` end to end on the toy world (a few GRPO steps on CPU).

The toy model is built once into the healtrl cache (`$HEALTRL_CACHE`, default `~/.cache/healtrl`) by a session
fixture and reused by every run, in this process and in the `train.py` subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from healtrl.cli import main

REPO = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# A few steps of 4 prompts x 8 generations instead of the default run's 300 steps of 16 x 8.
QUICK = [
    "--config",
    "configs/toy_grpo.yaml",
    "--max_steps",
    "3",
    "--logging_steps",
    "1",
    "--per_device_train_batch_size",
    "32",
    "--num_train_samples",
    "64",
]


def read_history(output_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_train_script_end_to_end(toy_model_dir, tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    result = subprocess.run(
        [sys.executable, "train.py", *QUICK, "--learning_rate", "1e-3", "--output_dir", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"Output folder: {out}" in result.stdout

    # the model and tokenizer load back
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert model.config.vocab_size >= len(tokenizer)

    # metrics: one entry per step with entropy and reward, then the run summary
    history = read_history(out)
    steps = [entry for entry in history if "entropy" in entry and "reward" in entry and "loss" in entry]
    assert [entry["step"] for entry in steps] == [1, 2, 3]
    assert all(entry["entropy"] > 0 and 0 <= entry["reward"] <= 1 for entry in steps)
    # the command-line overrides changed the run: constant lr 1e-3 instead of the config's 5e-4, 3 steps
    assert {entry["learning_rate"] for entry in steps} == {1e-3}
    assert "train_runtime" in history[-1] and history[-1]["step"] == 3

    assert (out / "curves.png").read_bytes()[:8] == PNG_SIGNATURE
    config = (out / "config.yaml").read_text()
    assert "learning_rate: 0.001" in config and "max_steps: 3" in config


@pytest.fixture
def curve_draws(monkeypatch):
    """Every figure the test saves (`healtrl.views.curves.save_figure`, what `plot_curves` and the trainer's
    `save_curves` write with) as (path, title); the figures are still written."""
    import healtrl.views.curves

    draws, save_figure = [], healtrl.views.curves.save_figure

    def recording(fig, path):
        draws.append((Path(path), fig.get_suptitle()))
        return save_figure(fig, path)

    monkeypatch.setattr(healtrl.views.curves, "save_figure", recording)
    return draws


def test_healtrl_train_with_lora_config(toy_model_dir, tmp_path, restore_threads, capsys, curve_draws):
    out = tmp_path / "lora"
    quick = QUICK[2:]  # the QUICK overrides on the LoRA config (a second --config is refused)
    code = main(["train", "--config", "configs/toy_grpo_lora.yaml", *quick, "--output_dir", str(out)])
    assert code == 0
    assert (out / "adapter_config.json").exists() and (out / "adapter_model.safetensors").exists()
    assert (out / "curves.png").read_bytes()[:8] == PNG_SIGNATURE
    # drawn once, by the trainer's save_model with the model card, titled by the model and task the config names
    assert curve_draws == [(out / "curves.png", "GRPO: healtrl-toy/qwen2-add on healtrl-toy/add")]
    assert "![curves](curves.png)" in (out / "README.md").read_text()
    assert len([e for e in read_history(out) if "entropy" in e]) == 3
    assert str(out) in capsys.readouterr().out

    from peft import AutoPeftModelForCausalLM

    AutoPeftModelForCausalLM.from_pretrained(out)


def test_curves_without_a_final_model(toy_model_dir, tmp_path, restore_threads, capsys, curve_draws):
    """save_final_model: false saves no model card; the command line has the trainer draw curves.png, once."""
    out = tmp_path / "nomodel"
    assert main(["train", *QUICK, "--save_final_model", "false", "--output_dir", str(out)]) == 0
    assert not (out / "model.safetensors").exists() and not (out / "README.md").exists()
    assert (out / "curves.png").read_bytes()[:8] == PNG_SIGNATURE
    assert curve_draws == [(out / "curves.png", "GRPO: healtrl-toy/qwen2-add on healtrl-toy/add")]
    assert "curves.png" in capsys.readouterr().out


def test_config_errors_exit_with_a_message(capsys):
    assert main(["train", "--learnin_rate", "1e-3"]) == 2
    err = capsys.readouterr().err
    assert "error: Unknown key `learnin_rate`" in err and "`learning_rate`" in err
    assert main(["select"]) == 2 and "--model" in capsys.readouterr().err  # healtrl select: required options named
    assert main(["trian"]) == 2 and "healtrl train" in capsys.readouterr().err
    assert main([]) == 0 and "train" in capsys.readouterr().out


def test_missing_column_is_reported_before_training(toy_model_dir, tmp_path, restore_threads, capsys):
    from datasets import Dataset

    data = tmp_path / "data.jsonl"
    Dataset.from_dict({"prompt": ["1+1=", "2+2="], "solution": ["2", "4"]}).to_json(str(data))
    code = main(["train", "--dataset_name", str(data), "--output_dir", str(tmp_path / "out"), *QUICK])
    assert code == 2
    err = capsys.readouterr().err
    assert "'answer'" in err and "reward 'toy'" in err and "prompt, solution" in err


def test_plot_curves_side_by_side(tmp_path):
    from healtrl.views.curves import plot_curves, read_metrics

    grpo = [{"step": s, "entropy": 1.0 / s, "reward": 0.1 * s} for s in range(1, 6)] + [{"train_runtime": 1.0}]
    run_dir = tmp_path / "heal"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text(
        "\n".join(json.dumps({"step": s, "entropy": 0.9, "reward": 0.05 * s}) for s in range(1, 6))
    )
    assert read_metrics(run_dir)[0]["entropy"] == 0.9
    path = plot_curves({"GRPO": grpo, "HEAL": run_dir}, tmp_path / "compare.png", title="HEAL vs GRPO")
    assert Path(path).read_bytes()[:8] == PNG_SIGNATURE


def test_missing_extra_is_named_before_the_model_loads(tmp_path, restore_threads, capsys, monkeypatch):
    """train.py names the package of a missing extra before it resolves the model (the trainers check it too, at
    construction, after TRL's own checks)."""
    import healtrl.models

    def no_model(*args, **kwargs):
        raise AssertionError("the model was resolved before the extra was checked")

    monkeypatch.setattr(healtrl.models, "resolve_model_path", no_model)
    monkeypatch.setattr("healtrl.utils.compat.is_available", lambda extra: extra != "liger")
    code = main(["train", "--output_dir", str(tmp_path / "out"), "--use_liger_kernel", "true", *QUICK])
    assert code == 2
    assert "pip install healtrl[liger]" in capsys.readouterr().err
