"""`use_liger_kernel=True` with every healtrl trainer (issue #42 item 4).

TRL 1.16's `GRPOTrainer` has no Liger loss: with `use_liger_kernel=True` it sets
`liger_kernel_config["fused_linear_cross_entropy"] = False` (its `__init__`), transformers' `Trainer.train` then patches
only the model's layers with Liger's kernels (`apply_liger_kernel`: RMSNorm, RoPE, SwiGLU), and `_compute_loss` runs
the same policy forward through the fused LM head as without Liger. healtrl's levers hook into that forward
(`healtrl/trainers/_trl/loss.py`) and into the generation batch, so every trainer keeps every lever under Liger
(`healtrl.trainers.base.liger_conflict`). The one combination that cannot train, Liger's fused linear cross-entropy
(which replaces the model's forward and with it the fused LM head), is refused by TRL's constructor and by healtrl's
dry run and run before the model loads.

CPU tests: the refusals, and one training step per trainer with `use_liger_kernel=True` in which transformers'
`apply_liger_kernel` is recorded instead of run (liger-kernel's kernels need a GPU, and it is not installed here): the
step trains through the same boundary and every lever acts. GPU test (`pytest -m gpu`, needs liger-kernel): the same
step with Liger's kernels really applied.
"""

from __future__ import annotations

import importlib.machinery
import math
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import set_seed
from trl import GRPOConfig, GRPOTrainer

from healtrl.toy.tasks import make_dataset, toy_reward
from healtrl.toy.tokenizer import build_tokenizer
from healtrl.trainers import TRAINERS, EntropyGRPOTrainer
from healtrl.trainers._trl import LossBatch
from healtrl.trainers.base import liger_conflict
from healtrl.utils.compat import MissingExtraError, is_available
from tests.helpers import digit_reward, grpo_kwargs, tiny_model

REPO = Path(__file__).resolve().parents[1]
FLCE = {"fused_linear_cross_entropy": True}


@dataclass(frozen=True)
class Case:
    """A trainer of the registry (`healtrl.trainers.TRAINERS`) with method settings that make its lever act at once."""

    trainer: str  # registry name
    method: dict[str, Any] = field(default_factory=dict)
    #: The lever that must act in the step (a method of the trainer), or None for TRL's GRPO.
    lever: str | None = None
    #: A shipped toy config of this trainer for the dry run.
    config: str = "toy_grpo.yaml"
    #: Optimizer steps of the training test.
    steps: int = 1


CASES = {
    "grpo": Case("grpo"),
    "clip_cov": Case(
        "grpo",
        dict(entropy_method="clip_cov", clip_cov_ratio=0.1, clip_cov_lb=-100.0, clip_cov_ub=100.0),
        "shape_advantages",
        "baseline_clip_cov_toy.yaml",
    ),
    # The second update of a rollout batch: logp != logp_old, so the KL-Cov penalty is not 0.
    "kl_cov": Case(
        "grpo", dict(entropy_method="kl_cov", num_iterations=2), "extra_loss", "baseline_kl_cov_toy.yaml", 2
    ),
    "entropy_adv": Case(
        "grpo", dict(entropy_method="entropy_adv"), "shape_advantages", "baseline_entropy_adv_toy.yaml"
    ),
    "heal": Case("heal", {}, "augment_rewards", "heal_toy.yaml"),
    "aer": Case("aer", dict(alpha_init=0.01), "extra_loss", "aer_toy.yaml"),
    "posadv": Case("posadv", dict(schedule="constant", lambda_init=0.5), "shape_advantages", "posadv_toy.yaml"),
    "opefo": Case("opefo", {}, "shape_advantages", "opefo_toy.yaml"),
}


def test_cases_cover_every_registered_trainer():
    assert {case.trainer for case in CASES.values()} == set(TRAINERS)


def _build(name: str, output_dir, **config):
    """The trainer of case `name` on the tiny model and both toy domains (HEAL's target and general rows)."""
    case = CASES[name]
    trainer_cls, config_cls = TRAINERS[case.trainer]
    set_seed(0)
    fields = grpo_kwargs(output_dir, per_device_train_batch_size=8, max_steps=case.steps, **case.method)
    fields.update(config)
    return trainer_cls(
        model=tiny_model(),
        reward_funcs=[toy_reward, digit_reward],
        args=config_cls(**fields),
        train_dataset=make_dataset(["add", "compare"], 8),
        processing_class=build_tokenizer(),
    )


