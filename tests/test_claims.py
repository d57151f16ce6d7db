"""`benchmarks/claims.py`: the papers' claims as checks (issue #26 item 2), their intervals and verdicts."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("bench_claims", os.path.join(HERE, "..", "benchmarks", "claims.py"))
claims = importlib.util.module_from_spec(_spec)
sys.modules["bench_claims"] = claims  # dataclasses look their module up
_spec.loader.exec_module(claims)


def _run(method, regime, seed, entropy, pass_at=None, steps=50, **series):
    return {
        "method": method,
        "regime": regime,
        "seed": seed,
        "steps": steps,
        "finished": True,
        "series": {"entropy_target": entropy, **series},
        "held_out": {"pass_at": {str(k): v for k, v in (pass_at or {}).items()}},
    }


def _runs(records):
    runs = {}
    for r in records:
        runs.setdefault((r["method"], r["regime"]), {})[r["seed"]] = r
    return runs


def _claim(claim_id):
    return next(c for c in claims.CLAIMS if c.id == claim_id)


def test_every_claim_the_issue_names_is_a_check():
    ids = {c.id for c in claims.CLAIMS}
    assert {
        "grpo-collapse-few", "grpo-collapse-full", "aer-near-target", "aer-pass-at-k", "pos-only-collapses",
        "neg-only-keeps", "posadv-near-threshold", "rand-pos-clip-mitigates", "clip-cov-mitigates",
        "kl-cov-mitigates", "entropy-adv-intensifies", "opefo-smooth", "grpo-net-flow-negative",
        "upper-clipped-positive", "lower-clipped-negative", "hybrid-keeps-more", "heal-keeps-most",
        "heal-approaches-full-shot",
    } <= ids  # fmt: skip
    for c in claims.CLAIMS:
        assert c.side in ("below", "above", "within") and c.source and c.statistic
        assert (c.upper is not None) == (c.side == "within")


def test_bootstrap_interval_brackets_the_mean_and_is_a_point_for_equal_values():
    assert claims.bootstrap_interval([0.3, 0.3, 0.3]) == (0.3, 0.3)
    low, high = claims.bootstrap_interval([0.0, 1.0, 2.0, 3.0, 4.0])
    assert 0.0 <= low < 2.0 < high <= 4.0
    assert claims.bootstrap_interval([0.0, 1.0, 2.0, 3.0, 4.0]) == (low, high)  # a fixed generator


@pytest.mark.parametrize(
    "side,interval,expected",
    [
        ("below", (0.1, 0.4), "held"),
        ("below", (0.4, 0.6), "inconclusive"),
        ("below", (0.5, 0.9), "not held"),
        ("above", (0.6, 0.9), "held"),
        ("above", (0.1, 0.5), "not held"),
        ("within", (0.6, 1.5), "held"),
        ("within", (2.5, 3.0), "not held"),
        ("within", (1.5, 2.5), "inconclusive"),
    ],
)
def test_verdicts(side, interval, expected):
    claim = claims.Claim("x", "p", "t", "s", side, 0.5, lambda runs: {}, upper=2.0 if side == "within" else None)
    assert claims.verdict(claim, *interval) == expected


def test_collapse_and_mitigation_on_synthetic_runs():
    flat = [1.0] * 50
    collapsing = [1.0] * 5 + [0.1] * 45
    runs = _runs(
        [_run("grpo", "full", s, collapsing) for s in range(3)] + [_run("clip_cov", "full", s, flat) for s in range(3)]
    )
    result = claims.evaluate(_claim("grpo-collapse-full"), runs)
    assert result.verdict == "held" and result.mean == pytest.approx(0.1)
    assert claims.evaluate(_claim("clip-cov-mitigates"), runs).verdict == "held"
    assert claims.evaluate(_claim("entropy-adv-intensifies"), runs).verdict == "not measured"
    runs = _runs([_run("grpo", "full", s, flat) for s in range(3)])
    assert claims.evaluate(_claim("grpo-collapse-full"), runs).verdict == "not held"


def test_pass_at_k_and_flow_claims_read_their_fields():
    better = {1: 0.3, 2: 0.4, 4: 0.5, 8: 0.6, 16: 0.7}
    worse = {k: v - 0.1 for k, v in better.items()}
    runs = _runs(
        [_run("aer", "full", s, [1.0] * 50, better) for s in range(3)]
        + [_run("grpo", "full", s, [1.0] * 50, worse) for s in range(3)]
    )
    result = claims.evaluate(_claim("aer-pass-at-k"), runs)
    assert result.verdict == "held" and result.mean == pytest.approx(0.1)
    flow = {"flow_increase": [1.0] * 50, "flow_decrease": [-3.0] * 50, "flow_net": [-2.0] * 50}
    runs = _runs([_run("grpo", "full", s, [1.0] * 50, **flow) for s in range(3)])
    result = claims.evaluate(_claim("grpo-net-flow-negative"), runs)
    assert result.verdict == "held" and result.mean == pytest.approx(-0.5)
    missing = claims.evaluate(_claim("upper-clipped-positive"), runs)
    assert missing.verdict == "not measured" and "clip_higher" in missing.reason


def test_load_runs_refuses_mixed_step_counts(tmp_path):
    for steps in (50, 100):
        (tmp_path / f"grpo-full-seed0-{steps}steps.json").write_text(
            json.dumps(_run("grpo", "full", 0, [1.0], steps=steps))
        )
    with pytest.raises(SystemExit, match="choose one with --steps"):
        claims.load_runs(str(tmp_path))
    assert set(claims.load_runs(str(tmp_path), steps=100)) == {("grpo", "full")}


def test_load_runs_refuses_a_folder_without_runs(tmp_path):
    with pytest.raises(SystemExit, match="no run files"):
        claims.load_runs(str(tmp_path))


def _full_record(method, regime, seed):
    flow = {name: [0.5 - seed / 10] * 50 for name in ("flow_increase", "flow_net", "flow_upper_clipped_net")}
    flow |= {name: [-1.0] * 50 for name in ("flow_decrease", "flow_lower_clipped_net")}
    pass_at = {k: 0.1 * seed + 0.01 * k for k in claims.PASS_K}
    return _run(method, regime, seed, [1.0 - 0.01 * i for i in range(50)], pass_at, **flow)


def test_claim_pairs_are_exactly_what_the_claims_read():
    """The study's `--pairs claims` runs every pair a claim reads and none that no claim reads."""
    pairs = claims.CLAIM_PAIRS
    assert len(set(pairs)) == len(pairs)
    runs = _runs([_full_record(m, r, s) for m, r in pairs for s in range(3)])

    def measured(claim, some_runs) -> bool:
        try:
            return bool(claim.values(some_runs))
        except claims.NotMeasured:
            return False

    assert [c.id for c in claims.CLAIMS if not measured(c, runs)] == []
    for pair in pairs:  # each pair is needed by at least one claim
        fewer = {key: value for key, value in runs.items() if key != pair}
        assert not all(measured(c, fewer) for c in claims.CLAIMS), pair


