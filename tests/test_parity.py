"""Parity with TRL: with every lever off, EntropyGRPOTrainer is TRL's GRPOTrainer.

Keep this file forever: it is what lets the method trainers claim that any difference from GRPO comes from the method.
"""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig
from transformers import set_seed
from trl import GRPOConfig, GRPOTrainer

from healtrl import EntropyGRPOConfig, EntropyGRPOTrainer
from healtrl.toy.tasks import toy_reward
from healtrl.toy.tokenizer import build_tokenizer
from tests.helpers import (
    assert_close_rel,
    assert_histories_equal,
    assert_params_equal,
    build_trainer,
    digit_reward,
    grpo_kwargs,
    loss_and_grads,
    next_inputs,
    tiny_dataset,
    tiny_model,
)

# Loss variants and the TRL options that change the loss or the data flow (old log-probs, reference model, entropy
# mask and bonus, gradient accumulation).
CASES = {
    "grpo": dict(loss_type="grpo"),
    "dapo-accum": dict(loss_type="dapo", gradient_accumulation_steps=2, per_device_train_batch_size=8),
    "bnpo-iters-kl": dict(loss_type="bnpo", num_iterations=2, beta=0.04),
    "drgrpo-entropy": dict(loss_type="dr_grpo", entropy_coef=0.01, top_entropy_quantile=0.5, epsilon_high=0.28),
    "adaptive-entropy": dict(use_adaptive_entropy=True, entropy_target=10.0, entropy_coef=0.0),
}


@pytest.mark.parametrize("kernel", ["healtrl", "trl"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_same_batch_same_loss_grads_metrics(case, kernel, tmp_path):
    """With TRL's LM-head kernel the numbers are TRL's; with healtrl's, equal to float32 rounding."""
    cfg = CASES[case]
    rel = 1e-5 if kernel == "healtrl" else 1e-6
    trl_trainer = build_trainer(GRPOTrainer, GRPOConfig, tmp_path / "trl", **cfg)
    ours = build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, tmp_path / "ours", logprob_kernel=kernel, **cfg)
    assert_params_equal(trl_trainer.model, ours.model, atol=0)

    set_seed(1)
    inputs = next_inputs(trl_trainer)
    ours.model.train()
    trl_trainer._metrics["train"].clear()  # drop the generation metrics: compare what the loss logs
    loss_trl, grads_trl = loss_and_grads(trl_trainer, inputs)
    loss_ours, grads_ours = loss_and_grads(ours, inputs)

    torch.testing.assert_close(loss_ours, loss_trl, rtol=rel, atol=1e-7)
    assert grads_trl and set(grads_trl) == set(grads_ours)
    assert any(g.abs().sum() > 0 for g in grads_trl.values())  # the batch carries a learning signal
    for name, grad in grads_trl.items():
        assert_close_rel(grads_ours[name], grad, rel=rel, msg=name)
    metrics_trl, metrics_ours = dict(trl_trainer._metrics["train"]), dict(ours._metrics["train"])
    metrics_trl.pop("step_time", None), metrics_ours.pop("step_time", None)
    assert set(metrics_trl) == set(metrics_ours)
    for key, values in metrics_trl.items():
        assert metrics_ours[key] == pytest.approx(values, rel=rel, abs=1e-6), key
    # The buffered batch is untouched by the lever plumbing.
    assert inputs["advantages"].dim() == 1


@pytest.mark.parametrize("kernel", ["healtrl", "trl"])
@pytest.mark.parametrize("case", ["grpo", "bnpo-iters-kl", "drgrpo-entropy"])
def test_training_run_matches_trl(case, kernel, tmp_path):
    """Same seed, same data: identical logged metrics at every step and identical final weights.

    With healtrl's kernel the gradients differ from TRL's by float32 rounding. Adam turns a rounding difference on a
    near-zero gradient into a full-size update, so that comparison trains with SGD, whose update is linear in the
    gradient; Adam is covered with TRL's kernel, where the numbers are TRL's own.
    """
    cfg = dict(CASES[case], max_steps=3)
    if kernel == "healtrl":
        cfg.update(optim="sgd", learning_rate=0.5)
    trl_trainer = build_trainer(GRPOTrainer, GRPOConfig, tmp_path / "trl", **cfg)
    set_seed(0)
    trl_trainer.train()
    ours = build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, tmp_path / "ours", logprob_kernel=kernel, **cfg)
    set_seed(0)
    ours.train()
    rel = 1e-5 if kernel == "healtrl" else 1e-6
    # The divergence guard (on by default) only adds its own metrics, and so does the entropy view of step 0
    # (`inspect_every_steps`, on by default: rollout entropies and their statistics); everything else is TRL's.
    guard = [{k: v for k, v in e.items() if k.startswith("divergence/")} for e in ours.state.log_history]
    assert all(set(g) == {"divergence/nonfinite", "divergence/entropy_fraction"} for g in guard[:-1])
    added = ("divergence/", "entropy/", "rollout/entropy")
    views = [sorted(k for k in e if k.startswith(added[1:])) for e in ours.state.log_history]
    assert views[0] == ["entropy/high_share", "entropy/mean", "entropy/q10", "entropy/q50", "entropy/q90"]
    assert not any(views[1:])  # the next view is at step 50
    ours_history = [{k: v for k, v in e.items() if not k.startswith(added)} for e in ours.state.log_history]
    assert_histories_equal(trl_trainer.state.log_history, ours_history, rel=rel, abs_=1e-6)
    assert "entropy" in ours.state.log_history[0] and "reward" in ours.state.log_history[0]
    for (name, param), trl_param in zip(ours.model.named_parameters(), trl_trainer.model.parameters()):
        assert_close_rel(param.detach(), trl_param.detach(), rel=rel, msg=name)
    # Training moved the weights (a parity test of two frozen models would prove nothing).
    start = tiny_model()
    moved = [not torch.equal(p, dict(start.named_parameters())[n]) for n, p in ours.model.named_parameters()]
    assert any(moved)


