"""Entropy views during training (issue #18 item 2; healtrl/trainers/_inspect_hooks.py): the page written every
`inspect_every_steps`, its entropies against the fused kernel's, the metrics, TRL's completions table, the trackers."""

import json
import re
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from healtrl.trainers import _inspect_hooks
from healtrl.trainers.base import EntropyGRPOConfig, EntropyGRPOTrainer
from tests.helpers import build_trainer, grpo_kwargs

REPO = Path(__file__).resolve().parents[1]
H_RE = re.compile(r'data-h="([^"]+)"')


def page_entropies(html: str) -> list[float]:
    return [float(x) for x in H_RE.findall(html)]


def view_entropies(view: dict) -> list[list[float]]:
    return [c["entropies"] for p in view["run"]["prompts"] for c in p["completions"]]


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """One step of configs/toy_grpo.yaml (4 prompts x 8 completions) with the view of step 0 covering every rollout,
    log_completions on; returns (output folder, the toy model's path). In float32: TRL's default bf16 autocast (also
    on the CPU) samples from the autocast policy, whose entropies a second bf16 forward reproduces only to ~1e-3."""
    from healtrl.cli import main
    from healtrl.toy import toy_model_path

    model_path = toy_model_path("healtrl-toy/qwen2-add")
    out = tmp_path_factory.mktemp("inspect_toy") / "run"
    previous = torch.get_num_threads()
    try:
        code = main(
            ["train", "--config", "configs/toy_grpo.yaml", "--max_steps", "1", "--logging_steps", "1",
             "--per_device_train_batch_size", "32", "--num_train_samples", "64", "--inspect_num_prompts", "4",
             "--log_completions", "true", "--bf16", "false", "--output_dir", str(out)]
        )  # fmt: skip
    finally:
        torch.set_num_threads(previous)
    assert code == 0
    return out, model_path


