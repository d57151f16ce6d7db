"""Entropy views during training (issue #18): `inspect_every_steps`, the entropy metrics, the completions table.

Where the pieces live:

* `RolloutInspector.on_rollouts` runs after the trainer scored the rollouts (the reward step of the TRL boundary,
  `_trl/generation.py`, after lever 3 filled its reward columns), with the rollout batch's exact per-token entropies
  (the TRL boundary's rollout statistics, `RolloutStats`: TRL's old-log-prob pass, the generation logits or one
  no-grad forward through the fused kernel, at the sampling temperature). It
  - logs `entropy/high_share` (share of completion tokens with entropy above `inspect_high_entropy`, ln 2 nats by
    default) and `entropy/q10`, `entropy/q50`, `entropy/q90` (token-entropy quantiles of the gathered batch) through
    TRL's metric buffer, so every `report_to` backend gets them;
  - with TRL's `log_completions`, adds the columns `entropy` (mean over the completion's tokens) and `token_entropies`
    (the per-token list, rounded to 4 decimals) to TRL's completions table (parquet, wandb, trackio);
  - every `inspect_every_steps` optimizer steps (training only, main process), writes the `healtrl inspect` page of the
    first `inspect_num_prompts` prompt groups of the main process's rollouts to `output_dir/inspect/step-N.html` (N:
    optimizer steps done before the rollouts were sampled; a resumed run keeps the uninterrupted run's schedule) with
    its data as `step-N.json`, and sends them to the
    trackers: wandb (`wandb.Html` of the page, a `wandb.Table` of the completions, a `wandb.Histogram` of every token
    entropy of the batch), trackio (a `trackio.Table`, and a `trackio.Histogram` where the installed trackio has one),
    tensorboard (the summary PNG as an image, and a histogram).
* `write_entropy_summary` renders `inspect_summary.png` for the model card from the first and the last view.
* The entropy columns of TRL's `log_completions` table go through `trainer.log_completion_columns` (the TRL boundary,
  `_trl/boundary.py`).
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
from typing import Any

import torch

INSPECT_DIR = "inspect"
"""Folder of the training-time views inside `output_dir` (not a checkpoint: checkpoint logic only reads
`checkpoint-N` folders)."""
SUMMARY_IMAGE = "inspect_summary.png"
"""The entropy summary written next to the model card (`healtrl.model_card`)."""
ENTROPY_QUANTILES = (0.1, 0.5, 0.9)
"""Token-entropy quantiles logged as `entropy/q10`, `entropy/q50`, `entropy/q90`."""
_STEP_RE = re.compile(r"step-(\d+)\.json$")


# ----------------------------------------------------------------------------------------------------------------
# Statistics (pure)
# ----------------------------------------------------------------------------------------------------------------
def entropy_metrics(entropies: torch.Tensor, mask: torch.Tensor, high_entropy: float) -> dict[str, float]:
    """`entropy/high_share` (share of masked tokens with entropy > `high_entropy`), `entropy/mean` and the
    `ENTROPY_QUANTILES` of the masked token entropies; empty when the mask selects no token.

    `entropy/mean` is the mean rollout token entropy, as `rollout/entropy`; that name is kept for the methods that
    compute rollout entropies at every step (`rollout_entropy`, HEAL), so that it never holds a series logged only
    on the steps of a view, which a reader of the last logged values would mistake for the run's current entropy."""
    values = entropies.detach().float()[mask.bool()]
    if values.numel() == 0:
        return {}
    out = {"entropy/high_share": (values > high_entropy).float().mean().item(), "entropy/mean": values.mean().item()}
    q = torch.quantile(values.cpu(), torch.tensor(ENTROPY_QUANTILES))
    for level, value in zip(ENTROPY_QUANTILES, q.tolist()):
        out[f"entropy/q{round(100 * level)}"] = value
    return out


def _rows(entropies: torch.Tensor, mask: torch.Tensor) -> list[list[float]]:
    """Per-row lists of the masked (completion) entropies."""
    ent, m = entropies.detach().float().cpu(), mask.bool().cpu()
    return [ent[i][m[i]].tolist() for i in range(ent.size(0))]