def test_seeds_filter_of_load_runs(tmp_path):
    for seed in range(3):
        (tmp_path / f"grpo-full-seed{seed}-50steps.json").write_text(json.dumps(_run("grpo", "full", seed, [1.0])))
    assert set(claims.load_runs(str(tmp_path), seeds=[0, 2])[("grpo", "full")]) == {0, 2}


def test_table_links_a_diagnostic_for_every_verdict_but_held():
    runs = _runs([_run("grpo", "few_shot", s, [1.0] * 45 + [0.1] * 5) for s in range(3)])
    results = [claims.evaluate(c, runs) for c in claims.CLAIMS]
    text = claims.table(results, "diagnostics.md")
    for r, line in zip(results, text.splitlines()[2:]):
        assert (f"(diagnostics.md#{r.claim.id})" in line) == (r.verdict != "held"), line
    assert "diagnostics.md" not in claims.table(results)
    # every row has the header's 6 cells: a statistic written |x| is escaped, not a cell border
    assert any("\\|AER final entropy" in line for line in text.splitlines())
    for line in text.splitlines():
        assert len(re.split(r"(?<!\\)\|", line)) == 8, line


def test_readme_table_is_the_committed_claims_table():
    """The README's claims table is `claims.md`'s, in the README's form (so a rerun of the study that rewrites
    `claims.md` cannot leave the README quoting the old numbers: `claims.py --readme README.md` rewrites it)."""
    root = os.path.join(HERE, "..")
    folder = "benchmarks/results/reasoning_study"
    with open(os.path.join(root, folder, "claims.md")) as f:
        claims_md = f.read()
    with open(os.path.join(root, "README.md")) as f:
        readme = f.read()
    expected = claims.readme_table(claims_md, folder)
    assert expected in readme
    assert claims.replace_readme_table(readme, claims_md, folder) == readme


