"""Data hygiene (`healtrl.hygiene`): evaluation rows in the training data are refused by train.py, its dry run and
`healtrl eval` on a run folder; and the `medicine` task's train/test splits are disjoint by construction."""

from __future__ import annotations

import json
import random
import shutil
import warnings
from pathlib import Path

import pytest
from datasets import Dataset

from healtrl.cli import train_main
from healtrl.cli.config import resolve
from healtrl.cli.run_hygiene import check_run_folder, check_training_run
from healtrl.hygiene import (
    EvalOverlapError,
    check_no_eval_overlap,
    find_overlaps,
    normalise_prompt,
    prompt_key,
)
from healtrl.tasks import load_task
from healtrl.tasks._common import math_prompt, user_prompt

REPO = Path(__file__).resolve().parents[1]
MEDICINE = REPO / "tests" / "data" / "tasks" / "medicine"
TOY = str(REPO / "configs" / "toy_grpo.yaml")


def rows(prompts):
    return Dataset.from_dict({"prompt": prompts, "answer": ["1"] * len(prompts)})


# ---------------------------------------------------------------------------------------------------- the key
def test_prompt_key_normalises_whitespace_case_and_the_prompt_format():
    assert prompt_key("What is  2+2?\n") == prompt_key("what is 2+2?")
    assert prompt_key("What is 2+2?") != prompt_key("What is 2+3?")
    # a conversation is compared by its user contents: roles and system prompts do not matter
    chat = [{"role": "system", "content": "You are a careful solver."}, {"role": "user", "content": "What is 2+2?"}]
    assert prompt_key(chat) == prompt_key(user_prompt("WHAT IS 2+2?")) == prompt_key("What is 2+2?")
    # the same problem with the boxed instruction and with DAPO's "Answer:" wrapper
    dapo = (
        "Solve the following math problem step by step. The last line of your response should be of the form "
        "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\nWhat is 2+2?\n\nRemember to "
        'put your answer on its own line after "Answer:".'
    )
    assert normalise_prompt(math_prompt("What is 2+2?")) == "what is 2+2?" == normalise_prompt(user_prompt(dapo))
    with pytest.raises(TypeError, match="string or a conversation"):
        prompt_key(42)


def test_overlaps_are_counted_per_evaluation_set():
    train = rows([f"Problem {i}" for i in range(10)])
    evals = {
        ("bench-a", "test"): rows(["problem 3", "Problem 4 ", "Problem 99"]),
        ("bench-b", "test"): rows(["Problem 100"]),
    }
    overlaps = find_overlaps(train, evals)
    assert [(o.name, o.split, o.count, o.total) for o in overlaps] == [("bench-a", "test", 2, 3)]
    assert overlaps[0].examples == ["problem 3", "problem 4"]
    with pytest.raises(EvalOverlapError, match=r"'bench-a' split 'test': 2 of its 3 rows") as info:
        check_no_eval_overlap(train, evals)
    assert "allow_eval_overlap: true" in str(info.value)
    with pytest.warns(UserWarning, match="Continuing because allow_eval_overlap: true is set"):
        assert check_no_eval_overlap(train, evals, allow=True) == overlaps
    # several training datasets (HEAL's target + general) count together
    assert find_overlaps([rows(["x"]), rows(["Problem 99"])], evals)[0].count == 1
    assert check_no_eval_overlap(train, {("bench-b", "test"): evals[("bench-b", "test")]}) == []


# ---------------------------------------------------------------------------------------------------- train.py
def overlapping_run(*extra):
    """A toy run that trains on toy-add's test split and evaluates on it."""
    return ["--config", TOY, "--dataset_name", "task:toy-add", "--dataset_train_split", "test", "--eval_tasks",
            "toy-add", *extra]  # fmt: skip


def test_training_run_refuses_evaluation_rows():
    resolved = resolve(overlapping_run())
    with pytest.raises(EvalOverlapError, match=r"'toy-add' split 'test': 20 of its 20 rows"):
        check_training_run(resolved)
    with pytest.warns(UserWarning):
        assert check_training_run(resolve(overlapping_run("--allow_eval_overlap", "true")))[0].count == 20
    # the training split is disjoint from the evaluated split
    assert (
        check_training_run(resolve(["--config", TOY, "--dataset_name", "task:toy-add", "--eval_tasks", "toy-add"]))
        == []
    )


