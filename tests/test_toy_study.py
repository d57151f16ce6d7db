"""Smoke test of the reproduction study `benchmarks/toy_study.py`: a 2-step subset in-process, then a cached re-run."""

from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import toy_study  # noqa: E402

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
    assert toy_study.window_mean(values, 4, 2) == 4.0  # steps 3-4
    assert toy_study.window_mean(values, 2, 2) == 1.0  # steps 1-2, step 2 not logged
    assert math.isnan(toy_study.window_mean([None, None], 2, 2))
    assert toy_study.spread([0.2, 0.4, 0.3]) == "0.300 (0.200-0.400)"
    assert toy_study.spread([float("nan"), 0.5]) == "0.500"
    assert toy_study.spread([float("nan")]) == "—"
    assert toy_study.smooth([2.0, 4.0, None, 8.0], 2) == [2.0, 3.0, 4.0, 8.0]


def test_bad_arguments_are_named():
    with pytest.raises(SystemExit):
        toy_study.parse_args(["--steps", "0"])
    with pytest.raises(SystemExit):
        toy_study.parse_args(["--methods", "no_such_method"])


def test_pairs_choose_the_runs_and_are_checked():
    args = toy_study.parse_args(["--task", "countdown", "--pairs", "heal:few_shot", "aer:full", "heal:few_shot"])
    assert args.pairs == [("heal", "few_shot"), ("aer", "full")]
    assert args.methods == ["heal", "aer"] and args.regimes == ["few_shot", "full"]
    # 'claims': the pairs benchmarks/claims.py reads at --steps (the study's 85, set A's 175, set B's 140)
    args = toy_study.parse_args(["--task", "countdown", "--pairs", "claims", "--steps", "85"])
    assert args.pairs == list(toy_study.claims.CLAIM_PAIRS)
    for steps in (85, 140, 175):
        args = toy_study.parse_args(["--task", "countdown", "--pairs", "claims", "--steps", str(steps)])
        assert args.pairs == list(toy_study.claims.claim_pairs(steps)) and args.pairs, steps
        assert {m for m, _ in args.pairs} <= set(toy_study.METHODS), steps  # every claim arm is a study method
    assert toy_study.claims.claim_pairs(175) == (("grpo", "full"), ("aer", "full"))
    # the claims' 140-step arms are the paper regime: 4 optimizer steps per rollout batch, full data
    for method, regime in toy_study.claims.claim_pairs(140):
        assert regime == "full" and toy_study.WORLD_OVERRIDES["countdown"][method]["steps_per_generation"] == 4
    # 'all': every trainer and baseline in both regimes, then the claims' (ablation) pairs, each once
    args = toy_study.parse_args(["--task", "countdown", "--pairs", "all", "--steps", "85"])
    every = {(m, r) for m in toy_study.STUDY_METHODS for r in toy_study.REGIMES}
    assert set(args.pairs) == every | set(toy_study.claims.CLAIM_PAIRS) and len(args.pairs) == len(set(args.pairs))
    assert {"grpo", "hybrid", "heal", "aer", "posadv", "opefo", "rand_pos_clip", "clip_cov", "kl_cov"} <= {
        m for m, _ in every
    }
    assert not any(m.startswith("opefo_") for m, _ in args.pairs)  # OPEFO's Table 2 variants stay opt-in
    for bad in ("heal", "heal:some", "nope:full"):
        with pytest.raises(SystemExit):
            toy_study.parse_args(["--pairs", bad])