# ----------------------------------------------------------------------------------------------------------------
# The trainer's inspector
# ----------------------------------------------------------------------------------------------------------------
class RolloutInspector:
    """State and wiring of the training-time entropy views of one trainer (see the module docstring)."""

    def __init__(self, every: int | None, num_prompts: int, high_entropy: float, log_completions: bool):
        self.every = int(every or 0)
        self.num_prompts = int(num_prompts)
        self.high_entropy = float(high_entropy)
        self.log_completions = bool(log_completions)
        self._bucket: int | None = None  # `global_step // every` of the last view

    @classmethod
    def from_trainer(cls, trainer) -> RolloutInspector | None:
        every = trainer.config_value("inspect_every_steps") or 0
        log_completions = bool(getattr(trainer.args, "log_completions", False))
        if not every and not log_completions:
            return None
        return cls(
            every,
            trainer.config_value("inspect_num_prompts"),
            trainer.config_value("inspect_high_entropy"),
            log_completions,
        )

    def view_due(self, trainer) -> bool:
        """Whether the rollouts being generated now get a view: training, and the first generation since the optimizer
        step count reached the next multiple of `every` (step 0 included)."""
        if not self.every or trainer.mode != "train":
            return False
        step = trainer.state.global_step
        if self._bucket is None and step > 0:
            # The first rollouts of a resumed run: follow the schedule of the uninterrupted run, whose previous
            # rollouts were sampled one rollout batch (in optimizer steps) earlier.
            per_batch = trainer.micro_steps_per_rollout_batch / trainer.args.gradient_accumulation_steps
            self._bucket = int((step - per_batch) // self.every)
        return step // self.every != self._bucket

    def wants_entropies(self, trainer) -> bool:
        """Whether the rollouts being generated need per-token entropies for this inspector."""
        return self.log_completions or self.view_due(trainer)

    def on_rollouts(self, trainer, prompts, completion_ids, rewards_per_func, entropies) -> None:
        """Metrics, completion columns and (when due) the view, from one rollout batch.

        Args:
            prompts, completion_ids: this process's rollouts.
            rewards_per_func: (B_global, n_funcs), gathered, augmentation columns filled.
            entropies: `(local, local_mask, gathered, gathered_mask)` right-padded per-token entropies.
        """
        local, local_mask, gathered, gathered_mask = entropies
        for name, value in entropy_metrics(gathered, gathered_mask, self.high_entropy).items():
            trainer.log_metric(name, value)
        rows = _rows(local, local_mask)
        if self.log_completions:
            trainer.log_completion_columns(
                {
                    "entropy": [sum(r) / len(r) if r else float("nan") for r in rows],
                    "token_entropies": [[round(h, 4) for h in r] for r in rows],
                },
            )
        if not self.view_due(trainer):
            return
        self._bucket = trainer.state.global_step // self.every
        if not trainer.accelerator.is_main_process:
            return
        weights = trainer.reward_weights.to(rewards_per_func.device)
        total = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        offset = trainer.accelerator.process_index * len(prompts)
        rewards = total[offset : offset + len(prompts)].tolist()
        run = build_run(trainer, prompts, completion_ids, rows, rewards)
        write_view(trainer, run, gathered[gathered_mask.bool()].float().cpu())


def build_run(trainer, prompts, completion_ids, rows, rewards):
    """An `InspectRun` ("step N") of the first `inspect_num_prompts` prompt groups of this process's rollouts."""
    from ..views.entropy import CompletionView, InspectRun, PromptGroup, format_prompt, token_texts

    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    size = trainer.num_generations
    groups = []
    for start in range(0, min(len(prompts), size * trainer.config_value("inspect_num_prompts")), size):
        group = PromptGroup(prompt=prompts[start], prompt_text=format_prompt(prompts[start]))
        for i in range(start, min(start + size, len(prompts))):
            ids = list(completion_ids[i])
            group.completions.append(
                CompletionView(
                    token_ids=ids,
                    tokens=token_texts(tokenizer, ids),
                    entropies=rows[i][: len(ids)],
                    probs=[],
                    text=tokenizer.decode(ids, skip_special_tokens=True),
                    truncated=False,
                    reward=float(rewards[i]),
                )
            )
        groups.append(group)
    return InspectRun(
        model=f"step {trainer.state.global_step}",
        groups=groups,
        temperature=float(trainer.temperature),
        seed=int(trainer.args.seed),
    )


def write_view(trainer, run, all_entropies: torch.Tensor) -> list[str]:
    """Write `step-N.html` and `step-N.json` into `output_dir/inspect` and send the view to the trackers."""
    from ..views.entropy import render_html, run_to_dict

    step = trainer.state.global_step
    folder = os.path.join(trainer.args.output_dir, INSPECT_DIR)
    os.makedirs(folder, exist_ok=True)
    page = render_html([run], title=f"healtrl: rollouts at step {step}")
    html_path = os.path.join(folder, f"step-{step}.html")
    with open(html_path, "w", encoding="utf-8") as f:
        f.write(page)
    json_path = os.path.join(folder, f"step-{step}.json")
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump({"step": step, "run": run_to_dict(run)}, f, default=str)
    trackers = find_trackers(trainer)
    if trackers:
        send_to_trackers(trackers, run, page, all_entropies, step, folder)
    return [html_path, json_path]


# ----------------------------------------------------------------------------------------------------------------
# Trackers
# ----------------------------------------------------------------------------------------------------------------
def find_trackers(trainer) -> dict[str, Any]:
    """The trackers of this run that take a view: `wandb` and `trackio` (modules, imported only when named in
    `report_to`; wandb only with an active run), `tensorboard` (the `SummaryWriter` of transformers'
    `TensorBoardCallback`, once it has one)."""
    report_to = trainer.args.report_to or []
    found: dict[str, Any] = {}
    if "wandb" in report_to:
        import wandb

        if getattr(wandb, "run", None) is not None:
            found["wandb"] = wandb
    if "trackio" in report_to:
        import trackio

        found["trackio"] = trackio
    for callback in trainer.callback_handler.callbacks:
        writer = getattr(callback, "tb_writer", None)
        if type(callback).__name__ == "TensorBoardCallback" and writer is not None:
            found["tensorboard"] = writer
    return found


def completions_frame(run):
    """One row per completion of a view: step, prompt, completion, reward, mean entropy, per-token entropies."""
    import pandas as pd

    rows = [
        {
            "step": run.model,
            "prompt": g.prompt_text,
            "completion": c.text,
            "reward": c.reward,
            "entropy": c.mean_entropy,
            "token_entropies": " ".join(f"{t!r}:{h:.3f}" for t, h in zip(c.tokens, c.entropies)),
        }
        for g in run.groups
        for c in g.completions
    ]
    return pd.DataFrame(rows)


def send_to_trackers(trackers: dict[str, Any], run, page: str, all_entropies: torch.Tensor, step: int, folder: str):
    """wandb: the page, the completions table, the entropy histogram; trackio: the table (and a histogram where its
    version has one); tensorboard: the summary PNG and the histogram."""
    values = all_entropies.numpy()
    if "wandb" in trackers:
        wandb = trackers["wandb"]
        wandb.log(
            {
                "inspect/rollouts": wandb.Html(page, inject=False),
                "inspect/completions": wandb.Table(dataframe=completions_frame(run)),
                "entropy/histogram": wandb.Histogram(values),
                "train/global_step": step,
            }
        )
    if "trackio" in trackers:
        trackio = trackers["trackio"]
        logs = {"inspect/completions": trackio.Table(dataframe=completions_frame(run))}
        if hasattr(trackio, "Histogram"):
            logs["entropy/histogram"] = trackio.Histogram(values)
        trackio.log(logs, step=step)
    if "tensorboard" in trackers:
        import matplotlib.image

        from ..views.entropy import render_summary_png

        writer = trackers["tensorboard"]
        path = render_summary_png([run], os.path.join(folder, f"step-{step}.png"))
        writer.add_image("inspect/summary", matplotlib.image.imread(path)[..., :3], step, dataformats="HWC")
        writer.add_histogram("entropy/histogram", values, step)
        writer.flush()


# ----------------------------------------------------------------------------------------------------------------
# Model card
# ----------------------------------------------------------------------------------------------------------------
def view_files(output_dir: str) -> list[str]:
    """The `step-N.json` views of a run, by increasing N."""
    found = []
    for path in glob.glob(os.path.join(output_dir, INSPECT_DIR, "step-*.json")):
        match = _STEP_RE.search(os.path.basename(path))
        if match:
            found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found)]


