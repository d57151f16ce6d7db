"""Best checkpoint: the `best_checkpoint` rule (healtrl.recipes), `healtrl eval --checkpoints` on toy checkpoints (best
by construction), resuming after a kill without re-evaluating finished checkpoints, and the model card's section."""

from __future__ import annotations

import copy
import json
import math
import types

import pytest
import torch
import yaml

import healtrl.evaluation.engine as evaluation
from healtrl.cli import main
from healtrl.cli.config import ConfigError, resolve
from healtrl.evaluation.best_checkpoint import choose_best, evaluate_checkpoints, score_row
from healtrl.evaluation.engine import Completion, EvalResults, SamplingSettings, summarise
from healtrl.model_card import BEST_CHECKPOINT_SECTION, set_card_section
from healtrl.recipes.checks import recipe_problems
from healtrl.recipes.recipe import BestCheckpointRule, metric_value, parse_best_checkpoint


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


AER_RULE = {"tasks": ["aime25"], "metric": "pass@1", "k": 32, "every_steps": 20, "max_new_tokens": 8192}


# ----------------------------------------------------------------------------------------------------------------
# The rule as data
# ----------------------------------------------------------------------------------------------------------------
def test_rule_defaults_and_groups():
    rule = parse_best_checkpoint(AER_RULE)
    assert isinstance(rule, BestCheckpointRule)
    assert (rule.reduce, rule.temperature, rule.top_p, rule.include_final) == ("mean", 1.0, 1.0, False)
    assert rule.groups() == {32: ["aime25"]}
    opefo = parse_best_checkpoint(
        {"tasks": ["aime24", "aime25", "math500"], "metric": "avg@k", "k": {"aime24": 32, "aime25": 32, "math500": 1}}
    )
    assert opefo.groups() == {32: ["aime24", "aime25"], 1: ["math500"]}
    assert parse_best_checkpoint(None) is None


@pytest.mark.parametrize(
    "change, message",
    [
        ({"tasks": ["aime2"]}, "best_checkpoint.tasks[0]: Unknown task 'aime2'. Did you mean 'aime25'?"),
        ({"tasks": []}, "best_checkpoint.tasks must be a non-empty list"),
        ({"metric": "pass@64"}, "best_checkpoint.metric is 'pass@64', which needs at least 64 samples"),
        ({"metric": "avg@8"}, "best_checkpoint.metric is 'avg@8' but best_checkpoint.k is 32"),
        ({"metric": "acc"}, "best_checkpoint.metric must be 'avg@k', 'pass@k'"),
        ({"k": 0}, "best_checkpoint.k must be a positive number"),
        ({"k": {"aime24": 4}}, "best_checkpoint.k is a per-task mapping but lacks ['aime25']"),
        ({"reduce": "max"}, "best_checkpoint.reduce must be one of mean"),
        ({"temperature": -1}, "best_checkpoint.temperature must be a number >= 0"),
        ({"every_steps": 0}, "best_checkpoint.every_steps must be a positive integer or null"),
        ({"evry_steps": 20}, "unknown key(s) 'evry_steps' (did you mean 'every_steps'?)"),
    ],
)
def test_rule_errors_name_the_key_and_the_fix(change, message):
    with pytest.raises(ValueError) as info:
        parse_best_checkpoint({**AER_RULE, **change})
    assert message in str(info.value)


def test_rule_requires_tasks_and_metric():
    with pytest.raises(ValueError, match="lacks the required key"):
        parse_best_checkpoint({"tasks": ["aime25"]})


def test_rule_goes_from_the_recipe_into_the_run_config(tmp_path):
    config = tmp_path / "recipe.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "trainer": "grpo",
                "model_name_or_path": "healtrl-toy/qwen2-add",
                "dataset_name": "healtrl-toy/add",
                "reward_funcs": ["toy"],
                "use_cpu": True,
                "best_checkpoint": AER_RULE,
            }
        )
    )
    resolved = resolve(["--config", str(config)])
    assert resolved.script_args.best_checkpoint == AER_RULE
    assert yaml.safe_load(resolved.to_yaml())["best_checkpoint"] == AER_RULE  # what config.yaml of the run holds
    with pytest.raises(ConfigError, match=r"best_checkpoint\.metric .*`best_checkpoint` = "):
        resolve(["--config", str(config), "--best_checkpoint", "{tasks: [aime25], metric: pass@64, k: 32}"])


