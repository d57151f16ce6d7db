"""The divergence guard of healtrl's trainers (`divergence_guard`, `divergence_entropy_fraction`).

Every training micro-batch records whether its loss is finite and the token-entropy sum and count of its loss forward
(the policy being updated). Before each optimizer step (transformers' `on_pre_optimizer_step`, after the gradients of
all micro-batches are accumulated and synchronised) the guard

- checks every local gradient for NaN/inf,
- reduces [entropy sum, token count, non-finite flags] over all processes (the same verdict on every rank),
- logs `divergence/nonfinite` (1.0 when a loss or gradient of the step is NaN/inf, else 0.0) and
  `divergence/entropy_fraction` (the step's token-mean entropy / log V, V the size of the LM head's output),
- raises `DivergenceError` when a value is non-finite, or when the fraction exceeds `divergence_entropy_fraction`
  after the run's policy was clearly away from uniform: the entropy criterion arms at the first step whose fraction
  is below half the threshold. A policy that starts near uniform (a randomly initialised model, whose entropy
  wanders between 0.9 and 1.0 of log V) has not diverged to it. Whether the criterion is armed is checkpointed (in
  `healtrl_checkpoint.json`), so a resumed run keeps watching.

Raising there stops the run before `optimizer.step()`: the step's update is never applied and transformers never
reaches the step's logging or checkpointing, so no checkpoint of a diverged model is written. The last good
checkpoint is the last complete checkpoint of `output_dir`, written at an earlier step. For the entropy criterion
the step measures the policy *before* its update, i.e. the weights of the previous optimizer step: when that step
saved a checkpoint, that checkpoint holds the policy that tripped the guard, and the error names it. Writing a
checkpoint also checks that every weight is finite (an optimizer can turn finite gradients into NaN weights).
"""

from __future__ import annotations

import math
import os
import weakref

import torch
from transformers import TrainerCallback

from ..checkpoints import DivergenceError, is_complete, list_checkpoints