def test_peft_lora_matches_trl(tmp_path):
    """LoRA through `peft_config`, as in TRL: only adapter weights train, and the run matches TRL's."""

    def run(trainer_cls, config_cls, out):
        set_seed(0)
        trainer = trainer_cls(
            model=tiny_model(),
            reward_funcs=[toy_reward, digit_reward],
            args=config_cls(**grpo_kwargs(out, learning_rate=5e-2)),
            train_dataset=tiny_dataset(),
            processing_class=build_tokenizer(),
            peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
        )
        set_seed(0)
        trainer.train()
        return trainer

    trl_trainer = run(GRPOTrainer, GRPOConfig, tmp_path / "trl")
    ours = run(EntropyGRPOTrainer, EntropyGRPOConfig, tmp_path / "ours")
    added = ("divergence/", "entropy/", "rollout/entropy")  # the guard's and the step-0 entropy view's metrics
    ours_history = [{k: v for k, v in e.items() if not k.startswith(added)} for e in ours.state.log_history]
    assert_histories_equal(trl_trainer.state.log_history, ours_history, rel=1e-5, abs_=1e-6)  # added metrics aside
    assert_params_equal(trl_trainer.model, ours.model)

    trainable = {n for n, p in ours.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    base = dict(tiny_model().named_parameters())
    for name, param in ours.model.named_parameters():
        key = name.replace("base_model.model.", "").replace(".base_layer", "")
        if "lora_" in name:
            continue
        torch.testing.assert_close(param.detach(), base[key].detach(), rtol=0, atol=0, msg=name)
    lora_b = [p for n, p in ours.model.named_parameters() if "lora_B" in n]
    assert any(p.abs().sum() > 0 for p in lora_b)  # lora_B starts at zero: non-zero means the adapter trained