def test_dry_run_flags_checkpoints_the_rule_cannot_see():
    script = types.SimpleNamespace(best_checkpoint=AER_RULE, paper_results=[], paper_protocol=None)
    ok = types.SimpleNamespace(save_strategy="steps", save_steps=20, save_total_limit=None)
    lines, problems = recipe_problems(script, ok)
    assert problems == [] and lines[0].startswith("best checkpoint: highest mean pass@1 over aime25")
    _, problems = recipe_problems(
        script, types.SimpleNamespace(save_strategy="steps", save_steps=10, save_total_limit=None)
    )
    assert problems == []  # 10 divides 20: every candidate is saved
    _, problems = recipe_problems(
        script, types.SimpleNamespace(save_strategy="steps", save_steps=50, save_total_limit=2)
    )
    assert len(problems) == 2 and "save_steps` to 20" in problems[0] and "save_total_limit" in problems[1]
    _, problems = recipe_problems(
        script, types.SimpleNamespace(save_strategy="no", save_steps=500, save_total_limit=None)
    )
    assert "save_strategy: steps" in problems[0]


# ----------------------------------------------------------------------------------------------------------------
# Scoring and choosing
# ----------------------------------------------------------------------------------------------------------------
def test_metric_values_are_the_unbiased_estimators():
    correct, k = [0, 1, 4, 8], 8
    assert metric_value(correct, k, "avg") == pytest.approx(13 / 32)
    expected = [1 - math.comb(k - c, 2) / math.comb(k, 2) for c in correct]
    assert metric_value(correct, k, "pass", 2) == pytest.approx(sum(expected) / 4)
    assert metric_value(correct, k, "pass", 1) == pytest.approx(13 / 32)  # pass@1 = avg@k
    assert metric_value(correct, k, "pass") == pytest.approx(3 / 4)  # pass@k: any correct
    with pytest.raises(ValueError, match="pass@16 needs at least 16"):
        metric_value(correct, k, "pass", 16)


def row(name, step, correct):
    return {"checkpoint": name, "step": step, "tasks": {t: {"k": 4, "correct": c} for t, c in correct.items()}}


def test_score_is_the_mean_over_tasks_and_ties_go_to_the_earliest_step():
    rule = parse_best_checkpoint({"tasks": ["aime24", "aime25"], "metric": "avg@k", "k": 4})
    rows = [
        row("checkpoint-10", 10, {"aime24": [4, 0], "aime25": [0, 0]}),  # 0.5, 0 -> 0.25
        row("checkpoint-20", 20, {"aime24": [2, 0], "aime25": [2, 0]}),  # 0.25, 0.25 -> 0.25
        row("checkpoint-30", 30, {"aime24": [1, 0], "aime25": [0, 0]}),  # 0.125, 0 -> 0.0625
    ]
    for r in rows:
        r["score"], r["values"] = score_row(r, rule)
    assert [r["score"] for r in rows] == [0.25, 0.25, 0.0625]
    assert rows[0]["values"] == {"aime24": 0.5, "aime25": 0.0}
    assert choose_best(rows)["checkpoint"] == "checkpoint-10"
    rule_any = parse_best_checkpoint({"tasks": ["aime24", "aime25"], "metric": "pass@k", "k": 4})
    for r in rows:
        r["score"], r["values"] = score_row(r, rule_any)
    assert [r["score"] for r in rows] == [0.25, 0.5, 0.25]  # pass@4: fraction of problems with any correct
    assert choose_best(rows)["checkpoint"] == "checkpoint-20"


