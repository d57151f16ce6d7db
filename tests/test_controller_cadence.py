"""Controller cadence (`controller_update`) of AER, PosAdv and TRL's adaptive entropy, AER's per-sequence entropy
normalisation (AER, arXiv:2510.10959, eq. 4, 7), and resuming in the middle of a rollout batch.

The cadence runs use 4 optimizer steps per rollout batch, as the AER and PosAdv paper configs: gradient accumulation 1,
steps_per_generation 4, so one generation batch of 16 prompts x 4 completions feeds 4 optimizer steps of 16.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from healtrl import (
    AERConfig,
    AERTrainer,
    EntropyGRPOConfig,
    EntropyGRPOTrainer,
    GRPOBaselineConfig,
    GRPOBaselineTrainer,
    PosAdvConfig,
    PosAdvTrainer,
)
from healtrl.functional import aer_entropy_term, sequence_entropies
from healtrl.trainers._control import ROLLOUT_BUFFER_FILE
from healtrl.trainers.aer import GROUP_ACCURACY_KEY
from tests.helpers import assert_close_rel, build_trainer, loss_and_grads, next_inputs

# 4 optimizer steps per rollout batch; 8 steps = 2 rollout batches (the 32-row toy set holds exactly 2).
FOUR_PER_ROLLOUT = dict(per_device_train_batch_size=16, gradient_accumulation_steps=1, steps_per_generation=4)


def steps_of(history, key):
    return {e["step"]: e[key] for e in history if key in e}


# ---------------------------------------------------------------------------------------------------------------
# The per-sequence entropy term (AER eq. 4, 7) as a pure function
# ---------------------------------------------------------------------------------------------------------------
# Three responses of lengths 3, 1 and 4 (unequal on purpose), padded to 4 positions.
ENT = [[0.9, 0.5, 0.1, 7.0], [2.0, 5.0, 5.0, 5.0], [0.4, 0.8, 1.2, 1.6]]
MASK = [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]]
COEF = [0.5, 0.25, 0.0]


def hand_sequence_term(ent, mask, coef, num_sequences):
    """eq. 4 then eq. 7 written out: (1 / n) sum_i lambda_i * (1 / L_i) sum_{l < L_i} H_il."""
    total = 0.0
    for row, m, c in zip(ent, mask, coef):
        length = sum(m)
        total = total + c * sum(h for h, keep in zip(row, m) if keep) / length
    return total / num_sequences


def test_sequence_term_hand_computed_with_unequal_lengths():
    ent = torch.tensor(ENT, dtype=torch.float64)
    mask, coef = torch.tensor(MASK), torch.tensor(COEF, dtype=torch.float64)
    # (0.5 * (0.9 + 0.5 + 0.1) / 3 + 0.25 * 2.0 / 1 + 0 * 1.0) / 3 = (0.25 + 0.5) / 3 = 0.25
    assert aer_entropy_term(ent, mask, coef, "sequence").item() == pytest.approx(0.25, rel=1e-12)
    assert hand_sequence_term(ENT, MASK, COEF, 3) == pytest.approx(0.25, rel=1e-12)
    torch.testing.assert_close(sequence_entropies(ent, mask), torch.tensor([0.5, 2.0, 1.0], dtype=torch.float64))
    # The token mean weighs the 3-token and 4-token responses more: (0.5 * 1.5 + 0.25 * 2.0) / 8 tokens.
    assert aer_entropy_term(ent, mask, coef, "token").item() == pytest.approx(1.25 / 8, rel=1e-12)


def test_sequence_term_gradient_equals_autograd_of_hand_formula():
    ent_fn = torch.tensor(ENT, dtype=torch.float64, requires_grad=True)
    ent_hand = torch.tensor(ENT, dtype=torch.float64, requires_grad=True)
    aer_entropy_term(ent_fn, torch.tensor(MASK), torch.tensor(COEF, dtype=torch.float64), "sequence").backward()
    rows = [[ent_hand[i, j] for j in range(4)] for i in range(3)]
    hand_sequence_term(rows, MASK, COEF, 3).backward()
    torch.testing.assert_close(ent_fn.grad, ent_hand.grad, rtol=1e-12, atol=1e-15)
    # d/dH_il = lambda_i / (n L_i) on the response's positions, 0 on padding.
    expected = torch.tensor([[0.5 / 9] * 3 + [0.0], [0.25 / 3] + [0.0] * 3, [0.0] * 4], dtype=torch.float64)
    torch.testing.assert_close(ent_fn.grad, expected, rtol=1e-12, atol=1e-15)


def test_sequence_term_splits_exactly_over_micro_batches():
    """Micro-batch terms with the step's number of responses add up to the step's term; so do equal micro-batches
    each normalised by their own size and divided by the accumulation steps (what the trainer does)."""
    gen = torch.Generator().manual_seed(0)
    ent = torch.rand(8, 6, generator=gen, dtype=torch.float64) * 3
    lengths = torch.tensor([1, 6, 3, 2, 5, 4, 6, 1])
    mask = (torch.arange(6).unsqueeze(0) < lengths.unsqueeze(1)).long()
    coef = torch.rand(8, generator=gen, dtype=torch.float64)
    full = aer_entropy_term(ent, mask, coef)
    hand = hand_sequence_term(ent.tolist(), mask.tolist(), coef.tolist(), 8)
    assert full.item() == pytest.approx(hand, rel=1e-12)
    parts = [slice(0, 3), slice(3, 8)]  # unequal micro-batches, normalised by the step's 8 responses
    assert sum(aer_entropy_term(ent[p], mask[p], coef[p], num_sequences=8) for p in parts).item() == pytest.approx(
        hand, rel=1e-12
    )
    halves = [slice(0, 4), slice(4, 8)]  # equal micro-batches of B = 4, each term / 2 accumulation steps
    assert sum(aer_entropy_term(ent[p], mask[p], coef[p]) / 2 for p in halves).item() == pytest.approx(hand, rel=1e-12)
    # The token mean is not a mean over responses: it differs on these unequal lengths.
    assert aer_entropy_term(ent, mask, coef, "token").item() != pytest.approx(hand, rel=1e-3)


def test_entropy_term_rejects_bad_arguments():
    ent, mask, coef = torch.ones(2, 3), torch.ones(2, 3), torch.ones(2)
    with pytest.raises(ValueError, match="normalization must be one of sequence, token"):
        aer_entropy_term(ent, mask, coef, "prompt")
    with pytest.raises(ValueError, match="num_sequences must be > 0"):
        aer_entropy_term(ent, mask, coef, num_sequences=0)


# ---------------------------------------------------------------------------------------------------------------
# The per-sequence term in the trainer: gradient accumulation over two micro-batches
# ---------------------------------------------------------------------------------------------------------------
def test_trainer_sequence_term_gradient_over_accumulated_micro_batches(tmp_path):
    """AER's gradient minus GRPO's over the 2 micro-batches of one optimizer step equals the autograd gradient of the
    hand-written eq. 7 term -(1 / 16) sum_i lambda_i (1 / L_i) sum_l H_il over the step's 16 responses."""
    cfg = dict(gradient_accumulation_steps=2, per_device_train_batch_size=8)
    aer = build_trainer(AERTrainer, AERConfig, tmp_path / "aer", alpha_init=0.3, rho=0.5, **cfg)
    base = build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, tmp_path / "base", **cfg)
    assert aer.args.entropy_normalization == "sequence"  # the paper's, by default
    torch.manual_seed(1)
    first = next_inputs(aer)
    micro = [first, aer._buffered_inputs[1]]
    accuracy = [torch.tensor([0.0, 0.25, 0.5, 0.75] * 2), torch.tensor([0.0, 0.0, 0.25, 1.0] * 2)]
    micro = [dict(m, **{GROUP_ACCURACY_KEY: a}) for m, a in zip(micro, accuracy)]
    lengths = torch.cat([m["completion_mask"].sum(-1) for m in micro])
    assert len(set(lengths.tolist())) > 1  # unequal lengths: the sequence and token means differ

    diff = None
    for inputs in micro:
        _, grads_aer = loss_and_grads(aer, inputs)
        _, grads_base = loss_and_grads(base, inputs)
        step = {name: grads_aer[name] - grads_base[name] for name in grads_base}
        diff = step if diff is None else {name: diff[name] + step[name] for name in diff}

    aer.model.zero_grad(set_to_none=True)
    hand = 0.0
    for inputs, acc in zip(micro, accuracy):
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        logits = aer.model(input_ids=ids, attention_mask=attn).logits[:, inputs["prompt_ids"].size(1) - 1 : -1]
        logp = torch.log_softmax(logits.double() / aer.temperature, dim=-1)
        ent = -(logp.exp() * logp).sum(-1)
        mask = inputs["completion_mask"].double()
        coef = 0.3 * torch.clamp(0.5 - acc.double(), min=0) / (0.5 + 1e-8)  # eq. 9
        hand = hand - (coef * (ent * mask).sum(-1) / mask.sum(-1)).sum() / 16  # eq. 4, 7 over the step's 16
    hand.backward()
    checked = 0
    for name, param in aer.model.named_parameters():
        if param.grad is None or param.grad.abs().max() == 0:
            continue
        assert_close_rel(diff[name], param.grad, rel=2e-4, msg=name)
        checked += 1
    assert checked > 0


