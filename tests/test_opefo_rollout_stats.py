"""OPEFO's whole-update-batch lambda* from rollout-time statistics (issue #19): no extra forward, same numbers.

With gradient accumulation, OPEFO reads the per-token log-prob, entropy (and power sums) of every sampled token off
the generation's own LM-head logits (or TRL's old-log-prob pass) instead of running one more no-grad forward. These
tests check lambda* (eq. 9) and the eq. 7 token weights against the forward-based computation on the same batch (the
fallback: one no-grad forward, `forward_lambda_and_delta_h`), for all three estimators, with and without accumulation, on 1 and 2 processes.

Run as a script (`torchrun --nproc_per_node 2 tests/test_opefo_rollout_stats.py OUT`) it is the 2-process worker.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from healtrl import EntropyGRPOConfig, EntropyGRPOTrainer, OPEFOConfig, OPEFOTrainer  # noqa: E402
from healtrl.functional import (  # noqa: E402
    opefo_flow_sums,
    opefo_lambda_from_sums,
    opefo_token_weights,
    token_entropy_change,
)
from healtrl.trainers._trl.generation_stats import GenerationStats  # noqa: E402
from tests.helpers import (  # noqa: E402
    build_trainer,
    loss_and_grads,
    reference_stats,
    run_two_processes,
    set_seed,
    shut_down_process_group,
)

ESTIMATORS = ("opefo", "steer", "exact")


class CountingForward(OPEFOTrainer):
    """Counts the fallback forwards, records the source of the rollout statistics `finish_generation_batch` received
    and the shaped advantages of every loss call."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fallback_forwards = 0
        self.stats_source = None
        self.shaped = []

    def finish_generation_batch(self, batch, stats):
        self.stats_source = None if stats is None else stats.source
        super().finish_generation_batch(batch, stats)

    def _provide_rollout_stats(self, call):
        stats = super()._provide_rollout_stats(call)
        self.fallback_forwards += stats.source == "forward"
        return stats

    def shape_advantages(self, advantages, batch):
        shaped = super().shape_advantages(advantages, batch)
        self.shaped.append(shaped.detach())
        return shaped


def generate_batch(trainer, seed=1):
    """The whole local generation batch of one optimizer step, with OPEFO's statistics, as training produces it."""
    set_seed(seed)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    return trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))


def forward_lambda_and_delta_h(trainer, batch):
    """The forward-based computation on `batch`: Delta H from one no-grad forward, lambda* over all processes."""
    forward = trainer.policy_forward(
        torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1),
        torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1),
        batch["completion_ids"].size(1),
        batch_size=trainer.args.per_device_train_batch_size,
        power_sums=trainer.args.entropy_change_estimator == "exact",
    )
    delta_h = token_entropy_change(
        forward.logps,
        forward.entropies,
        batch["advantages"],
        estimator=trainer.args.entropy_change_estimator,
        sum_p2=forward.sum_p2,
        sum_p2_logp=forward.sum_p2_logp,
    )
    mask = batch["completion_mask"]
    pos, neg = opefo_flow_sums(delta_h, mask)
    pos, neg = trainer.accelerator.reduce(torch.stack([pos, neg]), reduction="sum")
    return opefo_lambda_from_sums(pos, neg, eps=trainer.args.lambda_eps), delta_h


def assert_same_weights(dh_a, lam_a, dh_b, lam_b, mask, estimator):
    """The eq. 7 weights agree on every token whose Delta H is clear of float32 rounding around 0.

    A token whose Delta H is within rounding of 0 may fall into S+ under one computation and S- under the other (its
    contribution to lambda* is of that rounding size); every other token must get the same weight.
    """
    w_a = opefo_token_weights(dh_a, mask, lam_a)
    w_b = opefo_token_weights(dh_b, mask, lam_b)
    scale = dh_b[mask.bool()].abs().max()
    clear = mask.bool() & (dh_b.abs() > 1e-5 * scale)
    assert clear.sum() > 0.5 * mask.sum(), f"{estimator}: too few tokens clear of rounding"
    torch.testing.assert_close(w_a[clear], w_b[clear], rtol=1e-5, atol=1e-6)
    assert torch.equal(dh_a[clear] > 0, dh_b[clear] > 0)