# ----------------------------------------------------------------------------------------------------------------
# Toy checkpoints, best by construction, with the real evaluation
# ----------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """A run folder with checkpoint-10 (random weights: ~0% on toy-add), checkpoint-20 (the warmed-up toy model),
    checkpoint-30 (the same with its weights perturbed: worse), checkpoint-35 (warmed up, but not a multiple of the
    rule's every_steps), and config.yaml with a greedy pass@1 rule on toy-add."""
    from healtrl.toy import build_model, load_toy_model

    run = tmp_path_factory.mktemp("run")
    model, tokenizer = load_toy_model("healtrl-toy/qwen2-add")
    noisy = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in noisy.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    for step, m in [(10, build_model("qwen2", tokenizer=tokenizer, seed=1)), (20, model), (30, noisy), (35, model)]:
        m.save_pretrained(run / f"checkpoint-{step}")
        tokenizer.save_pretrained(run / f"checkpoint-{step}")
    (run / "checkpoint-20" / "README.md").write_text(
        "# Model Card for checkpoint-20\n\n## How to load\n\nfrom_pretrained\n"
    )
    rule = {"tasks": ["toy-add"], "metric": "pass@1", "k": 1, "temperature": 0.0, "every_steps": 10, "source": "toy"}
    (run / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "trainer": "grpo",
                "model_name_or_path": "healtrl-toy/qwen2-add",
                "dataset_name": "healtrl-toy/add",
                "dataset_seed": 0,
                "reward_funcs": ["toy"],
                "use_cpu": True,
                "max_completion_length": 4,
                "best_checkpoint": rule,
            }
        )  # fmt: skip
    )
    return run


def test_healtrl_eval_checkpoints_picks_the_best_by_the_rule(toy_run, tmp_path, capsys):
    out = tmp_path / "eval"
    assert main(["eval", "--checkpoints", str(toy_run), "--output_dir", str(out), "--no_progress"]) == 0
    rows = [json.loads(line) for line in (out / "checkpoint_eval.jsonl").read_text().splitlines()]
    assert [r["checkpoint"] for r in rows] == ["checkpoint-10", "checkpoint-20", "checkpoint-30"]  # 35: not a multiple
    accuracy = {
        r["checkpoint"]: sum(r["tasks"]["toy-add"]["correct"]) / r["tasks"]["toy-add"]["num_problems"] for r in rows
    }
    assert (
        accuracy["checkpoint-20"] > accuracy["checkpoint-30"] and accuracy["checkpoint-20"] > accuracy["checkpoint-10"]
    )
    assert accuracy["checkpoint-20"] >= 0.3  # greedy decoding of the warmed-up model (about 0.55)
    best = json.loads((out / "best_checkpoint.json").read_text())
    assert best["checkpoint"] == "checkpoint-20" and best["step"] == 20
    assert best["score"] == pytest.approx(accuracy["checkpoint-20"])
    assert best["rule"]["max_new_tokens"] == 4  # from the run's max_completion_length
    assert best["not_candidates"] == ["checkpoint-35"]
    table = (out / "checkpoint_eval.md").read_text()
    assert (
        f"| `checkpoint-20` | 20 | {100 * accuracy['checkpoint-20']:.2f} | {100 * accuracy['checkpoint-20']:.2f} | **best** |"
        in table
    )
    assert "Best checkpoint: **checkpoint-20** (step 20)" in table and "(source: toy)" in table
    card = (toy_run / "checkpoint-20" / "README.md").read_text()
    assert card.index(f"## {BEST_CHECKPOINT_SECTION}") < card.index("## How to load")
    assert "This checkpoint (step 20) is the one the recipe's rule selects among 3 evaluated checkpoints" in card
    assert "highest mean pass@1 over toy-add" in card and f"{100 * accuracy['checkpoint-20']:.2f}" in card
    assert not (toy_run / "checkpoint-30" / "README.md").exists()
    assert "Best: checkpoint-20" in capsys.readouterr().out

    # A flag overrides the rule of config.yaml: every 5 steps makes checkpoint-35 a candidate (the same weights as
    # checkpoint-20, so the tie goes to the earlier step); the three stored rows are reused.
    calls = []
    real = evaluation.evaluate

    def counting(model, *args, **kwargs):
        calls.append(str(model))
        return real(model, *args, **kwargs)

    evaluation.evaluate = counting
    try:
        assert (
            main(
                ["eval", "--checkpoints", str(toy_run), "--output_dir", str(out), "--every_steps", "5", "--no_progress"]
            )
            == 0
        )
    finally:
        evaluation.evaluate = real
    assert [c.rsplit("/", 1)[-1] for c in calls] == ["checkpoint-35"]
    best = json.loads((out / "best_checkpoint.json").read_text())
    assert best["checkpoint"] == "checkpoint-20" and best["candidates"][-1] == "checkpoint-35"


