"""Evaluation: `healtrl.functional.pass_at_k`, the eval engine (`healtrl.evaluation`), `healtrl eval`, and periodic
evaluation during training, on the toy world (CPU, offline)."""

from __future__ import annotations

import importlib.machinery
import json
import math
import sys
import types
from fractions import Fraction

import numpy as np
import pytest
import torch

from healtrl.cli import main
from healtrl.cli.eval import eval_main
from healtrl.evaluation.callback import PeriodicEvalCallback
from healtrl.evaluation.engine import (
    Completion,
    SamplingSettings,
    TransformersGenerator,
    VLLMGenerator,
    evaluate,
    evaluate_task,
    pass_at_k_points,
    score_completions,
    tokenize_prompts,
)
from healtrl.functional import pass_at_k

TOY = "healtrl-toy/qwen2-add"


def exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """1 - C(n - c, k) / C(n, k) in exact rational arithmetic (Chen et al. 2021, eq. 1)."""
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


# ----------------------------------------------------------------------------------------------------------------
# pass_at_k
# ----------------------------------------------------------------------------------------------------------------
def test_pass_at_k_matches_exact_binomials():
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(float(exact_pass_at_k(n, c, k)), abs=1e-12), (n, c, k)


def test_pass_at_k_large_n_is_stable():
    # C(1000, 500) overflows float64; the product form stays accurate.
    for n, c, k in [(1000, 3, 500), (1000, 1, 999), (1024, 17, 256), (500, 0, 64), (300, 299, 2)]:
        value = pass_at_k(n, c, k)
        assert isinstance(value, float)
        assert value == pytest.approx(float(exact_pass_at_k(n, c, k)), rel=1e-12, abs=1e-15)


def test_pass_at_1_is_the_fraction_correct_and_pass_at_n_is_any_correct():
    rng = np.random.default_rng(0)
    n = 32
    c = rng.integers(0, n + 1, size=50)
    np.testing.assert_allclose(pass_at_k(n, c, 1), c / n, rtol=0, atol=1e-14)
    np.testing.assert_array_equal(pass_at_k(n, c, n), (c > 0).astype(float))


def test_pass_at_k_vectorised_numpy_and_torch_agree_with_scalars():
    rng = np.random.default_rng(1)
    n = rng.integers(1, 40, size=64)
    c = np.array([rng.integers(0, m + 1) for m in n])
    k = np.array([rng.integers(1, m + 1) for m in n])
    expected = np.array([float(exact_pass_at_k(int(a), int(b), int(d))) for a, b, d in zip(n, c, k)])

    out = pass_at_k(n, c, k)
    assert isinstance(out, np.ndarray) and out.dtype == np.float64 and out.shape == (64,)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-14)

    out_t = pass_at_k(torch.tensor(n), torch.tensor(c), torch.tensor(k))
    assert isinstance(out_t, torch.Tensor) and out_t.dtype == torch.float64
    np.testing.assert_allclose(out_t.numpy(), expected, rtol=1e-12, atol=1e-14)

    # broadcasting: one n and k, many c; a tensor among ints gives a tensor
    out_b = pass_at_k(16, torch.arange(17), 4)
    np.testing.assert_allclose(out_b.numpy(), [float(exact_pass_at_k(16, i, 4)) for i in range(17)], atol=1e-14)
    assert isinstance(pass_at_k(np.int64(8), np.int64(3), np.int64(2)), float)


@pytest.mark.parametrize(
    "n, c, k, match",
    [
        (4, 2, 5, "`k`"),
        (4, 5, 2, "`c`"),
        (4, -1, 2, "`c` must be non-negative"),
        (-4, 0, 1, "`n` must be non-negative"),
        (4, 2, 0, "`k` must be at least 1"),
        (4, 1.5, 2, "`c` must hold whole numbers"),
        (np.array([4, 4]), np.array([1, 6]), 2, "`c`"),
    ],
)
def test_pass_at_k_rejects_bad_input(n, c, k, match):
    with pytest.raises(ValueError, match=match):
        pass_at_k(n, c, k)


def test_pass_at_k_rejects_non_numbers():
    with pytest.raises(TypeError, match="`k`"):
        pass_at_k(4, 2, True)
    with pytest.raises(TypeError, match="`c`"):
        pass_at_k(4, "2", 1)