# ---------------------------------------------------------------------------------------------------------------
# The recorder on its own: the generation's numbers are the policy's at the training temperature
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("top_k", [None, 3])
def test_generation_stats_equal_the_policy_at_the_training_temperature(tmp_path, top_k):
    """Sampling at temperature 0.7 with top-k 3: the statistics are those of softmax(z / 0.7) over the full
    vocabulary (the policy the loss trains), not of the truncated sampling distribution."""
    extra = {} if top_k is None else {"top_k": top_k}
    trainer = build_trainer(
        OPEFOTrainer,
        OPEFOConfig,
        tmp_path,
        gradient_accumulation_steps=2,
        per_device_train_batch_size=8,
        temperature=0.7,
        max_completion_length=6,
        entropy_change_estimator="exact",
        **extra,
    )
    set_seed(3)
    trainer.model.train()
    model = trainer.accelerator.unwrap_model(trainer.model)
    with GenerationStats(model, trainer.temperature, power_sums=True) as recorder:
        prompt_ids, completion_ids = trainer._generate([row["prompt"] for row in tiny_prompts(trainer)])[:2]
    stats = recorder.per_token(completion_ids)
    assert stats is not None
    inputs = padded(trainer, prompt_ids, completion_ids)
    expected = reference_stats(trainer, inputs)  # float64, full vocabulary, / temperature
    mask = inputs["completion_mask"].bool()
    width = mask.size(1)
    for key, ref in zip(("logp", "entropy", "sum_p2", "sum_p2_logp"), expected):
        torch.testing.assert_close(stats[key][:, :width].double()[mask], ref[mask], rtol=1e-5, atol=1e-5, msg=key)
    if top_k is not None:  # the sampling distribution has at most 3 tokens; the policy's entropy is not capped
        assert stats["entropy"][mask].max() > torch.log(torch.tensor(3.0))


def tiny_prompts(trainer):
    batch = next(iter(trainer.get_train_dataloader()))
    return batch


def padded(trainer, prompt_ids, completion_ids):
    p_ids, p_mask = trainer._pad_ids(prompt_ids, "left")
    c_ids, c_mask = trainer._pad_ids(completion_ids, "right")
    return {"prompt_ids": p_ids, "prompt_mask": p_mask, "completion_ids": c_ids, "completion_mask": c_mask}


def test_recorder_refuses_completions_that_do_not_line_up(tmp_path):
    trainer = build_trainer(
        OPEFOTrainer, OPEFOConfig, tmp_path, gradient_accumulation_steps=2, per_device_train_batch_size=8
    )
    set_seed(3)
    model = trainer.accelerator.unwrap_model(trainer.model)
    with GenerationStats(model, trainer.temperature) as recorder:
        completion_ids = trainer._generate([row["prompt"] for row in tiny_prompts(trainer)])[1]
    assert recorder.per_token(completion_ids) is not None
    wrong = [list(ids) for ids in completion_ids]
    wrong[0][0] = (wrong[0][0] + 1) % 10
    assert GenerationStats.per_token(recorder, wrong) is None  # a token the generation did not embed
    assert recorder.per_token(completion_ids[:-1]) is None  # another batch size


