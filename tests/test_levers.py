"""The four levers of EntropyGRPOTrainer, each checked against an equivalent computed by TRL itself or by hand."""

from __future__ import annotations

import json
import os
import re

import pytest
import torch
from datasets import concatenate_datasets
from transformers import set_seed
from trl import GRPOConfig, GRPOTrainer

from healtrl import EntropyGRPOConfig, EntropyGRPOTrainer
from healtrl.toy.tasks import toy_reward
from healtrl.utils.compat import MissingExtraError, UnsupportedVersionError, check_trl_version, is_available
from tests.helpers import (
    build_trainer,
    digit_reward,
    loss_and_grads,
    next_inputs,
    reference_stats,
    tiny_dataset,
    tiny_model,
)


def count_forwards(model):
    calls = []
    handle = model.register_forward_hook(lambda *args: calls.append(1))
    return calls, handle


# ---------------------------------------------------------------------------------------------------------------
# Lever 1: per-token advantage shaping
# ---------------------------------------------------------------------------------------------------------------
class HalveLateTokens(EntropyGRPOTrainer):
    """Weights each token's advantage by 1 for the first two completion tokens and 0.5 after."""

    seen = None

    def shape_advantages(self, advantages, batch):
        type(self).seen = batch
        weights = torch.ones_like(batch.per_token_logps)
        weights[:, 2:] = 0.5
        return advantages.unsqueeze(1) * weights


def test_shape_advantages_equals_trl_with_per_token_advantages(tmp_path):
    ours = build_trainer(HalveLateTokens, EntropyGRPOConfig, tmp_path / "ours")
    trl_trainer = build_trainer(GRPOTrainer, GRPOConfig, tmp_path / "trl")
    set_seed(1)
    inputs = next_inputs(ours)
    loss_ours, grads_ours = loss_and_grads(ours, inputs)

    # TRL accepts (B, T) advantages: hand it the shaped ones directly.
    weights = torch.ones_like(inputs["completion_mask"], dtype=torch.float32)
    weights[:, 2:] = 0.5
    shaped = dict(inputs, advantages=inputs["advantages"].unsqueeze(1) * weights)
    loss_trl, grads_trl = loss_and_grads(trl_trainer, shaped)

    torch.testing.assert_close(loss_ours, loss_trl, rtol=1e-6, atol=1e-7)
    for name, grad in grads_trl.items():
        torch.testing.assert_close(grads_ours[name], grad, rtol=1e-5, atol=1e-7, msg=name)
    # ... and differs from unshaped GRPO, so the hook really acted.
    loss_plain, _ = loss_and_grads(trl_trainer, inputs)
    assert not torch.allclose(loss_plain, loss_ours)
    # The hook saw the policy forward of this micro-batch, with gradients, and the buffered batch is untouched.
    batch = HalveLateTokens.seen
    assert batch.per_token_logps.shape == inputs["completion_mask"].shape
    assert batch.per_token_logps.requires_grad and batch.entropies.requires_grad
    assert torch.equal(batch.mask, inputs["completion_mask"])
    assert inputs["advantages"].dim() == 1
    torch.testing.assert_close(batch.old_per_token_logps, batch.per_token_logps.detach())


# ---------------------------------------------------------------------------------------------------------------
# Lever 2: extra loss terms from the same forward
# ---------------------------------------------------------------------------------------------------------------
class MyEntropyBonus(EntropyGRPOTrainer):
    """An entropy bonus written as an extra loss term: -coef * token-mean entropy (what TRL's entropy_coef does)."""

    coef = 0.05

    def extra_loss(self, batch):
        mean_entropy = (batch.entropies * batch.mask).sum() / batch.mask.sum().clamp(min=1)
        return -self.coef * mean_entropy


