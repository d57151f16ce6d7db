"""Checkpoints: method state, resume in the middle of a rollout batch, completion marker (`healtrl.checkpoints`).

TRL 1.16 keeps the rollout batch in `_buffered_inputs` and counts micro-batches in `_step`, neither of which it
checkpoints, so a run resumed in the middle of a rollout batch would generate a new batch at once and restart the
count. `CheckpointCalls` (a part of `TRLBoundary`) overrides transformers' `_save_checkpoint` and
`_load_optimizer_and_scheduler`: the marker records the count and the batch layout; when a checkpoint falls inside a
rollout batch every process also saves its part of the batch (`healtrl_rollout_buffer_rank{r}.pt`), so that the
resumed run takes the same updates as an uninterrupted one. The method's `method_state` goes to `healtrl_state.json`,
the divergence guard's state into the marker. The files' format (the marker, atomic writes) is `healtrl.checkpoints`,
passed in by the base trainer as `_checkpoint_files` (`hooks.CheckpointFiles`).
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .hooks import BoundaryHooks, CheckpointFiles

STATE_FILE = "healtrl_state.json"
ROLLOUT_BUFFER_FILE = "healtrl_rollout_buffer_rank{rank}.pt"


class CheckpointCalls(BoundaryHooks):
    """transformers' checkpoint save and load, with healtrl's state and rollout position (a part of `TRLBoundary`)."""

    def _rollout_position(self) -> dict[str, Any]:
        return {
            "micro_steps": int(self._step),
            "micro_steps_per_rollout_batch": self.micro_steps_per_rollout_batch,
            "mid_rollout": not self.at_rollout_boundary() and self._buffered_inputs is not None,
        }

    def _mid_rollout_state(self) -> dict[str, Any]:
        """What this process holds of an unfinished rollout batch, beyond the JSON state (torch-saved per rank)."""
        state = {"buffered_inputs": self._buffered_inputs}
        if self.defer_trl_entropy:
            # TRL's entropy window of this process (`_entropy_window_stats`), open since the rollout batch began (TRL
            # checkpoints only the coefficient and the last window's entropy).
            state["trl_entropy_window"] = self._entropy_window_stats
        return state

    def _load_mid_rollout_state(self, state: dict[str, Any]) -> None:
        self._buffered_inputs = state["buffered_inputs"]
        if self.defer_trl_entropy:
            self._entropy_window_stats = state.get("trl_entropy_window")

    def _rollout_buffer_path(self, checkpoint: str) -> str:
        return os.path.join(checkpoint, ROLLOUT_BUFFER_FILE.format(rank=self.accelerator.process_index))

    def _files(self) -> CheckpointFiles:
        files = self._checkpoint_files
        if files is None:
            raise RuntimeError(
                f"{type(self).__name__} has no checkpoint files (`_checkpoint_files`, set by EntropyGRPOTrainer): the "
                "TRL boundary cannot write or read healtrl's checkpoint marker without them."
            )
        return files

    def _save_checkpoint(self, model, trial):
        from transformers.trainer import rotate_checkpoints

        files = self._files()
        run_dir = self._get_output_dir(trial=trial)
        output_dir = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        marker = os.path.join(output_dir, files.marker_file)
        if self._guard is not None:
            self._guard.check_weights(self)  # never write a checkpoint of a model with NaN/inf weights
        if self.args.should_save and os.path.exists(marker):
            os.remove(marker)  # a folder of an earlier attempt at this step: incomplete until this save ends
        # transformers deletes old checkpoints (`save_total_limit`) at the end of its save: only once this one is
        # complete here, so that a run killed while saving keeps its last complete checkpoints.
        limit = self.args.save_total_limit
        self.args.save_total_limit = None
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.save_total_limit = limit
        state = self.method_state()
        if state and self.args.should_save:
            files.write_json(os.path.join(output_dir, STATE_FILE), state)
        rollout = self._rollout_position()
        if rollout["mid_rollout"]:
            os.makedirs(output_dir, exist_ok=True)
            files.torch_save(self._mid_rollout_state(), self._rollout_buffer_path(output_dir))
        self.accelerator.wait_for_everyone()  # every process's files are written
        if self.args.should_save:
            files.sync_folder(output_dir)
            extra = {"guard": self._guard.state()} if self._guard is not None else {}
            files.write_json(marker, files.marker(self, {**rollout, **extra}))
            files.sync_folder(output_dir)
            rotate_checkpoints(
                output_dir=run_dir,
                save_total_limit=limit,
                best_model_checkpoint=self.state.best_model_checkpoint,
                use_mtime=True,
            )

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        files = self._files()
        path = os.path.join(checkpoint, STATE_FILE)
        if os.path.exists(path):
            with open(path) as f:
                self.load_method_state(json.load(f))
        elif self.method_state():
            raise FileNotFoundError(
                f"Resuming {type(self).__name__} from {checkpoint}, which has no {STATE_FILE}: the method's state "
                "(coefficients, schedules) cannot be restored. Resume from a checkpoint this trainer wrote."
            )
        if files.is_complete(checkpoint):
            self._restore_rollout_position(files.read_marker(checkpoint), checkpoint)

    def _restore_rollout_position(self, info: dict[str, Any], checkpoint: str) -> None:
        if self._guard is not None and info.get("guard"):
            self._guard.load_state(info["guard"])
        micro_steps = int(info.get("micro_steps", 0))
        saved_every = int(info.get("micro_steps_per_rollout_batch", self.micro_steps_per_rollout_batch))
        if not info.get("mid_rollout"):  # saved at a rollout-batch boundary: the next step generates
            self._step = micro_steps if micro_steps % self.micro_steps_per_rollout_batch == 0 else 0
            return
        if saved_every != self.micro_steps_per_rollout_batch:
            raise ValueError(
                f"The checkpoint was written in the middle of a rollout batch of {saved_every} micro-batches, but this "
                f"run's rollout batches have {self.micro_steps_per_rollout_batch} (steps_per_generation * num_iterations). Resume "
                "with the checkpoint's steps_per_generation and num_iterations."
            )
        path = self._rollout_buffer_path(checkpoint)
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"{checkpoint} was saved in the middle of a rollout batch, but {os.path.basename(path)} (this "
                "process's part of that batch) is missing: the run cannot continue the batch. Resume with as many "
                "processes as wrote the checkpoint, or from a checkpoint at a rollout-batch boundary."
            )
        self._step = micro_steps  # TRL's counter: where in the rollout batch the run stands
        # Onto the CPU first: tensors saved by a CPU process of a gloo group carry the location tag "cpu:0", which
        # torch.load cannot map to a device by itself; then onto this process's device.
        state = torch.load(path, map_location="cpu", weights_only=True)
        device = self.accelerator.device

        def to_device(value):
            if isinstance(value, torch.Tensor):
                return value.to(device)
            if isinstance(value, dict):
                return {key: to_device(item) for key, item in value.items()}
            if isinstance(value, (list, tuple)):
                return type(value)(to_device(item) for item in value)
            return value

        self._load_mid_rollout_state(to_device(state))