# ---------------------------------------------------------------------------------------------------------------
# The trainer: lambda* and the weights from generation equal the forward-based ones, and no extra forward runs
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_lambda_from_generation_equals_forward_based(tmp_path, estimator):
    trainer = build_trainer(
        CountingForward,
        OPEFOConfig,
        tmp_path,
        gradient_accumulation_steps=2,
        per_device_train_batch_size=8,
        max_completion_length=6,
        entropy_change_estimator=estimator,
    )
    trainer.model.train()
    batch = generate_batch(trainer)
    assert trainer.stats_source == "generation"
    assert trainer.fallback_forwards == 0
    assert trainer._metrics["train"]["opefo/extra_forward"] == [0.0]
    lam_fwd, dh_fwd = forward_lambda_and_delta_h(trainer, batch)
    mask = batch["completion_mask"]
    assert abs(lam_fwd.item()) > 1e-3  # a non-trivial batch
    assert batch["opefo_lambda"].item() == pytest.approx(lam_fwd.item(), rel=1e-5, abs=1e-6)
    m = mask.bool()
    scale = dh_fwd[m].abs().max()
    torch.testing.assert_close(batch["opefo_delta_h"][m], dh_fwd[m], rtol=1e-4, atol=1e-5 * scale.item())
    assert_same_weights(batch["opefo_delta_h"], batch["opefo_lambda"], dh_fwd, lam_fwd, mask, estimator)


def count_model_forwards(trainer):
    calls = []
    handle = trainer.model.register_forward_hook(lambda *args: calls.append(1))
    try:
        generate_batch(trainer)
    finally:
        handle.remove()
    return len(calls)


def test_no_forward_beyond_grpos_and_forward_fallback_is_logged(tmp_path):
    # No entropy view at step 0 (`inspect_every_steps`): with rollout_entropy_source "forward" it would add its own
    # no-grad pass, and this test counts OPEFO's.
    kwargs = dict(gradient_accumulation_steps=2, per_device_train_batch_size=8, max_completion_length=6)
    kwargs.update(inspect_every_steps=0)
    grpo = build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, tmp_path / "grpo", **kwargs)
    opefo = build_trainer(CountingForward, OPEFOConfig, tmp_path / "opefo", **kwargs)
    forced = build_trainer(CountingForward, OPEFOConfig, tmp_path / "fwd", rollout_entropy_source="forward", **kwargs)
    n_grpo, n_opefo, n_forced = (count_model_forwards(t) for t in (grpo, opefo, forced))
    assert forced.stats_source == "forward" and opefo.stats_source == "generation"
    assert n_opefo == n_grpo  # generation steps only
    assert n_forced == n_grpo + 2  # the fallback's no-grad pass over the 16 rollouts, in chunks of 8 (the micro-batch)
    assert forced.fallback_forwards == 1 and forced._metrics["train"]["opefo/extra_forward"] == [1.0]