# ---------------------------------------------------------------------------------------------------------------
# Cadence: once per rollout batch vs once per optimizer step
# ---------------------------------------------------------------------------------------------------------------
class _SpyAER(AERTrainer):
    """Records every training micro-batch's entropies and mask, and every H_t handed to the controller."""

    def extra_loss(self, batch):
        if batch.mode == "train":
            self.seen.append((batch.entropies.detach().double(), batch.mask.double()))
        return super().extra_loss(batch)

    def update_controller(self, entropy):
        self.updates.append((self.state.global_step, entropy))
        super().update_controller(entropy)


@pytest.mark.parametrize("cadence", ["rollout_batch", "optimizer_step"])
def test_aer_alpha_moves_once_per_rollout_batch(tmp_path, cadence):
    cfg = dict(FOUR_PER_ROLLOUT, max_steps=8, initial_entropy=10.0, tau=0.5, controller_update=cadence)
    trainer = build_trainer(_SpyAER, AERConfig, tmp_path, **cfg)
    trainer.seen, trainer.updates = [], []
    trainer.train()
    alpha = steps_of(trainer.state.log_history, "aer/alpha")
    # H* = 5 nats is far above the entropy: every update raises alpha by eta = 0.005 (eq. 11).
    if cadence == "rollout_batch":
        assert alpha == pytest.approx({1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0, 5: 0.005, 6: 0.005, 7: 0.005, 8: 0.005})
        assert [s for s, _ in trainer.updates] == [4, 8]
        assert sorted(steps_of(trainer.state.log_history, "aer/entropy")) == [4, 8]
        windows = [trainer.seen[0:4], trainer.seen[4:8]]  # the 4 micro-batches of each rollout batch
    else:
        assert alpha == pytest.approx({s: 0.005 * (s - 1) for s in range(1, 9)})
        assert [s for s, _ in trainer.updates] == list(range(1, 9))
        windows = [[seen] for seen in trainer.seen]
    assert len(trainer.seen) == 8
    # H_t: the mean over the window's responses of each response's mean token entropy (eq. 4; the default
    # `sequence` normalisation), from the recorded tensors.
    for (_, entropy), window in zip(trainer.updates, windows):
        per_response = torch.cat([(e * m).sum(-1) / m.sum(-1) for e, m in window])
        assert entropy == pytest.approx(per_response.mean().item(), rel=1e-6)  # float32 sums in the trainer