@pytest.mark.parametrize("accum", [1, 2])
def test_extra_loss_equals_trl_entropy_bonus_without_second_forward(tmp_path, accum):
    cfg = dict(gradient_accumulation_steps=accum, per_device_train_batch_size=16 // accum)
    ours = build_trainer(MyEntropyBonus, EntropyGRPOConfig, tmp_path / "ours", **cfg)
    trl_trainer = build_trainer(GRPOTrainer, GRPOConfig, tmp_path / "trl", entropy_coef=MyEntropyBonus.coef, **cfg)
    set_seed(1)
    inputs = next_inputs(ours)

    calls, handle = count_forwards(ours.model)
    loss_ours, grads_ours = loss_and_grads(ours, inputs)
    handle.remove()
    assert len(calls) == 1  # the extra term reuses the loss forward

    loss_trl, grads_trl = loss_and_grads(trl_trainer, inputs)
    torch.testing.assert_close(loss_ours, loss_trl, rtol=1e-6, atol=1e-7)
    for name, grad in grads_trl.items():
        torch.testing.assert_close(grads_ours[name], grad, rtol=1e-5, atol=1e-7, msg=name)


# ---------------------------------------------------------------------------------------------------------------
# Lever 3: reward augmentation from the rollout batch, with rollout entropies
# ---------------------------------------------------------------------------------------------------------------
class DigitBonus(EntropyGRPOTrainer):
    """Adds the digit share as an augmentation column (weight 0.5), and records the rollouts it saw."""

    reward_augmentations = {"digits": 0.5}
    seen = None

    def augment_rewards(self, rollouts):
        type(self).seen = rollouts
        return {"digits": torch.tensor(digit_reward(rollouts.completions))}


def test_augmented_reward_equals_a_reward_function(tmp_path):
    """An augmentation column is the same as a weighted reward function: same advantages, own logged column."""
    ours = build_trainer(DigitBonus, EntropyGRPOConfig, tmp_path / "ours", reward_funcs=[toy_reward])
    trl_trainer = build_trainer(
        GRPOTrainer, GRPOConfig, tmp_path / "trl", reward_funcs=[toy_reward, digit_reward], reward_weights=[1.0, 0.5]
    )
    set_seed(1)
    inputs_ours = next_inputs(ours)
    set_seed(1)
    inputs_trl = next_inputs(trl_trainer)
    torch.testing.assert_close(inputs_ours["completion_ids"], inputs_trl["completion_ids"])
    torch.testing.assert_close(inputs_ours["advantages"], inputs_trl["advantages"], rtol=1e-6, atol=1e-6)
    assert inputs_ours["advantages"].abs().sum() > 0
    assert ours._metrics["train"]["rewards/digits/mean"] == pytest.approx(
        trl_trainer._metrics["train"]["rewards/digit_reward/mean"]
    )
    rollouts = DigitBonus.seen
    assert len(rollouts.completions) == 16 and rollouts.num_generations == 4
    assert rollouts.column("domain") == ["target"] * 16
    assert rollouts.entropies is None  # not asked for
    with pytest.raises(KeyError, match="no column 'nope'"):
        rollouts.column("nope")


class EntropyProbe(DigitBonus):
    @property
    def needs_rollout_entropies(self):
        return True


def reference_rollout_entropies(trainer, inputs):
    """Full-vocabulary entropies of the completions under `trainer.model`, from plain logits (float64)."""
    return reference_stats(trainer, inputs)[1] * inputs["completion_mask"]


def generate_counting_forwards(trainer):
    calls, handle = count_forwards(trainer.model)
    set_seed(1)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    inputs = trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))
    handle.remove()
    return inputs, len(calls)


@pytest.mark.parametrize("num_iterations,source", [(1, "auto"), (1, "forward"), (2, "auto")])
def test_rollout_entropies_are_exact(tmp_path, num_iterations, source):
    """num_iterations=2 makes TRL run its old-log-prob pass, whose forward the entropies then come from; on-policy,
    `auto` reads them off the generation's own logits and `forward` runs one no-grad forward."""
    ours = build_trainer(
        EntropyProbe, EntropyGRPOConfig, tmp_path / "ours", num_iterations=num_iterations, rollout_entropy_source=source
    )
    assert ours.trl_computes_old_logps() == (num_iterations == 2)
    inputs, forwards = generate_counting_forwards(ours)

    rollouts = EntropyProbe.seen
    expected = reference_rollout_entropies(ours, inputs)
    got = rollouts.entropies[:, : expected.size(1)]
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(rollouts.entropy_mask[:, : expected.size(1)], inputs["completion_mask"])
    assert ours._metrics["train"]["rollout/entropy"][0] == pytest.approx(
        (expected.sum() / inputs["completion_mask"].sum()).item(), rel=1e-5
    )
    # Cost: one extra no-grad forward per generation batch with `forward`, none otherwise.
    without = build_trainer(DigitBonus, EntropyGRPOConfig, tmp_path / "plain", num_iterations=num_iterations)
    inputs_plain, forwards_plain = generate_counting_forwards(without)
    assert torch.equal(inputs_plain["completion_ids"], inputs["completion_ids"])
    assert forwards - forwards_plain == (1 if (num_iterations, source) == (1, "forward") else 0)


def test_rollout_entropy_alone_is_logged(tmp_path):
    trainer = build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, tmp_path, rollout_entropy=True)
    inputs, _ = generate_counting_forwards(trainer)
    expected = reference_rollout_entropies(trainer, inputs)
    assert trainer._metrics["train"]["rollout/entropy"][0] == pytest.approx(
        (expected.sum() / inputs["completion_mask"].sum()).item(), rel=1e-5
    )


# ---------------------------------------------------------------------------------------------------------------
# Lever 4: data mixing
# ---------------------------------------------------------------------------------------------------------------
class MixGeneral(EntropyGRPOTrainer):
    def mix_datasets(self, train_dataset, args):
        return concatenate_datasets([train_dataset, tiny_dataset(8, family="compare")]).shuffle(seed=args.seed)