def test_lambda_from_trls_old_logprob_pass(tmp_path):
    """Where TRL runs its old-log-prob pass (vLLM with importance-sampling correction), lambda* comes from that pass.

    Emulated without vLLM by making TRL's own condition for the pass true (`gradient_accumulation_steps` not a
    multiple of `steps_per_generation`); the batch itself is generated by the same policy either way.
    """
    trainer = build_trainer(
        CountingForward,
        OPEFOConfig,
        tmp_path,
        gradient_accumulation_steps=2,
        per_device_train_batch_size=8,
        entropy_change_estimator="exact",
    )
    trainer.args.steps_per_generation = 3  # TRL: 2 % 3 != 0 -> it computes old log-probs
    trainer.model.train()
    batch = generate_batch(trainer)
    assert trainer.stats_source == "old_logps"
    assert batch["old_per_token_logps"] is not None
    assert trainer.fallback_forwards == 0 and trainer._metrics["train"]["opefo/extra_forward"] == [0.0]
    lam_fwd, dh_fwd = forward_lambda_and_delta_h(trainer, batch)
    assert batch["opefo_lambda"].item() == pytest.approx(lam_fwd.item(), rel=1e-5, abs=1e-6)
    assert_same_weights(batch["opefo_delta_h"], batch["opefo_lambda"], dh_fwd, lam_fwd, batch["completion_mask"], "x")


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_same_lambda_and_weights_with_and_without_accumulation(tmp_path, estimator):
    """One generation batch of 16 as one micro-batch (lambda* in the loss forward) or four (lambda* from generation):
    the same batch, the same lambda* and the same shaped advantages per token."""
    results = {}
    for ga in (1, 4):
        trainer = build_trainer(
            CountingForward,
            OPEFOConfig,
            tmp_path / f"ga{ga}",
            gradient_accumulation_steps=ga,
            per_device_train_batch_size=16 // ga,
            max_completion_length=6,
            entropy_change_estimator=estimator,
        )
        batch = generate_batch(trainer)
        trainer.current_gradient_accumulation_steps = ga
        size = 16 // ga
        for i in range(ga):
            micro = {
                k: (v[i * size : (i + 1) * size] if torch.is_tensor(v) and v.dim() else v) for k, v in batch.items()
            }
            trainer.accelerator.gradient_state._set_sync_gradients(i == ga - 1)
            loss_and_grads(trainer, micro)
        trainer.accelerator.gradient_state._set_sync_gradients(True)
        assert trainer.fallback_forwards == 0
        results[ga] = (batch, torch.cat(trainer.shaped), trainer._metrics["train"]["opefo/lambda"])
    (b1, shaped1, lam1), (b4, shaped4, lam4) = results[1], results[4]
    assert torch.equal(b1["completion_ids"], b4["completion_ids"])
    assert len(lam1) == len(lam4) == 1 and lam4[0] == pytest.approx(lam1[0], rel=1e-5, abs=1e-6)
    # Same shaped advantage (1 +- lambda*) A on every token whose Delta H is clear of rounding around 0.
    _, dh = forward_lambda_and_delta_h(trainer, b4)
    m = b1["completion_mask"].bool()
    clear = m & (dh.abs() > 1e-5 * dh[m].abs().max())
    assert clear.sum() > 0.5 * m.sum()
    torch.testing.assert_close(shaped4[clear], shaped1[clear], rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# Two processes: lambda* over both ranks' tokens from generation equals the forward-based one, on both ranks
# ---------------------------------------------------------------------------------------------------------------
def _worker(output_dir: str) -> None:
    torch.set_num_threads(1)
    report = {}
    for estimator in ESTIMATORS:
        trainer = build_trainer(
            CountingForward,
            OPEFOConfig,
            os.path.join(output_dir, estimator),
            gradient_accumulation_steps=2,
            per_device_train_batch_size=4,
            max_completion_length=6,
            entropy_change_estimator=estimator,
            ddp_backend="gloo",
        )
        batch = generate_batch(trainer)
        lam_fwd, dh_fwd = forward_lambda_and_delta_h(trainer, batch)
        mask = batch["completion_mask"]
        local = [float(x) for x in opefo_flow_sums(batch["opefo_delta_h"], mask)]
        assert_same_weights(batch["opefo_delta_h"], batch["opefo_lambda"], dh_fwd, lam_fwd, mask, estimator)
        report[estimator] = {
            "lambda": batch["opefo_lambda"].item(),
            "lambda_forward": lam_fwd.item(),
            "local": local,
            "fallback_forwards": trainer.fallback_forwards,
        }
    with open(os.path.join(output_dir, f"rank{trainer.accelerator.process_index}.json"), "w") as f:
        json.dump(report, f)


@pytest.mark.slow  # a two-process launch (~25 s); test_distributed.py keeps one in the default suite
def test_two_processes_lambda_from_generation_is_global_and_equals_forward(tmp_path):
    reports = run_two_processes(__file__, tmp_path)
    for estimator in ESTIMATORS:
        r0, r1 = reports[0][estimator], reports[1][estimator]
        assert r0["fallback_forwards"] == r1["fallback_forwards"] == 0
        assert r0["lambda"] == r1["lambda"]  # identical on every rank
        assert r0["local"] != r1["local"]  # the ranks generated different tokens ...
        pos, neg = r0["local"][0] + r1["local"][0], r0["local"][1] + r1["local"][1]
        assert r0["lambda"] == pytest.approx((neg - pos) / (neg + pos), rel=1e-5)  # ... and lambda* is over both
        assert r0["lambda"] == pytest.approx(r0["lambda_forward"], rel=1e-5, abs=1e-6)


if __name__ == "__main__":
    _worker(sys.argv[1])
    shut_down_process_group()