class DivergenceGuard(TrainerCallback):
    def __init__(self, trainer, fraction: float):
        self._trainer = weakref.ref(trainer)
        self.fraction = float(fraction)
        self._log_vocab: float | None = None
        self.armed_step: int | None = None  # first optimizer step whose entropy was below half the threshold
        self._reset()

    def state(self) -> dict:
        return {"armed_step": self.armed_step}

    def load_state(self, state: dict) -> None:
        self.armed_step = state.get("armed_step")

    def _reset(self) -> None:
        self._entropy = None  # local tensor [sum of token entropies, tokens]
        self._nonfinite_loss = False

    # -- per micro-batch ---------------------------------------------------------------------------------------------
    def record(self, batch, loss: torch.Tensor) -> None:
        """One training micro-batch: its loss (with the method's extra term) and its `LossBatch`."""
        if batch is not None:
            entropies = batch.entropies.detach().float()
            mask = batch.mask.to(entropies.dtype)
            stats = torch.stack([(torch.nan_to_num(entropies, nan=0.0) * mask).sum(), mask.sum()]).double()
            self._entropy = stats if self._entropy is None else self._entropy + stats
        if not bool(torch.isfinite(loss.detach()).all()):
            self._nonfinite_loss = True

    # -- per optimizer step ------------------------------------------------------------------------------------------
    def log_vocab(self, trainer) -> float:
        if self._log_vocab is None:
            model = trainer.accelerator.unwrap_model(trainer.model)
            head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
            weight = getattr(head, "weight", None)
            size = weight.shape[0] if weight is not None and weight.dim() == 2 and weight.shape[0] > 1 else None
            if size is None:
                size = model.config.vocab_size
            self._log_vocab = math.log(int(size))
        return self._log_vocab

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        trainer = self._trainer()
        if trainer is None:
            return
        grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
        bad_grad = bool(grads) and not bool(torch.stack([torch.isfinite(g).all() for g in grads]).all())
        entropy = self._entropy if self._entropy is not None else torch.zeros(2, dtype=torch.float64)
        flags = torch.tensor([float(self._nonfinite_loss), float(bad_grad)], dtype=torch.float64)
        stats = torch.cat([entropy.to(flags.device), flags]).to(trainer.accelerator.device)
        if trainer.accelerator.num_processes > 1:
            stats = trainer.accelerator.reduce(stats, reduction="sum")
        self._reset()
        ent_sum, tokens, bad_loss, bad_grad = (float(x) for x in stats.tolist())
        entropy_mean = ent_sum / tokens if tokens > 0 else float("nan")
        fraction = entropy_mean / self.log_vocab(trainer) if tokens > 0 else float("nan")
        nonfinite = bad_loss > 0 or bad_grad > 0 or (tokens > 0 and not math.isfinite(entropy_mean))
        trainer.log_metric("divergence/nonfinite", float(nonfinite))
        if tokens > 0:
            trainer.log_metric("divergence/entropy_fraction", fraction)
        reasons = []
        if bad_loss > 0:
            reasons.append(f"the loss is NaN/inf on {int(bad_loss)} process(es)")
        if bad_grad > 0:
            reasons.append(f"a gradient is NaN/inf on {int(bad_grad)} process(es)")
        if tokens > 0 and not math.isfinite(entropy_mean):
            reasons.append("the policy entropy is NaN/inf")
        elif tokens > 0 and fraction <= self.fraction / 2 and self.armed_step is None:
            self.armed_step = state.global_step + 1
        elif tokens > 0 and fraction > self.fraction and self.armed_step is not None:
            reasons.append(
                f"the policy entropy {entropy_mean:.4f} nats is {fraction:.3f} of the uniform entropy log V = "
                f"{self.log_vocab(trainer):.4f}, above divergence_entropy_fraction {self.fraction} (it was below half "
                f"of it at step {self.armed_step})"
            )
        if reasons:
            self.trip(trainer, state, "; ".join(reasons), entropy_criterion=not nonfinite)

    def check_weights(self, trainer) -> None:
        """Before writing a checkpoint: every weight finite, on every process."""
        params = [p.detach() for p in trainer.model.parameters()]
        bad = torch.tensor(
            [0.0 if not params or bool(torch.stack([torch.isfinite(p).all() for p in params]).all()) else 1.0],
            device=trainer.accelerator.device,
        )
        if trainer.accelerator.num_processes > 1:
            bad = trainer.accelerator.reduce(bad, reduction="sum")
        if float(bad) > 0:
            self.trip(trainer, trainer.state, "the model's weights are NaN/inf", entropy_criterion=False, saving=True)

    def trip(self, trainer, state, reason: str, *, entropy_criterion: bool, saving: bool = False) -> None:
        step = state.global_step
        trainer.log({"divergence/tripped": 1.0})  # flushes the step's metrics (divergence/*) into the log history
        complete = [path for path in list_checkpoints(trainer.run_output_dir()) if is_complete(path)]
        if complete:
            last = complete[-1]
            last_step = int(os.path.basename(last).rsplit("-", 1)[1])
            good = f"The last good checkpoint is {last}."
            if entropy_criterion and last_step == step:
                earlier = complete[-2] if len(complete) > 1 else None
                good = (
                    f"{last} holds the policy that was measured (the weights after step {step}); the last checkpoint "
                    f"before it is {earlier}."
                    if earlier
                    else f"{last} holds the policy that was measured (the "
                    f"weights after step {step}); there is no earlier complete checkpoint."
                )
        else:
            good = "No complete checkpoint has been written."
        if saving:
            what = f"while saving the checkpoint of step {step}: {reason}. That checkpoint was not written."
        else:
            what = f"at optimizer step {step + 1}: {reason}. The step's update was not applied; no checkpoint of it "
            what += "was written."
        raise DivergenceError(
            f"Divergence guard: training stopped {what} {good} Lower the learning rate or check the rewards, then resume with "
            "`resume_from_checkpoint`; switch the guard off with `divergence_guard: false`, or raise "
            "`divergence_entropy_fraction` (up to 1.0)."
        )