def test_train_py_refuses_before_training(monkeypatch, tmp_path, capsys):
    """run_training checks right after loading the data: no model is built, no step is trained."""
    import healtrl.cli.run as cli
    import healtrl.models as models

    monkeypatch.setattr(models, "resolve_model_path", lambda name, *a, **k: name)
    monkeypatch.setattr(cli, "_load_tokenizer", lambda *a, **k: None)
    code = train_main(overlapping_run("--output_dir", str(tmp_path / "out")))
    err = capsys.readouterr().err
    assert code == 2
    assert "error: evaluation rows appear in the training data" in err and "'toy-add' split 'test': 20 of" in err
    assert not (tmp_path / "out").exists()


def test_dry_run_refuses_evaluation_rows(capsys):
    assert train_main([*overlapping_run(), "--dry_run"]) == 2
    captured = capsys.readouterr()
    assert "the train data is task 'toy-add' split 'test', the split eval_tasks evaluates" in captured.err
    assert "'toy-add' split 'test': 20 of its 20 rows (named by eval_tasks) are training questions" in captured.err
    assert train_main([*overlapping_run("--allow_eval_overlap", "true"), "--dry_run"]) == 0
    assert "allowed: allow_eval_overlap is true" in capsys.readouterr().out
    assert train_main(["--config", TOY, "--eval_tasks", "toy-add", "--dry_run"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the report wraps long lines
    assert "hygiene: no evaluation prompt is a training prompt on local data and offline data" in out


def test_toy_data_with_another_seed_holds_the_toy_tasks_test_problems(capsys):
    """A finding of the check: `healtrl-toy/add` holds out seed-dependent problems, while task toy-add's test split is
    fixed (seed 0); with seed 42 most of toy-add's test problems are training rows."""
    argv = ["--config", TOY, "--eval_tasks", "toy-add", "--dataset_seed", "42", "--dry_run"]
    assert train_main(argv) == 2
    assert (
        "'toy-add' split 'test': 17 of its 20 rows (named by eval_tasks) are training questions"
        in capsys.readouterr().err
    )


# ---------------------------------------------------------------------------------------------------- healtrl eval
def write_run_folder(folder: Path, argv) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(resolve(argv).to_yaml())  # as write_run_files writes it
    return folder


def test_healtrl_eval_on_a_run_folder_checks_the_training_data(tmp_path, capsys):
    from healtrl.cli.eval import eval_main

    run = write_run_folder(tmp_path / "run", ["--config", TOY, "--dataset_name", "task:toy-add",
                                               "--dataset_train_split", "test"])  # fmt: skip
    with pytest.raises(EvalOverlapError, match=r"'toy-add' split 'test': 20 of its 20 rows"):
        check_run_folder(str(run), ["toy-add"])
    (run / "checkpoint-10").mkdir()  # a checkpoint is checked against its run's config
    with pytest.raises(EvalOverlapError, match="--allow_eval_overlap"):
        check_run_folder(str(run / "checkpoint-10"), ["toy-mul", "toy-add"])
    with pytest.warns(UserWarning, match="--allow_eval_overlap"):
        assert check_run_folder(str(run), ["toy-add"], allow=True)[0].count == 20
    assert check_run_folder(str(run), ["toy-mul"]) == []
    assert check_run_folder(str(tmp_path), ["toy-add"]) is None  # not a run folder: nothing to compare with
    assert eval_main(["--model", str(run), "--tasks", "toy-add", "--k", "1"]) == 2
    err = capsys.readouterr().err
    assert "error: evaluation rows appear in the training data" in err and "'toy-add' split 'test'" in err


# ---------------------------------------------------------------------------------------------------- medicine
def test_medicine_splits_are_disjoint_and_cover_every_question():
    train = load_task("medicine", split="train", path=str(MEDICINE))
    test = load_task("medicine", split="test", path=str(MEDICINE))
    n_sources = sum(1 for _ in open(MEDICINE / "medbullets.jsonl")) + sum(
        1 for _ in open(MEDICINE / "medxpertqa.jsonl")
    )
    assert len(train) + len(test) == n_sources and len(test) > 0 and len(train) > len(test)
    assert set(train["source"]) == set(test["source"]) == {"medbullets", "medxpertqa"}
    assert {prompt_key(p) for p in train["prompt"]}.isdisjoint(prompt_key(p) for p in test["prompt"])
    assert set(train["task"]) == {"medicine"} and set(train["domain"]) == {"medicine"}
    # the per-source views are the same split, one source each
    for source in ("medbullets", "medxpertqa"):
        view = load_task(f"medicine-{source}", split="test", path=str(MEDICINE))
        assert set(view["source"]) == {source}
        assert sorted(view["prompt"], key=str) == sorted(
            [p for p, s in zip(test["prompt"], test["source"]) if s == source], key=str
        )
    assert check_no_eval_overlap(train, {("medicine-medxpertqa", "test"): view}) == []
    with pytest.raises(ValueError, match="splits 'train' and 'test', not 'validation'"):
        load_task("medicine", split="validation", path=str(MEDICINE))


def test_medicine_split_depends_on_the_question_only(tmp_path):
    """Reordering the source files (or adding questions) moves no question across the split."""
    folder = tmp_path / "medicine"
    folder.mkdir()
    for name in ("medbullets.jsonl", "medxpertqa.jsonl"):
        lines = (MEDICINE / name).read_text().splitlines()
        random.Random(1).shuffle(lines)
        if name == "medxpertqa.jsonl":  # a copy of an existing question with other spacing
            row = json.loads(lines[0])
            row["question"] = "  " + row["question"].replace(" ", "  ", 1)
            lines.append(json.dumps(row))
        (folder / name).write_text("\n".join(lines) + "\n")
    for split in ("train", "test"):
        before = {prompt_key(p) for p in load_task("medicine", split=split, path=str(MEDICINE))["prompt"]}
        after = {prompt_key(p) for p in load_task("medicine", split=split, path=str(folder))["prompt"]}
        assert before == after
    # a few-shot draw from the training split never meets the test split
    few = load_task("medicine", split="train", path=str(folder), num_samples=8, seed=3)
    assert (
        check_no_eval_overlap(few, {("medicine", "test"): load_task("medicine", split="test", path=str(folder))}) == []
    )


def test_medicine_folder_must_hold_both_sources(tmp_path):
    shutil.copy(MEDICINE / "medbullets.jsonl", tmp_path / "medbullets.jsonl")
    with pytest.raises(ValueError, match="has no 'medxpertqa.<ext>' file"):
        load_task("medicine", split="train", path=str(tmp_path))


def test_medicine_recipe_passes_the_dry_run_and_the_old_one_fails(capsys):
    """Training on task:medicine 'train' and evaluating its 'test' split is clean; training on MedXpertQA's test split
    (the old recipes) and evaluating on it is refused."""
    good = ["--config", str(REPO / "configs/heal_baseline_few_shot_qwen3_1.7b_medicine.yaml"), "--dataset_name",
            "task:medicine", "--dataset_train_split", "train", "--eval_tasks", "medicine-medbullets,medicine-medxpertqa",
            "--eval_split", "test", "--dry_run", "--num_processes", "8"]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert train_main(good) == 0, capsys.readouterr().err
        out = " ".join(capsys.readouterr().out.split())
        assert "no evaluation prompt is a training prompt on the tasks' local samples" in out
        bad = ["--config", str(REPO / "configs/heal_baseline_few_shot_qwen3_1.7b_medicine.yaml"), "--dataset_name",
               "task:medxpertqa", "--dataset_train_split", "test", "--eval_tasks", "medxpertqa", "--dry_run",
               "--num_processes", "8"]  # fmt: skip
        assert train_main(bad) == 2
    assert "task 'medxpertqa' split 'test', the split eval_tasks evaluates" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------- near-duplicates
def _medbullets_twins(folder, n=40):
    """A MedBullets file holding every question twice, with 4 and with 5 options (what the Hub copy appears to hold,
    issue #27), and a MedXpertQA file copied from the fixture."""
    folder.mkdir()
    lines = []
    for i in range(n):
        base = {"question": f"Question {i}: a {30 + i}-year-old patient presents with finding number {i * 7}.",
                "opa": f"a{i}", "opb": f"b{i}", "opc": f"c{i}", "opd": f"d{i}", "ope": "", "answer_idx": "A"}  # fmt: skip
        lines += [
            json.dumps(base),
            json.dumps({**base, "ope": f"e{i}", "opa": f"d{i}", "opd": f"a{i}", "answer_idx": "D"}),
        ]
    (folder / "medbullets.jsonl").write_text("\n".join(lines) + "\n")
    shutil.copy(MEDICINE / "medxpertqa.jsonl", folder / "medxpertqa.jsonl")


def test_medicine_split_keeps_4_and_5_option_twins_together(tmp_path):
    from healtrl.hygiene import stem_key
    from healtrl.tasks.multiple_choice import medicine_split

    folder = tmp_path / "twins"
    _medbullets_twins(folder)
    train = load_task("medicine-medbullets", split="train", path=str(folder))
    test = load_task("medicine-medbullets", split="test", path=str(folder))
    assert len(train) + len(test) == 80 and len(test) > 0
    assert {len(c) for c in test["choices"]} == {4, 5}  # both versions of each test question are in the test split
    # the twins' prompts differ (the old, whole-prompt key told them apart) but their stems do not
    assert len({prompt_key(p) for p in test["prompt"]}) == len(test)
    assert {stem_key(p) for p in train["prompt"]}.isdisjoint(stem_key(p) for p in test["prompt"])
    four, five = test["prompt"][0], test["prompt"][1]
    assert stem_key(four) == stem_key(five) and prompt_key(four) != prompt_key(five)
    assert medicine_split(four) == medicine_split(five)
    # the hygiene check calls a twin the same question: a 5-option test question is refused against its 4-option twin
    fours = rows([p for p, c in zip(test["prompt"], test["choices"]) if len(c) == 4])
    fives = rows([p for p, c in zip(test["prompt"], test["choices"]) if len(c) == 5])
    with pytest.raises(EvalOverlapError, match=rf"'medbullets' split 'test': {len(fives)} of its {len(fives)} rows"):
        check_no_eval_overlap(fours, {("medbullets", "test"): fives})


def test_near_duplicates_are_found_above_the_threshold_and_warned_about():
    from healtrl.hygiene import NEAR_DUPLICATE_THRESHOLD, find_near_duplicates

    long = "A train leaves the station at noon travelling at sixty miles per hour towards a city 300 miles away."
    train = rows([long, "Completely unrelated question about the boiling point of water at sea level, in kelvin."])
    evals = {
        ("bench", "test"): rows([
            long.replace("noon", "noon,"),  # one character added: near-duplicate
            long.replace("sixty", "seventy").replace("300", "450").replace("city", "town"),  # edited: below 0.9
            long,  # the same question: an overlap, not a near-duplicate
            "Short one?",
        ])
    }  # fmt: skip
    near = find_near_duplicates(train, evals)
    assert [(n.name, n.count, n.total) for n in near] == [("bench", 1, 4)]
    assert NEAR_DUPLICATE_THRESHOLD <= near[0].examples[0][0] < 1
    assert find_near_duplicates(train, evals, threshold=0.5)[0].count == 2
    with pytest.warns(UserWarning, match=r"near-duplicates .*'bench' split 'test': 1 of its 4 rows"):
        with pytest.raises(EvalOverlapError, match="1 of its 4 rows"):
            check_no_eval_overlap(train, evals)


# ---------------------------------------------------------------------------------------------------- recipe benchmarks
@pytest.mark.parametrize(
    "recipe, named_by",
    [
        ({"paper_results": [{"benchmark": "toy-add", "metric": "avg@k", "k": 1, "value": 50.0}]}, "paper_results"),
        ({"best_checkpoint": {"tasks": ["toy-add"], "metric": "avg@k"}, "save_strategy": "steps", "save_steps": 10},
         "best_checkpoint.tasks"),
    ],
)  # fmt: skip
def test_recipe_benchmarks_are_checked_before_training(recipe, named_by, tmp_path, capsys):
    """A recipe whose paper_results benchmark or best_checkpoint task is the training split is refused by the dry run
    and by train.py before training, though eval_tasks is empty."""
    import yaml

    config = yaml.safe_load(Path(TOY).read_text())
    config.update(dataset_name="task:toy-add", dataset_train_split="test", eval_tasks=[], **recipe)
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(config))
    assert train_main(["--config", str(path), "--dry_run"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"task 'toy-add' split 'test', the split {named_by} evaluates: every training row" in err
    with pytest.raises(EvalOverlapError, match=r"'toy-add' split 'test': 20 of its 20 rows"):
        check_training_run(resolve(["--config", str(path)]))
    # the training split, disjoint from the evaluated one: clean
    clean = resolve(["--config", str(path), "--dataset_train_split", "train"])
    assert check_training_run(clean) == []
