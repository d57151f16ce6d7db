"""The `grpo` trainer's entropy baselines (Clip-Cov, KL-Cov, Entropy-Adv): pure functions against hand-computed cases,
parity with EntropyGRPOTrainer for `entropy_method: none`, the shaped losses against TRL, and invalid settings."""

from __future__ import annotations

import warnings

import pytest
import torch
from transformers import set_seed
from trl import GRPOConfig, GRPOTrainer

from healtrl import TRAINERS, EntropyGRPOConfig, EntropyGRPOTrainer, GRPOBaselineConfig, GRPOBaselineTrainer
from healtrl.functional import clip_cov_select, entropy_advantage, kl_cov_select, token_covariance
from tests.helpers import assert_close_rel, build_trainer, loss_and_grads, next_inputs


# ---------------------------------------------------------------------------------------------------------------
# Pure functions
# ---------------------------------------------------------------------------------------------------------------
def test_token_covariance_hand_computed():
    logp = torch.tensor([[-1.0, -3.0, -9.0]])
    adv = torch.tensor([2.0])  # broadcast over the row
    mask = torch.tensor([[1, 1, 0]])
    # valid tokens: A = [2, 2] (mean 2), logp = [-1, -3] (mean -2): cov = 0 * ... = 0
    torch.testing.assert_close(token_covariance(logp, adv, mask), torch.zeros(1, 3))
    adv = torch.tensor([[1.0, 3.0, 100.0]])
    # mean A = 2, mean logp = -2 over valid tokens: cov = [(-1)(1), (1)(-1), 0] = [-1, -1, 0]
    torch.testing.assert_close(token_covariance(logp, adv, mask), torch.tensor([[-1.0, -1.0, 0.0]]))


def test_entropy_advantage_hand_computed():
    adv = torch.tensor([[1.0, -1.0, 0.0, 2.0]])
    ent = torch.tensor([[1.0, 1.0, 1.0, 0.5]], requires_grad=True)
    out = entropy_advantage(adv, ent, alpha=0.4, kappa=2.0)
    # min(0.4 H, |A| / 2): [min(.4, .5), min(.4, .5), min(.4, 0), min(.2, 1)] = [.4, .4, 0, .2]
    torch.testing.assert_close(out, torch.tensor([[1.4, -0.6, 0.0, 2.2]]))
    assert not out.requires_grad  # H is detached