def test_readme_table_form_and_rewrite():
    runs = _runs([_run("grpo", "few_shot", s, [1.0] * 45 + [0.1] * 5) for s in range(3)])
    results = [claims.evaluate(c, runs) for c in claims.CLAIMS]
    claims_md = "# title\n\ntext\n\n" + claims.table(results, "diagnostics.md") + "\n"
    text = claims.readme_table(claims_md, "a/b")
    lines = text.splitlines()
    assert lines[0] == claims.README_HEADER.format(seeds="3")
    assert len(lines) == 2 + len(claims.CLAIMS)
    collapse = next(line for line in lines if line.startswith(f"| {_claim('grpo-collapse-few').text} |"))
    assert "(< 0.5) | 0.100 [0.100, 0.100] | **held** |" in collapse  # statistic (threshold), no "(3)" seeds
    assert "(a/b/diagnostics.md#" in text and "(diagnostics.md#" not in text
    assert "- (" in text  # the claims these runs cannot measure keep their reason
    for line in lines:
        assert len(re.split(r"(?<!\\)\|", line)) == 7, line  # 5 cells; |x| stays escaped
    # the rewrite replaces exactly the table, and refuses a README without one (or with two)
    readme = f"# R\n\nbefore\n\n{claims.README_HEADER.format(seeds='9')}\n|---|\n| old | row |\n\nafter\n"
    assert claims.replace_readme_table(readme, claims_md, "a/b") == f"# R\n\nbefore\n\n{text}\n\nafter\n"
    with pytest.raises(ValueError, match="found 0"):
        claims.replace_readme_table("# R\n", claims_md, "a/b")
    with pytest.raises(ValueError, match="no claims table"):
        claims.readme_table("# nothing\n", "a/b")


def test_readme_option_rewrites_the_readme_and_needs_output(tmp_path, capsys):
    for seed in range(3):
        record = _run("grpo", "few_shot", seed, [1.0] * 45 + [0.1] * 5)
        (tmp_path / f"grpo-few_shot-seed{seed}-50steps.json").write_text(json.dumps(record))
    readme = tmp_path / "README.md"
    readme.write_text(f"top\n\n{claims.README_HEADER.format(seeds='1')}\n|---|\n| stale |\n\nend\n")
    out = tmp_path / "res" / "claims.md"
    out.parent.mkdir()
    claims.main(
        ["--runs", str(tmp_path), "--output", str(out), "--diagnostics", "diagnostics.md", "--readme", str(readme)]
    )
    text = readme.read_text()
    assert "stale" not in text and text.startswith("top\n\n") and text.endswith("\n\nend\n")
    assert claims.readme_table(out.read_text(), "res") in text
    with pytest.raises(SystemExit):
        claims.main(["--runs", str(tmp_path), "--readme", str(readme)])
    assert "give --output too" in capsys.readouterr().err