# ---------------------------------------------------------------------------------------------------------------
# The rule
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "use, config",
    [
        (False, FLCE),  # inert without use_liger_kernel, as in TRL
        (True, None),
        (True, {}),
        (True, {"rms_norm": False, "swiglu": True}),
        (True, {"fused_linear_cross_entropy": False}),
        (True, '{"fused_linear_cross_entropy": false}'),
        (True, "not json"),  # left to the config's own check
    ],
)
def test_liger_conflict_accepts_the_layer_kernels(use, config):
    assert liger_conflict(use, config) is None


@pytest.mark.parametrize(
    "config", [FLCE, {"fused_linear_cross_entropy": 1, "rope": True}, '{"fused_linear_cross_entropy": true}']
)
def test_liger_conflict_names_the_field_the_reason_and_the_fix(config):
    message = liger_conflict(True, config)
    assert message is not None
    for text in (
        "use_liger_kernel=true with liger_kernel_config fused_linear_cross_entropy=true",  # the fields
        "replaces the model's forward, which bypasses the fused LM head",  # the reason
        "advantage shaping, extra loss terms",  # the levers it bypasses
        "Remove fused_linear_cross_entropy from liger_kernel_config",  # the fixes
        "or set use_liger_kernel=false",
    ):
        assert text in message, f"{text!r} not in {message!r}"


# ---------------------------------------------------------------------------------------------------------------
# Refused: Liger's fused linear cross-entropy
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::FutureWarning")  # TRL deprecates `use_liger_kernel`
@pytest.mark.parametrize("name", list(CASES))
def test_constructor_refuses_fused_linear_cross_entropy_with_trls_error(name, tmp_path):
    """TRL's constructor refuses it (a ValueError naming `liger_kernel_config` and the fused LM head) for every
    trainer, before healtrl's liger-kernel check: installing liger-kernel would not help."""
    set_seed(0)
    with pytest.raises(ValueError) as trl_error:
        GRPOTrainer(
            model=tiny_model(),
            reward_funcs=[toy_reward, digit_reward],
            args=GRPOConfig(**grpo_kwargs(tmp_path / "trl", use_liger_kernel=True, liger_kernel_config=dict(FLCE))),
            train_dataset=make_dataset(["add", "compare"], 8),
            processing_class=build_tokenizer(),
        )
    with pytest.raises(ValueError) as ours:
        _build(name, tmp_path / "ours", use_liger_kernel=True, liger_kernel_config=dict(FLCE))
    assert type(ours.value) is ValueError and not isinstance(ours.value, MissingExtraError)
    assert str(ours.value) == str(trl_error.value)
    assert "liger_kernel_config" in str(ours.value) and "fused LM head" in str(ours.value)


def _dry_run(config_name: str, tmp_path, capsys, *overrides: str) -> tuple[int, str, str]:
    from healtrl.cli import train_main

    code = train_main(
        ["--config", str(REPO / "configs" / config_name), "--output_dir", str(tmp_path), *overrides, "--dry_run"]
    )
    captured = capsys.readouterr()
    return code, captured.out, " ".join(captured.err.split())


@pytest.mark.parametrize("name", list(CASES))
def test_dry_run_refuses_fused_linear_cross_entropy(name, tmp_path, no_network, capsys):
    config = CASES[name].config
    flce = ["--use_liger_kernel", "true", "--liger_kernel_config", '{"fused_linear_cross_entropy": true}']
    code, out, err = _dry_run(config, tmp_path, capsys, *flce)
    assert code == 2 and "Dry run FAILED" in out
    assert " ".join(liger_conflict(True, FLCE).split()) in err
    # The same config with Liger's layer kernels only passes (liger-kernel itself is the launch machine's to have).
    code, out, err = _dry_run(config, tmp_path, capsys, "--use_liger_kernel", "true")
    assert code == 0, err
    assert "Dry run OK" in out
    if not is_available("liger"):
        assert "liger_kernel is not installed: the config sets use_liger_kernel=true" in " ".join(out.split())


