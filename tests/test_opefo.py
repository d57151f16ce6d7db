"""OPEFO (arXiv:2605.11491, §5): pure functions by hand, the trainer against hand computations and TRL, and across 2
ranks.

Run as a script (`torchrun --nproc_per_node 2 tests/test_opefo.py OUT`) it is the worker of the 2-process test.
"""

from __future__ import annotations

import json
import math
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from healtrl import OPEFOConfig, OPEFOTrainer  # noqa: E402
from healtrl.functional import (  # noqa: E402
    opefo_flow_sums,
    opefo_lambda,
    opefo_lambda_from_sums,
    opefo_token_weights,
    token_entropy_change,
)
from tests.helpers import (  # noqa: E402
    build_trainer,
    grpo_kwargs,
    loss_and_grads,
    next_inputs,
    reference_stats,
    run_two_processes,
    shut_down_process_group,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------------------------------------------
# Pure functions, by hand
# ---------------------------------------------------------------------------------------------------------------
DELTA_H = torch.tensor([[0.3, -0.5, 0.2], [-0.1, 0.0, 0.7]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])  # the 0.7 is padding


def test_flow_sums_and_lambda_by_hand():
    pos, neg = opefo_flow_sums(DELTA_H, MASK)
    assert pos.item() == pytest.approx(0.5) and neg.item() == pytest.approx(0.6)
    # eq. 9: (0.6 - 0.5) / (0.6 + 0.5)
    assert opefo_lambda(DELTA_H, MASK).item() == pytest.approx(0.1 / 1.1)
    assert opefo_lambda_from_sums(torch.tensor(0.5), torch.tensor(0.6)).item() == pytest.approx(0.1 / 1.1)
    # Zero net flow after reweighting (eq. 8): (1 + l) * 0.5 - (1 - l) * 0.6 = 0.
    lam = opefo_lambda(DELTA_H, MASK)
    assert ((1 + lam) * 0.5 - (1 - lam) * 0.6).abs().item() < 1e-7


def test_lambda_edge_cases():
    assert opefo_lambda(torch.zeros(2, 3), torch.ones(2, 3)).item() == 0.0  # guarded denominator
    assert opefo_lambda(DELTA_H, torch.zeros(2, 3)).item() == 0.0
    only_neg = torch.tensor([[-0.2, -0.1]])
    assert opefo_lambda(only_neg, torch.ones(1, 2)).item() == pytest.approx(1.0)
    assert opefo_lambda(-only_neg, torch.ones(1, 2)).item() == pytest.approx(-1.0)
    assert opefo_lambda(torch.tensor([[1e-30, -3e-30]]), torch.ones(1, 2), eps=1e-12).abs().item() < 1e-17


def test_token_weights_by_hand():
    lam = 0.25
    both = opefo_token_weights(DELTA_H, MASK, lam)
    torch.testing.assert_close(both, torch.tensor([[1.25, 0.75, 1.25], [0.75, 1.0, 1.0]]))
    pos = opefo_token_weights(DELTA_H, MASK, lam, sides="pos")
    torch.testing.assert_close(pos, torch.tensor([[1.25, 1.0, 1.25], [1.0, 1.0, 1.0]]))
    neg = opefo_token_weights(DELTA_H, MASK, lam, sides="neg")
    torch.testing.assert_close(neg, torch.tensor([[1.0, 0.75, 1.0], [0.75, 1.0, 1.0]]))
    with pytest.raises(ValueError, match="sides"):
        opefo_token_weights(DELTA_H, MASK, lam, sides="up")


# ---------------------------------------------------------------------------------------------------------------
# Config: strict on-policy
# ---------------------------------------------------------------------------------------------------------------
def test_config_accepts_on_policy(tmp_path):
    cfg = OPEFOConfig(**grpo_kwargs(tmp_path))
    assert cfg.steps_per_generation == cfg.gradient_accumulation_steps == 1
    assert (cfg.entropy_change_estimator, cfg.lambda_mode, cfg.static_lambda, cfg.balance_sides) == (
        "opefo",
        "adaptive",
        0.001,
        "both",
    )
    cfg = OPEFOConfig(**grpo_kwargs(tmp_path, gradient_accumulation_steps=2, per_device_train_batch_size=8))
    assert cfg.steps_per_generation == 2


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"num_iterations": 2}, "num_iterations"),
        ({"steps_per_generation": 2}, "steps_per_generation"),
        ({"generation_batch_size": 32}, "steps_per_generation"),
        ({"gradient_accumulation_steps": 2, "steps_per_generation": 1}, "steps_per_generation"),
        ({"entropy_change_estimator": "magic"}, "entropy_change_estimator"),
        ({"balance_sides": "left"}, "balance_sides"),
        ({"lambda_mode": "auto"}, "lambda_mode"),
        ({"static_lambda": 2.0}, "static_lambda"),
    ],
)
def test_config_rejects_off_policy_and_bad_values(tmp_path, overrides, field):
    with pytest.raises(ValueError, match=field):
        OPEFOConfig(**grpo_kwargs(tmp_path, **overrides))