def test_toy_config_view_entropies_equal_the_kernel(toy_run):
    """The page of step 0 (rollouts of the initial toy model) carries, for every completion token, the entropy that
    `healtrl.kernels.fused_logprob_entropy` gives for the same prompt + completion at the sampling temperature."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from healtrl.toy.tasks import toy_reward
    from healtrl.utils.prompts import tokenize_prompts
    from healtrl.views.inspection import token_stats

    out, model_path = toy_run
    assert sorted(p.name for p in (out / "inspect").iterdir()) == ["step-0.html", "step-0.json"]
    view = json.loads((out / "inspect" / "step-0.json").read_text())
    html = (out / "inspect" / "step-0.html").read_text()
    assert view["step"] == 0 and view["run"]["model"] == "step 0" and view["run"]["temperature"] == 1.0
    groups = view["run"]["prompts"]
    assert len(groups) == 4 and all(len(g["completions"]) == 8 for g in groups)

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    prompt_ids = tokenize_prompts(tokenizer, [g["prompt"] for g in groups for _ in g["completions"]])
    completion_ids = [c["token_ids"] for g in groups for c in g["completions"]]
    expected, _ = token_stats(model, prompt_ids, completion_ids, temperature=1.0, progress=False)
    got = view_entropies(view)
    assert sum(map(len, got)) > 32  # real completions, several tokens each
    for row_got, row_expected in zip(got, expected, strict=True):
        np.testing.assert_allclose(row_got, row_expected, rtol=1e-5, atol=1e-5)
    # The page shows the same numbers, token by token, in order; one coloured span per token.
    np.testing.assert_allclose(page_entropies(html), [h for row in got for h in row], rtol=0, atol=0)
    assert html.count('<span class="tok"') == sum(map(len, got))
    # No probabilities in a training-time view (none computed where the entropies came from the generation logits).
    assert 'title="entropy ' in html and ", p = " not in html and "hover a token for its entropy." in html
    # Rewards on the page: the toy task's exact-match reward of each completion ("3+5=" -> "8").
    for g in groups:
        a, b = re.search(r"(\d+)\+(\d+)=", g["prompt"][-1]["content"]).groups()
        texts = [c["text"] for c in g["completions"]]
        expected_rewards = toy_reward(completions=texts, answer=[str(int(a) + int(b))] * len(texts))
        assert [c["reward"] for c in g["completions"]] == pytest.approx(expected_rewards)
    assert any(c["reward"] == 1.0 for g in groups for c in g["completions"])  # the warmed-up model solves some


def test_toy_config_metrics_and_completions_table(toy_run):
    """entropy/high_share and the quantiles are those of every rollout token of the step; TRL's completions table
    carries each completion's mean and per-token entropies, equal to the view's."""
    out, _ = toy_run
    view = json.loads((out / "inspect" / "step-0.json").read_text())
    rows = view_entropies(view)
    tokens = np.array([h for row in rows for h in row])
    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    step = next(e for e in history if "entropy/high_share" in e)
    assert step["entropy/high_share"] == pytest.approx(float(np.mean(tokens > np.log(2))), abs=1e-6)
    for q in (10, 50, 90):
        assert step[f"entropy/q{q}"] == pytest.approx(float(np.quantile(tokens, q / 100)), rel=1e-5), q
    assert step["entropy/mean"] == pytest.approx(float(tokens.mean()), rel=1e-5)
    # `rollout/entropy` is for methods that compute rollout entropies at every step: the toy GRPO run logs none.
    assert not any("rollout/entropy" in e for e in history)

    table = pd.read_parquet(next((out / "completions").glob("*.parquet")))
    assert {"entropy", "token_entropies"} <= set(table.columns) and len(table) == 32
    for i, row in enumerate(rows):  # the view shows the main process's rollouts in order: the table's first rows
        np.testing.assert_allclose(table["token_entropies"][i], np.round(row, 4), atol=1e-9)
        assert table["entropy"][i] == pytest.approx(np.mean(row), rel=1e-6)


def test_model_card_embeds_the_entropy_summary(toy_run):
    from tests.test_model_card import assert_png

    out, _ = toy_run
    card = (out / "README.md").read_text()
    assert "![curves](curves.png)" in card and "![token entropy](inspect_summary.png)" in card
    assert card.index("![curves](curves.png)") < card.index("![token entropy](inspect_summary.png)")
    assert_png(out / "inspect_summary.png")


class Recorder:
    """A fake tracker module (wandb, trackio) or SummaryWriter: records every call."""

    def __init__(self, name):
        self.name, self.calls = name, []
        for cls in ("Html", "Table", "Histogram"):
            setattr(self, cls, self._wrap(cls))
        self.run = object()

    def _wrap(self, cls):
        def make(*args, **kwargs):
            return (cls, args, kwargs)

        return make

    def __getattr__(self, method):
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: self.calls.append((method, args, kwargs))


def tensorboard_writer(tmp_path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard not installed: a recording fake with the same methods
        return Recorder("tensorboard"), False
    return SummaryWriter(str(tmp_path / "tb")), True


def test_trackers_receive_the_view(tmp_path, monkeypatch):
    wandb, trackio = Recorder("wandb"), Recorder("trackio")
    writer, real = tensorboard_writer(tmp_path)
    monkeypatch.setattr(
        _inspect_hooks, "find_trackers", lambda trainer: {"wandb": wandb, "trackio": trackio, "tensorboard": writer}
    )
    trainer = build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, tmp_path / "run", inspect_every_steps=2, max_steps=3)
    trainer.train()
    assert sorted(p.name for p in (tmp_path / "run" / "inspect").glob("*.html")) == ["step-0.html", "step-2.html"]

    logs = [c[1][0] for c in wandb.calls if c[0] == "log"]
    assert [entry["train/global_step"] for entry in logs] == [0, 2]
    for entry, step in zip(logs, (0, 2)):
        page = (tmp_path / "run" / "inspect" / f"step-{step}.html").read_text()
        assert entry["inspect/rollouts"][0] == "Html" and entry["inspect/rollouts"][1][0] == page
        table = entry["inspect/completions"][2]["dataframe"]
        assert len(table) == 8 and list(table.columns)[-2:] == ["entropy", "token_entropies"]  # 2 prompts x 4
        histogram = entry["entropy/histogram"][1][0]
        assert histogram.ndim == 1 and len(histogram) > len(page_entropies(page))  # every token of the batch
    trackio_logs = [c for c in trackio.calls if c[0] == "log"]
    assert [c[2]["step"] for c in trackio_logs] == [0, 2]
    assert all(c[1][0]["inspect/completions"][0] == "Table" for c in trackio_logs)
    if real:
        writer.close()
        assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
    else:
        images = [c for c in writer.calls if c[0] == "add_image"]
        assert [c[1][0] for c in images] == ["inspect/summary"] * 2 and [c[1][2] for c in images] == [0, 2]
        assert images[0][1][1].ndim == 3 and images[0][1][1].shape[2] == 3 and images[0][2]["dataformats"] == "HWC"
        assert [c[1][0] for c in writer.calls if c[0] == "add_histogram"] == ["entropy/histogram"] * 2


def test_find_trackers_imports_only_what_report_to_names(monkeypatch):
    wandb, trackio = Recorder("wandb"), Recorder("trackio")
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    monkeypatch.setitem(sys.modules, "trackio", trackio)
    TensorBoardCallback = type("TensorBoardCallback", (), {"tb_writer": "writer"})  # noqa: N806
    callbacks = types.SimpleNamespace(callbacks=[TensorBoardCallback(), object()])

    def trainer(report_to):
        return types.SimpleNamespace(args=types.SimpleNamespace(report_to=report_to), callback_handler=callbacks)

    assert _inspect_hooks.find_trackers(trainer(["wandb", "trackio", "tensorboard"])) == {
        "wandb": wandb,
        "trackio": trackio,
        "tensorboard": "writer",
    }
    wandb.run = None  # wandb without an active run takes nothing
    assert set(_inspect_hooks.find_trackers(trainer(["wandb"]))) == {"tensorboard"}
    monkeypatch.delitem(sys.modules, "wandb")
    monkeypatch.setitem(sys.modules, "wandb", None)  # an import of wandb would fail: none is attempted
    assert set(_inspect_hooks.find_trackers(trainer([]))) == {"tensorboard"}


def test_interval_and_off(tmp_path):
    trainer = build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, tmp_path / "on", inspect_every_steps=2, max_steps=5)
    trainer.train()
    assert sorted(p.name for p in (tmp_path / "on" / "inspect").glob("*.html")) == [
        "step-0.html",
        "step-2.html",
        "step-4.html",
    ]
    steps = [e["step"] for e in trainer.state.log_history if "entropy/high_share" in e]
    assert steps == [1, 3, 5]  # logged with the step that trains on the rollouts

    trainer = build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, tmp_path / "off", inspect_every_steps=0, max_steps=2)
    trainer.train()
    assert not (tmp_path / "off" / "inspect").exists()
    assert not any(k.startswith("entropy/") or k == "rollout/entropy" for e in trainer.state.log_history for k in e)
    trainer.save_model(str(tmp_path / "off" / "final"))
    assert not (tmp_path / "off" / "final" / "inspect_summary.png").exists()
    assert "inspect_summary" not in (tmp_path / "off" / "final" / "README.md").read_text()


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("inspect_every_steps", -1, "inspect_every_steps must be a non-negative integer"),
        ("inspect_every_steps", 2.5, "inspect_every_steps must be a non-negative integer"),
        ("inspect_num_prompts", 0, "inspect_num_prompts must be a positive integer"),
        ("inspect_high_entropy", float("nan"), "inspect_high_entropy must be a finite number"),
        ("inspect_high_entropy", -0.1, "inspect_high_entropy must be a finite number"),
    ],
)
def test_bad_inspect_fields_are_named(tmp_path, field, value, match):
    with pytest.raises(ValueError, match=match):
        EntropyGRPOConfig(**grpo_kwargs(tmp_path, **{field: value}))


def test_none_disables(tmp_path):
    config = EntropyGRPOConfig(**grpo_kwargs(tmp_path, inspect_every_steps=None))
    assert (
        _inspect_hooks.RolloutInspector.from_trainer(
            types.SimpleNamespace(args=config, config_value=lambda name: getattr(config, name))
        )
        is None
    )


def test_entropy_metrics_against_numpy():
    torch.manual_seed(0)
    entropies = torch.rand(5, 7) * 3
    mask = torch.rand(5, 7) > 0.3
    got = _inspect_hooks.entropy_metrics(entropies * mask, mask, 0.7)
    values = entropies[mask].double().numpy()
    assert got["entropy/high_share"] == pytest.approx(np.mean(values > 0.7))
    assert got["entropy/mean"] == pytest.approx(values.mean(), rel=1e-6)
    for q in (10, 50, 90):
        assert got[f"entropy/q{q}"] == pytest.approx(np.quantile(values, q / 100), rel=1e-6)
    assert _inspect_hooks.entropy_metrics(entropies, torch.zeros_like(mask), 0.7) == {}


@pytest.mark.parametrize("per_batch", [1, 4])
def test_resumed_run_keeps_the_view_schedule(per_batch):
    """The views a resumed run writes are those of the uninterrupted run (`test_kill_resume` checks the histories)."""

    def trainer_at(step):
        return types.SimpleNamespace(
            mode="train",
            state=types.SimpleNamespace(global_step=step),
            micro_steps_per_rollout_batch=per_batch,
            args=types.SimpleNamespace(gradient_accumulation_steps=1),
        )

    def schedule(start, end):
        inspector = _inspect_hooks.RolloutInspector(10, 2, 0.7, False)
        due = []
        for step in range(start, end, per_batch):  # rollouts are sampled every `per_batch` optimizer steps
            if inspector.view_due(trainer_at(step)):
                due.append(step)
                inspector._bucket = step // 10  # as `on_rollouts` records it
        return due

    full = schedule(0, 60)
    assert full == ([0, 10, 20, 30, 40, 50] if per_batch == 1 else [0, 12, 20, 32, 40, 52])
    for resume in range(per_batch, 60, per_batch):
        assert schedule(resume, 60) == [s for s in full if s >= resume], resume