def test_run_refuses_fused_linear_cross_entropy_before_the_model_loads(tmp_path, restore_threads, capsys, monkeypatch):
    """`train.py` stops at the config, before the model resolves and before the missing-package check (installing
    liger-kernel would not make the config train)."""
    import healtrl.models
    from healtrl.cli import main

    def no_model(*args, **kwargs):
        raise AssertionError("the model was resolved before the Liger setting was checked")

    monkeypatch.setattr(healtrl.models, "resolve_model_path", no_model)
    argv = ["train", "--config", "configs/toy_grpo.yaml", "--output_dir", str(tmp_path / "out")]
    argv += ["--use_liger_kernel", "true", "--liger_kernel_config", '{"fused_linear_cross_entropy": true}']
    code = main(argv)
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2
    assert " ".join(liger_conflict(True, FLCE).split()) in err
    assert "pip install" not in err


# ---------------------------------------------------------------------------------------------------------------
# Accepted: one step per trainer, every lever acting
# ---------------------------------------------------------------------------------------------------------------
def _spy(monkeypatch, cls: type, method: str) -> list:
    """Record what `cls.method` returns (and its first tensor argument), calling the real method."""
    calls: list = []
    original = getattr(cls, method)

    def spy(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        calls.append((args, result))
        return result

    monkeypatch.setattr(cls, method, spy)
    return calls


def _assert_lever_acted(case: Case, calls: list) -> None:
    """The lever ran in the step and its output is the kind the boundary feeds into TRL's loss or rewards."""
    acted = [(args, result) for args, result in calls if result is not None]
    assert acted, f"{case.lever} ran {len(calls)} times and never returned a value"
    if case.lever == "shape_advantages":
        changed = []
        for (advantages, batch), shaped in acted:
            assert isinstance(batch, LossBatch) and shaped.shape == batch.mask.shape
            assert torch.isfinite(shaped).all()
            changed.append(not torch.equal(shaped, advantages.unsqueeze(1).expand_as(shaped).to(shaped.dtype)))
        assert any(changed), "shape_advantages returned TRL's advantages unchanged"
    elif case.lever == "extra_loss":
        for _, term in acted:
            assert term.dim() == 0 and term.requires_grad and torch.isfinite(term)
        assert any(term.item() != 0.0 for _, term in acted), "extra_loss added only zeros"
    elif case.lever == "augment_rewards":
        for (rollouts,), columns in acted:
            assert columns and all(v.shape == (len(rollouts.rewards_per_func),) for v in columns.values())
    else:
        raise AssertionError(f"unknown lever {case.lever}")


def _one_step(name: str, tmp_path, monkeypatch, **config) -> tuple[EntropyGRPOTrainer, list[LossBatch], list]:
    """Train case `name` (`Case.steps` optimizer steps) with `use_liger_kernel=True`; returns the trainer, the loss
    forwards' batches (built by the boundary inside TRL's `_compute_loss`) and the lever's calls."""
    case = CASES[name]
    trainer_cls, _ = TRAINERS[case.trainer]
    batches: list[LossBatch] = []
    forward = EntropyGRPOTrainer._loss_policy_forward

    def recording_forward(self, call, *args, **kwargs):
        out = forward(self, call, *args, **kwargs)
        batches.append(call.batch)
        return out

    monkeypatch.setattr(EntropyGRPOTrainer, "_loss_policy_forward", recording_forward)
    calls = _spy(monkeypatch, trainer_cls, case.lever) if case.lever else []
    trainer = _build(name, tmp_path, use_liger_kernel=True, **config)
    trainer.train()
    return trainer, batches, calls


def _assert_step(name: str, trainer, batches: list[LossBatch], calls: list) -> None:
    case = CASES[name]
    assert trainer.state.global_step == case.steps
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses and all(math.isfinite(loss) for loss in losses)
    # TRL's loss ran its policy forward through healtrl's boundary (where levers 1 and 2 hook), with the per-token
    # entropies of the fused LM head.
    assert batches and all(b is not None and torch.isfinite(b.entropies).all() for b in batches)
    if case.lever:
        _assert_lever_acted(case, calls)


def _stand_in_liger(monkeypatch, model_types: set[str]) -> None:
    """liger-kernel as modules that list `model_types` in `MODEL_TYPE_TO_APPLY_LIGER_FN` (all it is read for here)."""
    names = ("liger_kernel", "liger_kernel.transformers", "liger_kernel.transformers.monkey_patch")
    modules = [types.ModuleType(name) for name in names]
    for module, name in zip(modules, names):
        module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=name != names[-1])
        monkeypatch.setitem(sys.modules, name, module)
    modules[0].transformers, modules[1].monkey_patch = modules[1], modules[2]
    modules[2].MODEL_TYPE_TO_APPLY_LIGER_FN = {name: None for name in model_types}


