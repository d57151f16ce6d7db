"""The papers' evaluation protocols, offline: evaluation prompt = training prompt format (DAPO-trained recipes are
evaluated with DAPO's prompt and the answer_line grader), AER's 83-problem AMC set, HumanEval+ pass@1 greedy as
EvalPlus reports it, and Avg@k / Pass@k as the papers state them (unbiased estimator of Chen et al. 2021)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from healtrl.evaluation.engine import Completion, SamplingSettings, load_eval_tasks, score_completions, summarise
from tests.helpers import sandbox_expected

DATA = Path(__file__).parent / "data" / "tasks"
needs_sandbox = pytest.mark.skipif(not sandbox_expected(), reason="the code sandbox is built for Linux")


def _reward(name):
    from healtrl.data import get_reward_func

    return get_reward_func(name)


def _evaluate(spec, dataset, texts_per_problem, k):
    """Score scripted completions like `evaluate_task` does (columns passed as TRL passes them) and summarise."""
    completions = [[Completion(text, [1, 2], False) for text in texts] for texts in texts_per_problem]
    rewards = score_completions(dataset, completions, _reward(spec.reward), reward_name=spec.reward)
    return summarise(spec.name, spec.split, spec.reward, 1.0, k, completions, rewards)


# ----------------------------------------------------------------------------------------------------------------
# Evaluation prompt = training prompt format
# ----------------------------------------------------------------------------------------------------------------
def test_dapo_trained_recipe_is_evaluated_with_dapo_prompt_and_grader():
    from healtrl.tasks import load_task
    from healtrl.tasks._common import math_problem

    tasks = load_eval_tasks(
        ["aime25@answer_line", "aime25"],
        task_paths={"aime25@answer_line": str(DATA / "aime25.jsonl"), "aime25": str(DATA / "aime25.jsonl")},
    )
    (line_spec, line_data), (boxed_spec, boxed_data) = tasks["aime25@answer_line"], tasks["aime25"]
    train = load_task("dapo-math-17k", split="train", path=str(DATA / "dapo_math_17k.jsonl"))
    # the evaluation prompts are written in the template of the training rows (DAPO's), the plain task's are not
    for rows in (train, line_data):
        assert all(math_problem(p[0]["content"], "answer_line") for p in rows["prompt"])
    assert not any(math_problem(p[0]["content"], "answer_line") for p in boxed_data["prompt"])

    answers = line_data["answer"]  # 17, 24
    dapo_style = [[f"Step 1...\nAnswer: {a}", "Step 1...\nAnswer: 3 or maybe 4"] for a in answers]
    boxed_style = [[f"Step 1... \\boxed{{{a}}}", "Step 1... \\boxed{3}"] for a in answers]
    line = _evaluate(line_spec, line_data, dapo_style, k=2)
    assert line.correct == [1, 1] and line.metrics()["avg@2"] == 0.5
    assert _evaluate(line_spec, line_data, boxed_style, k=2).correct == [0, 0]  # a box is not DAPO's answer line
    assert _evaluate(boxed_spec, boxed_data, boxed_style, k=2).correct == [1, 1]
    assert _evaluate(boxed_spec, boxed_data, dapo_style, k=2).correct == [0, 0]


def test_eval_fields_and_callback_take_the_format_variants():
    from healtrl.cli.config import ScriptArguments
    from healtrl.evaluation.callback import PeriodicEvalCallback

    assert ScriptArguments(eval_tasks="aime25@answer_line,math500@answer_line").eval_tasks == [
        "aime25@answer_line",
        "math500@answer_line",
    ]
    with pytest.raises(ValueError, match="unknown prompt format 'dapo'"):
        ScriptArguments(eval_tasks=["aime25@dapo"])
    assert PeriodicEvalCallback(["aime25@answer_line"], every_n_steps=20).tasks == ["aime25@answer_line"]


# ----------------------------------------------------------------------------------------------------------------
# AER's AMC23: AI-MO/aimo-validation-amc (83 problems)
# ----------------------------------------------------------------------------------------------------------------
def _aimo_amc_rows(n=83):
    """Rows in the Hub schema of AI-MO/aimo-validation-amc: id (int), problem (str), answer (float), url (str)."""
    return [
        {"id": i, "problem": f"What is ${i} + 1$?", "answer": float(i + 1), "url": f"https://example.invalid/{i}"}
        for i in range(n)
    ]


def test_aimo_validation_amc_task(tmp_path):
    from healtrl.tasks import TASKS, load_task
    from healtrl.tasks._common import MATH_INSTRUCTION

    path = tmp_path / "aimo_amc.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in _aimo_amc_rows()))
    data = load_task("aimo-validation-amc", path=str(path))
    spec = TASKS["aimo-validation-amc"]
    assert spec.hub_id == "AI-MO/aimo-validation-amc" and spec.split == "test" and spec.reward == "math"
    assert len(data) == 83 and data["answer"][:3] == ["1", "2", "3"]  # 1.0 -> "1"
    assert data["prompt"][0][0]["content"] == f"What is $0 + 1$? {MATH_INSTRUCTION}"
    assert set(data["task"]) == {"aimo-validation-amc"} and set(data["answer_format"]) == {"boxed"}
    assert "83" in spec.description and "AER" in spec.description
    # amc23 stays math-ai/amc23 (40 problems: HEAL, OPEFO)
    assert TASKS["amc23"].hub_id == "math-ai/amc23" and "40" in TASKS["amc23"].description


def test_aimo_validation_amc_reads_the_hub_train_split(monkeypatch):
    """The Hub dataset has one split, 'train', served as the task's 'test' split."""
    import datasets

    from healtrl.tasks import load_task

    calls = []

    def fake_load_dataset(name, config=None, split=None, **kwargs):
        calls.append((name, config, split))
        return datasets.Dataset.from_list(_aimo_amc_rows(3))

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    assert len(load_task("aimo-validation-amc")) == 3
    assert calls == [("AI-MO/aimo-validation-amc", None, "train")]


