"""`healtrl.study.claims` (`healtrl study --claims`, `benchmarks/claims.py`): the papers' claims, each against its
control (issues #26 and #40): the claims are the pre-registered ones, their quotes are the papers', and the
statistics, windows, intervals and verdict rule behave as the module docstring states, on synthetic runs."""

from __future__ import annotations

import json
import math
import os
import re
import statistics

import pytest

from healtrl.study import claims, command

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SEEDS = (0, 1, 2, 3, 4)
STUDY = "benchmarks/results/reasoning_study"


# ---------------------------------------------------------------------------------------------------------------------
# Synthetic runs
# ---------------------------------------------------------------------------------------------------------------------
def _run(method, regime, steps, seed, entropy, pass_at=None, **series):
    """A run record as the study caches it (`healtrl.study.runs.run_one`; the fields the claims read)."""
    assert len(entropy) == steps
    return {
        "method": method,
        "regime": regime,
        "seed": seed,
        "steps": steps,
        "finished": True,
        "series": {"entropy_target": entropy, **series},
        "held_out": {"pass_at": {str(k): v for k, v in (pass_at or {}).items()}},
    }


def _entropy(steps, start, end, every=1):
    """`start` at steps 1-5, `end` in the last max(5, steps // 10) steps, linear between; logged at steps 1,
    1 + every, ... only (`every` 4: a run with 4 updates per rollout batch), None elsewhere."""
    tail = max(5, steps // 10)
    values = []
    for step in range(1, steps + 1):
        if step <= 5:
            value = start
        elif step > steps - tail:
            value = end
        else:
            value = start + (end - start) * (step - 5) / (steps - tail - 5)
        values.append(value if (step - 1) % every == 0 else None)
    return values


def _runs(records):
    runs = {}
    for r in records:
        by_seed = runs.setdefault((r["method"], r["regime"], r["steps"]), {})
        assert r["seed"] not in by_seed
        by_seed[r["seed"]] = r
    return runs


def _arm_runs(arm, finals, start=1.0):
    """Runs of `arm` whose target entropy starts at `start` and ends at finals[seed] (seeds 0-4)."""
    every = 4 if arm.steps == 140 else 1
    return [_run(*arm.key, s, _entropy(arm.steps, start, finals[s], every)) for s in SEEDS]


def _claim(claim_id):
    return next(c for c in claims.CLAIMS if c.id == claim_id)


def _labelled(claim_id, label_start):
    return next(row for label, row in _claim(claim_id).labelled if label.startswith(label_start))


# ---------------------------------------------------------------------------------------------------------------------
# The claims are the pre-registered ones; their quotes are in the papers
# ---------------------------------------------------------------------------------------------------------------------
with open(claims.PREREGISTRATION) as _f:
    PREREGISTRATION = json.load(_f)

# preregistration.json's `direction` of a claim -> (side of the own condition or None, the comparisons' side, and
# whether a comparison's threshold is 0 or the claim's threshold). A direction not listed here fails the test.
DIRECTIONS = {
    "below": ("below", None, None),
    "above": ("above", None, None),
    "distance: d_method < threshold AND d_method - d_control < 0": ("below", "below", "zero"),
    "superiority: interval > 0": (None, "above", "threshold"),
    "superiority in the paper's direction (lower): interval < 0": (None, "below", "threshold"),
    "own ratio < threshold AND every paired difference < 0 (interval)": ("below", "below", "zero"),
    "superiority: ratio > threshold AND paired difference > 0 (interval)": ("above", "above", "zero"),
    "ratio within [0.5, 2] AND paired difference > 0 (interval)": ("within", "above", "zero"),
    "non-inferiority: interval > threshold": (None, "above", "threshold"),
}


def _key(block):
    return None if block is None else (block["method"], block["regime"], block["steps"])


def _rule_mismatches(name, claim, pre, comparison_arms):
    """Where `claim`'s own condition and paired comparisons differ from the ones `pre`'s direction and threshold
    state, the comparisons against `comparison_arms` (keys, in order)."""
    if pre["direction"] not in DIRECTIONS:
        return [f"{name}: direction {pre['direction']!r} is not in this test's DIRECTIONS (add its reading)"]
    own_side, comparison_side, comparison_threshold = DIRECTIONS[pre["direction"]]
    found = []
    if (claim.side, claim.upper) != (own_side, pre.get("upper")):
        found.append(f"{name}: own condition {claim.side} (upper {claim.upper}), pre-registered {own_side} "
                     f"(upper {pre.get('upper')})")  # fmt: skip
    if own_side is not None and claim.threshold != pre["threshold"]:
        found.append(f"{name}: threshold {claim.threshold}, pre-registered {pre['threshold']}")
    if comparison_side is None:
        if claim.comparisons or claim.control is not None:
            found.append(f"{name}: a single-run claim with a control or comparisons")
        return found
    if [c.other.key for c in claim.comparisons] != comparison_arms:
        found.append(f"{name}: compared with {[c.other.key for c in claim.comparisons]}, pre-registered "
                     f"{comparison_arms}")  # fmt: skip
    threshold = 0.0 if comparison_threshold == "zero" else pre["threshold"]
    for comp in claim.comparisons:
        if (comp.side, comp.threshold) != (comparison_side, threshold):
            found.append(f"{name}: comparison {comp.description!r} {comp.side} {comp.threshold}, pre-registered "
                         f"{comparison_side} {threshold}")  # fmt: skip
    return found


def _mismatches(claim, pre):
    """Every difference between `claim` (with its labelled rows) and its pre-registered form `pre`."""
    found = []

    def differ(what, code, registered):
        if code != registered:
            found.append(f"{claim.id}: {what}: claims.py {code!r}, preregistration.json {registered!r}")

    differ("seeds", list(SEEDS), pre["seeds"])
    blocks = [pre["method"], pre["control"], *pre.get("comparison_set", [])]
    for row in pre.get("labelled_rows", []):
        blocks += [row["method"], row.get("control"), *row.get("comparison_set", [])]
    blocks = [b for b in blocks if b is not None]
    differ("seeds of the runs", [list(SEEDS)] * len(blocks), [b["seeds"] for b in blocks])
    differ("method", claim.arm.key, _key(pre["method"]))
    differ("control", claim.control and claim.control.key, _key(pre["control"]))
    differ("quote", list(claim.quote), pre["quote"])
    differ("quote papers", [f"{p}.txt" for p in claim.quote_papers], pre["quote_files"])
    differ("number of deviations", len(claim.deviations), len(pre["deviations"]))
    expected = [_key(b) for b in pre.get("comparison_set", [pre["control"]])]
    found += _rule_mismatches(claim.id, claim, pre, expected)
    # labelled rows: the same claim (rule, quotes) on the pre-registered runs; a row that names a comparison set and
    # no control has the set's first member as its control, as the claim itself does
    pre_rows = pre.get("labelled_rows", [])
    differ(
        "labelled rows (method runs)", [row.arm.key for _, row in claim.labelled], [_key(r["method"]) for r in pre_rows]
    )
    if len(claim.labelled) != len(pre_rows):
        return found  # rows not aligned: the difference above says which
    for (label, row), pre_row in zip(claim.labelled, pre_rows):
        name = f"{claim.id}, labelled row {label!r}"
        control = pre_row["comparison_set"][0] if "comparison_set" in pre_row else pre_row.get("control")
        if row.arm.key != _key(pre_row["method"]) or (row.control and row.control.key) != _key(control):
            found.append(f"{name}: runs {row.arm.key} / {row.control and row.control.key}, pre-registered "
                         f"{_key(pre_row['method'])} / {_key(control)} ({pre_row['label']!r})")  # fmt: skip
        if (row.id, row.quote, row.quote_papers) != (claim.id, claim.quote, claim.quote_papers):
            found.append(f"{name}: not the same claim (id, quotes)")
        expected = [_key(b) for b in pre_row.get("comparison_set", [control])]
        found += _rule_mismatches(name, row, pre, expected)
    return found


def test_claims_are_the_preregistered_ones():
    """Every claim is the pre-registered one (`preregistration.json`, committed before the new runs): id, threshold
    and band, the side of each condition, the method's and the control's runs, the comparison set, the quotes, the
    number of labelled deviations and the labelled rows' runs (in the pre-registration's order). Lists every
    difference."""
    conventions = PREREGISTRATION["conventions"]
    assert (conventions["seeds"], conventions["tau"], conventions["delta"]) == (
        list(SEEDS),
        claims.AER_TAU,
        claims.POSADV_DELTA,
    )
    pre_claims = {c["id"]: c for c in PREREGISTRATION["claims"]}
    assert len(pre_claims) == len(PREREGISTRATION["claims"])
    assert [c.id for c in claims.CLAIMS] == list(pre_claims)  # the same claims, in the same order
    found = [problem for claim in claims.CLAIMS for problem in _mismatches(claim, pre_claims[claim.id])]
    assert not found, "\n".join(found)


def test_the_preregistration_check_sees_a_change():
    """`_mismatches` is not vacuous: a changed threshold, control, side, comparison set or labelled row is found."""
    pre = next(c for c in PREREGISTRATION["claims"] if c["id"] == "neg-only-keeps")
    claim = _claim("neg-only-keeps")
    assert _mismatches(claim, pre) == []
    changes = [
        {"threshold": 0.7},
        {"control": None},
        {"direction": "superiority: interval > 0"},
        {"quote": pre["quote"][::-1] + ["another sentence"]},
        {"comparison_set": [pre["control"], pre["method"]]},
        {"labelled_rows": []},
        {"labelled_rows": [{**pre["labelled_rows"][0], "control": pre["control"]}]},
    ]
    for change in changes:
        assert _mismatches(claim, {**pre, **change}), change


def _papers_folder():
    for folder in (os.path.join(ROOT, "shared", "papers"), os.path.join(ROOT, "..", "shared", "papers")):
        if os.path.isdir(folder):
            return folder
    return None


def test_quotes_are_in_the_papers():
    """Each quote is a verbatim substring of its paper's text (shared/papers/<paper>.txt)."""
    folder = _papers_folder()
    if folder is None:
        pytest.skip("no shared/papers folder beside or inside the repository (the papers' texts are not committed)")
    checked = 0
    for claim in claims.CLAIMS:
        for row in (claim, *(r for _, r in claim.labelled)):
            assert len(row.quote) == len(row.quote_papers) > 0, claim.id
            for quote, name in zip(row.quote, row.quote_papers):
                assert name in claims.PAPER_NAMES, (claim.id, name)
                with open(os.path.join(folder, f"{name}.txt"), encoding="utf-8") as f:
                    assert quote in f.read(), (claim.id, name, quote)
                checked += 1
    assert checked >= len(claims.CLAIMS)


# ---------------------------------------------------------------------------------------------------------------------
# Intervals, windows, crossing step, pairs
# ---------------------------------------------------------------------------------------------------------------------
def test_bootstrap_interval_brackets_the_mean_and_is_a_point_for_equal_values():
    assert claims.bootstrap_interval([0.3, 0.3, 0.3]) == (0.3, 0.3)
    low, high = claims.bootstrap_interval([0.0, 1.0, 2.0, 3.0, 4.0])
    assert 0.0 <= low < 2.0 < high <= 4.0
    assert claims.bootstrap_interval([0.0, 1.0, 2.0, 3.0, 4.0]) == (low, high)  # a fixed generator
    with pytest.raises(ValueError):
        claims.bootstrap_interval([])


def test_t_interval_by_hand():
    # mean 3, sample sd sqrt(2.5), t(4 df) = 2.776: half width 2.776 x sqrt(2.5) / sqrt(5) = 2.776 / sqrt(2)
    low, high = claims.t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (low, high) == pytest.approx((3.0 - 2.776 / math.sqrt(2.0), 3.0 + 2.776 / math.sqrt(2.0)), abs=1e-12)
    assert claims.t_interval([1.0, 3.0]) == pytest.approx((2.0 - 12.706, 2.0 + 12.706))  # sd sqrt(2), n 2
    assert claims.t_interval([0.5]) is None
    assert claims.t_interval([float(i) for i in range(12)]) is None  # 11 df: not in the table


@pytest.mark.parametrize(
    "side,interval,expected",
    [
        ("below", (0.1, 0.4), "held"),
        ("below", (0.4, 0.6), "inconclusive"),
        ("below", (0.5, 0.9), "not held"),
        ("above", (0.6, 0.9), "held"),
        ("above", (0.4, 0.6), "inconclusive"),
        ("above", (0.1, 0.5), "not held"),
        ("within", (0.6, 1.5), "held"),
        ("within", (2.5, 3.0), "not held"),
        ("within", (0.1, 0.4), "not held"),
        ("within", (1.5, 2.5), "inconclusive"),
        ("within", (0.4, 2.5), "inconclusive"),
    ],
)
def test_verdict_of_each_side(side, interval, expected):
    upper = 2.0 if side == "within" else None
    assert claims.verdict_of(side, 0.5, *interval, upper) == expected


def test_verdict_of_refuses_an_unknown_side():
    with pytest.raises(ValueError, match="unknown side"):
        claims.verdict_of("sideways", 0.5, 0.1, 0.2)


def test_combine_conditions():
    assert claims.combine(["held", "held"]) == "held"
    assert claims.combine(["held", "inconclusive"]) == "inconclusive"
    assert claims.combine(["inconclusive", "not held", "held"]) == "not held"


def test_windows_in_steps_with_4_updates_per_rollout_batch():
    """A 140-step run with 4 updates per rollout batch logs its rollout entropy at steps 1, 5, 9, ...: the windows
    are in steps, so `initial` reads steps 1 and 5, `final` (steps 127-140) reads 129, 133 and 137, `second_half`
    (steps 71-140) reads 73, 77, ..., 137."""
    series = [float(step) if (step - 1) % 4 == 0 else None for step in range(1, 141)]
    record = _run("grpo_n4", "full", 140, 0, series)
    assert claims.initial(record) == pytest.approx((1 + 5) / 2)
    assert claims.final(record) == pytest.approx((129 + 133 + 137) / 3)
    assert claims.second_half(record) == pytest.approx(statistics.fmean(range(73, 138, 4)))
    assert claims.h0(record) == 1.0
    assert claims.ratio(record) == pytest.approx(133 / 3)
    with pytest.raises(claims.NotMeasured, match="steps 2-4"):
        claims.steps_window(record, 2, 4)


def test_windows_of_a_full_series():
    record = _run("grpo", "full", 85, 0, [float(step) for step in range(1, 86)])
    assert claims.final(record) == pytest.approx(statistics.fmean(range(78, 86)))  # the last floor(85 / 10) = 8
    assert claims.initial(record) == pytest.approx(3.0)
    assert claims.second_half(record) == pytest.approx(statistics.fmean(range(43, 86)))
    short = _run("grpo", "full", 20, 0, [float(step) for step in range(1, 21)])
    assert claims.final(short) == pytest.approx(statistics.fmean(range(16, 21)))  # at least 5 steps
    # the distances of AER's and PosAdv's near-target claims
    flat = _run("aer", "full", 85, 0, [1.0] * 5 + [0.9] * 72 + [0.5] * 8)
    assert claims.aer_distance(flat) == pytest.approx(abs(0.5 / (claims.AER_TAU * 1.0) - 1.0))
    assert claims.posadv_distance(flat) == pytest.approx(
        abs(statistics.fmean([0.9] * 35 + [0.5] * 8) - claims.POSADV_DELTA) / claims.POSADV_DELTA
    )
    with pytest.raises(claims.NotMeasured, match="no 'entropy_target' series"):
        claims.final(_run("grpo", "full", 2, 0, [None, None]))


def test_crossing_step_by_hand():
    # H0 = 1, target 0.4; 5-step trailing means: 1, .9, .8, .7, .62, .46 (steps 2-6), .32 (steps 3-7)
    series = [1.0, 0.8, 0.6, 0.4, 0.3, 0.2, 0.1, 0.1]
    record = _run("grpo", "full", 8, 0, series)
    assert claims.crossing_step(record) == 7
    assert claims.crossing_step(record, window=1) == 4  # 0.4 <= 0.4
    assert claims.crossing_step(record, tau=0.05) is None
    # with 4 updates per rollout batch the trailing window holds the logged values only
    sparse = _run("grpo_n4", "full", 9, 0, [1.0, None, None, None, 0.5, None, None, None, 0.2])
    assert claims.crossing_step(sparse) == 9  # steps 5-9: 0.5 and 0.2, mean 0.35


def test_claim_pairs_by_budget():
    assert claims.claim_pairs(85) == claims.CLAIM_PAIRS
    assert claims.claim_pairs(175) == (("grpo", "full"), ("aer", "full"))
    assert set(claims.claim_pairs(140)) == {
        (arm.method, arm.regime) for arm in claims.claim_arms() if arm.steps == 140
    } and all(regime == "full" for _, regime in claims.claim_pairs(140))
    assert claims.claim_pairs(100) == ()
    for steps in (85, 140, 175):
        pairs = claims.claim_pairs(steps)
        assert len(set(pairs)) == len(pairs) > 0


# ---------------------------------------------------------------------------------------------------------------------
# The verdict rule on synthetic runs
# ---------------------------------------------------------------------------------------------------------------------
OPEFO, GRPO85 = _claim("opefo-smooth").arm, _claim("opefo-smooth").control


def test_paired_claim_whose_difference_crosses_zero_is_inconclusive_and_says_the_control_meets_it():
    # OPEFO and GRPO both keep the ratio in the band [0.5, 2]; their paired differences straddle 0
    runs = _runs(_arm_runs(OPEFO, [0.90, 0.95, 0.88, 0.93, 0.91]) + _arm_runs(GRPO85, [0.95, 0.90, 0.92, 0.89, 0.91]))
    result = claims.evaluate(_claim("opefo-smooth"), runs)
    assert result.own_verdict == "held"
    assert result.control_meets is True
    ((_, difference, verdict),) = result.comparisons
    assert difference.interval[0] < 0 < difference.interval[1] and verdict == "inconclusive"
    assert result.verdict == "inconclusive"
    assert "the control also meets the threshold" in claims.table([result])


def test_paired_claim_held_when_the_method_meets_and_the_difference_is_on_the_papers_side():
    runs = _runs(_arm_runs(OPEFO, [0.90, 0.95, 0.88, 0.93, 0.91]) + _arm_runs(GRPO85, [0.30, 0.25, 0.32, 0.28, 0.31]))
    result = claims.evaluate(_claim("opefo-smooth"), runs)
    assert (result.verdict, result.own_verdict, result.control_meets) == ("held", "held", False)
    assert result.method.values == pytest.approx({0: 0.90, 1: 0.95, 2: 0.88, 3: 0.93, 4: 0.91})
    assert result.control.mean == pytest.approx(statistics.fmean([0.30, 0.25, 0.32, 0.28, 0.31]))
    ((_, difference, verdict),) = result.comparisons
    assert verdict == "held" and difference.values[0] == pytest.approx(0.60)
    assert "the control also meets" not in claims.table([result])


def test_difference_wholly_on_the_wrong_side_is_not_held_although_the_method_meets_its_threshold():
    # OPEFO in the band, GRPO higher (still in the band): ratio(OPEFO) - ratio(GRPO) < 0, the paper says > 0
    runs = _runs(_arm_runs(OPEFO, [0.90, 0.95, 0.88, 0.93, 0.91]) + _arm_runs(GRPO85, [1.5, 1.6, 1.4, 1.5, 1.55]))
    result = claims.evaluate(_claim("opefo-smooth"), runs)
    assert result.own_verdict == "held" and result.control_meets is True
    assert result.comparisons[0][2] == "not held" and result.verdict == "not held"
    # a distance claim (side "below"): AER within 0.25 of tau x H0 but farther from it than GRPO
    aer, grpo = _claim("aer-near-target").arm, _claim("aer-near-target").control
    target = claims.AER_TAU
    runs = _runs(_arm_runs(aer, [target * 1.1] * 5) + _arm_runs(grpo, [target * (1 + 0.01 * s) for s in SEEDS]))
    result = claims.evaluate(_claim("aer-near-target"), runs)
    assert result.method.mean == pytest.approx(0.1)
    assert result.own_verdict == "held" and result.control_meets is True
    assert result.comparisons[0][2] == "not held" and result.verdict == "not held"


POS_ONLY = _claim("pos-only-collapses")
POS_ONLY_FINALS = {  # final entropy (initial 1.0): A>0-only lowest; Entropy-Adv (reported) lower still
    "pos_only_n4": 0.20,
    "grpo_n4": 0.45,
    "posadv_n4": 0.60,
    "neg_only_n4": 0.90,
    "entropy_adv_n4": 0.05,
}


def _pos_only_runs(finals):
    arms = [POS_ONLY.arm, *(c.other for c in POS_ONLY.comparisons), *(c.other for c in POS_ONLY.reported)]
    assert sorted(arm.method for arm in arms) == sorted(finals)
    return _runs([r for arm in arms for r in _arm_runs(arm, [finals[arm.method] + 0.01 * s for s in SEEDS])])


def test_comparison_set_claim_held_and_the_reported_comparison_does_not_enter_the_verdict():
    result = claims.evaluate(POS_ONLY, _pos_only_runs(POS_ONLY_FINALS))
    assert [c.other.method for c, _, _ in result.comparisons] == ["grpo_n4", "posadv_n4", "neg_only_n4"]
    assert [v for _, _, v in result.comparisons] == ["held"] * 3
    ((reported, summary),) = result.reported
    assert reported.other.method == "entropy_adv_n4" and summary.interval[0] > 0  # wholly on the wrong side
    assert result.verdict == "held"


@pytest.mark.parametrize("other", ["grpo_n4", "posadv_n4", "neg_only_n4"])
def test_comparison_set_claim_not_held_when_any_one_difference_is_wholly_above_zero(other):
    finals = {**POS_ONLY_FINALS, other: 0.10}  # this member ends below A>0-only on every seed
    result = claims.evaluate(POS_ONLY, _pos_only_runs(finals))
    verdicts = {c.other.method: v for c, _, v in result.comparisons}
    assert verdicts == {m: "not held" if m == other else "held" for m in verdicts}
    assert result.own_verdict == "held" and result.verdict == "not held"


def test_missing_runs_are_not_measured_with_a_reason_naming_the_method_and_steps():
    aer, grpo = _claim("aer-near-target").arm, _claim("aer-near-target").control
    only_grpo = _runs(_arm_runs(grpo, [0.3] * 5))
    result = claims.evaluate(_claim("aer-near-target"), only_grpo)
    assert result.verdict == "not measured"
    assert "aer" in result.reason and "175 steps" in result.reason
    result = claims.evaluate(_claim("aer-near-target"), _runs(_arm_runs(aer, [0.3] * 5)))
    assert result.verdict == "not measured" and "grpo" in result.reason and "175 steps" in result.reason
    row = claims._row(result, None)
    assert f"- ({result.reason})" in row and "**not measured**" in row


def test_labelled_rows_use_the_same_rule_and_do_not_set_the_verdict():
    claim = _claim("aer-near-target")
    target = claims.AER_TAU
    main_runs = _arm_runs(claim.arm, [target * (1.02 + 0.01 * s) for s in SEEDS]) + _arm_runs(
        claim.control, [target * 2.0] * 5
    )
    row_85 = _labelled("aer-near-target", "85 steps")
    # the 85-step row: AER farther from the target than GRPO, on every seed
    row_runs = _arm_runs(row_85.arm, [target * 2.0] * 5) + _arm_runs(row_85.control, [target * 1.05] * 5)
    alone = claims.evaluate(claim, _runs(main_runs))
    both = claims.evaluate(claim, _runs(main_runs + row_runs))
    assert alone.verdict == both.verdict == "held"
    labelled = dict(both.labelled)
    assert list(labelled) == [label for label, _ in claim.labelled]
    verdicts = {label.split(" ")[0]: r.verdict for label, r in both.labelled}
    assert verdicts == {"85": "not held", "E2:": "not measured"}  # the E2 (N4) runs are absent
    assert "aer_n4" in next(r.reason for r in labelled.values() if r.verdict == "not measured")
    # the same rule: the row's result is the row's claim evaluated on its own
    own = claims.evaluate(row_85, _runs(row_runs), with_labelled=False)
    row_result = next(r for r in labelled.values() if r.verdict == "not held")
    assert (own.verdict, own.own_verdict, own.comparisons[0][2]) == (
        row_result.verdict,
        row_result.own_verdict,
        row_result.comparisons[0][2],
    )
    lines = claims.table([both]).splitlines()
    assert len(lines) == 2 + 1 + len(claim.labelled)
    assert "**held**" in lines[2] and "*not held* (labelled: not the verdict)" in lines[3]


# ---------------------------------------------------------------------------------------------------------------------
# Reading runs
# ---------------------------------------------------------------------------------------------------------------------
def _write(folder, record):
    name = f"{record['method']}-{record['regime']}-seed{record['seed']}-{record['steps']}steps.json"
    (folder / name).write_text(json.dumps(record))


def test_load_runs_keys_by_method_regime_and_steps_and_filters_seeds(tmp_path):
    for steps in (85, 175):
        for seed in range(3):
            _write(tmp_path, _run("grpo", "full", steps, seed, [1.0] * steps))
    unfinished = {**_run("aer", "full", 175, 0, [1.0] * 175), "finished": False}
    _write(tmp_path, unfinished)
    runs = claims.load_runs(str(tmp_path))
    assert set(runs) == {("grpo", "full", 85), ("grpo", "full", 175)}
    assert set(claims.load_runs(str(tmp_path), seeds=[0, 2])[("grpo", "full", 175)]) == {0, 2}


def test_load_runs_refuses_a_folder_without_runs_and_a_run_in_two_folders(tmp_path):
    with pytest.raises(SystemExit, match="no run files"):
        claims.load_runs(str(tmp_path))
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        _write(tmp_path / sub, _run("grpo", "full", 85, 0, [1.0] * 85))
    with pytest.raises(SystemExit, match="the same run .* is read twice"):
        claims.load_runs([str(tmp_path / "a"), str(tmp_path / "b")])
    # a folder that does not exist is skipped
    assert set(claims.load_runs([str(tmp_path / "a"), str(tmp_path / "none")])) == {("grpo", "full", 85)}


# ---------------------------------------------------------------------------------------------------------------------
# claims.md, claims.json, the README's table
# ---------------------------------------------------------------------------------------------------------------------
def _level(method):
    return 0.2 + 0.06 * (sum(map(ord, method)) % 10)


def _study_record(arm, seed):
    """A run of `arm` with every series and held-out score a claim reads."""
    steps, level = arm.steps, _level(arm.method) + 0.01 * seed
    every = 4 if arm.steps == 140 else 1
    series = {
        "flow_increase": [1.0] * steps,
        "flow_decrease": [-2.0] * steps,
        "flow_net": [-1.0 + 0.05 * seed] * steps,
        "flow_upper_clipped_net": [0.3 + 0.01 * seed] * steps,
        "flow_lower_clipped_net": [-0.3 - 0.01 * seed] * steps,
        "controller": [0.0] * 10 + [0.001] * (steps - 10),
    }
    pass_at = {k: min(1.0, 0.5 * level + 0.05 * math.log2(k)) for k in claims.PASS_K}
    return _run(*arm.key, seed, _entropy(steps, 1.0, level, every), pass_at, **series)


MISSING = "opefo"  # no runs of this method: its claim is not measured


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The claims' command on synthetic runs of every arm but OPEFO's: the results, the folder, the README."""
    root = tmp_path_factory.mktemp("study")
    runs = root / "runs"
    runs.mkdir()
    for arm in claims.claim_arms():
        if arm.method != MISSING:
            for seed in SEEDS:
                _write(runs, _study_record(arm, seed))
    readme = root / "README.md"
    readme.write_text(f"top\n\n{claims.README_HEADER.format(seeds='1')}\n|---|\n| stale |\n\nend\n")
    out = root / "res" / "claims.md"
    out.parent.mkdir()
    argv = ["--runs", str(runs), "--output", str(out), "--diagnostics", "diagnostics.md", "--readme", str(readme)]
    results = command.claims_main(argv)
    return results, root


def test_main_writes_claims_md_and_claims_json(study):
    results, root = study
    assert [r.claim.id for r in results] == [c.id for c in claims.CLAIMS]
    text = (root / "res" / "claims.md").read_text()
    assert claims.table(results, "diagnostics.md") in text
    doc = json.loads((root / "res" / "claims.json").read_text())
    assert doc["verdict_rule"].startswith("A claim has an own condition")
    assert [c["id"] for c in doc["claims"]] == [c.id for c in claims.CLAIMS]
    for claim, result, entry in zip(claims.CLAIMS, results, doc["claims"]):
        assert entry["figure"] == claim.figure and entry["quote"] == list(claim.quote)
        assert entry["statistic"] == claim.statistic and entry["holds_if"] == claim.holds_if()
        if claim.side is not None:  # the own condition's direction and threshold
            assert (entry["direction"], entry["threshold"], entry["upper"]) == (
                claim.side,
                claim.threshold,
                claim.upper,
            )
        else:  # a claim decided by its one comparison: that comparison's
            (comp,) = claim.comparisons
            assert (entry["direction"], entry["threshold"], entry["upper"]) == (comp.side, comp.threshold, None)
        assert (entry["method"]["method"], entry["method"]["regime"], entry["method"]["steps"]) == claim.arm.key
        if claim.control is None:
            assert entry["control"] is None
        else:
            assert (entry["control"]["method"], entry["control"]["regime"], entry["control"]["steps"]) == (
                claim.control.key
            )
        assert entry["deviations"] == list(claim.deviations)
        assert entry["verdict"] == result.verdict in claims.VERDICTS
        assert len(entry.get("labelled_rows", [])) == len(claim.labelled)
        if claim.arm.method == MISSING:
            assert entry["verdict"] == "not measured" and MISSING in entry["reason"] and "seeds" not in entry
            continue
        assert entry["verdict"] != "not measured", (claim.id, entry.get("reason"))
        assert entry["seeds"] == list(SEEDS)
        method = entry["method_values"]
        assert set(method) >= {"per_seed", "mean", "interval_bootstrap95"}
        assert {int(s): v for s, v in method["per_seed"].items()} == pytest.approx(result.method.values)
        assert method["mean"] == pytest.approx(statistics.fmean(method["per_seed"].values()))
        low, high = method["interval_bootstrap95"]
        assert low <= method["mean"] <= high
        if claim.control is None:
            assert entry["control_values"] is None and entry["paired_differences"] == []
        else:
            assert len(entry["control_values"]["per_seed"]) == len(SEEDS)
        assert len(entry["paired_differences"]) == len(claim.comparisons)
        for comp, pd in zip(claim.comparisons, entry["paired_differences"]):
            assert tuple(pd["against"]) == comp.other.key
            assert (pd["direction"], pd["threshold"]) == (comp.side, comp.threshold)
            assert pd["verdict"] in claims.VERDICTS[:3]
            assert len(pd["interval_bootstrap95"]) == len(pd["interval_t95"]) == 2
            t_low, t_high = pd["interval_t95"]
            assert t_low <= pd["mean"] <= t_high
    by_id = {c["id"]: c for c in doc["claims"]}
    assert len(by_id["aer-near-target"]["details"]["alpha"]) == len(SEEDS)  # AER's alpha beside the entropy
    assert set(by_id["aer-pass-at-k"]["details"]) == {str(k) for k in claims.PASS_K}


def test_healtrl_study_claims_writes_what_the_script_writes(study, tmp_path):
    """`healtrl study --claims` is the script's command: the same claims.json but for the command it names; the
    verdict rule in it is the docstring's section, ending before the docstring's commands."""
    from healtrl.cli import main

    _, root = study
    out = tmp_path / "claims.md"
    argv = ["--runs", str(root / "runs"), "--output", str(out), "--diagnostics", "diagnostics.md"]
    assert main(["study", "--claims", *argv]) == 0
    doc = json.loads((tmp_path / "claims.json").read_text())
    script = json.loads((root / "res" / "claims.json").read_text())
    assert doc["written_by"] == "healtrl study --claims " + " ".join(argv)
    assert script["written_by"].startswith("python benchmarks/claims.py --runs ")
    assert {k: v for k, v in doc.items() if k != "written_by"} == {k: v for k, v in script.items() if k != "written_by"}
    assert doc["verdict_rule"].endswith("they are shown with their label and do not set the\nclaim's verdict.")
    assert f"Written by `healtrl study --claims {' '.join(argv)}`" in out.read_text()


def test_table_links_a_diagnostic_for_every_verdict_but_held_and_escapes_pipes(study):
    results, _ = study
    assert {r.verdict for r in results} >= {"held", "not held", "not measured"}
    text = claims.table(results, "diagnostics.md")
    lines = text.splitlines()
    assert lines[0] == claims.TABLE_HEADER
    main_rows = [line for line in lines[2:] if not line.startswith("| labelled row: ")]
    assert len(main_rows) == len(results)
    for r, line in zip(results, main_rows):
        assert (f"(diagnostics.md#{r.claim.id})" in line) == (r.verdict != "held"), line
    assert all("diagnostics.md" not in line for line in lines if line.startswith("| labelled row: "))
    assert "diagnostics.md" not in claims.table(results)
    # every row has the header's 7 cells: a statistic written |x| is escaped, not a cell border
    assert any("d = \\|final entropy" in line for line in lines)
    for line in lines:
        assert len(re.split(r"(?<!\\)\|", line)) == 9, line
    assert claims._cell("|x| and |y|") == "\\|x\\| and \\|y\\|"


def test_readme_table_is_the_claims_table_and_the_option_rewrites_the_readme(study, capsys):
    results, root = study
    claims_md = (root / "res" / "claims.md").read_text()
    text = claims.readme_table(claims_md, "res")
    lines = text.splitlines()
    assert lines[0] == claims.README_HEADER.format(seeds="5")
    # exactly the claims table's rows (not the per-seed tables of the details below it)
    table_rows = claims.table(results, "diagnostics.md").splitlines()[2:]
    assert len(lines) == 2 + len(table_rows)
    for line, row in zip(lines[2:], table_rows):
        assert line == row.replace("](diagnostics.md#", "](res/diagnostics.md#")
    assert "(res/diagnostics.md#" in text and "(diagnostics.md#" not in text
    for line in lines:
        assert len(re.split(r"(?<!\\)\|", line)) == 9, line  # 7 cells; |x| stays escaped
    readme = (root / "README.md").read_text()
    assert readme == f"top\n\n{text}\n\nend\n"
    assert claims.replace_readme_table(readme, claims_md, "res") == readme
    with pytest.raises(ValueError, match="found 0"):
        claims.replace_readme_table("# R\n", claims_md, "res")
    with pytest.raises(ValueError, match="no claims table"):
        claims.readme_table("# nothing\n", "res")
    with pytest.raises(SystemExit):
        command.claims_main(["--runs", str(root / "runs"), "--readme", str(root / "README.md")])
    assert "give --output too" in capsys.readouterr().err


def test_readme_table_is_the_committed_claims_table():
    """The README's claims table is the committed `claims.md`'s, in the README's form (so a rerun that rewrites
    `claims.md` cannot leave the README quoting the old numbers: `claims.py --readme README.md` rewrites it)."""
    with open(os.path.join(ROOT, STUDY, "claims.md")) as f:
        claims_md = f.read()
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    assert claims.TABLE_HEADER in claims_md
    assert claims.readme_table(claims_md, STUDY) in readme
    assert claims.replace_readme_table(readme, claims_md, STUDY) == readme


def test_committed_claims_link_to_a_diagnostic_section_for_every_verdict_but_held():
    """Every verdict of the committed table other than "held" links to a `## <claim id>` section of diagnostics.md."""
    with open(os.path.join(ROOT, STUDY, "claims.md")) as f:
        claims_md = f.read()
    with open(os.path.join(ROOT, STUDY, "diagnostics.md")) as f:
        sections = set(re.findall(r"^## (\S+)$", f.read(), flags=re.M))
    table = claims_md[claims_md.index(claims.TABLE_HEADER) :].split("\n\n")[0].splitlines()[2:]
    main_rows = [row for row in table if not row.startswith("| labelled row: ")]
    assert len(main_rows) == len(claims.CLAIMS)
    for claim, row in zip(claims.CLAIMS, main_rows):
        held = "| **held**" in row
        assert (f"(diagnostics.md#{claim.id})" in row) == (not held), row
        if not held:
            assert claim.id in sections, f"diagnostics.md has no '## {claim.id}' section"