def test_liger_on_a_model_type_it_does_not_patch_warns_at_construction(tmp_path, monkeypatch):
    """transformers logs an unsupported model type at info level only and patches nothing; the trainer warns, naming
    the type and the fix. A supported type gives no such warning; a PEFT model is looked up by its base model."""
    from healtrl.models import liger_unsupported
    from tests.helpers import build_trainer

    _stand_in_liger(monkeypatch, {"llama", "qwen3"})
    model = tiny_model()  # qwen2
    why = liger_unsupported(model)
    assert "no kernels for model type 'qwen2'" in why and "use_liger_kernel=false" in why and "llama, qwen3" in why
    wrapped = types.SimpleNamespace(get_base_model=lambda: model)
    assert liger_unsupported(wrapped) == why
    with pytest.warns(UserWarning, match="no kernels for model type 'qwen2'"):
        build_trainer(EntropyGRPOTrainer, TRAINERS["grpo"][1], tmp_path / "a", model=model, use_liger_kernel=True)
    _stand_in_liger(monkeypatch, {"qwen2"})
    assert liger_unsupported(model) is None


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("name", list(CASES))
def test_one_step_with_use_liger_kernel_keeps_every_lever(name, tmp_path, monkeypatch):
    """On the CPU, liger-kernel stands in as a module listing qwen2 and transformers' `apply_liger_kernel` is recorded:
    the step shows what TRL does with `use_liger_kernel=True` (the layer kernels only, the same loss path)."""
    import transformers.trainer

    _stand_in_liger(monkeypatch, {"qwen2"})
    applied = []
    monkeypatch.setattr(
        transformers.trainer, "apply_liger_kernel", lambda model, config: applied.append((model, config))
    )

    trainer, batches, calls = _one_step(name, tmp_path, monkeypatch)
    assert len(applied) == 1
    model, config = applied[0]
    assert model is trainer.model
    assert config == {"fused_linear_cross_entropy": False}  # TRL's: no Liger loss, the fused LM head stays
    _assert_step(name, trainer, batches, calls)


def _gpu(test):
    """GPU-only: selected by `pytest -m gpu`, skipped without a CUDA device or without liger-kernel."""
    test = pytest.mark.skipif(not is_available("liger"), reason="needs liger-kernel (pip install healtrl[liger])")(test)
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")(test))


@_gpu
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("name", list(CASES))
def test_one_step_with_liger_kernels_on_cuda(name, tmp_path, monkeypatch):
    """One step on CUDA with Liger's kernels applied to the model (RMSNorm, SwiGLU, RoPE): finite loss, the loss
    forward through healtrl's boundary and the trainer's lever acting."""
    from liger_kernel.transformers.rms_norm import LigerRMSNorm
    from transformers.models.qwen2 import modeling_qwen2

    # Liger also patches the module's classes and RoPE function for every later Qwen2 model: restored after the test.
    for attr in ("apply_rotary_pos_emb", "Qwen2RMSNorm", "Qwen2MLP"):
        monkeypatch.setattr(modeling_qwen2, attr, getattr(modeling_qwen2, attr))
    trainer, batches, calls = _one_step(name, tmp_path, monkeypatch, use_cpu=False)
    assert trainer.model.device.type == "cuda"
    base = trainer.model.model
    assert base.norm.forward.__func__ is LigerRMSNorm.forward  # bound by apply_liger_kernel: not a no-op
    assert all(layer.mlp._get_name() == "LigerSwiGLUMLP" for layer in base.layers)
    _assert_step(name, trainer, batches, calls)
