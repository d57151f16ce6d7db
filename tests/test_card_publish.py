"""What a user publishes (issue #41 item 9): the model card names the base model by the id it was loaded with and the
training data by its name, never by a folder of this machine; `curves.png` draws each method's entropy target or
threshold; figure titles hold no folder path."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch
import yaml

from healtrl import (
    AERConfig,
    AERTrainer,
    GRPOBaselineConfig,
    GRPOBaselineTrainer,
    OPEFOConfig,
    PosAdvConfig,
    PosAdvTrainer,
)
from healtrl.model_card import build_model_card, published_model_name
from healtrl.toy import load_toy_model, toy_build_overrides, toy_model_name, toy_reward
from healtrl.views.curves import checked_title, config_targets, draw_curves
from tests.helpers import build_trainer, digit_reward, grpo_kwargs, tiny_dataset, tiny_model_path

TOY = "healtrl-toy/qwen2-add"
# A toy build small enough for a test: one warm-up step, an 8-problem accuracy probe (the warm-up warns that the
# target accuracy is not reached).
TINY_BUILD = dict(hidden_size=32, num_layers=1, num_heads=2, max_steps=1, batch_size=8, probe_size=8)


@pytest.fixture(scope="module")
def toy_cache(tmp_path_factory) -> Path:
    """A healtrl cache holding the tiny build of `TOY`."""
    cache = tmp_path_factory.mktemp("healtrl-cache")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.warns(UserWarning, match="Warm-up stopped at max_steps=1"):
            load_toy_model(TOY, cache_dir=cache, **TINY_BUILD)
    finally:
        torch.set_num_threads(threads)
    return cache


def toy_folder(cache: Path) -> str:
    (folder,) = [p for p in cache.iterdir() if p.is_dir() and p.name.startswith("toy-")]
    return str(folder)


def front_matter(card: str) -> dict:
    match = re.match(r"^---\n(.*?)\n---\n", card, re.S)
    assert match, card[:200]
    return yaml.safe_load(match.group(1))


def card_of(**overrides) -> str:
    kwargs = dict(model_name="toy", method="M", description="Two lines.", load_path="someone/toy")
    return build_model_card(**{**kwargs, **overrides})


# ----------------------------------------------------------------------------------------------------------------
# The card: base model and datasets
# ----------------------------------------------------------------------------------------------------------------
def test_toy_folder_is_named_by_its_toy_name(toy_cache):
    folder = toy_folder(toy_cache)
    model, _ = load_toy_model(TOY, cache_dir=toy_cache, **TINY_BUILD)
    assert model.config.name_or_path == folder  # what TRL loads the reference model from stays the folder
    assert toy_model_name(folder) == TOY and toy_model_name(toy_cache) is None
    assert toy_build_overrides(folder) == TINY_BUILD
    assert published_model_name(folder) == (TOY, "healtrl")
    assert published_model_name(os.path.relpath(folder)) == (TOY, "healtrl")
    with pytest.raises(ValueError, match="not a toy model folder"):
        toy_build_overrides(toy_cache)


def test_card_of_a_toy_run_names_the_toy_model_and_no_path(toy_cache, tmp_path, monkeypatch):
    """The README's Python quick start, two steps long: a toy model from `load_toy_model`, a relative output folder."""
    monkeypatch.chdir(tmp_path)
    torch.set_num_threads(1)
    model, tokenizer = load_toy_model(TOY, cache_dir=toy_cache, **TINY_BUILD)
    dataset = tiny_dataset(16)
    dataset.info.dataset_name = "healtrl-toy/add"
    trainer = AERTrainer(
        model=model,
        reward_funcs=[toy_reward, digit_reward],
        args=AERConfig(**grpo_kwargs("outputs/quickstart")),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    drawn = []
    import healtrl.views.curves

    draw = healtrl.views.curves.draw_curves

    def recording(*args, **kwargs):
        drawn.append(draw(*args, **kwargs))
        return drawn[-1]

    monkeypatch.setattr(healtrl.views.curves, "draw_curves", recording)
    trainer.train()
    trainer.save_model()
    card = (tmp_path / "outputs" / "quickstart" / "README.md").read_text()

    assert "- Base model: `healtrl-toy/qwen2-add` (a toy model healtrl builds on first use, not a Hub id; a " in card
    assert "non-default build: hidden_size=32, num_layers=1, num_heads=2, max_steps=1, batch_size=8" in card
    assert "fine-tuned version of `healtrl-toy/qwen2-add`;" in card
    assert "- Datasets: `healtrl-toy/add`\n" in card
    meta = front_matter(card)
    assert "base_model" not in meta and "datasets" not in meta  # healtrl's names are not Hub ids
    for machine_path in (str(tmp_path), str(toy_cache), str(Path.home()), "/root", ".cache"):
        assert machine_path not in card, machine_path

    # curves.png: the entropy panel draws AER's logged target H*, labelled with its value to 3 digits
    target = [e["aer/target_entropy"] for e in trainer.state.log_history if "aer/target_entropy" in e][-1]
    (figure,) = drawn
    entropy = figure.axes[0]
    assert entropy.get_title() == "entropy"
    lines = [line for line in entropy.lines if line.get_label().startswith("AER target H*")]
    assert [line.get_label() for line in lines] == [f"AER target H* = {target:.3g}"]
    assert list(lines[0].get_ydata()) == [target, target]
    assert [t.get_text() for t in entropy.get_legend().get_texts()] == [f"AER target H* = {target:.3g}"]
    assert figure.axes[1].get_title() == "reward" and not figure.axes[1].get_legend()
    # titled by the model's toy name and the task's name, not by the output folder or the cache folder
    assert figure.get_suptitle() == "AER: healtrl-toy/qwen2-add on healtrl-toy/add"


def test_card_of_a_model_from_a_local_folder_keeps_the_path_out(tmp_path):
    folder = tiny_model_path(tmp_path)
    card = card_of(base_model=folder, datasets=[str(tmp_path / "data" / "train.jsonl"), "healtrl-toy/add"])
    assert "base_model" not in front_matter(card)
    assert (
        "- Base model: `tiny-model` (local: a folder on the training machine, so the card's metadata names no " in card
    )
    assert "- Datasets: `train.jsonl` (local), `healtrl-toy/add`\n" in card
    assert str(tmp_path) not in card
    assert published_model_name(folder) == ("tiny-model", "local")
    assert published_model_name("/somewhere/else/run-3/") == ("run-3", "local")  # a path of another machine too


def test_card_of_a_hub_model_names_its_hub_id():
    card = card_of(base_model="Qwen/Qwen3-0.6B", datasets=["openai/gsm8k"])
    assert front_matter(card)["base_model"] == "Qwen/Qwen3-0.6B"
    assert front_matter(card)["datasets"] == ["openai/gsm8k"]
    assert "- Base model: [Qwen/Qwen3-0.6B](https://huggingface.co/Qwen/Qwen3-0.6B)\n" in card
    assert published_model_name("gpt2") == ("gpt2", "name")
    assert "- Base model: `gpt2` (not a `namespace/name` Hub id" in card_of(base_model="gpt2")


def test_unrecorded_base_model_and_datasets_say_how_to_record_them():
    card = card_of()
    assert "- Base model: not recorded (set `trainer.model_card_base_model` to the Hub id or healtrl name" in card
    assert "- Datasets: not recorded (set `trainer.model_card_datasets` to the dataset or task names, or give " in card
    assert "`info.dataset_name` is set)" in card


# ----------------------------------------------------------------------------------------------------------------
# The curves: targets and thresholds, titles
# ----------------------------------------------------------------------------------------------------------------
AER_LOG = [
    {"step": 1, "entropy": 0.9, "reward": 0.1, "aer/alpha": 0.0, "aer/target_entropy": 0.777273},
    {"step": 2, "entropy": 0.8, "reward": 0.2, "aer/alpha": 0.005, "aer/target_entropy": 0.777273},
]
GRPO_LOG = [{"step": 1, "entropy": 0.9, "reward": 0.1}, {"step": 2, "entropy": 0.8, "reward": 0.2}]


def dashed(ax) -> list[tuple[str, float]]:
    """(label, y) of the horizontal target lines of an axes."""
    return [(line.get_label(), float(line.get_ydata()[0])) for line in ax.lines if line.get_linestyle() == "--"]


def test_aer_target_is_drawn_and_grpo_gets_none():
    aer = draw_curves(AER_LOG)
    assert dashed(aer.axes[0]) == [("AER target H* = 0.777", 0.777273)]
    assert dashed(aer.axes[1]) == []  # the reward panel

    grpo = draw_curves(GRPO_LOG)
    assert dashed(grpo.axes[0]) == [] and grpo.axes[0].get_legend() is None

    both = draw_curves({"GRPO": GRPO_LOG, "AER": AER_LOG})
    ax = both.axes[0]
    assert dashed(ax) == [("AER: AER target H* = 0.777", 0.777273)]
    (aer_curve,) = [line for line in ax.lines if line.get_label() == "AER"]
    (target,) = [line for line in ax.lines if line.get_linestyle() == "--"]
    assert target.get_color() == aer_curve.get_color()  # the run's colour
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["GRPO", "AER", "AER: AER target H* = 0.777"]

    custom = draw_curves(AER_LOG, panels={"entropy (TRL)": "entropy", "alpha": "aer/alpha"})
    assert len(dashed(custom.axes[0])) == 1 and dashed(custom.axes[1]) == []


def test_a_logged_target_that_varies_is_drawn_as_its_series():
    log = [dict(entry, **{"aer/target_entropy": value}) for entry, value in zip(AER_LOG, (0.61234, 0.70456))]
    (target,) = [line for line in draw_curves(log).axes[0].lines if line.get_linestyle() == "--"]
    assert target.get_label() == "AER target H*, last = 0.705"
    assert list(target.get_xdata()) == [1, 2] and list(target.get_ydata()) == [0.61234, 0.70456]


def test_config_targets_of_each_method(tmp_path):
    common = dict(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none")
    posadv = PosAdvConfig(**common, entropy_threshold=0.35)
    assert config_targets(posadv) == {"PosAdv threshold \u03b4": 0.35}
    assert config_targets(PosAdvConfig(**common, schedule="constant")) == {}  # delta unused by that schedule
    assert config_targets(AERConfig(**common)) == {}  # AER logs its target (LOGGED_TARGETS)
    assert config_targets(OPEFOConfig(**common)) == {}
    assert config_targets(GRPOBaselineConfig(**common)) == {}
    adaptive = GRPOBaselineConfig(**common, use_adaptive_entropy=True, entropy_target=0.3)
    assert config_targets(adaptive) == {"adaptive-entropy target": 0.3}

    figure = draw_curves(GRPO_LOG, targets=config_targets(posadv))
    assert dashed(figure.axes[0]) == [("PosAdv threshold \u03b4 = 0.35", 0.35)] and dashed(figure.axes[1]) == []
    # logged by the run too (PosAdv logs its delta): drawn once, from the log
    logged = [dict(entry, **{"posadv/entropy_threshold": 0.35}) for entry in GRPO_LOG]
    assert dashed(draw_curves(logged, targets=config_targets(posadv)).axes[0]) == [
        ("PosAdv threshold \u03b4 = 0.35", 0.35)
    ]
    with pytest.raises(ValueError, match="finite number"):
        draw_curves(GRPO_LOG, targets={"x": float("nan")})


def test_title_with_a_folder_is_refused_or_named(toy_cache, tmp_path):
    folder = toy_folder(toy_cache)
    assert checked_title(f"{os.path.relpath(folder)} on healtrl-toy/countdown (toy path)") == (
        "healtrl-toy/qwen2-add on healtrl-toy/countdown (toy path)"
    )
    assert draw_curves(GRPO_LOG, title=f"GRPO: {folder}").get_suptitle() == "GRPO: healtrl-toy/qwen2-add"
    for title in (f"GRPO: {tmp_path}", "GRPO (/data/run)", "GRPO: ~/outputs/run"):
        with pytest.raises(ValueError, match="a folder of this machine"):
            draw_curves(GRPO_LOG, title=title)
    for title in ("entropy / reward", "AER: Qwen/Qwen3-0.6B on task:gsm8k", "AER: quickstart"):
        assert checked_title(title) == title


def test_plot_curves_writes_the_figure(tmp_path):
    from healtrl.views.curves import plot_curves

    path = plot_curves(AER_LOG, tmp_path / "curves.png", title="AER: healtrl-toy/qwen2-add on toy-add")
    assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------------------------------------------
# A trainer's own curves.png (`save_curves`): title and targets, from a given log history (no training)
# ----------------------------------------------------------------------------------------------------------------
HUB_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture
def saved_figures(monkeypatch):
    """The figures `save_curves` writes, in order, as matplotlib Figures."""
    import healtrl.views.curves

    figures, save = [], healtrl.views.curves.save_figure

    def recording(fig, path):
        figures.append(fig)
        return save(fig, path)

    monkeypatch.setattr(healtrl.views.curves, "save_figure", recording)
    return figures


def saved_curves(trainer, history, directory: Path, figures: list):
    """The figure of `trainer.save_curves(directory)` for `history`, the PNG checked."""
    trainer.state.log_history = history
    path = trainer.save_curves(str(directory))
    assert path == str(directory / "curves.png") and Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return figures[-1]


@pytest.mark.parametrize(
    "trainer_cls, config_cls, config, history, expected",
    [
        pytest.param(
            PosAdvTrainer,
            PosAdvConfig,
            dict(schedule="entropy", entropy_threshold=0.234567),
            GRPO_LOG,
            [("PosAdv threshold \u03b4 = 0.235", 0.234567)],
            id="posadv-delta-from-config",
        ),
        pytest.param(
            PosAdvTrainer,
            PosAdvConfig,
            dict(schedule="entropy", entropy_threshold=0.234567),
            [dict(entry, **{"posadv/entropy_threshold": 0.234567}) for entry in GRPO_LOG],
            [("PosAdv threshold \u03b4 = 0.235", 0.234567)],
            id="posadv-delta-logged-and-set-drawn-once",
        ),
        pytest.param(
            GRPOBaselineTrainer,
            GRPOBaselineConfig,
            dict(use_adaptive_entropy=True, entropy_target=0.314159),
            GRPO_LOG,
            [("adaptive-entropy target = 0.314", 0.314159)],
            id="trl-adaptive-entropy-target",
        ),
        pytest.param(AERTrainer, AERConfig, {}, AER_LOG, [("AER target H* = 0.777", 0.777273)], id="aer-logged"),
        pytest.param(GRPOBaselineTrainer, GRPOBaselineConfig, {}, GRPO_LOG, [], id="grpo-none"),
    ],
)
def test_save_curves_draws_each_target_under_the_model_and_task(
    trainer_cls, config_cls, config, history, expected, tmp_path, saved_figures
):
    out = tmp_path / "runs" / "my-run"
    trainer = build_trainer(trainer_cls, config_cls, out, **config)
    trainer.model_card_base_model = HUB_MODEL
    trainer.model_card_datasets = ["openai/gsm8k", str(tmp_path / "data" / "extra.jsonl")]
    figure = saved_curves(trainer, history, out, saved_figures)

    entropy, reward = figure.axes
    assert dashed(entropy) == expected and dashed(reward) == []
    legend = entropy.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == [label for label, _ in expected] if expected else not legend
    method = trainer.model_card_method()["name"]
    title = figure.get_suptitle()
    assert title == f"{method}: {HUB_MODEL} on openai/gsm8k, extra.jsonl"
    assert str(tmp_path) not in title and "my-run" not in title and "runs/" not in title


def test_save_curves_title_of_a_local_model_and_of_an_unrecorded_one(tmp_path, saved_figures):
    """A model from a local folder is named by the folder's last component; no dataset, no ` on ...`; the datasets
    given to `create_model_card` are the title's."""
    out = tmp_path / "out"
    local = build_trainer(GRPOBaselineTrainer, GRPOBaselineConfig, out, model=tiny_model_path(tmp_path))
    local.model_card_datasets = []
    title = saved_curves(local, GRPO_LOG, out, saved_figures).get_suptitle()
    assert title == "GRPO: tiny-model" and str(tmp_path) not in title
    # the datasets `create_model_card(dataset_name=...)` names in the card name them in the title too
    local.create_model_card(dataset_name=["openai/gsm8k"])
    assert saved_figures[-1].get_suptitle() == "GRPO: tiny-model on openai/gsm8k"

    # a model built in memory has no `_name_or_path`; the task comes from the training dataset's `info.dataset_name`
    in_memory = build_trainer(GRPOBaselineTrainer, GRPOBaselineConfig, out)
    title = saved_curves(in_memory, GRPO_LOG, out, saved_figures).get_suptitle()
    assert title == "GRPO: base model not recorded on healtrl-toy/add"
