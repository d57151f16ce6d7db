"""Smoke test of the study (`healtrl.study`, `healtrl study`; `benchmarks/toy_study.py` wraps it): a 2-step subset
in-process, then a cached re-run; the command line's checks; the report from a synthetic cache; a user's trainer."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest

from healtrl.study import claims, command, methods, report, runs, world

METHODS = ("grpo", "heal", "kl_cov")  # kl_cov logs rollout entropies every other step (2 updates per batch)


def table_rows(markdown: str) -> dict[str, list[str]]:
    """Method label -> cells of its row in the results table."""
    rows = {}
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 9 and cells[0] == "few_shot":
            rows[cells[1]] = cells
    return rows


def test_window_mean_and_spread_by_hand():
    values = [1.0, None, 3.0, 5.0]
    assert report.window_mean(values, 4, 2) == 4.0  # steps 3-4
    assert report.window_mean(values, 2, 2) == 1.0  # steps 1-2, step 2 not logged
    assert math.isnan(report.window_mean([None, None], 2, 2))
    assert report.spread([0.2, 0.4, 0.3]) == "0.300 (0.200-0.400)"
    assert report.spread([float("nan"), 0.5]) == "0.500"
    assert report.spread([float("nan")]) == "—"
    assert report.smooth([2.0, 4.0, None, 8.0], 2) == [2.0, 3.0, 4.0, 8.0]


def test_bad_arguments_are_named():
    with pytest.raises(SystemExit):
        command.parse_args(["--steps", "0"])
    with pytest.raises(SystemExit):
        command.parse_args(["--methods", "no_such_method"])


def test_pairs_choose_the_runs_and_are_checked():
    args = command.parse_args(["--task", "countdown", "--pairs", "heal:few_shot", "aer:full", "heal:few_shot"])
    assert args.pairs == [("heal", "few_shot"), ("aer", "full")]
    assert args.methods == ["heal", "aer"] and args.regimes == ["few_shot", "full"]
    # 'claims': the pairs the claims read at --steps (the study's 85, set A's 175, set B's 140)
    args = command.parse_args(["--task", "countdown", "--pairs", "claims", "--steps", "85"])
    assert args.pairs == list(claims.CLAIM_PAIRS)
    for steps in (85, 140, 175):
        args = command.parse_args(["--task", "countdown", "--pairs", "claims", "--steps", str(steps)])
        assert args.pairs == list(claims.claim_pairs(steps)) and args.pairs, steps
        assert {m for m, _ in args.pairs} <= set(methods.METHODS), steps  # every claim arm is a study method
    assert claims.claim_pairs(175) == (("grpo", "full"), ("aer", "full"))
    # the claims' 140-step arms are the paper regime: 4 optimizer steps per rollout batch, full data
    for method, regime in claims.claim_pairs(140):
        assert regime == "full" and methods.WORLD_OVERRIDES["countdown"][method]["steps_per_generation"] == 4
    # 'all': every trainer and baseline in both regimes, then the claims' (ablation) pairs, each once
    args = command.parse_args(["--task", "countdown", "--pairs", "all", "--steps", "85"])
    every = {(m, r) for m in methods.STUDY_METHODS for r in world.REGIMES}
    assert set(args.pairs) == every | set(claims.CLAIM_PAIRS) and len(args.pairs) == len(set(args.pairs))
    assert {"grpo", "hybrid", "heal", "aer", "posadv", "opefo", "rand_pos_clip", "clip_cov", "kl_cov"} <= {
        m for m, _ in every
    }
    assert not any(m.startswith("opefo_") for m, _ in args.pairs)  # OPEFO's Table 2 variants stay opt-in
    for bad in ("heal", "heal:some", "nope:full"):
        with pytest.raises(SystemExit):
            command.parse_args(["--pairs", bad])


def test_study_subset_writes_table_and_figure_and_reuses_cache(tmp_path, monkeypatch):
    argv = ["--steps", "2", "--seeds", "0", "--regimes", "few_shot", "--jobs", "1", "--window", "2"]
    argv += ["--methods", *METHODS, "--output-dir", str(tmp_path), "--work-dir", str(tmp_path / "work")]
    result = command.main(argv)
    assert sorted(result["trained"]) == sorted((m, "few_shot", 0) for m in METHODS)

    png = Path(result["png"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = Path(result["markdown"]).read_text()
    # entropy, reward and held-out pass@k figures, each written and linked from the report
    assert [Path(p).name for p in result["figures"]] == list(report.FIGURES) and len(result["figures"]) == 3
    for figure in result["figures"]:
        assert Path(figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({Path(figure).name})" in markdown
    rows = table_rows(markdown)
    assert set(rows) == {methods.METHODS[m][0] for m in METHODS}
    for method in METHODS:
        cells = rows[methods.METHODS[method][0]]
        numbers = [float(c) for c in cells[2:8]]  # reward, avg@16, pass@4, pass@16, entropy, s/run
        assert all(math.isfinite(x) for x in numbers), cells
        assert all(0.0 <= x <= 1.0 for x in numbers[:4]), cells
        assert numbers[1] <= numbers[2] <= numbers[3]  # pass@1 <= pass@4 <= pass@16
        assert numbers[4] > 0
        # The table's final entropy is the mean of the cached per-step rollout entropies (reference: plain loop).
        record = json.loads((tmp_path / "toy_study_runs" / f"{method}-few_shot-seed0-2steps.json").read_text())
        logged = [v for v in record["series"]["entropy_target"] if v is not None]
        assert logged, method
        assert float(cells[6]) == pytest.approx(sum(logged) / len(logged), abs=5e-4)
        assert record["steps"] == 2 and record["seed"] == 0
    # kl_cov takes 2 optimizer steps per rollout batch: only step 1 generated.
    kl = json.loads((tmp_path / "toy_study_runs" / "kl_cov-few_shot-seed0-2steps.json").read_text())
    assert kl["series"]["entropy_target"][0] is not None and kl["series"]["entropy_target"][1] is None

    # A re-run reads every run from the cache: training would raise.
    files = sorted((tmp_path / "toy_study_runs").glob("*.json"))
    mtimes = [os.path.getmtime(f) for f in files]

    def no_training(*args, **kwargs):
        raise AssertionError("the re-run trained instead of reading the cache")

    monkeypatch.setattr(runs, "run_one", no_training)
    again = command.main(argv)
    assert again["trained"] == []
    assert [os.path.getmtime(f) for f in files] == mtimes
    assert re.search(r"trained no run: all 3 were read from the cache", Path(again["markdown"]).read_text())
    assert table_rows(Path(again["markdown"]).read_text()).keys() == rows.keys()


def _record(method, seed, entropy, reward, zero_std=None, controller=None):
    series = {"entropy_target": entropy, "reward_target": reward}
    if zero_std is not None:
        series["zero_std"] = zero_std
    if controller is not None:
        series["controller"] = controller
    return {"method": method, "seed": seed, "steps": len(entropy), "series": series}


def test_fixed_steps_table_by_hand(monkeypatch):
    monkeypatch.setattr(report, "FIXED_STEPS", (2, 4))
    records = {
        ("aer", "few_shot"): [
            _record(
                "aer", 0, [1.0, 0.8, None, 0.4, 0.2], [0.0, 0.5, 0.5, 1.0, 1.0], [0.5] * 5, [0.0, 0.0, 0.005, 0.01, 0.0]
            )
        ],
        # A run cached before the diagnostics existed: no zero_std / controller series.
        ("grpo", "few_shot"): [_record("grpo", 1, [0.9] * 5, [0.25] * 5)],
    }
    lines = report.fixed_steps_table(records, ["grpo", "aer"], ["few_shot"], steps=5, window=2)
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == ["data", "method", "seed", "H@1", "H@2", "H@4", "H@5", "R@2", "R@4", "R@5",
                      "zero-std at 2/4/5", "alpha or lambda at the same steps"]  # fmt: skip
    rows = {r[1]: r for r in ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:])}
    assert list(rows) == ["GRPO", "AER"]  # method order of the arguments
    # AER: H@2 = mean(1.0, 0.8), H@4 = step 4 alone (step 3 not logged), H@5 = mean(0.4, 0.2); R likewise.
    assert rows["AER"][2:10] == ["0", "1.000", "0.900", "0.400", "0.300", "0.250", "0.750", "1.000"]
    assert rows["AER"][10] == "0.50 / 0.50 / 0.50"
    assert rows["AER"][11] == "0.000 / 0.010 / 0.000"
    assert rows["GRPO"][10] == "— / — / —" and rows["GRPO"][11] == ""


def test_other_task_rejects_methods_that_need_the_general_domain(capsys):
    for method in ("heal", "hybrid"):
        with pytest.raises(SystemExit):
            command.parse_args(["--task", "mul", "--methods", "grpo", method])
        assert f"--methods {method} need a general domain" in capsys.readouterr().err
    args = command.parse_args(["--task", "mul", "--methods", "grpo", "aer"])
    assert args.task == "mul" and args.methods == ["grpo", "aer"]
    assert "neg_only" not in command.parse_args([]).methods  # the ablations are opt-in


@pytest.mark.slow  # study runs of the controllers (~12 s); test_study_subset_... stays default
def test_mul_task_records_the_controllers(tmp_path, capsys):
    argv = ["--task", "mul", "--steps", "2", "--seeds", "0", "--regimes", "few_shot", "--jobs", "1", "--window", "1"]
    argv += ["--methods", "grpo", "aer", "posadv", "neg_only", "--output-dir", str(tmp_path)]
    argv += ["--work-dir", str(tmp_path / "work")]
    result = command.main(argv)
    runs = {}
    for method in ("grpo", "aer", "posadv", "neg_only"):
        path = tmp_path / "toy_study_runs" / f"{method}-mul-few_shot-seed0-2steps.json"
        runs[method] = json.loads(path.read_text())
        assert runs[method]["task"] == "mul" and runs[method]["model"] == "healtrl-toy/qwen2-mul"
        assert all(0.0 <= v <= 1.0 for v in runs[method]["series"]["zero_std"])
    # AER: alpha_0 = 0 and the entropy starts above H* = 0.4 H0, so alpha stays 0 (eq. 11 clips at 0).
    assert runs["aer"]["series"]["controller"] == [0.0, 0.0]
    assert runs["aer"]["series"]["hard_frac"][0] is not None
    # Entropy-guided PosAdv: lambda_0 = 0, then + Delta = 0.05 while the entropy is above delta = 0.2.
    assert runs["posadv"]["series"]["entropy_target"][0] > 0.2
    assert runs["posadv"]["series"]["controller"] == [0.0, 0.05]
    assert runs["neg_only"]["series"]["controller"] == [0.0, 0.0]
    assert runs["grpo"]["series"]["controller"] == [None, None]
    # The same first step for every method (same model, data and seed; the methods differ only in the update).
    assert len({r["series"]["entropy_target"][0] for r in runs.values()}) == 1
    markdown = Path(result["markdown"]).read_text()
    assert "`healtrl-toy/qwen2-mul`" in markdown
    assert "| few_shot | A<0 tokens only | 0 |" in markdown
    assert "| few_shot | AER | 0 |" in capsys.readouterr().out  # the fixed-steps table is printed too


@pytest.mark.slow  # ~30 s; the world's default-suite smoke test is tests/test_reasoning_world.py
def test_reasoning_world_subset_runs_and_records_the_entropy_flow(tmp_path, monkeypatch):
    """`--task countdown` (issue #26): the world's trainers, HEAL's selection on its general family, Clip-Higher's
    off-policy updates, the 32-token budget and the flow series, on a tiny stand-in for the world's model."""
    from healtrl.toy import world as toy_world

    tiny = dict(hidden_size=32, num_layers=1, num_heads=2, target_accuracy=0.9, max_steps=2, batch_size=8,
                demo_rows=64, eval_every=2)  # fmt: skip
    monkeypatch.setattr(toy_world, "WORLD_BUILD", {**toy_world.WORLD_BUILD, **tiny})
    monkeypatch.setenv("HEALTRL_CACHE", str(tmp_path / "cache"))
    methods = ("grpo", "heal", "clip_higher")
    argv = ["--task", "countdown", "--steps", "4", "--seeds", "0", "--regimes", "few_shot", "--jobs", "1"]
    argv += ["--methods", *methods, "--output-dir", str(tmp_path), "--work-dir", str(tmp_path / "work")]
    result = command.main(argv)
    assert sorted(result["trained"]) == sorted((m, "few_shot", 0) for m in methods)
    for method in methods:
        record = result["records"][(method, "few_shot")][0]
        assert record["task"] == "countdown" and record["held_out"]["k"] == world.K
        series = record["series"]
        assert all(v is not None for v in series["flow_net"]), method
        net = [i + d for i, d in zip(series["flow_increase"], series["flow_decrease"])]
        assert net == pytest.approx(series["flow_net"], abs=1e-5)
    clip = result["records"][("clip_higher", "few_shot")][0]["series"]
    on_policy = result["records"][("grpo", "few_shot")][0]["series"]
    assert all(v == 0 for v in on_policy["flow_upper_clipped_net"])  # ratio 1: nothing is clipped on-policy
    assert all(v is not None for v in clip["flow_upper_clipped_net"])


# ---------------------------------------------------------------------------------------------------------------------
# `healtrl study`: the command line, the report from a cache, a user's trainer
# ---------------------------------------------------------------------------------------------------------------------
def _cached(method, regime, seed, steps, task="countdown", level=0.5):
    """A finished run as `runs.run_one` caches it, with synthetic numbers (entropy falling from 1 to `level`)."""
    entropy = [1.0 - (1.0 - level) * t / (steps - 1) for t in range(steps)]
    pass_at = {str(k): min(1.0, 0.2 + 0.05 * k + 0.01 * seed) for k in (1, 2, 4, 8, 16)}
    return {
        "format": runs.FORMAT,
        "method": method,
        "regime": regime,
        "seed": seed,
        "steps": steps,
        "task": task,
        "series": {"entropy_target": entropy, "reward_target": [0.1 * seed + 0.01 * t for t in range(steps)]},
        "held_out": {"k": world.K, "scorer": "synthetic", "avg@k": pass_at["1"], "pass_at": pass_at},
        "seconds": {"total": 10.0, "cpu": 9.0, "per_step": 1.0},
        "finished": "2026-11-28T00:00:00",
    }


def _write_cache(folder: Path, records) -> None:
    cache = folder / runs.RUNS_SUBDIR
    cache.mkdir(parents=True, exist_ok=True)
    for r in records:
        path = runs.run_path(str(cache), r["method"], r["regime"], r["seed"], r["steps"], r["task"])
        Path(path).write_text(json.dumps(r))


def test_healtrl_study_help_names_the_options(capsys):
    from healtrl.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["study", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: healtrl study")
    for option in ("--pairs", "--report", "--trainer", "--config", "--output-dir", "--task"):
        assert option in out, option
    with pytest.raises(SystemExit) as exc:
        main(["study", "--claims", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: healtrl study --claims") and "--diagnostics" in out


def test_healtrl_study_report_from_a_synthetic_cache(tmp_path, monkeypatch):
    """`healtrl study --report` (and its alias `--report-only`) writes the table and the figures from the cache alone,
    names itself as the command, and refuses, naming the run, when one is missing."""
    from healtrl.cli import main

    steps = 6
    records = [_cached(m, "full", s, steps, level=lv) for m, lv in (("grpo", 0.2), ("aer", 0.6)) for s in (0, 1)]
    _write_cache(tmp_path, records)
    monkeypatch.setattr(runs, "run_one", lambda *a, **k: pytest.fail("--report trained a run"))

    def options(*seeds):
        return ["--task", "countdown", "--methods", "grpo", "aer", "--regimes", "full", "--seeds", *seeds,
                "--steps", str(steps), "--window", "2", "--output-dir", str(tmp_path),
                "--work-dir", str(tmp_path / "w")]  # fmt: skip

    assert main(["study", *options("0", "1"), "--report"]) == 0
    markdown = (tmp_path / "toy_study.md").read_text()
    assert f"Command: `healtrl study {' '.join(options('0', '1'))} --report`" in markdown
    assert "This invocation trained no run: all 4 were read from the cache" in markdown
    rows = {line.split(" | ")[1]: line for line in markdown.splitlines() if line.startswith("| full | ")}
    assert {"GRPO", "AER"} <= set(rows)
    # final entropy: the mean of the last 2 steps of the synthetic series (GRPO 1 -> 0.2: steps 5-6 are 0.36, 0.2)
    assert "| 0.280 |" in rows["GRPO"]
    assert "above GRPO's (0.280 (0.280-0.280)) on every one of the 2 seeds: AER 0.640 (0.640-0.640)" in markdown
    for name in report.FIGURES:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the same report through the script's alias; a missing run is named
    assert command.main([*options("0", "1"), "--report-only"])["trained"] == []
    with pytest.raises(SystemExit, match=r"2 runs are not in .*grpo/full/seed 2, aer/full/seed 2"):
        main(["study", *options("0", "1", "2"), "--report"])


USER_MODULE = '''
from healtrl.trainers import EntropyGRPOTrainer


class BonusTrainer(EntropyGRPOTrainer):
    """A user's trainer: GRPO with TRL's entropy bonus (set in the YAML file)."""


class NotATrainer:
    pass
'''


@pytest.fixture
def user_trainer(tmp_path, monkeypatch):
    """`study_user_methods.BonusTrainer` importable from the current folder (tmp_path), a YAML file of its fields, and
    METHODS restored afterwards (a user's trainer is registered into it)."""
    (tmp_path / "study_user_methods.py").write_text(USER_MODULE)
    (tmp_path / "fields.yaml").write_text("entropy_coef: 0.01\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    before = dict(methods.METHODS)
    yield tmp_path
    for key in set(methods.METHODS) - set(before):
        del methods.METHODS[key]
    __import__("sys").modules.pop("study_user_methods", None)


def test_user_trainer_is_one_more_method_beside_grpo(user_trainer):
    base = ["--task", "countdown", "--regimes", "full", "--seeds", "0", "--steps", "6"]
    base += ["--output-dir", str(user_trainer), "--work-dir", str(user_trainer / "w")]
    args = command.parse_args([*base, "--trainer", "study_user_methods:BonusTrainer", "--config", "fields.yaml"])
    key = args.user["key"]
    assert key.startswith("BonusTrainer-") and args.methods == ["grpo", key]
    assert args.user["fields"] == {"entropy_coef": 0.01}
    label, group, source, _, notes = methods.METHODS[key]
    assert (label, group, source) == ("BonusTrainer", methods.USER_GROUP, "user") and "entropy_coef 0.01" in notes
    # another config is another method (its own cache files); --pairs adds the user's method in the pairs' regimes
    other = command.parse_args([*base, "--trainer", "study_user_methods:BonusTrainer"])
    assert other.user["key"] != key and other.user["fields"] == {}
    # an edited trainer (its module's source changed) is another method too: its old cached runs are not reused
    source = user_trainer / "study_user_methods.py"
    source.write_text(source.read_text() + "\n# edited\n")
    edited = command.parse_args([*base, "--trainer", "study_user_methods:BonusTrainer", "--config", "fields.yaml"])
    assert edited.user["key"] != key and edited.user["fields"] == {"entropy_coef": 0.01}
    source.write_text(USER_MODULE)
    paired = command.parse_args([*base, "--trainer", "study_user_methods:BonusTrainer", "--pairs", "aer:few_shot"])
    assert paired.pairs == [("aer", "few_shot"), (other.user["key"], "few_shot")]
    # the report reads the user's runs like any method's
    _write_cache(user_trainer, [_cached("grpo", "full", 0, 6, level=0.2), _cached(key, "full", 0, 6, level=0.7)])
    argv = [
        *base,
        "--trainer",
        "study_user_methods:BonusTrainer",
        "--config",
        "fields.yaml",
        "--report",
        "--window",
        "2",
    ]
    markdown = Path(command.main(argv, prog="healtrl study", command="healtrl study")["markdown"]).read_text()
    row = next(line for line in markdown.splitlines() if line.startswith("| full | BonusTrainer |"))
    assert "`study_user_methods:BonusTrainer` (EntropyGRPOConfig): entropy_coef 0.01" in row
    assert "on every one of the 1 seeds: BonusTrainer 0.730" in markdown


@pytest.mark.parametrize(
    "spec, fields, message",
    [
        ("study_user_methods", None, "write MODULE:CLASS"),
        ("no_such_module_here:X", None, "cannot import no_such_module_here"),
        ("study_user_methods:Missing", None, "has no attribute Missing"),
        ("study_user_methods:NotATrainer", None, "is not a subclass of healtrl's EntropyGRPOTrainer"),
        ("study_user_methods:BonusTrainer", "no_such_field: 1\n", "no_such_field are not fields of EntropyGRPOConfig"),
        # the study's budget and logging are the same for every method: a user's config may not move them
        ("study_user_methods:BonusTrainer", "learning_rate: 0.1\nseed: 3\n", "learning_rate, seed are set by the"),
    ],
)
def test_user_trainer_errors_are_named(user_trainer, capsys, spec, fields, message):
    argv = [
        "--task",
        "countdown",
        "--output-dir",
        str(user_trainer),
        "--work-dir",
        str(user_trainer),
        "--trainer",
        spec,
    ]
    if fields is not None:
        (user_trainer / "bad.yaml").write_text(fields)
        argv += ["--config", "bad.yaml"]
    with pytest.raises(SystemExit):
        command.parse_args(argv)
    assert message in capsys.readouterr().err


def test_user_trainer_trains_through_the_study(user_trainer):
    """Two 2-step runs in the add world, in this process: GRPO and the user's trainer, each cached with its trainer."""
    argv = ["--steps", "2", "--seeds", "0", "--regimes", "few_shot", "--jobs", "1", "--window", "2"]
    argv += ["--trainer", "study_user_methods:BonusTrainer", "--config", "fields.yaml"]
    argv += ["--output-dir", str(user_trainer), "--work-dir", str(user_trainer / "work")]
    result = command.main(argv)
    key = next(m for m, _ in result["records"] if m != "grpo")
    assert sorted(result["trained"]) == sorted([("grpo", "few_shot", 0), (key, "few_shot", 0)])
    record = json.loads((user_trainer / "toy_study_runs" / f"{key}-few_shot-seed0-2steps.json").read_text())
    assert record["trainer"] == "BonusTrainer" and record["user"]["fields"] == {"entropy_coef": 0.01}
    assert all(v is not None for v in record["series"]["entropy_target"])


def test_a_report_outside_a_checkout_needs_no_scratch_folder(tmp_path, monkeypatch, capsys):
    """Installed from a wheel (no results folder of a checkout): `--report` with `--output-dir` trains nothing and
    asks for no `--work-dir`; a study that trains does."""
    monkeypatch.setattr(command, "RESULTS_DIR", str(tmp_path / "no_checkout"))
    base = ["--task", "countdown", "--seeds", "0", "--output-dir", str(tmp_path)]
    assert command.parse_args([*base, "--report"]).report_only
    with pytest.raises(SystemExit):
        command.parse_args(base)
    assert "give --work-dir (scratch) too" in capsys.readouterr().err