def test_pass_at_k_points():
    assert pass_at_k_points(1) == [1]
    assert pass_at_k_points(8) == [1, 2, 4, 8]
    assert pass_at_k_points(6) == [1, 2, 4, 6]
    assert pass_at_k_points(32) == [1, 2, 4, 8, 16, 32]
    with pytest.raises(ValueError):
        pass_at_k_points(0)


# ----------------------------------------------------------------------------------------------------------------
# Scoring and summaries, with a scripted generator
# ----------------------------------------------------------------------------------------------------------------
class ScriptedGenerator:
    """Returns, for problem i, `correct[i]` right answers then wrong ones, with fixed token lengths."""

    name = "scripted"

    def __init__(self, dataset, correct):
        self.answers = list(dataset["answer"])
        self.correct = correct
        self.seen_prompt_ids = None

    def generate(self, prompt_ids, settings, desc="", progress=True):
        self.seen_prompt_ids = prompt_ids
        out = []
        for i in range(len(prompt_ids)):
            right = [Completion(self.answers[i], [5, 2], False) for _ in range(self.correct[i])]
            wrong = [Completion("wrong", [7, 7, 7, 7], True) for _ in range(settings.k - self.correct[i])]
            out.append(right + wrong)
        return out


def test_evaluate_task_counts_scores_and_lengths(toy_model_dir):
    from transformers import AutoTokenizer

    from healtrl.tasks import load_task

    tokenizer = AutoTokenizer.from_pretrained(toy_model_dir)
    dataset = load_task("toy-add").select(range(5))
    correct = [0, 1, 2, 4, 4]
    k = 4
    generator = ScriptedGenerator(dataset, correct)
    result = evaluate_task(generator, tokenizer, dataset, SamplingSettings(k=k), task="toy-add", reward="toy")

    assert result.correct == correct and result.num_problems == 5 and result.k == k
    assert result.avg_at_k == pytest.approx(sum(correct) / (5 * k))
    for j in (1, 2, 4):
        expected = sum(float(exact_pass_at_k(k, c, j)) for c in correct) / 5
        assert result.pass_at[j] == pytest.approx(expected, abs=1e-12)
    assert result.pass_at[1] == pytest.approx(result.avg_at_k)  # the unbiased pass@1 is avg@k
    n_right, n_wrong = sum(correct), 5 * k - sum(correct)
    assert result.mean_response_length == pytest.approx((2 * n_right + 4 * n_wrong) / (5 * k))
    assert result.truncated_fraction == pytest.approx(n_wrong / (5 * k))
    metrics = result.metrics()
    assert set(metrics) == {"avg@4", "pass@1", "pass@2", "pass@4", "mean_response_length", "truncated_fraction",
                            "mean_reward"}  # fmt: skip
    # the prompts went through the chat template, as TRL renders them
    assert generator.seen_prompt_ids == tokenize_prompts(tokenizer, dataset["prompt"])
    expected_ids = tokenizer.apply_chat_template(dataset["prompt"][0], add_generation_prompt=True, tokenize=True)
    assert generator.seen_prompt_ids[0] == list(getattr(expected_ids, "input_ids", expected_ids))


def test_threshold_decides_what_counts_as_correct():
    from datasets import Dataset

    dataset = Dataset.from_dict({"prompt": ["a", "b"], "score": [0.5, 1.0]})

    def graded(prompts, completions, score, **kwargs):  # a partial-credit reward: the `score` column
        return list(score)

    completions = [[Completion("x", [1], False)] * 2, [Completion("y", [1], False)] * 2]
    rewards = score_completions(dataset, completions, graded)
    assert rewards == [[0.5, 0.5], [1.0, 1.0]]
    from healtrl.evaluation.engine import summarise

    assert summarise("t", "test", "graded", 1.0, 2, completions, rewards).correct == [0, 2]
    assert summarise("t", "test", "graded", 0.5, 2, completions, rewards).correct == [2, 2]