def test_registered_and_yaml_configs_parse():
    from healtrl.cli.config import resolve
    from healtrl.trainers import TRAINERS

    assert TRAINERS["opefo"] == (OPEFOTrainer, OPEFOConfig)
    toy = resolve(["--config", os.path.join(ROOT, "configs/opefo_toy.yaml")])
    assert toy.trainer_name == "opefo" and isinstance(toy.trainer_args, OPEFOConfig)
    paper = resolve(
        ["--config", os.path.join(ROOT, "configs/opefo_qwen25_math_7b.yaml"), "--bf16", "false", "--use_vllm", "false"]
    )
    args = paper.trainer_args
    assert (args.learning_rate, args.warmup_steps, args.max_completion_length) == (2.83e-6, 10, 3000)
    # Prompt batch 32: 8 per device x 8 GPUs x 4 accumulation steps / 8 generations.
    assert args.per_device_train_batch_size * 8 * args.gradient_accumulation_steps // args.num_generations == 32


# ---------------------------------------------------------------------------------------------------------------
# Trainer
# ---------------------------------------------------------------------------------------------------------------
class Recording(OPEFOTrainer):
    seen: list = []

    def shape_advantages(self, advantages, batch):
        shaped = super().shape_advantages(advantages, batch)
        type(self).seen.append((batch, shaped))
        return shaped


def hand_lambda_and_weights(trainer, inputs, estimator="opefo", sides="both", static=None):
    """lambda* (eq. 9) and the eq. 7 weights over `inputs`, written out with plain tensor ops in float64."""
    logp, ent, s2, s2l = reference_stats(trainer, inputs)
    adv = inputs["advantages"].double().unsqueeze(1)
    p = logp.exp()
    if estimator == "opefo":
        dh = -adv * (1 - p) ** 2 * (logp + ent)  # OPEFO eq. 6
    else:  # exact
        dh = -adv * (p * (logp + ent) - (s2l + ent * s2))
    mask = inputs["completion_mask"].bool()
    pos = dh[mask & (dh > 0)].sum()
    neg = -dh[mask & (dh < 0)].sum()
    lam = (neg - pos) / (neg + pos) if static is None else torch.tensor(static, dtype=torch.float64)
    w = torch.ones_like(dh)
    if sides in ("both", "pos"):
        w[mask & (dh > 0)] = 1 + lam
    if sides in ("both", "neg"):
        w[mask & (dh < 0)] = 1 - lam
    return lam.item(), w, dh, mask


@pytest.mark.parametrize(
    "cfg",
    [
        {},
        {"entropy_change_estimator": "exact"},
        {"balance_sides": "pos"},
        {"balance_sides": "neg"},
        {"lambda_mode": "static"},
    ],
)
def test_shaped_advantages_and_metrics_match_hand_computation(tmp_path, cfg):
    Recording.seen = []
    trainer = build_trainer(Recording, OPEFOConfig, tmp_path, **cfg)
    inputs = next_inputs(trainer)
    loss_and_grads(trainer, inputs)
    ((batch, shaped),) = Recording.seen
    lam, w, dh, mask = hand_lambda_and_weights(
        trainer,
        inputs,
        estimator=cfg.get("entropy_change_estimator", "opefo"),
        sides=cfg.get("balance_sides", "both"),
        static=0.001 if cfg.get("lambda_mode") == "static" else None,
    )
    assert abs(lam) >= 1e-3  # a non-trivial case
    metrics = trainer._metrics["train"]
    assert metrics["opefo/lambda"][0] == pytest.approx(lam, rel=1e-4, abs=1e-6)
    expected = inputs["advantages"].double().unsqueeze(1) * w
    torch.testing.assert_close(shaped.double()[mask], expected[mask], rtol=1e-4, atol=1e-6)
    lr = trainer.args.learning_rate
    assert metrics["opefo/flow_pos"][0] == pytest.approx(lr * dh[mask & (dh > 0)].sum().item(), rel=1e-4)
    assert metrics["opefo/flow_neg"][0] == pytest.approx(lr * dh[mask & (dh < 0)].sum().item(), rel=1e-4)
    assert metrics["opefo/net_flow"][0] == pytest.approx(lr * dh[mask].sum().item(), rel=1e-4, abs=1e-9)
    share = (mask & (dh > 0)).sum().item() / mask.sum().item()
    assert metrics["opefo/pos_share"][0] == pytest.approx(share)