def test_no_rule_and_bad_rule_are_usage_errors(tmp_path, toy_run, capsys):
    (tmp_path / "checkpoint-1").mkdir()
    assert main(["eval", "--checkpoints", str(tmp_path)]) == 2
    assert "No best-checkpoint rule" in capsys.readouterr().err
    code = main(["eval", "--checkpoints", str(toy_run), "--metric", "pass@4", "--output_dir", str(tmp_path / "o")])
    assert code == 2
    assert "best_checkpoint.metric is 'pass@4', which needs at least 4 samples" in capsys.readouterr().err
    assert main(["eval", "--checkpoints", str(toy_run), "--every_steps", "9", "--output_dir", str(tmp_path / "o")]) == 2
    assert "No checkpoint of" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------------
# Resuming after a kill (a scripted evaluate: its result per checkpoint is known)
# ----------------------------------------------------------------------------------------------------------------
ACCURACY = {"checkpoint-10": 1, "checkpoint-20": 3, "checkpoint-30": 2}  # correct problems out of 4, k = 1


def make_run(root):
    for name in ACCURACY:
        (root / name).mkdir(parents=True)
        (root / name / "config.json").write_text("{}")
        (root / name / "model.safetensors").write_bytes(name.encode())
    return root


class ScriptedEvaluate:
    """Stands in for `healtrl.evaluation.evaluate`: counts calls per checkpoint; can "die" at a given checkpoint."""

    def __init__(self, die_at=None):
        self.calls, self.die_at = [], die_at

    def __call__(self, model, tasks, *, k, temperature, top_p, top_k, max_new_tokens, seed, batch_size, **kwargs):
        name = str(model).rstrip("/").rsplit("/", 1)[-1]
        self.calls.append(name)
        if name == self.die_at:
            raise KeyboardInterrupt  # the process is killed while evaluating this checkpoint
        settings = SamplingSettings(k=k, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
        results = EvalResults(model=str(model), backend="scripted", settings=settings)
        for task in tasks:
            rewards = [[1.0] if i < ACCURACY[name] else [0.0] for i in range(4)]
            completions = [[Completion("x", [1], False)] for _ in range(4)]
            results.tasks[task] = summarise(task, "test", "toy", 1.0, k, completions, rewards)
        return results


RULE = {"tasks": ["toy-add"], "metric": "avg@k", "k": 1, "max_new_tokens": 4}


def test_a_killed_evaluation_resumes_without_redoing_finished_checkpoints(tmp_path, monkeypatch):
    run = make_run(tmp_path / "run")
    dying = ScriptedEvaluate(die_at="checkpoint-20")
    monkeypatch.setattr(evaluation, "evaluate", dying)
    with pytest.raises(KeyboardInterrupt):
        evaluate_checkpoints(run, RULE, progress=False)
    assert dying.calls == ["checkpoint-10", "checkpoint-20"]
    stored = (run / "checkpoint_eval.jsonl").read_text().splitlines()
    assert [json.loads(line)["checkpoint"] for line in stored] == ["checkpoint-10"]
    with open(run / "checkpoint_eval.jsonl", "a") as f:
        f.write('{"checkpoint": "checkpoint-20", "ste')  # killed in the middle of writing a row

    rerun = ScriptedEvaluate()
    monkeypatch.setattr(evaluation, "evaluate", rerun)
    outcome = evaluate_checkpoints(run, RULE, progress=False)
    assert rerun.calls == ["checkpoint-20", "checkpoint-30"]  # checkpoint-10 is not evaluated again
    assert outcome["evaluated"] == ["checkpoint-20", "checkpoint-30"]
    assert json.loads((run / "checkpoint_eval.jsonl").read_text().splitlines()[0]) == json.loads(stored[0])
    assert [r["score"] for r in outcome["rows"]] == [0.25, 0.75, 0.5]
    assert outcome["best"]["checkpoint"] == "checkpoint-20"

    third = ScriptedEvaluate()
    monkeypatch.setattr(evaluation, "evaluate", third)
    evaluate_checkpoints(run, {**RULE, "metric": "pass@1"}, progress=False)  # a metric change re-scores stored rows
    assert third.calls == []
    (run / "checkpoint-30" / "model.safetensors").write_bytes(b"new weights")  # checkpoint-30 was overwritten
    evaluate_checkpoints(run, RULE, progress=False)
    assert third.calls == ["checkpoint-30"]
    assert len((run / "checkpoint_eval.jsonl").read_text().splitlines()) == 3
    with pytest.raises(ValueError, match=r"other settings \(temperature: 1.0 -> 0.5\).*another --output_dir"):
        evaluate_checkpoints(run, {**RULE, "temperature": 0.5}, progress=False)


def test_model_cards_follow_the_choice(tmp_path, monkeypatch):
    run = make_run(tmp_path / "run")
    (run / "README.md").write_text("# Model Card for run\n\n## How to load\n\nx\n")
    monkeypatch.setattr(evaluation, "evaluate", ScriptedEvaluate())
    evaluate_checkpoints(run, RULE, progress=False)
    assert f"## {BEST_CHECKPOINT_SECTION}" in (run / "checkpoint-20" / "README.md").read_text()
    run_card = (run / "README.md").read_text()
    assert "`checkpoint-20` (step 20) is the one the recipe's rule selects" in run_card
    assert "this folder holds a different model" in run_card and "[checkpoint_eval.md](checkpoint_eval.md)" in run_card

    ACCURACY_LATER = {**ACCURACY, "checkpoint-30": 4}
    monkeypatch.setitem(globals(), "ACCURACY", ACCURACY_LATER)
    (run / "checkpoint-30" / "model.safetensors").write_bytes(b"retrained")
    evaluate_checkpoints(run, RULE, progress=False)
    assert f"## {BEST_CHECKPOINT_SECTION}" not in (run / "checkpoint-20" / "README.md").read_text()
    assert "This checkpoint (step 30)" in (run / "checkpoint-30" / "README.md").read_text()
    assert (run / "README.md").read_text().count(f"## {BEST_CHECKPOINT_SECTION}") == 1


def test_set_card_section_inserts_replaces_and_removes():
    card = "# Card\n\n## Training\n\nt\n\n## How to load\n\nl\n"
    one = set_card_section(card, "Best checkpoint", "first")
    assert one == "# Card\n\n## Training\n\nt\n\n## Best checkpoint\n\nfirst\n\n## How to load\n\nl\n"
    two = set_card_section(one, "Best checkpoint", "second")
    assert two == one.replace("first", "second")
    assert set_card_section(two, "Best checkpoint", None) == card
    assert set_card_section("# Card\n", "Best checkpoint", "b") == "# Card\n\n## Best checkpoint\n\nb\n"


# ----------------------------------------------------------------------------------------------------------------
# A real training run: checkpoints saved every step, config.yaml written at the start, rule read from it
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.slow  # ~10 s: a training run and an evaluation; the default suite keeps the pieces (the rule into the run
# config, in-training validation, `healtrl eval --checkpoints` on a run folder); .ci/release runs it
def test_training_run_checkpoints_end_to_end(tmp_path):
    out = tmp_path / "run"
    rule = "{tasks: [toy-add], metric: pass@1, k: 2, every_steps: 2, num_problems: 6}"
    args = ["--config", "configs/toy_grpo.yaml", "--max_steps", "4", "--per_device_train_batch_size", "16",
            "--num_train_samples", "32", "--save_strategy", "steps", "--save_steps", "2", "--logging_steps", "1",
            "--best_checkpoint", rule, "--output_dir", str(out)]  # fmt: skip
    assert main(["train", *args]) == 0
    assert yaml.safe_load((out / "config.yaml").read_text())["best_checkpoint"]["every_steps"] == 2
    assert main(["eval", "--checkpoints", str(out), "--include_final", "--no_progress"]) == 0
    best = json.loads((out / "best_checkpoint.json").read_text())
    assert best["candidates"] == ["checkpoint-2", "checkpoint-4", "final"]
    rows = [json.loads(line) for line in (out / "checkpoint_eval.jsonl").read_text().splitlines()]
    scores = {r["checkpoint"]: metric_value(r["tasks"]["toy-add"]["correct"], 2, "pass", 1) for r in rows}
    assert best["score"] == max(scores.values())
    assert best["checkpoint"] == min((c for c in scores if scores[c] == best["score"]), key=best["candidates"].index)
    assert (
        f"## {BEST_CHECKPOINT_SECTION}"
        in (out / best["checkpoint"] if best["checkpoint"] != "final" else out).joinpath("README.md").read_text()
    )


def test_train_dry_run_reports_the_rule_and_refuses_unsaved_candidates(capsys):
    rule = "{tasks: [toy-add], metric: pass@1, every_steps: 20, max_new_tokens: 4}"
    base = ["train", "--config", "configs/toy_grpo.yaml", "--dry_run", "--best_checkpoint", rule]
    assert main([*base, "--save_strategy", "steps", "--save_steps", "10"]) == 0
    assert "best checkpoint: highest mean pass@1 over toy-add" in capsys.readouterr().out
    assert main([*base, "--save_strategy", "steps", "--save_steps", "15"]) == 2
    assert "best_checkpoint.every_steps is 20 but save_steps is 15" in capsys.readouterr().err


def test_a_trainer_checkpoint_without_its_completion_marker_is_not_evaluated(tmp_path):
    """A checkpoint the Trainer was still writing when the run was killed (trainer files, no healtrl marker) is skipped
    with a warning naming it; with the marker it is a candidate; a model folder saved by hand needs none."""
    from healtrl.checkpoints import MARKER_FILE
    from healtrl.evaluation.best_checkpoint import find_checkpoints

    for step in (10, 20, 30):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "config.json").write_text("{}")
    (tmp_path / "checkpoint-20" / "trainer_state.json").write_text("{}")  # cut short: no marker
    (tmp_path / "checkpoint-30" / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-30" / MARKER_FILE).write_text("{}")
    with pytest.warns(UserWarning, match="checkpoint-20.*no completion marker"):
        found = find_checkpoints(tmp_path)
    assert [c["checkpoint"] for c in found] == ["checkpoint-10", "checkpoint-30"]


# ----------------------------------------------------------------------------------------------------------------
# Runnable budgets: bounded checkpoints, the best one kept (issue #27 item 6)
# ----------------------------------------------------------------------------------------------------------------
def _plan_args(**script):
    values = dict(best_checkpoint=AER_RULE, paper_results=[], paper_protocol=None, eval_tasks=[], eval_every_steps=100,
                  eval_k=8, eval_split=None, allow_large_checkpoint_plan=False)  # fmt: skip
    values.update(script)
    return types.SimpleNamespace(**values)


def _trainer_args(**kw):
    values = dict(save_strategy="steps", save_steps=20, save_total_limit=None, max_steps=37680, save_only_model=False)
    values.update(kw)
    return types.SimpleNamespace(**values)


def test_dry_run_prices_the_checkpoints_and_refuses_a_plan_over_the_bounds():
    from healtrl.recipes.checks import checkpoint_plan
    from healtrl.recipes.recipe import CHECKPOINT_BOUNDS

    # AER's 30 epochs saved every 20 steps with nothing deleted: 1,884 checkpoints of a 4B model
    lines, problems = checkpoint_plan(_plan_args(), _trainer_args(), "Qwen/Qwen3-4B-Base")
    assert "1884 saves (max_steps 37680 / save_steps 20), at most 1884 kept at once" in lines[0]
    assert "~75 TB" in lines[0] and "1884 candidates x (aime25 x 32)" in lines[0]
    assert len(problems) == 1 and f"bound {CHECKPOINT_BOUNDS['disk_tb']:g} TB" in problems[0]
    assert "1884 checkpoints to evaluate" in problems[0] and "allow_large_checkpoint_plan" in problems[0]
    lines, problems = checkpoint_plan(_plan_args(allow_large_checkpoint_plan=True), _trainer_args(), "x/Model-4B")
    assert problems == [] and "allowed by allow_large_checkpoint_plan" in lines[0]
    # save_total_limit alone deletes the rule's candidates: refused by recipe_problems
    _, problems = recipe_problems(_plan_args(), _trainer_args(save_total_limit=2), model="Qwen/Qwen3-4B-Base")
    assert any("save_total_limit is 2" in p and "validate during training by the rule" in p for p in problems)
    # validating during training by the rule keeps the best: 3 checkpoints at once, within the bounds
    validated = _plan_args(eval_tasks=["aime25"], eval_every_steps=20)
    lines, problems = recipe_problems(validated, _trainer_args(save_total_limit=2), model="Qwen/Qwen3-4B-Base")
    text = " ".join(lines)
    assert problems == [] and "at most 3 kept at once (save_total_limit 2 + the best)" in text
    assert "1884 validations x 8 samples per problem of aime25" in text


def test_in_training_validation_records_the_best_step_and_rotation_keeps_it(tmp_path):
    from transformers.trainer_utils import rotate_checkpoints

    from healtrl.evaluation.callback import PeriodicEvalCallback
    from healtrl.recipes.recipe import parse_best_checkpoint

    rule = parse_best_checkpoint(AER_RULE)
    callback = PeriodicEvalCallback(["aime25"], k=4, every_n_steps=20, best_rule=rule)
    state = types.SimpleNamespace(global_step=0, best_metric=None, best_global_step=None)
    for step, correct in ((20, [1, 0]), (40, [4, 2]), (60, [3, 1]), (80, [4, 2])):  # best at 40 (ties: earliest)
        state.global_step = step
        record = types.SimpleNamespace(correct=correct, k=4)
        callback._track_best(state, types.SimpleNamespace(tasks={"aime25": record}))
        (tmp_path / f"checkpoint-{step}").mkdir()
    assert state.best_global_step == 40 and state.best_metric == pytest.approx(6 / 8)
    rotate_checkpoints(str(tmp_path), save_total_limit=2, best_model_checkpoint=str(tmp_path / "checkpoint-40"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-40", "checkpoint-80"]


def test_aer_recipes_validate_during_training_at_the_papers_interval():
    from pathlib import Path

    from healtrl.cli.config import resolve
    from healtrl.cli.dry_run_checks import DryRunReport, environment_adjust
    from healtrl.recipes.checks import validation_keeps_best

    for path in sorted((Path(__file__).resolve().parent.parent / "configs").glob("aer_*qwen3*.yaml")):
        resolved = resolve(["--config", str(path)], adjust=environment_adjust(DryRunReport()))  # no GPU here
        script, args = resolved.script_args, resolved.trainer_args
        assert script.eval_tasks == ["aime25"] and script.eval_every_steps == 20, path.name
        assert args.save_total_limit and validation_keeps_best(script, args), path.name