def test_cov_selections_hand_computed():
    cov = torch.tensor([[0.5, 2.0, 4.0], [6.0, 1.5, 3.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    # KL-Cov: top int(0.4 * 5) = 2 valid tokens by cov: 6.0 and 4.0 (3.0 is masked out).
    assert kl_cov_select(cov, mask, 0.4).nonzero().tolist() == [[0, 2], [1, 0]]
    # k = max(1, int(0.5)) = 1 by default (the reference code's count); the literal floor int(0.5) = 0 as an option.
    assert kl_cov_select(cov, mask, 0.1).nonzero().tolist() == [[1, 0]]
    assert kl_cov_select(cov, mask, 0.1, rounding="floor").sum() == 0
    # Clip-Cov: candidates 1 < cov < 5 and valid: (0,1), (0,2), (1,1); k = max(1, int(0.2 * 5)) = 1.
    sel = clip_cov_select(cov, mask, 0.2, 1.0, 5.0, generator=torch.Generator().manual_seed(0))
    assert sel.sum() == 1 and sel[mask.bool() & (cov > 1) & (cov < 5)].sum() == 1
    sel = clip_cov_select(cov, mask, 1.0, 1.0, 5.0)
    assert sel.nonzero().tolist() == [[0, 1], [0, 2], [1, 1]]  # k capped by the candidates
    exclude = torch.zeros_like(mask, dtype=torch.bool)
    exclude[0, 1] = True
    assert clip_cov_select(cov, mask, 1.0, 1.0, 5.0, exclude=exclude).nonzero().tolist() == [[0, 2], [1, 1]]


# ---------------------------------------------------------------------------------------------------------------
# The `grpo` trainer
# ---------------------------------------------------------------------------------------------------------------
def test_registered_as_grpo():
    assert TRAINERS["grpo"] == (GRPOBaselineTrainer, GRPOBaselineConfig)
    assert issubclass(GRPOBaselineConfig, EntropyGRPOConfig)


@pytest.mark.parametrize(
    "cfg",
    [dict(loss_type="grpo"), dict(loss_type="dapo", gradient_accumulation_steps=2, per_device_train_batch_size=8)],
)
def test_method_none_is_entropy_grpo(tmp_path, cfg):
    """Parity: entropy_method none gives EntropyGRPOTrainer's loss, gradients and metrics exactly."""
    ours = build_trainer(GRPOBaselineTrainer, GRPOBaselineConfig, tmp_path / "ours", **cfg)
    base = build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, tmp_path / "base", **cfg)
    set_seed(1)
    inputs = next_inputs(base)
    base._metrics["train"].clear()
    loss_b, grads_b = loss_and_grads(base, inputs)
    loss_o, grads_o = loss_and_grads(ours, inputs)
    assert torch.equal(loss_o, loss_b)
    for name, grad in grads_b.items():
        assert torch.equal(grads_o[name], grad), name
    mb, mo = dict(base._metrics["train"]), dict(ours._metrics["train"])
    mb.pop("step_time", None), mo.pop("step_time", None)
    assert mb == mo


def test_entropy_adv_equals_trl_with_shaped_advantages(tmp_path):
    ours = build_trainer(
        GRPOBaselineTrainer, GRPOBaselineConfig, tmp_path / "ours", entropy_method="entropy_adv", logprob_kernel="trl"
    )
    trl_trainer = build_trainer(GRPOTrainer, GRPOConfig, tmp_path / "trl")
    set_seed(1)
    inputs = next_inputs(ours)
    loss_o, grads_o = loss_and_grads(ours, inputs)
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    with torch.no_grad():
        _, ent, _ = trl_trainer._get_per_token_logps_and_entropies(
            trl_trainer.model, ids, attn, inputs["completion_ids"].size(1), compute_entropy=True
        )
    shaped = entropy_advantage(inputs["advantages"], ent, 0.4, 2.0)
    loss_t, grads_t = loss_and_grads(trl_trainer, dict(inputs, advantages=shaped))
    torch.testing.assert_close(loss_o, loss_t, rtol=1e-5, atol=1e-7)
    for name, grad in grads_t.items():
        assert_close_rel(grads_o[name], grad, rel=1e-4, msg=name)
    assert not torch.allclose(loss_o, loss_and_grads(trl_trainer, inputs)[0])


def test_clip_cov_zeroes_selected_tokens(tmp_path):
    ours = build_trainer(
        GRPOBaselineTrainer, GRPOBaselineConfig, tmp_path, entropy_method="clip_cov", clip_cov_ratio=0.05,
        clip_cov_lb=-1e9, clip_cov_ub=1e9, epsilon=1.0, epsilon_high=1.0,
    )  # fmt: skip
    set_seed(1)
    inputs = next_inputs(ours)
    captured = {}
    original = ours.shape_advantages

    def spy(advantages, batch):
        captured["shaped"] = original(advantages, batch)
        return captured["shaped"]

    ours.shape_advantages = spy
    loss_and_grads(ours, inputs)
    shaped, mask = captured["shaped"], inputs["completion_mask"]
    zeroed = (shaped == 0) & (inputs["advantages"].unsqueeze(1) != 0) & mask.bool()
    k = max(1, int(0.05 * mask.sum()))
    assert ours._metrics["train"]["cov/selected_tokens"][-1] == k
    assert 1 <= zeroed.sum() <= k  # selected tokens with A = 0 were zero already
    adv = inputs["advantages"].unsqueeze(1).expand_as(shaped)
    assert torch.equal(shaped[shaped != 0], adv[shaped != 0])  # every other token keeps its advantage


def test_clip_higher_warns_on_policy_only(tmp_path):
    with pytest.warns(UserWarning, match="Clip-Higher on-policy: .*epsilon_high 0.28 != epsilon 0.2"):
        build_trainer(GRPOBaselineTrainer, GRPOBaselineConfig, tmp_path / "on", epsilon=0.2, epsilon_high=0.28)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # two updates per rollout batch: the clip acts, no warning
        build_trainer(
            GRPOBaselineTrainer, GRPOBaselineConfig, tmp_path / "off", epsilon=0.2, epsilon_high=0.28, num_iterations=2
        )


def test_kl_cov_warns_on_policy_and_penalises_off_policy(tmp_path):
    with pytest.warns(UserWarning, match="KL-Cov on-policy"):
        build_trainer(GRPOBaselineTrainer, GRPOBaselineConfig, tmp_path / "on", entropy_method="kl_cov")
    trainer = build_trainer(
        GRPOBaselineTrainer, GRPOBaselineConfig, tmp_path / "off", entropy_method="kl_cov", kl_cov_ratio=0.1,
        num_iterations=2, max_steps=2, learning_rate=5e-2,
    )  # fmt: skip
    trainer.train()
    penalties = [e["cov/kl_penalty"] for e in trainer.state.log_history if "cov/kl_penalty" in e]
    assert penalties[0] < 1e-6 and penalties[1] > 1e-3  # iteration 1: logp = logp_old (rounding); 2: moved


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(entropy_method="kl"), "entropy_method must be one of"),
        (dict(clip_cov_ratio=0.0), r"clip_cov_ratio must be in \(0, 1\]"),
        (dict(clip_cov_lb=5.0, clip_cov_ub=1.0), "clip_cov_ub must be > clip_cov_lb"),
        (dict(kl_cov_ratio=2.0), r"kl_cov_ratio must be in \(0, 1\]"),
        (dict(kl_cov_coef=-1.0), "kl_cov_coef must be >= 0"),
        (dict(entropy_adv_kappa=0.0), "entropy_adv_kappa must be > 0"),
        (dict(entropy_adv_alpha=-0.1), "entropy_adv_alpha must be >= 0"),
    ],
)
def test_invalid_settings(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        GRPOBaselineConfig(output_dir=str(tmp_path), use_cpu=True, **kw)


@pytest.mark.parametrize("name", ["aer_toy", "posadv_toy", "baseline_clip_cov_toy", "baseline_kl_cov_toy",
                                  "baseline_entropy_adv_toy", "baseline_entropy_loss_toy",
                                  "baseline_adaptive_entropy_toy", "baseline_clip_higher_toy", "baseline_80_20_toy",
                                  "aer_qwen3_4b_deepscaler", "posadv_qwen25_math_7b_dapo"])  # fmt: skip
def test_method_configs_parse(name):
    from pathlib import Path

    from healtrl.cli.config import parse

    path = Path(__file__).resolve().parent.parent / "configs" / f"{name}.yaml"
    gpu = ["--bf16", "false", "--use_vllm", "false", "--use_cpu", "true"] if "qwen" in name else []
    _, _, args, trainer = parse(["--config", str(path), *gpu], default=None)
    assert type(args) is TRAINERS[trainer][1]


@pytest.mark.slow
def test_two_process_coefficients_agree(tmp_path):
    """AER alpha/H0, PosAdv lambda: computed from globally reduced statistics, identical on both ranks."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
           "tests/dist_methods_worker.py", str(tmp_path)]  # fmt: skip
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    r0, r1 = (json.load(open(tmp_path / f"rank{r}.json")) for r in range(2))
    assert r0 == r1
    assert r0["aer"]["state"]["initial_entropy"] > 0
    assert any("posadv/lambda" in e for e in r0["posadv"]["history"])