def test_aer_token_normalisation_measures_token_mean_over_the_rollout_batch(tmp_path):
    cfg = dict(FOUR_PER_ROLLOUT, max_steps=4, initial_entropy=10.0, entropy_normalization="token")
    trainer = build_trainer(_SpyAER, AERConfig, tmp_path, **cfg)
    trainer.seen, trainer.updates = [], []
    trainer.train()
    ((step, entropy),) = trainer.updates
    total = sum((e * m).sum() for e, m in trainer.seen) / sum(m.sum() for _, m in trainer.seen)
    assert step == 4 and entropy == pytest.approx(total.item(), rel=1e-6)


def test_aer_h0_is_the_first_rollout_batch_entropy(tmp_path):
    cfg = dict(FOUR_PER_ROLLOUT, max_steps=8, alpha_init=0.02, tau=0.4)
    trainer = build_trainer(_SpyAER, AERConfig, tmp_path, **cfg)
    trainer.seen, trainer.updates = [], []
    trainer.train()
    hist = trainer.state.log_history
    assert trainer.initial_entropy == pytest.approx(trainer.updates[0][1])
    assert steps_of(hist, "aer/initial_entropy") == pytest.approx({4: trainer.updates[0][1], 8: trainer.updates[0][1]})
    # tau < 1 and an entropy near H0: H_t > H*, alpha falls by eta once per rollout batch.
    assert steps_of(hist, "aer/alpha") == pytest.approx(
        {**{s: 0.02 for s in range(1, 5)}, **{s: 0.015 for s in range(5, 9)}}
    )


