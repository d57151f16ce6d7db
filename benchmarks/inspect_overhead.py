"""Step time with the training-time entropy views on (`inspect_every_steps` at its default) vs off (issue #18 item 2).

Both runs are `configs/toy_grpo.yaml` as `python train.py` trains it (healtrl-toy/qwen2-add, 16 prompts x 8
generations per step, one torch thread), `report_to: none`, each for `--steps` optimizer steps from step 0, so the
"on" run writes `steps / inspect_every_steps` views (at steps 0, 50, ...: the rate of a long run). The runs alternate
within each round (order rotated per round) so machine load hits both alike. A step is timed from `on_step_begin` to
`on_step_end`: generation, rollout entropies, rewards, the view (HTML + JSON, written in `_calculate_rewards`),
loss, backward, optimizer. Reported: the median over rounds of (mean step time on) / (mean step time off), with the
interquartile range (the machine's load moves it by a few percent either way); the median time of a view step and of
other steps of the "on" run, and the extra time of a view step over its neighbouring steps of the same run (paired, so
load cancels) with the ratio it implies at the interval; and the time to render the summary PNG that a tensorboard
run adds to each view (matplotlib, measured on the last view).

    python benchmarks/inspect_overhead.py                       # 5 rounds of 50 steps (~4 min on 2 CPU cores)
    python benchmarks/inspect_overhead.py --rounds 1 --steps 10 # quick look
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from transformers import PrinterCallback, TrainerCallback  # noqa: E402

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


def quartiles(values):
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return q[0], q[2]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=DEFAULT_EVERY, help="optimizer steps per run (default 50)")
    parser.add_argument("--every", type=int, default=DEFAULT_EVERY, help="inspect_every_steps of the 'on' run")
    parser.add_argument("--output", default=None, help="also write the Markdown result here")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")

    from healtrl.inspect_view import render_summary_png
    from healtrl.trainers._inspect_hooks import load_run, view_files

    ratios, on_means, off_means, view_steps, other_steps, png_ms, extras = [], [], [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = [("on", args.every), ("off", 0)]
            if r % 2:
                order.reverse()
            means = {}
            for name, every in order:
                out = os.path.join(tmp, f"{name}-{r}")
                times, trainer = run(every, args.steps, out)
                means[name] = statistics.fmean(times)
                if name == "on":
                    views = view_files(out)
                    expected = len(range(0, args.steps, args.every))
                    assert len(views) == expected, (views, expected)
                    done = [int(os.path.basename(v)[5:-5]) for v in views]  # step-N.json: view at step N
                    view_steps += [times[s] for s in done]  # step index s = the step that sampled the view
                    for s in done:  # paired: the view step against its neighbours of the same run
                        near = [times[i] for i in range(max(s - 3, 0), min(s + 4, len(times))) if i not in done]
                        extras.append(times[s] - statistics.median(near))
                    other_steps += [t for i, t in enumerate(times) if i not in done]
                    start = time.perf_counter()
                    render_summary_png([load_run(views[-1])], os.path.join(tmp, "summary.png"))
                    png_ms.append(1000 * (time.perf_counter() - start))
                del trainer
            ratios.append(means["on"] / means["off"])
            on_means.append(means["on"])
            off_means.append(means["off"])
            print(f"round {r}: on {1000 * means['on']:.1f} ms, off {1000 * means['off']:.1f} ms, "
                  f"ratio {ratios[-1]:.3f}", flush=True)  # fmt: skip

    extra = statistics.median(extras)
    estimate = 1 + extra / (args.every * statistics.median(off_means))
    lo, hi = quartiles(ratios)
    ratio = statistics.median(ratios)
    if hi <= 1.05:
        verdict = "yes"
    elif lo > 1.05:
        verdict = "NO"
    else:  # the load of the shared machine moves whole runs by more than the target
        verdict = f"inconclusive (IQR spans 1.05); paired estimate {'meets' if estimate <= 1.05 else 'misses'} it"
    lines = [
        "# Training-time entropy views: step time on vs off (issue #18 item 2)",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- device: {platform.processor() or platform.machine()}, {os.cpu_count()} logical cores (shared), "
        f"Python {platform.python_version()}, torch {torch.__version__}",
        "- script: `benchmarks/inspect_overhead.py` (its docstring says what is timed): `configs/toy_grpo.yaml`, "
        f"{args.steps} optimizer steps per run from step 0, `inspect_every_steps` {args.every} (on) vs 0 (off), "
        f"{args.rounds} rounds, order rotated per round.",
        "",
        f"Command: `python benchmarks/inspect_overhead.py --rounds {args.rounds} --steps {args.steps} "
        f"--every {args.every}`",
        "",
        "| | value |",
        "|---|---|",
        f"| mean step time, views off (ms, median over rounds) | {1000 * statistics.median(off_means):.1f} |",
        f"| mean step time, views on (ms, median over rounds) | {1000 * statistics.median(on_means):.1f} |",
        f"| ratio on / off (median [IQR] of per-round ratios) | {ratio:.3f} [{lo:.3f}-{hi:.3f}] |",
        "| target | <= 1.05 |",
        f"| meets | {verdict} |",
        f"| step with a view (ms, median) | {1000 * statistics.median(view_steps):.1f} |",
        f"| other steps of the 'on' run (ms, median) | {1000 * statistics.median(other_steps):.1f} |",
        f"| extra time of a view step over its neighbours (ms, median, paired within a run) | {1000 * extra:.1f} |",
        f"| ratio implied by that extra time: 1 + extra / ({args.every} x off step) | {estimate:.4f} |",
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