def load_run(path: str):
    """The `InspectRun` stored in a `step-N.json` view."""
    from ..views.entropy import CompletionView, InspectRun, PromptGroup, format_prompt

    with open(path, encoding="utf-8") as f:
        data = json.load(f)["run"]
    fields = ("token_ids", "tokens", "entropies", "probs", "text", "truncated", "reward")
    groups = [
        PromptGroup(
            prompt=p["prompt"],
            prompt_text=format_prompt(p["prompt"]),
            completions=[CompletionView(**{k: c[k] for k in fields}) for c in p["completions"]],
        )
        for p in data["prompts"]
    ]
    return InspectRun(model=data["model"], groups=groups, temperature=data["temperature"], seed=data["seed"])


def write_entropy_summary(output_dir: str, directory: str) -> str | None:
    """Render `inspect_summary.png` into `directory` from the first and the last view of `output_dir` (one when there
    is one); returns its file name, or None when the run wrote no view."""
    from ..views.entropy import render_summary_png

    files = view_files(output_dir)
    if not files:
        return None
    chosen = [files[0]] if len(files) == 1 else [files[0], files[-1]]
    runs = [load_run(path) for path in chosen]
    if not any(c.entropies for r in runs for g in r.groups for c in g.completions):
        return None
    os.makedirs(directory, exist_ok=True)
    render_summary_png(runs, os.path.join(directory, SUMMARY_IMAGE))
    return SUMMARY_IMAGE


def check_inspect_fields(config) -> None:
    """Clear errors for bad `inspect_*` config values."""
    every = config.inspect_every_steps
    if every is not None and (not isinstance(every, int) or isinstance(every, bool) or every < 0):
        raise ValueError(f"inspect_every_steps must be a non-negative integer (0 or null: no views), got {every!r}.")
    if not isinstance(config.inspect_num_prompts, int) or config.inspect_num_prompts < 1:
        raise ValueError(f"inspect_num_prompts must be a positive integer, got {config.inspect_num_prompts!r}.")
    high = config.inspect_high_entropy
    if not isinstance(high, (int, float)) or isinstance(high, bool) or not math.isfinite(high) or high < 0:
        raise ValueError(f"inspect_high_entropy must be a finite number >= 0 (nats), got {high!r}.")