@pytest.mark.parametrize("cadence", ["rollout_batch", "optimizer_step"])
def test_posadv_lambda_moves_once_per_rollout_batch(tmp_path, cadence):
    # delta = 0: every entropy is above the threshold, so lambda rises by Delta at every update (eq. 5).
    cfg = dict(FOUR_PER_ROLLOUT, max_steps=8, entropy_threshold=0.0, lambda_step=0.05, controller_update=cadence)
    trainer = build_trainer(PosAdvTrainer, PosAdvConfig, tmp_path, **cfg)
    trainer.train()
    lam = steps_of(trainer.state.log_history, "posadv/lambda")
    if cadence == "rollout_batch":
        assert lam == pytest.approx({**{s: 0.0 for s in range(1, 5)}, **{s: 0.05 for s in range(5, 9)}})
        assert sorted(steps_of(trainer.state.log_history, "posadv/entropy")) == [4, 8]
    else:
        assert lam == pytest.approx({s: 0.05 * (s - 1) for s in range(1, 9)})
    assert trainer.lam == pytest.approx(0.1 if cadence == "rollout_batch" else 0.4)


class _SpyBaseline(GRPOBaselineTrainer):
    def shape_advantages(self, advantages, batch):
        if batch.mode == "train":
            self.seen.append((batch.entropies.detach().double(), batch.mask.double()))
        return super().shape_advantages(advantages, batch)


@pytest.mark.parametrize("cadence", ["rollout_batch", "optimizer_step"])
def test_trl_adaptive_entropy_moves_once_per_rollout_batch(tmp_path, cadence):
    """TRL's coefficient: +delta at each update while the entropy is below its target (10 nats: always)."""
    cfg = dict(
        FOUR_PER_ROLLOUT,
        max_steps=8,
        use_adaptive_entropy=True,
        entropy_coef=0.0,
        entropy_target=10.0,
        entropy_coef_delta=1e-3,
        entropy_coef_max=1.0,
        controller_update=cadence,
        entropy_flow_diagnostics=True,  # a lever that reads sync_gradients: must still see every optimizer step
    )
    trainer = build_trainer(_SpyBaseline, GRPOBaselineConfig, tmp_path, **cfg)
    trainer.seen = []
    trainer.train()
    hist = trainer.state.log_history
    coef = steps_of(hist, "entropy_coef")  # logged at the end of each step, after any update
    if cadence == "rollout_batch":
        assert coef == pytest.approx({1: 0, 2: 0, 3: 0, 4: 1e-3, 5: 1e-3, 6: 1e-3, 7: 1e-3, 8: 2e-3})
        window = trainer.seen[4:8]  # TRL's window spans the second rollout batch's 4 micro-batches
    else:
        assert coef == pytest.approx({s: 1e-3 * s for s in range(1, 9)})
        window = trainer.seen[7:8]
    token_mean = sum((e * m).sum() for e, m in window) / sum(m.sum() for _, m in window)
    assert trainer._last_world_entropy == pytest.approx(token_mean.item(), rel=1e-5)
    assert sorted(steps_of(hist, "entropy_flow/net")) == list(range(1, 9))  # diagnostics: once per optimizer step
    assert trainer.accelerator.sync_gradients  # restored