def test_study_subset_writes_table_and_figure_and_reuses_cache(tmp_path, monkeypatch):
    argv = ["--steps", "2", "--seeds", "0", "--regimes", "few_shot", "--jobs", "1", "--window", "2"]
    argv += ["--methods", *METHODS, "--output-dir", str(tmp_path), "--work-dir", str(tmp_path / "work")]
    result = toy_study.main(argv)
    assert sorted(result["trained"]) == sorted((m, "few_shot", 0) for m in METHODS)

    png = Path(result["png"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = Path(result["markdown"]).read_text()
    # entropy, reward and held-out pass@k figures, each written and linked from the report
    assert [Path(p).name for p in result["figures"]] == list(toy_study.FIGURES) and len(result["figures"]) == 3
    for figure in result["figures"]:
        assert Path(figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({Path(figure).name})" in markdown
    rows = table_rows(markdown)
    assert set(rows) == {toy_study.METHODS[m][0] for m in METHODS}
    for method in METHODS:
        cells = rows[toy_study.METHODS[method][0]]
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

    monkeypatch.setattr(toy_study, "run_one", no_training)
    again = toy_study.main(argv)
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
    monkeypatch.setattr(toy_study, "FIXED_STEPS", (2, 4))
    records = {
        ("aer", "few_shot"): [
            _record(
                "aer", 0, [1.0, 0.8, None, 0.4, 0.2], [0.0, 0.5, 0.5, 1.0, 1.0], [0.5] * 5, [0.0, 0.0, 0.005, 0.01, 0.0]
            )
        ],
        # A run cached before the diagnostics existed: no zero_std / controller series.
        ("grpo", "few_shot"): [_record("grpo", 1, [0.9] * 5, [0.25] * 5)],
    }
    lines = toy_study.fixed_steps_table(records, ["grpo", "aer"], ["few_shot"], steps=5, window=2)
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
            toy_study.parse_args(["--task", "mul", "--methods", "grpo", method])
        assert f"--methods {method} need a general domain" in capsys.readouterr().err
    args = toy_study.parse_args(["--task", "mul", "--methods", "grpo", "aer"])
    assert args.task == "mul" and args.methods == ["grpo", "aer"]
    assert "neg_only" not in toy_study.parse_args([]).methods  # the ablations are opt-in


@pytest.mark.slow  # study runs of the controllers (~12 s); test_study_subset_... stays default
def test_mul_task_records_the_controllers(tmp_path, capsys):
    argv = ["--task", "mul", "--steps", "2", "--seeds", "0", "--regimes", "few_shot", "--jobs", "1", "--window", "1"]
    argv += ["--methods", "grpo", "aer", "posadv", "neg_only", "--output-dir", str(tmp_path)]
    argv += ["--work-dir", str(tmp_path / "work")]
    result = toy_study.main(argv)
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
    from healtrl.toy import world

    tiny = dict(hidden_size=32, num_layers=1, num_heads=2, target_accuracy=0.9, max_steps=2, batch_size=8,
                demo_rows=64, eval_every=2)  # fmt: skip
    monkeypatch.setattr(world, "WORLD_BUILD", {**world.WORLD_BUILD, **tiny})
    monkeypatch.setenv("HEALTRL_CACHE", str(tmp_path / "cache"))
    methods = ("grpo", "heal", "clip_higher")
    argv = ["--task", "countdown", "--steps", "4", "--seeds", "0", "--regimes", "few_shot", "--jobs", "1"]
    argv += ["--methods", *methods, "--output-dir", str(tmp_path), "--work-dir", str(tmp_path / "work")]
    result = toy_study.main(argv)
    assert sorted(result["trained"]) == sorted((m, "few_shot", 0) for m in methods)
    for method in methods:
        record = result["records"][(method, "few_shot")][0]
        assert record["task"] == "countdown" and record["held_out"]["k"] == toy_study.K
        series = record["series"]
        assert all(v is not None for v in series["flow_net"]), method
        net = [i + d for i, d in zip(series["flow_increase"], series["flow_decrease"])]
        assert net == pytest.approx(series["flow_net"], abs=1e-5)
    clip = result["records"][("clip_higher", "few_shot")][0]["series"]
    on_policy = result["records"][("grpo", "few_shot")][0]["series"]
    assert all(v == 0 for v in on_policy["flow_upper_clipped_net"])  # ratio 1: nothing is clipped on-policy
    assert all(v is not None for v in clip["flow_upper_clipped_net"])
