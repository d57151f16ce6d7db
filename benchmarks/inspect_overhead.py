"""Step time with the training-time entropy views on (`inspect_every_steps` at its default) vs off (issue #18 item 2).

Both runs are `configs/toy_grpo.yaml` as `python train.py` trains it (healtrl-toy/qwen2-add, 16 prompts x 8
generations per step, one torch thread), `report_to: none`, each for `--steps` optimizer steps from step 0, so the
"on" run writes `steps / inspect_every_steps` views (at steps 0, 50, ...: the rate of a long run). The two runs of a
round run back to back (order rotated per round). A step is timed from `on_step_begin` to `on_step_end`: generation,
rollout entropies, rewards, the view (HTML + JSON, written in `_calculate_rewards`), loss, backward, optimizer.

The views cost time only on the steps that write one (the other steps of the "on" run compute nothing more: rollout
entropies are computed only for a view, or for `rollout_entropy` / `log_completions`, which both runs leave off). So
the verdict uses the paired estimator, which the load of a shared machine does not swamp: per view, the extra time of
the view step over its neighbouring steps (up to 3 each side) of the same run, minus the same difference at the same
step indices of the "off" run of that round (the step-0 warm-up that both runs share cancels), amortised over the
interval: ratio = 1 + extra / (every x mean step time of that round's "off" run). Verdict: "yes" when the upper
quartile of those per-view ratios is <= 1.05, "NO" when the lower quartile is above 1.05, "inconclusive" otherwise.
Also reported, not judged: the direct ratio (mean step time on / off per round; whole runs move by tens of percent
under load, so its IQR usually spans the target), and the time to render the summary PNG that a tensorboard run adds
to each view (matplotlib, measured on the last view).

    python benchmarks/inspect_overhead.py --output benchmarks/results/inspect_overhead.md  # 5 rounds of 50 steps,
                                                                # ~3 min on 2 shared CPU cores (2026-11-25)
    python benchmarks/inspect_overhead.py --rounds 1 --steps 10 # quick look
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import statistics
import tempfile
import time
import warnings

import torch
from _bench import cpu_model, quartiles, rotation
from transformers import PrinterCallback, TrainerCallback

DEFAULT_EVERY = 50


class StepTimer(TrainerCallback):
    def __init__(self):
        self.times: list[float] = []
        self._start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self._start)


def run(every: int, steps: int, output_dir: str):
    """Train the toy config for `steps` steps with `inspect_every_steps=every`; returns (step times, trainer)."""
    from healtrl.cli.config import resolve
    from healtrl.cli.run import _load_data, _load_tokenizer, _model_init_kwargs, configure_threads
    from healtrl.data import get_reward_funcs
    from healtrl.models import resolve_model_path
    from healtrl.trainers import get_trainer_classes

    resolved = resolve(
        ["--config", "configs/toy_grpo.yaml", "--max_steps", str(steps), "--inspect_every_steps", str(every),
         "--logging_steps", "10", "--output_dir", output_dir, "--disable_tqdm", "true"]
    )  # fmt: skip
    script_args, model_args, trainer_args = resolved.script_args, resolved.model_args, resolved.trainer_args
    configure_threads(script_args.torch_num_threads)
    trainer_cls, _ = get_trainer_classes(resolved.trainer_name)
    model_path = resolve_model_path(model_args.model_name_or_path)
    tokenizer = _load_tokenizer(model_path, model_args, trainer_args)
    train_dataset, _ = _load_data(script_args, trainer_args)
    trainer_args.model_init_kwargs = _model_init_kwargs(model_args, trainer_args)
    trainer = trainer_cls(
        model=model_path,
        reward_funcs=get_reward_funcs(script_args.reward_funcs),
        args=trainer_args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
    )
    trainer.remove_callback(PrinterCallback)
    timer = StepTimer()
    trainer.add_callback(timer)
    trainer.train()
    return timer.times, trainer


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=DEFAULT_EVERY, help="optimizer steps per run (default 50)")
    parser.add_argument("--every", type=int, default=DEFAULT_EVERY, help="inspect_every_steps of the 'on' run")
    parser.add_argument("--output", default=None, help="also write the Markdown result here")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")

    from healtrl.trainers._inspect_hooks import load_run, view_files
    from healtrl.views.inspection import render_summary_png

    ratios, on_means, off_means, view_steps, other_steps, png_ms, extras, paired = [], [], [], [], [], [], [], []
    load_start = os.getloadavg()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = rotation([("on", args.every), ("off", 0)], r)
            means, times_of, done = {}, {}, []
            for name, every in order:
                out = os.path.join(tmp, f"{name}-{r}")
                times, trainer = run(every, args.steps, out)
                means[name], times_of[name] = statistics.fmean(times), times
                if name == "on":
                    views = view_files(out)
                    expected = len(range(0, args.steps, args.every))
                    assert len(views) == expected, (views, expected)
                    done = [int(os.path.basename(v)[5:-5]) for v in views]  # step-N.json: view at step N
                    view_steps += [times[s] for s in done]  # step index s = the step that sampled the view
                    other_steps += [t for i, t in enumerate(times) if i not in done]
                    start = time.perf_counter()
                    render_summary_png([load_run(views[-1])], os.path.join(tmp, "summary.png"))
                    png_ms.append(1000 * (time.perf_counter() - start))
                del trainer
            for s in done:  # paired: the view step against its neighbours, on minus off at the same step indices
                near = [i for i in range(max(s - 3, 0), min(s + 4, args.steps)) if i not in done]
                excess = {n: times_of[n][s] - statistics.median(times_of[n][i] for i in near) for n in times_of}
                extras.append(excess["on"] - excess["off"])
                paired.append(1 + extras[-1] / (args.every * means["off"]))
            ratios.append(means["on"] / means["off"])
            on_means.append(means["on"])
            off_means.append(means["off"])
            print(f"round {r}: on {1000 * means['on']:.1f} ms, off {1000 * means['off']:.1f} ms, "
                  f"direct ratio {ratios[-1]:.3f}, paired ratio {paired[-1]:.4f}", flush=True)  # fmt: skip

    minutes = (time.perf_counter() - started) / 60
    load_end = os.getloadavg()
    estimate = statistics.median(paired)
    p_lo, _, p_hi = quartiles(paired)
    lo, _, hi = quartiles(ratios)
    if p_hi <= 1.05:
        verdict = "yes"
    elif p_lo > 1.05:
        verdict = "NO"
    else:
        verdict = "inconclusive (the IQR of the paired ratios spans 1.05)"
    import transformers
    import trl

    lines = [
        "# Training-time entropy views: step time on vs off (issue #18 item 2)",
        "",
        f"- date: {datetime.date.today().isoformat()}; wall time {minutes:.1f} min",
        f"- machine: {cpu_model()}, {os.cpu_count()} logical cores shared with other "
        f"jobs (load average {load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end)",
        f"- versions: Python {platform.python_version()}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}, trl {trl.__version__}",
        "- script: `benchmarks/inspect_overhead.py` (its docstring says what is timed and how the verdict is reached): "
        f"`configs/toy_grpo.yaml`, {args.steps} optimizer steps per run from step 0, `inspect_every_steps` "
        f"{args.every} (on) vs 0 (off), {args.rounds} rounds, order rotated per round, "
        f"{len(paired)} views in all.",
        "",
        f"Command: `python benchmarks/inspect_overhead.py --rounds {args.rounds} --steps {args.steps} "
        f"--every {args.every}{' --output ' + shlex.quote(args.output) if args.output else ''}`",
        "",
        "| | value |",
        "|---|---|",
        "| estimator of the verdict | paired: per view, (view step - median of its neighbours) in the 'on' run minus "
        "the same at the same steps of that round's 'off' run, amortised: 1 + extra / "
        f"({args.every} x mean 'off' step) |",
        f"| extra time of a view step (ms, median [IQR] over views) | {1000 * statistics.median(extras):.1f} "
        f"[{1000 * quartiles(extras)[0]:.1f} to {1000 * quartiles(extras)[2]:.1f}] |",
        f"| step-time ratio on / off, paired estimate (median [IQR] over views) | {estimate:.4f} "
        f"[{p_lo:.4f}-{p_hi:.4f}] |",
        "| target | <= 1.05 |",
        f"| meets (upper quartile of the paired ratios <= target) | {verdict} |",
        f"| mean step time, views off (ms, median over rounds) | {1000 * statistics.median(off_means):.1f} |",
        f"| mean step time, views on (ms, median over rounds) | {1000 * statistics.median(on_means):.1f} |",
        f"| direct ratio on / off, not judged: load moves whole runs (median [IQR] of per-round ratios) | "
        f"{statistics.median(ratios):.3f} [{lo:.3f}-{hi:.3f}] |",
        f"| per-round direct ratios | {', '.join(f'{x:.3f}' for x in ratios)} |",
        f"| step with a view (ms, median) | {1000 * statistics.median(view_steps):.1f} |",
        f"| other steps of the 'on' run (ms, median) | {1000 * statistics.median(other_steps):.1f} |",
        f"| summary PNG per view, tensorboard runs only (ms, median) | {statistics.median(png_ms):.0f} |",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()
