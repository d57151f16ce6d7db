"""Which per-token entropy-change estimator predicts the real entropy change? (OPEFO eq. 6 vs STEER vs exact.)

Over a toy run, at every optimizer step k the three estimators of `healtrl.functional.token_entropy_change` ("opefo" =
OPEFO eq. 6, "steer" = single (1 - p) factor, "exact" = exact first-order change of a tabular softmax, from the power
sums of healtrl's kernel) each predict the net entropy flow sum_t Delta H_t of the update batch, from the loss forward
of that step (before the update). Two measured targets:

- probe: the change of the mean per-token policy entropy on a fixed probe set (the 128 (prompt, completion) pairs of
  the first rollout batch, re-scored by the current policy) between consecutive steps;
- batch: the change, across the update, of the summed entropy at the update batch's own states (what eq. 6 predicts
  token by token), measured with a forward after the optimizer step.

Reported: Spearman rank correlation between predicted and measured change across steps, and the share of steps where
the signs agree. The predictions share the learning-rate scale (they are all in units of lr x eq. 6), which does not
affect rank correlations within a run at constant lr.

Runs: GRPO (healtrl's base trainer, levers off) and OPEFO, on the toy config (`configs/opefo_toy.yaml` setup).

Usage:
    python benchmarks/opefo_estimators.py        # writes benchmarks/results/opefo_estimators.md (~2 min, 1 thread)
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform

import torch
from _bench import cpu_model
from scipy.stats import spearmanr
from transformers import TrainerCallback

from healtrl import EntropyGRPOConfig, EntropyGRPOTrainer, OPEFOConfig, OPEFOTrainer
from healtrl.diagnostics import current_learning_rate
from healtrl.functional import ESTIMATORS, token_entropy_change
from healtrl.toy import reproduce_entropy_collapse


def probing(cls):
    class Probing(cls):
        """Records every estimator's predicted net flow and the measured entropy changes, once per optimizer step."""

        records: list = []

        @property
        def needs_power_sums(self):
            return True

        def shape_advantages(self, advantages, batch):
            shaped = super().shape_advantages(advantages, batch)
            if batch.mode == "train":  # predict the update actually taken (OPEFO: reweighted advantages)
                self._record(batch, advantages if shaped is None else shaped)
            return shaped

        def _entropy_of(self, inputs):
            ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
            attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
            with torch.no_grad():
                _, ent, _ = self._get_per_token_logps_and_entropies(
                    self.model, ids, attn, inputs["completion_ids"].size(1), compute_entropy=True
                )
            return ent.double() * inputs["completion_mask"]

        def _record(self, batch, advantages):
            inputs = batch.inputs
            mask = batch.mask
            lr = current_learning_rate(self)
            pred = {}
            for est in ESTIMATORS:
                dh = token_entropy_change(
                    batch.per_token_logps,
                    batch.entropies,
                    advantages,
                    estimator=est,
                    sum_p2=batch.sum_p2,
                    sum_p2_logp=batch.sum_p2_logp,
                    lr=lr,
                )
                pred[est] = (dh * mask).sum().item()
            if not hasattr(self, "_probe"):
                self._probe = {
                    k: inputs[k].clone() for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
                }
                ent = self._entropy_of(self._probe)
                self._probe_h = (ent.sum() / self._probe["completion_mask"].sum()).item()
            self._pending = {
                "pred": pred,
                "batch_inputs": {
                    k: inputs[k] for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
                },
                "batch_h_before": (batch.entropies.detach().double() * mask).sum().item(),
            }

        def measure(self):
            pending = getattr(self, "_pending", None)
            if pending is None:
                return
            self._pending = None
            probe_h = (self._entropy_of(self._probe).sum() / self._probe["completion_mask"].sum()).item()
            batch_h_after = self._entropy_of(pending["batch_inputs"]).sum().item()
            type(self).records.append(
                {
                    **{f"pred/{k}": v for k, v in pending["pred"].items()},
                    "probe_dh": probe_h - self._probe_h,
                    "batch_dh": batch_h_after - pending["batch_h_before"],
                    "probe_h": probe_h,
                }
            )
            self._probe_h = probe_h

    return Probing


class Measure(TrainerCallback):
    def __init__(self):
        self.trainer = None

    def on_step_end(self, args, state, control, **kwargs):
        self.trainer.measure()


def run(cls, config_cls, steps, **overrides):
    probing_cls = probing(cls)
    probing_cls.records = []
    callback = Measure()

    class WithCallback(probing_cls):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            callback.trainer = self

    reproduce_entropy_collapse(
        steps,
        trainer_cls=WithCallback,
        config_cls=config_cls,
        callbacks=[callback],
        learning_rate=5e-4,
        lr_scheduler_type="constant",
        **overrides,
    )
    return probing_cls.records


def summarize(records, target):
    measured = [r[target] for r in records]
    rows = []
    for est in ESTIMATORS:
        pred = [r[f"pred/{est}"] for r in records]
        rho, p = spearmanr(pred, measured)
        sign = sum((a > 0) == (b > 0) for a, b in zip(pred, measured)) / len(pred)
        rows.append((est, rho, p, sign))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--output", default="benchmarks/results/opefo_estimators.md")
    args = parser.parse_args()
    torch.set_num_threads(1)

    runs = {
        "GRPO": run(EntropyGRPOTrainer, EntropyGRPOConfig, args.steps),
        "OPEFO": run(OPEFOTrainer, OPEFOConfig, args.steps),
    }
    out = [
        "# Which entropy-change estimator predicts the real entropy change?",
        "",
        f"**Date:** {datetime.date.today().isoformat()} · **Machine:** {cpu_model()}, {os.cpu_count()} cores "
        f"(shared), 1 torch thread, Python {platform.python_version()}, torch {torch.__version__} · **Script:** `benchmarks/opefo_estimators.py --steps {args.steps}`",
        "",
        "Toy world (`healtrl-toy/qwen2-add`, 16 prompts x 8 generations, lr 5e-4 constant, AdamW, strict on-policy). "
        "Per optimizer step: each estimator's predicted net flow sum_t Delta H_t over the update batch (loss forward, "
        "before the update) vs the measured entropy change. `probe`: mean token entropy on a fixed probe set (the "
        "first rollout batch, 128 sequences), change between consecutive steps. `batch`: summed entropy at the update "
        "batch's own states, after minus before the optimizer step. Spearman rho across steps (p-value), and the "
        "share of steps whose signs agree.",
        "",
    ]
    for name, records in runs.items():
        first, last = records[0]["probe_h"], records[-1]["probe_h"]
        out.append(f"## {name} run ({len(records)} steps; probe entropy {first:.3f} -> {last:.3f})")
        out.append("")
        out.append("| estimator | rho vs probe | p | sign agree (probe) | rho vs batch | p | sign agree (batch) |")
        out.append("| --- | --- | --- | --- | --- | --- | --- |")
        probe, batch = summarize(records, "probe_dh"), summarize(records, "batch_dh")
        for (est, r1, p1, s1), (_, r2, p2, s2) in zip(probe, batch):
            out.append(f"| {est} | {r1:+.3f} | {p1:.2g} | {s1:.2f} | {r2:+.3f} | {p2:.2g} | {s2:.2f} |")
        out.append("")
    with open(args.output, "w") as f:
        f.write("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
