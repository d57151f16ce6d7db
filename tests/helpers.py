"""Shared builders for the trainer tests: a tiny toy model, a toy dataset and a GRPO config, all offline."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from transformers import set_seed

from benchmarks._bench import loss_and_grads, next_inputs  # noqa: F401  (one micro-batch: shared with the benchmarks)
from healtrl.toy.model import build_model
from healtrl.toy.tasks import make_dataset, toy_reward
from healtrl.toy.tokenizer import build_tokenizer

# Keys of the log history that measure wall time: they differ between any two runs.
TIMING_KEYS = {"step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second"}


def digit_reward(completions, **kwargs) -> list[float]:
    """Share of digits in each completion: a dense reward, so that an untrained model gets non-zero advantages."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]


def tiny_model(seed: int = 0, hidden_size: int = 32, num_layers: int = 1):
    return build_model("qwen2", hidden_size=hidden_size, num_layers=num_layers, num_heads=2, seed=seed)


def tiny_dataset(n: int = 32, family="add", seed: int = 0):
    return make_dataset(family, n, seed=seed)


def grpo_kwargs(output_dir, **overrides) -> dict:
    """Config fields for a GRPO run of a few seconds on the tiny model (8 prompts x 4 generations per step)."""
    kwargs = dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=16,
        num_generations=4,
        max_completion_length=4,
        learning_rate=5e-3,
        max_steps=2,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        temperature=1.0,
        bf16=False,  # TRL defaults to bf16 autocast, also on CPU; parity is checked in float32
        activation_checkpointing=False,
    )
    kwargs.update(overrides)
    return kwargs


def tiny_model_path(root) -> str:
    """The tiny model saved to a folder, so TRL can build its reference model from the path (beta > 0)."""
    path = Path(root) / "tiny-model"
    if not path.exists():
        tiny_model().save_pretrained(path)
        build_tokenizer().save_pretrained(path)
    return str(path)


def build_trainer(trainer_cls, config_cls, output_dir, *, reward_funcs=None, train_dataset=None, model=None, **cfg):
    set_seed(0)
    tokenizer = build_tokenizer()
    if model is None:
        model = tiny_model_path(Path(output_dir).parent) if cfg.get("beta") else tiny_model()
    return trainer_cls(
        model=model,
        reward_funcs=reward_funcs if reward_funcs is not None else [toy_reward, digit_reward],
        args=config_cls(**grpo_kwargs(output_dir, **cfg)),
        train_dataset=train_dataset if train_dataset is not None else tiny_dataset(),
        processing_class=tokenizer,
    )


def clean_history(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in entry.items() if k not in TIMING_KEYS} for entry in history]


def assert_histories_equal(a: list[dict], b: list[dict], rel: float = 1e-6, abs_: float = 1e-7):
    a, b = clean_history(a), clean_history(b)
    assert len(a) == len(b)
    for step_a, step_b in zip(a, b):
        assert set(step_a) == set(step_b), set(step_a) ^ set(step_b)
        for key in step_a:
            va, vb = step_a[key], step_b[key]
            if isinstance(va, float) and isinstance(vb, float):
                if math.isnan(va) and math.isnan(vb):
                    continue
                assert math.isclose(va, vb, rel_tol=rel, abs_tol=abs_), (key, va, vb)
            else:
                assert va == vb, (key, va, vb)


def assert_close_rel(actual, expected, rel: float = 1e-5, msg: str = ""):
    """Max abs error <= rel * max |expected|: float32 rounding of a reduction-order change, whatever the scale."""
    err = (actual.double() - expected.double()).abs().max().item()
    scale = expected.double().abs().max().item()
    assert err <= rel * max(scale, 1e-12), f"{msg}: max abs error {err:.3g} vs max |expected| {scale:.3g}"


def assert_params_equal(model_a, model_b, atol: float = 1e-6):
    params_b = dict(model_b.named_parameters())
    for name, pa in model_a.named_parameters():
        torch.testing.assert_close(pa.detach(), params_b[name].detach(), rtol=1e-5, atol=atol, msg=name)


ROOT = Path(__file__).resolve().parent.parent


def run_two_processes(script: str, output_dir) -> list[dict]:
    """Run `script OUTPUT_DIR` under torchrun with 2 CPU processes (gloo); return each rank's rank{r}.json."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone"]
    result = subprocess.run(
        [*cmd, str(script), str(output_dir)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return [json.loads((Path(output_dir) / f"rank{r}.json").read_text()) for r in range(2)]


def reference_stats(trainer, inputs):
    """log p(target), entropy, sum p^2, sum p^2 log p of each completion token under `trainer.model`, float64."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    with torch.no_grad():
        logits = trainer.model(input_ids=ids, attention_mask=attn).logits.double()
    logits = logits[:, inputs["prompt_ids"].size(1) - 1 : -1] / trainer.temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    p = logp_all.exp()
    logp = logp_all.gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)
    return logp, -(p * logp_all).sum(-1), (p * p).sum(-1), (p * p * logp_all).sum(-1)


def shut_down_process_group() -> None:
    """End a torchrun worker cleanly: without it, gloo's threads can abort the process at exit (SIGABRT)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def sandbox_expected() -> bool:
    """Whether the code sandbox must work here (Linux). Its tests run there and fail, with the sandbox's own message,
    when it cannot start: a skip would hide a sandbox that breaks, e.g., under a virtual environment."""
    import sys

    return sys.platform == "linux"


def free_port() -> int:
    """A free TCP port on the loopback interface, for a launch's rendezvous (not a fixed default: parallel runs
    collide)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def evalplus_assertion_test(inputs, results) -> str:
    """A HumanEval+ (Hub evalplus/humanevalplus) shaped test: EvalPlus's `assertion` helper on np.allclose."""
    return (
        "import numpy as np\n\n"
        "def is_floats(x) -> bool:\n"
        "    if isinstance(x, float):\n        return True\n"
        "    if isinstance(x, (list, tuple)):\n        return all(isinstance(i, float) for i in x)\n"
        "    return False\n\n"
        "def assertion(out, exp, atol):\n"
        "    exact_match = out == exp\n"
        "    if atol == 0 and is_floats(exp):\n        atol = 1e-6\n"
        "    if not exact_match and atol != 0:\n        assert np.allclose(out, exp, rtol=1e-07, atol=atol)\n"
        "    else:\n        assert exact_match\n\n"
        "def check(candidate):\n"
        f"    inputs = {inputs!r}\n"
        f"    results = {results!r}\n"
        "    for inp, exp in zip(inputs, results):\n        assertion(candidate(*inp), exp, 0)\n"
    )