def test_mix_datasets(tmp_path):
    trainer = build_trainer(MixGeneral, EntropyGRPOConfig, tmp_path)
    assert len(trainer.train_dataset) == 40
    assert sorted(set(trainer.train_dataset["domain"])) == ["general", "target"]


# ---------------------------------------------------------------------------------------------------------------
# Method state survives checkpoint and resume
# ---------------------------------------------------------------------------------------------------------------
class CountingTrainer(EntropyGRPOTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.updates = 0

    def extra_loss(self, batch):
        if batch.mode == "train":
            self.updates += 1
        return None

    def method_state(self):
        return {"updates": self.updates}

    def load_method_state(self, state):
        self.updates = state["updates"]


@pytest.mark.slow  # ~7 s; AER's, PosAdv's and the sampler's resume tests cover method state in the default suite
def test_method_state_checkpoint_and_resume(tmp_path):
    out = tmp_path / "run"
    trainer = build_trainer(CountingTrainer, EntropyGRPOConfig, out, max_steps=2, save_strategy="steps", save_steps=1)
    trainer.train()
    with open(os.path.join(out, "checkpoint-1", "healtrl_state.json")) as f:
        assert json.load(f) == {"updates": 1}
    resumed = build_trainer(CountingTrainer, EntropyGRPOConfig, out, max_steps=2, save_strategy="no")
    resumed.train(resume_from_checkpoint=os.path.join(out, "checkpoint-1"))
    assert resumed.updates == 2  # 1 restored + 1 step after resuming

    os.remove(os.path.join(out, "checkpoint-1", "healtrl_state.json"))
    again = build_trainer(CountingTrainer, EntropyGRPOConfig, out, max_steps=2, save_strategy="no")
    with pytest.raises(FileNotFoundError, match="healtrl_state.json"):
        again.train(resume_from_checkpoint=os.path.join(out, "checkpoint-1"))


# ---------------------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------------------
def test_wrong_config_class(tmp_path):
    # A plain GRPOConfig is converted (tests/test_trl_compat.py); a config TRL's does not derive from is refused.
    with pytest.warns(UserWarning, match=r"converted it to healtrl\.EntropyGRPOConfig"):
        trainer = build_trainer(EntropyGRPOTrainer, GRPOConfig, tmp_path)
    assert type(trainer.args) is EntropyGRPOConfig
    with pytest.raises(TypeError, match="needs args of type EntropyGRPOConfig"):
        EntropyGRPOTrainer(model=tiny_model(), reward_funcs=[digit_reward], args=object(), train_dataset=tiny_dataset())


@pytest.mark.parametrize(
    "field, value, extra",
    [
        ("report_to", "wandb", "healtrl[wandb]"),
        ("use_vllm", True, "healtrl[vllm]"),
        ("use_liger_kernel", True, "healtrl[liger]"),
    ],
)
def test_missing_extra_names_the_extra(tmp_path, monkeypatch, field, value, extra):
    import importlib.util

    module = {"healtrl[wandb]": "wandb", "healtrl[vllm]": "vllm", "healtrl[liger]": "liger_kernel"}[extra]
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == module else real_find_spec(name, *a)
    )
    assert not is_available(extra.split("[")[1].rstrip("]"))
    # Checked by the trainer, after TRL's own checks (tests/test_trl_compat.py checks the order).
    with pytest.raises(MissingExtraError, match="pip install " + re.escape(extra)):
        build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, tmp_path, **{field: value})


def test_augmentation_name_clash(tmp_path):
    def digits(completions, **kwargs):
        return [0.0] * len(completions)

    with pytest.raises(ValueError, match="already named 'digits'"):
        build_trainer(DigitBonus, EntropyGRPOConfig, tmp_path, reward_funcs=[digits])


def test_unsupported_trl_version(monkeypatch):
    import trl

    monkeypatch.setattr(trl, "__version__", "1.17.0")
    with pytest.raises(UnsupportedVersionError, match=r"supports TRL >=1.16,<1.17, found trl==1.17.0"):
        check_trl_version()
    monkeypatch.setattr(trl, "__version__", "1.16.2")
    assert check_trl_version() == "1.16.2"


def test_dataset_smaller_than_one_generation_batch_is_refused(tmp_path):
    """TRL draws whole batches of distinct prompts and would train 0 steps on 3 rows with 4 prompts per batch."""
    with pytest.raises(ValueError, match=r"train_dataset has 3 rows, fewer than the 4 distinct prompts") as info:
        build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, tmp_path, train_dataset=tiny_dataset(3))
    assert "num_generations" not in str(info.value).split("TRL would train 0 steps.")[1]  # 16 % 3: no such value
    with pytest.raises(ValueError, match=r"2 rows, fewer than the 4 .* set num_generations to 8 so that every batch"):
        build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, tmp_path, train_dataset=tiny_dataset(2))
    # exactly one batch of distinct prompts is enough
    trainer = build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, tmp_path, train_dataset=tiny_dataset(4))
    trainer.train()
    assert trainer.state.global_step == 2
