"""The `healtrl select` / `healtrl eval` arguments shared by tests/test_select_eval_processes.py and its worker."""

from __future__ import annotations

import os


def select_args(out: str) -> list[str]:
    # 24 questions in batches of 4: 6 batches, 3 rounds of 2 processes.
    return ["--config", "configs/select_toy.yaml", "--output_dir", os.path.join(out, "select"), "--max_questions", "24",
            "--top_k", "8", "--batch_size", "4", "--no_progress"]  # fmt: skip


def eval_args(out: str) -> list[str]:
    # 13 problems x k=4 = 52 sequences in batches of 8: 7 batches, the last one short and on rank 0.
    return ["--model", "healtrl-toy/qwen2-add", "--tasks", "toy-add", "--k", "4", "--num_samples", "13",
            "--batch_size", "8", "--max_new_tokens", "4", "--temperature", "1.0", "--seed", "5",
            "--output_dir", os.path.join(out, "eval"), "--no_progress"]  # fmt: skip


def checkpoints_args(out: str, run: str) -> list[str]:
    return ["--checkpoints", run, "--output_dir", os.path.join(out, "checkpoints"), "--no_progress"]


def make_run(run) -> None:
    """A training-run folder with two checkpoints (random weights at step 10, the warmed-up toy model at step 20) and
    a config.yaml whose best-checkpoint rule is pass@2 at temperature 1 on 12 toy-add problems."""
    import yaml

    from healtrl.toy import build_model, load_toy_model

    model, tokenizer = load_toy_model("healtrl-toy/qwen2-add")
    for step, m in [(10, build_model("qwen2", tokenizer=tokenizer, seed=1)), (20, model)]:
        m.save_pretrained(os.path.join(run, f"checkpoint-{step}"))
        tokenizer.save_pretrained(os.path.join(run, f"checkpoint-{step}"))
    rule = {"tasks": ["toy-add"], "metric": "pass@2", "k": 2, "temperature": 1.0, "every_steps": 10,
            "num_problems": 12, "seed": 3}  # fmt: skip
    config = {"trainer": "grpo", "model_name_or_path": "healtrl-toy/qwen2-add", "dataset_name": "healtrl-toy/add",
              "dataset_seed": 0, "reward_funcs": ["toy"], "use_cpu": True, "max_completion_length": 4,
              "best_checkpoint": rule}  # fmt: skip
    with open(os.path.join(run, "config.yaml"), "w") as f:
        yaml.safe_dump(config, f)