def test_gradients_equal_trl_with_shaped_advantages_and_clipping_is_inert(tmp_path):
    """On-policy the ratio is exactly 1: OPEFO's loss is TRL's with (1 +- lambda) A per token, clipped or not."""
    from trl import GRPOConfig, GRPOTrainer

    Recording.seen = []
    ours = build_trainer(Recording, OPEFOConfig, tmp_path / "ours")
    inputs = next_inputs(ours)
    loss, grads = loss_and_grads(ours, inputs)
    ((_, shaped),) = Recording.seen

    unclipped = build_trainer(Recording, OPEFOConfig, tmp_path / "wide", epsilon=1e6, epsilon_high=1e6)
    loss_u, grads_u = loss_and_grads(unclipped, inputs)
    torch.testing.assert_close(loss, loss_u)
    for name, grad in grads.items():
        torch.testing.assert_close(grads_u[name], grad, msg=name)

    trl_trainer = build_trainer(GRPOTrainer, GRPOConfig, tmp_path / "trl")
    loss_trl, grads_trl = loss_and_grads(trl_trainer, dict(inputs, advantages=shaped.detach()))
    torch.testing.assert_close(loss, loss_trl, rtol=1e-6, atol=1e-7)
    for name, grad in grads_trl.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-5, atol=1e-7, msg=name)

    # And it is REINFORCE with those weights: d/dtheta of -sum(w A log p) / num_items (TRL's "dapo" normalisation).
    ours.model.zero_grad(set_to_none=True)
    logp, _, _ = ours._get_per_token_logps_and_entropies(
        ours.model,
        torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
        torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1),
        inputs["completion_ids"].size(1),
    )
    surrogate = -(shaped.detach() * logp * inputs["completion_mask"]).sum() / inputs["num_items_in_batch"]
    surrogate.backward()
    for name, p in ours.model.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(p.grad, grads[name], rtol=1e-4, atol=1e-7, msg=name)


@pytest.mark.parametrize("estimator", ["opefo", "exact"])
def test_whole_update_batch_lambda_with_gradient_accumulation(tmp_path, estimator):
    """GA = 2: lambda* is computed over both micro-batches at generation time (from the generation logits, no extra
    forward), equal to the hand value over the batch."""
    Recording.seen = []
    trainer = build_trainer(
        Recording,
        OPEFOConfig,
        tmp_path,
        gradient_accumulation_steps=2,
        per_device_train_batch_size=8,
        entropy_change_estimator=estimator,
    )
    trainer.model.train()
    torch.manual_seed(1)
    full = trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))
    assert full["completion_ids"].size(0) == 16
    lam, w, dh, mask = hand_lambda_and_weights(trainer, full, estimator=estimator)
    assert full["opefo_lambda"].item() == pytest.approx(lam, rel=1e-4)
    # From the generation logits (KV cache) vs a float64 forward: float32 rounding of log p and H, amplified where
    # log p + H cancels, so the tolerance is relative to the batch's largest |Delta H|.
    atol = 1e-5 * dh[mask].abs().max().item()
    torch.testing.assert_close(full["opefo_delta_h"].double()[mask], dh[mask], rtol=1e-4, atol=atol)

    # Each micro-batch uses that lambda*; the step logs it once.
    trainer.current_gradient_accumulation_steps = 2
    halves = [
        {k: (v[i * 8 : (i + 1) * 8] if torch.is_tensor(v) and v.dim() else v) for k, v in full.items()} for i in (0, 1)
    ]
    for half, wh in zip(halves, (w[:8], w[8:])):
        trainer.accelerator.gradient_state._set_sync_gradients(half is halves[1])
        loss_and_grads(trainer, half)
        shaped = Recording.seen[-1][1]
        m = half["completion_mask"].bool()
        torch.testing.assert_close(
            shaped.double()[m], (half["advantages"].double().unsqueeze(1) * wh)[m], rtol=1e-4, atol=1e-6
        )
    trainer.accelerator.gradient_state._set_sync_gradients(True)
    assert trainer._metrics["train"]["opefo/lambda"] == [pytest.approx(lam, rel=1e-4)]
    assert trainer._metrics["train"]["opefo/pos_share"][0] == pytest.approx(
        (mask & (dh > 0)).sum().item() / mask.sum().item()
    )