def test_score_completions_passes_columns_like_trl_and_rejects_none():
    from datasets import Dataset

    dataset = Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": "q1"}], [{"role": "user", "content": "q2"}]], "answer": ["1", "2"]}
    )
    calls = {}

    def reward(prompts, completions, completion_ids, answer, **kwargs):
        calls.update(prompts=prompts, completions=completions, ids=completion_ids, answer=answer, extra=kwargs)
        return [1.0] * len(completions)

    completions = [[Completion("1", [3, 2], False)], [Completion("0", [4, 2], False)]]
    score_completions(dataset, completions, reward)
    assert calls["answer"] == ["1", "2"] and calls["ids"] == [[3, 2], [4, 2]]
    assert calls["completions"] == [[{"role": "assistant", "content": "1"}], [{"role": "assistant", "content": "0"}]]
    assert calls["prompts"][1] == [{"role": "user", "content": "q2"}] and calls["extra"] == {}

    with pytest.raises(ValueError, match="'none_reward' returned None"):
        score_completions(dataset, completions, lambda **kw: [None, 1.0], reward_name="none_reward")


# ----------------------------------------------------------------------------------------------------------------
# The engine on the toy model
# ----------------------------------------------------------------------------------------------------------------
def test_greedy_evaluation_matches_an_independent_decoding_loop(toy_model_dir, restore_threads):
    """Greedy decoding through `generate` gives exactly the answers of healtrl.toy's own KV-cache loop."""
    torch.set_num_threads(1)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from healtrl.tasks import load_task
    from healtrl.toy import sample_completions, toy_reward

    results = evaluate(TOY, ["toy-add"], k=2, temperature=0, max_new_tokens=4, progress=False)
    result = results.tasks["toy-add"]
    assert results.backend == "transformers" and result.num_problems == 20
    assert set(result.correct) <= {0, 2}  # greedy: both samples are the same

    dataset = load_task("toy-add")
    model = AutoModelForCausalLM.from_pretrained(toy_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(toy_model_dir)
    texts = sample_completions(model, tokenizer, dataset["prompt"], max_new_tokens=4, temperature=0)
    reference = toy_reward(completions=texts, answer=dataset["answer"])
    assert [c // 2 for c in result.correct] == [int(r) for r in reference]


def test_sampling_is_seeded_per_task(toy_model_dir, restore_threads):
    torch.set_num_threads(1)
    kwargs = dict(k=4, max_new_tokens=4, seed=3, batch_size=32, progress=False)
    alone = evaluate(TOY, ["toy-add"], **kwargs).tasks["toy-add"]
    together = evaluate(TOY, ["toy-mul", "toy-add"], **kwargs).tasks["toy-add"]
    assert alone.correct == together.correct
    assert alone.mean_response_length == together.mean_response_length
    # the global RNG of the caller is untouched
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    evaluate(TOY, ["toy-add"], **kwargs)
    assert torch.equal(torch.rand(3), expected)


def test_generation_settings_override_the_checkpoint_defaults(toy_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(toy_model_dir)
    model.generation_config.top_k = 1  # a checkpoint default that would make sampling greedy
    model.generation_config.repetition_penalty = 1.3
    generator = TransformersGenerator(model, AutoTokenizer.from_pretrained(toy_model_dir))
    config = generator._generation_config(SamplingSettings(k=2, temperature=0.7, top_p=0.9, max_new_tokens=3))
    merged, _ = model._prepare_generation_config(config)
    assert merged.top_k == 0 and merged.repetition_penalty == 1.0
    assert merged.temperature == 0.7 and merged.top_p == 0.9 and merged.do_sample and merged.max_new_tokens == 3


# ----------------------------------------------------------------------------------------------------------------
# vLLM backend, with a stand-in module (vLLM itself needs a GPU)
# ----------------------------------------------------------------------------------------------------------------
def fake_vllm_module(record):
    module = types.ModuleType("vllm")
    module.__spec__ = importlib.machinery.ModuleSpec("vllm", loader=None)

    class SamplingParams:
        def __init__(self, **kwargs):
            record["params"] = kwargs
            self.n = kwargs["n"]

    class LLM:
        def __init__(self, **kwargs):
            record["llm"] = kwargs

        def generate(self, requests, sampling_params, use_tqdm=True):
            record["requests"] = requests
            out = []
            for i, _ in enumerate(requests):
                outputs = [
                    types.SimpleNamespace(
                        text=f"{i}-{j}", token_ids=[1] * (j + 1), finish_reason="length" if j else "stop"
                    )
                    for j in range(sampling_params.n)
                ]
                out.append(types.SimpleNamespace(outputs=outputs))
            return out

    module.SamplingParams, module.LLM = SamplingParams, LLM
    return module


def test_vllm_generator_maps_settings_and_outputs(monkeypatch):
    record = {}
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm_module(record))
    generator = VLLMGenerator("some/model", dtype="bfloat16", seed=7, tensor_parallel_size=2)
    settings = SamplingSettings(k=3, temperature=0.6, top_p=0.95, max_new_tokens=100, seed=7)
    out = generator.generate([[1, 2], [3]], settings, progress=False)
    assert record["llm"]["model"] == "some/model" and record["llm"]["tensor_parallel_size"] == 2
    assert record["params"] == dict(n=3, temperature=0.6, top_p=0.95, top_k=-1, max_tokens=100, seed=7)
    assert record["requests"] == [{"prompt_token_ids": [1, 2]}, {"prompt_token_ids": [3]}]
    assert [c.text for c in out[1]] == ["1-0", "1-1", "1-2"]
    assert [c.num_tokens for c in out[0]] == [1, 2, 3] and [c.truncated for c in out[0]] == [False, True, True]


def test_backend_choice_is_explicit(monkeypatch):
    from healtrl.evaluation.engine import _pick_backend

    monkeypatch.setattr("healtrl.utils.compat.is_available", lambda extra: False)
    assert _pick_backend("auto", False, False) == ("transformers", "vLLM is not installed")
    with pytest.raises(ValueError, match="pip install healtrl\\[vllm\\]"):
        _pick_backend("vllm", False, False)
    monkeypatch.setattr("healtrl.utils.compat.is_available", lambda extra: True)
    with pytest.raises(ValueError, match="LoRA adapter"):
        _pick_backend("vllm", False, True)
    if not torch.cuda.is_available():
        assert _pick_backend("auto", False, False)[0] == "transformers"


# ----------------------------------------------------------------------------------------------------------------
# healtrl eval
# ----------------------------------------------------------------------------------------------------------------
def test_healtrl_eval_writes_json_and_markdown(toy_model_dir, tmp_path, restore_threads, capsys):
    out = tmp_path / "eval"
    code = main(
        ["eval", "--model", toy_model_dir, "--tasks", "toy-add,toy-compare", "--k", "4", "--max_new_tokens", "4",
         "--num_samples", "6", "--output_dir", str(out), "--no_progress"]
    )  # fmt: skip
    assert code == 0
    data = json.loads((out / "results.json").read_text())
    assert data["backend"] == "transformers" and data["settings"]["k"] == 4
    for task in ("toy-add", "toy-compare"):
        entry = data["tasks"][task]
        assert entry["num_problems"] == 6 and len(entry["correct"]) == 6
        m = entry["metrics"]
        assert set(m) >= {"avg@4", "pass@1", "pass@2", "pass@4", "mean_response_length"}
        assert 0 <= m["pass@1"] <= m["pass@2"] <= m["pass@4"] <= 1
        assert m["avg@4"] == pytest.approx(sum(entry["correct"]) / 24)
        assert 1 <= m["mean_response_length"] <= 4
    table = (out / "results.md").read_text()
    # Given the toy model's cache folder, the report names the model as a card would, not by this machine's path
    assert table.startswith(f"# Evaluation of `{TOY}`\n") and toy_model_dir not in table
    assert "| task | split | problems | avg@4 | pass@1 | pass@2 | pass@4 |" in table
    assert "| toy-add | test | 6 |" in table and "**average**" in table
    assert "results.json" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tasks", "toy-ad"], "Unknown task 'toy-ad'. Did you mean 'toy-add'? Known tasks:"),
        (["--tasks", "toy-add", "--k", "0"], "--k must be a positive number"),
        (["--tasks", "toy-add", "--temperature", "-1"], "--temperature must be a number >= 0"),
        (["--tasks", "toy-add", "--task_path", "nopath"], "--task_path expects TASK=PATH"),
        (["--tasks", "toy-add", "--backend", "tpu"], "invalid choice: 'tpu'"),
        (["--tasks", "toy-add", "--num_samples", "0"], "--num_samples must be a positive number"),
    ],
)
def test_healtrl_eval_errors(args, message, capsys):
    assert eval_main(["--model", TOY, *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err


def test_healtrl_eval_help(capsys):
    assert eval_main(["--help"]) == 0
    assert "--num_samples" in capsys.readouterr().out


# ----------------------------------------------------------------------------------------------------------------
# Periodic evaluation during training
# ----------------------------------------------------------------------------------------------------------------
QUICK = ["--config", "configs/toy_grpo.yaml", "--max_steps", "4", "--logging_steps", "1", "--per_device_train_batch_size", "32", "--num_train_samples", "64",
         "--save_final_model", "false"]  # fmt: skip


def read_history(path):
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_periodic_eval_from_a_config_logs_and_leaves_training_unchanged(toy_model_dir, tmp_path, restore_threads):
    eval_args = ["--eval_tasks", "toy-add", "--eval_k", "4", "--eval_every_steps", "2", "--eval_num_problems", "8"]
    assert main(["train", *QUICK, *eval_args, "--output_dir", str(tmp_path / "with")]) == 0
    assert main(["train", *QUICK, "--output_dir", str(tmp_path / "without")]) == 0
    with_eval, without = read_history(tmp_path / "with"), read_history(tmp_path / "without")

    evals = [e for e in with_eval if "eval/toy-add/avg@4" in e]
    assert [e["step"] for e in evals] == [2, 4]
    for e in evals:
        assert 0 <= e["eval/toy-add/pass@1"] <= e["eval/toy-add/pass@2"] <= e["eval/toy-add/pass@4"] <= 1
        assert e["eval/toy-add/pass@1"] == pytest.approx(e["eval/toy-add/avg@4"])
        assert 1 <= e["eval/toy-add/mean_response_length"] <= 4  # eval_max_new_tokens: the trainer's 4

    # the evaluation samples under a forked RNG: the training run itself is identical with and without it
    def train_entries(history):
        return [{k: e[k] for k in ("step", "loss", "reward", "entropy")} for e in history if "reward" in e]

    assert train_entries(with_eval) == train_entries(without) and len(train_entries(without)) == 4


def test_periodic_eval_callback_needs_a_trainer_and_valid_settings():
    callback = PeriodicEvalCallback(["toy-add"], k=2, every_n_steps=5)
    with pytest.raises(RuntimeError, match="attach"):
        callback.evaluate_now()
    with pytest.raises(ValueError, match="Unknown task 'toy-ad'"):
        PeriodicEvalCallback(["toy-ad"])
    with pytest.raises(ValueError, match="every_n_steps"):
        PeriodicEvalCallback(["toy-add"], every_n_steps=0)
    with pytest.raises(ValueError, match="`k`"):
        PeriodicEvalCallback(["toy-add"], k=0)


WORKER = """
import json, os, sys
sys.path.insert(0, os.getcwd())
import torch
torch.set_num_threads(1)
from healtrl.cli import run_training
from healtrl.cli.config import resolve
from healtrl.evaluation.callback import PeriodicEvalCallback
from tests.helpers import shut_down_process_group

out = sys.argv[1]
args = ["--max_steps", "2", "--logging_steps", "1", "--per_device_train_batch_size", "16", "--num_train_samples", "32",
        "--save_final_model", "false", "--eval_tasks", "toy-add", "--eval_k", "4", "--eval_every_steps", "2",
        "--ddp_backend", "gloo", "--output_dir", out]
from tests.helpers import ROOT
trainer = run_training(resolve(["--config", str(ROOT / "configs" / "toy_grpo.yaml"), *args]))
callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, PeriodicEvalCallback))
report = [{"step": step, "correct": r.tasks["toy-add"].correct, "metrics": r.tasks["toy-add"].metrics()}
          for step, r in callback.history]
rank = int(os.environ["RANK"])
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump({"world_size": int(os.environ["WORLD_SIZE"]), "history": report}, f)
shut_down_process_group()
"""


@pytest.mark.slow
def test_periodic_eval_two_processes_share_the_problems(tmp_path, toy_model_dir):
    """Under torchrun (2 CPU processes, gloo) each rank samples half of the problems; both log the same numbers."""
    from tests.helpers import run_two_processes

    script = tmp_path / "eval_worker.py"
    script.write_text(WORKER)
    reports = run_two_processes(str(script), tmp_path / "out")
    assert [r["world_size"] for r in reports] == [2, 2]
    assert reports[0]["history"] == reports[1]["history"]
    (entry,) = reports[0]["history"]
    assert entry["step"] == 2 and len(entry["correct"]) == 20  # every problem of toy-add's test split, gathered
    assert entry["metrics"]["avg@4"] == pytest.approx(sum(entry["correct"]) / 80)