# ---------------------------------------------------------------------------------------------------------------
# Resume in the middle of a rollout batch
# ---------------------------------------------------------------------------------------------------------------
RESUME_CASES = {
    "aer": (AERTrainer, AERConfig, dict(alpha_init=0.02, tau=0.9), ("aer/alpha", "aer/entropy")),
    "posadv": (PosAdvTrainer, PosAdvConfig, dict(entropy_threshold=0.0), ("posadv/lambda", "posadv/entropy")),
    "trl_adaptive": (
        GRPOBaselineTrainer,
        GRPOBaselineConfig,
        dict(use_adaptive_entropy=True, entropy_coef=0.0, entropy_target=10.0, entropy_coef_delta=1e-3),
        ("entropy_coef", "entropy"),
    ),
}


# posadv runs in the default suite; the other controllers (~10-20 s each) are marked slow.
@pytest.mark.parametrize(
    "case", [c if c == "posadv" else pytest.param(c, marks=pytest.mark.slow) for c in sorted(RESUME_CASES)]
)
def test_resume_mid_rollout_batch_gives_the_uninterrupted_updates(tmp_path, case):
    tcls, ccls, kw, keys = RESUME_CASES[case]
    cfg = dict(FOUR_PER_ROLLOUT, max_steps=8, learning_rate=5e-2, **kw)
    out = tmp_path / "full"
    full = build_trainer(tcls, ccls, out, save_strategy="steps", save_steps=2, **cfg)
    full.train()
    # Checkpoint 2 and 6 lie inside a rollout batch: every process saved its part of it; 4 and 8 end one.
    buffer = ROLLOUT_BUFFER_FILE.format(rank=0)
    assert [os.path.exists(out / f"checkpoint-{s}" / buffer) for s in (2, 4, 6, 8)] == [True, False, True, False]
    expected = {key: steps_of(full.state.log_history, key) for key in (*keys, "loss")}
    for start in (2, 6):
        resumed = build_trainer(tcls, ccls, tmp_path / f"resumed{start}", **cfg)
        resumed.train(resume_from_checkpoint=str(out / f"checkpoint-{start}"))
        for key, values in expected.items():
            after = {s: v for s, v in values.items() if s > start}
            got = {s: v for s, v in steps_of(resumed.state.log_history, key).items() if s > start}
            assert after, key
            assert got == pytest.approx(after, rel=1e-6, abs=1e-9), key


def test_resume_mid_rollout_batch_that_cannot_continue_the_batch_is_refused(tmp_path):
    cfg = dict(FOUR_PER_ROLLOUT, max_steps=2, alpha_init=0.01)
    out = tmp_path / "full"
    build_trainer(AERTrainer, AERConfig, out, save_strategy="steps", save_steps=2, **cfg).train()
    checkpoint = out / "checkpoint-2"
    # Another rollout-batch layout: refused as a changed setting; accepted, the saved half batch still does not fit.
    other = build_trainer(AERTrainer, AERConfig, tmp_path / "other", **dict(cfg, max_steps=4, steps_per_generation=2))
    with pytest.raises(ValueError, match="steps_per_generation: checkpoint 4, this run 2"):
        other.train(resume_from_checkpoint=str(checkpoint))
    allow = ["generation_batch_size", "steps_per_generation"]
    other = build_trainer(
        AERTrainer,
        AERConfig,
        tmp_path / "other",
        **dict(cfg, max_steps=4, steps_per_generation=2),
        resume_allow_mismatch=allow,
    )
    with pytest.raises(ValueError, match="middle of a rollout batch of 4 micro-batches"), pytest.warns(RuntimeWarning):
        other.train(resume_from_checkpoint=str(checkpoint))
    # Written by 2 processes (as the checkpoint's marker says): this process's part alone is not the batch.
    marker_path = checkpoint / "healtrl_checkpoint.json"
    marker = json.loads(marker_path.read_text())
    marker_path.write_text(json.dumps(dict(marker, num_processes=2)))
    two = build_trainer(AERTrainer, AERConfig, tmp_path / "two", **dict(cfg, max_steps=4))
    with pytest.raises(ValueError, match="num_processes: checkpoint 2, this run 1"):
        two.train(resume_from_checkpoint=str(checkpoint))
    marker_path.write_text(json.dumps(marker))
    # The process's part of the batch is missing.
    os.remove(checkpoint / ROLLOUT_BUFFER_FILE.format(rank=0))
    resumed = build_trainer(AERTrainer, AERConfig, tmp_path / "resumed", **dict(cfg, max_steps=4))
    with pytest.raises(FileNotFoundError, match="middle of a rollout batch"):
        resumed.train(resume_from_checkpoint=str(checkpoint))