@pytest.mark.slow  # ~5 s; test_opefo_rollout_stats.py checks the same per estimator in the default suite
def test_training_runs_same_lambda_with_and_without_accumulation(tmp_path):
    """Same generation batch (16 completions) as one micro-batch or two: the same lambda* every step."""
    histories = []
    for ga in (1, 2):
        trainer = build_trainer(
            OPEFOTrainer,
            OPEFOConfig,
            tmp_path / f"ga{ga}",
            gradient_accumulation_steps=ga,
            per_device_train_batch_size=16 // ga,
            max_steps=2,
        )
        trainer.train()
        histories.append([h["opefo/lambda"] for h in trainer.state.log_history if "opefo/lambda" in h])
    assert len(histories[0]) == 2
    assert histories[0] == pytest.approx(histories[1], rel=1e-4)
    assert trainer.method_state() == {}  # stateless: nothing to checkpoint beyond TRL's state


def test_wrong_config_class(tmp_path):
    from healtrl import AERConfig

    # A base config (EntropyGRPOConfig, GRPOConfig) is converted (tests/test_trl_compat.py); another method's is not.
    with pytest.raises(TypeError, match="OPEFOConfig"):
        build_trainer(OPEFOTrainer, AERConfig, tmp_path)


def test_matches_token_entropy_change_default():
    """The trainer's default estimator is the library's eq. 6 (sanity of the shared function on one token)."""
    dh = token_entropy_change(torch.tensor([math.log(0.5)]), torch.tensor([0.6]), torch.tensor([2.0]))
    assert dh.item() == pytest.approx(-2.0 * 0.25 * (math.log(0.5) + 0.6))


# ---------------------------------------------------------------------------------------------------------------
# Two processes: lambda* identical on both ranks and equal to the hand value over both ranks' tokens
# ---------------------------------------------------------------------------------------------------------------
class LocalSums(OPEFOTrainer):
    """Records this rank's own S+ / S- sums per optimizer step (before any reduction)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.local = []
        self._open = None

    def shape_advantages(self, advantages, batch):
        dh = batch.inputs.get("opefo_delta_h")
        if dh is None:
            dh = token_entropy_change(batch.per_token_logps, batch.entropies, advantages)
        pos, neg = opefo_flow_sums(dh, batch.mask)
        self._open = (
            [pos.item(), neg.item()] if self._open is None else [self._open[0] + pos.item(), self._open[1] + neg.item()]
        )
        if self.accelerator.sync_gradients:
            self.local.append(self._open)
            self._open = None
        return super().shape_advantages(advantages, batch)


def _worker(output_dir: str) -> None:
    import hashlib

    torch.set_num_threads(1)
    report = {}
    for ga in (1, 2):
        trainer = build_trainer(
            LocalSums,
            OPEFOConfig,
            os.path.join(output_dir, f"ga{ga}"),
            per_device_train_batch_size=8 // ga,
            gradient_accumulation_steps=ga,
            max_steps=2,
            ddp_backend="gloo",
        )
        trainer.train()
        digest = hashlib.sha256()
        for name, param in sorted(trainer.model.named_parameters()):
            digest.update(name.encode() + param.detach().numpy().tobytes())
        report[ga] = {
            "lambda": [h["opefo/lambda"] for h in trainer.state.log_history if "opefo/lambda" in h],
            "local": trainer.local,
            "sha": digest.hexdigest(),
        }
    rank = trainer.accelerator.process_index
    with open(os.path.join(output_dir, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)


@pytest.mark.slow  # a two-process launch (~25 s); test_distributed.py keeps one in the default suite
def test_two_process_lambda_identical_and_global(tmp_path):
    reports = run_two_processes(__file__, tmp_path)
    for ga in ("1", "2"):
        r0, r1 = reports[0][ga], reports[1][ga]
        assert len(r0["lambda"]) == 2 and r0["lambda"] == r1["lambda"]  # identical on every rank
        assert r0["sha"] == r1["sha"]
        assert r0["local"] != r1["local"]  # the ranks saw different tokens ...
        for step, lam in enumerate(r0["lambda"]):  # ... and lambda* is eq. 9 over both ranks' tokens
            pos = r0["local"][step][0] + r1["local"][step][0]
            neg = r0["local"][step][1] + r1["local"][step][1]
            assert lam == pytest.approx((neg - pos) / (neg + pos), rel=1e-4)
    assert reports[0]["1"]["lambda"] == pytest.approx(reports[0]["2"]["lambda"], rel=1e-4)


if __name__ == "__main__":
    _worker(sys.argv[1])
    shut_down_process_group()