# ----------------------------------------------------------------------------------------------------------------
# HumanEval+ pass@1, greedy, as EvalPlus reports it
# ----------------------------------------------------------------------------------------------------------------
def test_greedy_sampling_settings_decode_greedily():
    from healtrl.evaluation.engine import TransformersGenerator

    settings = SamplingSettings(k=1, temperature=0.0, max_new_tokens=768)  # EvalPlus --greedy
    generator = object.__new__(TransformersGenerator)  # the generation config needs no model
    generator.eos_token_ids, generator.pad_token_id = [0], 0
    config = generator._generation_config(settings)
    assert config.do_sample is False and config.max_new_tokens == 768


@needs_sandbox
def test_humanevalplus_greedy_pass_at_1():
    from healtrl.tasks import load_task

    (spec, data) = load_eval_tasks(["humanevalplus"], task_paths={"humanevalplus": str(DATA / "humanevalplus.jsonl")})[
        "humanevalplus"
    ]
    assert len(data) == len(load_task("humanevalplus", path=str(DATA / "humanevalplus.jsonl"))) == 2
    evalplus_prefix = "Below is a Python script with a self-contained function that solves the problem and passes "
    right = f"{evalplus_prefix}corresponding tests:\n```python\ndef double(x: int) -> int:\n    return 2 * x\n```\n"
    wrong = "```python\ndef count_vowels(s):\n    return sum(c in 'aeiouy' for c in s)\n```"  # 'y' fails 'xyz'
    result = _evaluate(spec, data, [[right], [wrong]], k=1)
    assert result.correct == [1, 0]
    assert result.metrics()["pass@1"] == result.metrics()["avg@1"] == 0.5


# ----------------------------------------------------------------------------------------------------------------
# Avg@k and Pass@k as the papers state them
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "k, correct, paper",
    [
        (4, [0, 1, 3, 4], "HEAL Avg@4 (MATH500, Minerva, OlympiadBench, medicine, physics)"),
        (8, [0, 2, 8], "HEAL Avg@8 (AMC23); AER mean@8 / pass@8 (MATH500, AMC23)"),
        (10, [0, 1, 10, 3], "HEAL Pass@10 (LiveCodeBench v5)"),
        (32, [0, 5, 32], "OPEFO Avg@32 (AIME24/25, AMC23); AER mean@32 / pass@32 (AIME)"),
        (64, [0, 1, 63], "PosAdv Avg@64 / Pass@64"),
        (1, [0, 1, 1], "OPEFO Avg@1 (MATH500, Minerva, OlympiadBench); HumanEval+ Pass@1"),
    ],
)
def test_avg_at_k_and_pass_at_k_as_stated(k, correct, paper):
    completions = [[Completion("x", [1], False)] * k for _ in correct]
    rewards = [[1.0] * c + [0.0] * (k - c) for c in correct]
    metrics = summarise("t", "test", "r", 1.0, k, completions, rewards).metrics()
    # Avg@k: the mean correctness over the k samples of every problem (= the unbiased pass@1)
    assert metrics[f"avg@{k}"] == pytest.approx(sum(correct) / (k * len(correct)))
    assert metrics["pass@1"] == pytest.approx(metrics[f"avg@{k}"])
    # Pass@k with n = k samples: the fraction of problems with at least one correct sample
    assert metrics[f"pass@{k}"] == pytest.approx(sum(c > 0 for c in correct) / len(correct))
    # Pass@j < n: Chen et al. 2021 eq. 1, 1 - C(n - c, j) / C(n, j), with exact binomials
    for j in (2, 4, 8, 16, 32):
        if j < k:
            expected = sum(1 - math.comb(k - c, j) / math.comb(k, j) for c in correct) / len(correct)
            assert metrics[f"pass@{j}"] == pytest.approx(expected, rel=1e-12), paper