# ---------------------------------------------------------------------------------------------------------------
# Invalid settings
# ---------------------------------------------------------------------------------------------------------------
def _config(ccls, tmp_path, **kw):
    return ccls(output_dir=str(tmp_path), use_cpu=True, report_to="none", **kw)


@pytest.mark.parametrize(
    "ccls, extra",
    [(AERConfig, {}), (PosAdvConfig, {}), (GRPOBaselineConfig, {"use_adaptive_entropy": True})],
)
def test_rollout_batch_needs_whole_optimizer_steps(tmp_path, ccls, extra):
    # 2 micro-batches per optimizer step, 1 per rollout batch: a rollout batch would end inside an optimizer step.
    layout = dict(per_device_train_batch_size=8, gradient_accumulation_steps=2, steps_per_generation=1)
    with pytest.raises(ValueError, match=r"controller_update: rollout_batch needs .* multiple of gradient_accum"):
        _config(ccls, tmp_path, **layout, **extra)
    _config(ccls, tmp_path, **layout, controller_update="optimizer_step", **extra)  # accepted
    with pytest.raises(ValueError, match="controller_update must be one of rollout_batch, optimizer_step"):
        _config(ccls, tmp_path, controller_update="epoch", **extra)


def test_cadence_layout_not_checked_where_no_controller_runs(tmp_path):
    layout = dict(per_device_train_batch_size=8, gradient_accumulation_steps=2, steps_per_generation=1)
    _config(PosAdvConfig, tmp_path, schedule="stage", max_steps=4, **layout)
    _config(GRPOBaselineConfig, tmp_path, **layout)  # no use_adaptive_entropy


def test_invalid_entropy_normalization(tmp_path):
    with pytest.raises(ValueError, match="entropy_normalization must be one of sequence, token"):
        _config(AERConfig, tmp_path, entropy_normalization="prompt")


# ---------------------------------------------------------------------------------------------------------------
# The step-end hook: one accumulation (`step_sums`), handed over once per optimizer step
# ---------------------------------------------------------------------------------------------------------------
class _SpyStepEnd(EntropyGRPOTrainer):
    def extra_loss(self, batch):
        if batch.mode == "train":
            self.micro.append((self.state.global_step, float(batch.mask.sum())))
            self.step_sums(
                "probe_tokens", torch.stack([batch.mask.sum().double(), torch.ones((), dtype=torch.float64)])
            )
        return super().extra_loss(batch)

    def optimizer_step_end(self, step_stats):
        self.ends.append((self.state.global_step, {k: v.tolist() for k, v in step_stats.items()}))
        super().optimizer_step_end(step_stats)


def test_step_end_hook_gets_each_optimizer_steps_reduced_sums(tmp_path):
    # 2 micro-batches per optimizer step (gradient accumulation 2), 3 optimizer steps, entropy-flow diagnostics on:
    # the hook runs once per step with every key `step_sums` closed in it, summed over that step's micro-batches.
    cfg = dict(
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
        steps_per_generation=2,
        max_steps=3,
        entropy_flow_diagnostics=True,
    )
    trainer = build_trainer(_SpyStepEnd, EntropyGRPOConfig, tmp_path, **cfg)
    trainer.micro, trainer.ends = [], []
    trainer.train()
    assert [step for step, _ in trainer.ends] == [1, 2, 3]
    assert len(trainer.micro) == 6
    for i, (_, stats) in enumerate(trainer.ends):
        assert set(stats) == {"probe_tokens", "entropy_flow"}
        tokens = trainer.micro[2 * i][1] + trainer.micro[2 * i + 1][1]
        assert stats["probe_tokens"] == [tokens, 2.0]
    # The same totals the entropy-flow diagnostics logged at the step's last micro-batch.
    logged = steps_of(trainer.state.log_history, "entropy_flow/increase")
    for step, stats in trainer.ends:
        assert logged[step] == pytest.approx(stats["entropy_flow"][0], rel=1e-6, abs=1e-12)
