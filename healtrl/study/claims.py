"""The papers' claims that the reasoning world can test, each against its control (issues #26 and #40).

Each claim is a check fixed before the runs it reads (`benchmarks/results/reasoning_study/preregistration.md` and
`.json`, committed before any of the new runs existed; `tests/test_claims.py` checks that the claims below are the
pre-registered ones): a statistic per seed read from cached study runs (the JSON files `healtrl study` writes,
`healtrl.study.runs.run_one`: per-step `series` and held-out `pass_at`), a threshold and the side of it the claim is
on, the control the paper compares with, and the paired comparisons with that control. Every claim quotes the
sentence of its paper.

**Arms.** A claim reads runs by (method, regime, steps): the study's method keys (`healtrl.study.methods.METHODS`),
`few_shot` (16 target problems) or `full` (256), and the run's optimizer steps. The `*_n4` methods and `kl_cov_paper`
(`grpo_n4`, `posadv_n4`, ...: `methods.PAPER_REGIME`) take 4 optimizer steps per rollout batch (PosAdv App. E.2); of
the others, `clip_higher` takes 4 in this world and the study's `kl_cov` 2 iterations per rollout batch, the rest 1.

**Windows are in steps.** *initial*: mean of the logged values of steps 1-5; *final*: of the last max(5, floor(T/10))
steps; *second half*: of steps floor(T/2)+1..T; *H0*: the value at step 1. With 1 update per rollout batch every step
is logged; with 4 the rollout entropy is logged at steps 1, 5, 9, ...

**Intervals.** 95% percentile bootstrap of the mean over seeds (`bootstrap_interval`: 10,000 resamples,
`random.Random(0)`), for the method's values, the control's and every paired per-seed difference (method minus the
other arm, same seed: same initial weights and data order). `claims.json` also gives the Student t-interval of each
paired difference, for information; verdicts use the bootstrap interval.

**Verdicts.** A claim has an own condition (the method's statistic on the claim's side of a threshold, or inside a
band), paired comparisons (a per-seed difference on the paper's side of its threshold, usually 0), or both:

- **held**: every condition's interval is on its side;
- **not held**: some condition's interval is wholly on the wrong side;
- **inconclusive**: otherwise (an interval crosses its threshold);
- **not measured**: the runs are missing (the reason is given).

Claims about GRPO itself and the within-run signs of OPEFO's Fig. 2c have only the own condition (single-run form).
A method claim whose own condition the control also meets says so ("the control also meets it"): its verdict then
rests on the paired comparison. Labelled rows evaluate the same claim on other runs (the earlier 85-step budget, a
setting that deviates from the paper's) with the same rule; they are shown with their label and do not set the
claim's verdict.

    healtrl study --claims --output benchmarks/results/reasoning_study/claims.md \\
        --diagnostics diagnostics.md --readme README.md

(or `python benchmarks/claims.py` with the same options) reads the run caches of the reasoning study
(`paths.DEFAULT_RUNS`: the 85-step study, set A, set B and OPEFO's exact-estimator runs) and writes `claims.md`,
`claims.json` beside it and the README's table. `--runs DIR [DIR ...]` reads other caches (e.g. a re-check on new
seeds).

Why this module is long: the claims are data (one `Claim` per pre-registered check, with its quotes, arms, labelled
rows and the details reported beside its verdict), and the statistics, intervals, verdict rule and the writers of
`claims.md` / `claims.json` / the README's table are what those data mean; split apart, a reader checking one claim
against `preregistration.md` would follow it through several files.
"""

from __future__ import annotations

import datetime
import glob
import json
import math
import os
import random
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# Defaults of the methods' configs that the thresholds refer to (AERConfig.tau, PosAdvConfig.entropy_threshold),
# read from healtrl so that the claims follow the configs the runs used.
from healtrl.trainers import AERConfig, PosAdvConfig

from .paths import STUDY_DIR

# The verdict rule as claims.json states it: the docstring's "Verdicts" section, up to the command.
VERDICT_RULE = __doc__.split("**Verdicts.**")[1].split("    healtrl study --claims")[0].strip()
PREREGISTRATION = os.path.join(STUDY_DIR, "preregistration.json")

Key = tuple  # (method, regime, steps)
Runs = dict  # Key -> {seed: run record}
VERDICTS = ("held", "not held", "inconclusive", "not measured")
PASS_K = (1, 2, 4, 8, 16)
AER_TAU = AERConfig.tau  # a dataclass field's default is its class attribute
POSADV_DELTA = PosAdvConfig.entropy_threshold
# Two-sided 95% Student t quantiles by degrees of freedom (claims.json's t-interval of the paired differences).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


# The papers a quote comes from (the keys of `Claim.quote_papers`).
PAPER_NAMES = {
    "heal": "HEAL, arXiv:2604.17928",
    "aer": "AER, arXiv:2510.10959",
    "posadv": "PosAdv, arXiv:2511.05993",
    "opefo": "OPEFO, arXiv:2605.11491",
}


class NotMeasured(Exception):
    """The runs lack what a statistic needs; the message says what."""


# ---------------------------------------------------------------------------------------------------------------------
# Reading runs
# ---------------------------------------------------------------------------------------------------------------------
def load_runs(runs_dirs: str | Sequence[str], seeds: Sequence[int] | None = None) -> Runs:
    """The finished runs of one or more study caches: (method, regime, steps) -> {seed: record}; only `seeds` when
    given. A folder that does not exist is skipped (its claims are then not measured); a run present in two folders
    is an error."""
    if isinstance(runs_dirs, str):
        runs_dirs = [runs_dirs]
    runs: Runs = {}
    found = 0
    for runs_dir in runs_dirs:
        for path in sorted(glob.glob(os.path.join(runs_dir, "*.json"))):
            with open(path) as f:
                record = json.load(f)
            found += 1
            if not record.get("finished", True) or (seeds is not None and record["seed"] not in seeds):
                continue
            by_seed = runs.setdefault((record["method"], record["regime"], record["steps"]), {})
            if record["seed"] in by_seed:
                raise SystemExit(
                    f"{path}: the same run (method, regime, steps, seed) is read twice ({', '.join(runs_dirs)})."
                )
            by_seed[record["seed"]] = record
    if not found:
        raise SystemExit(
            f"--runs {' '.join(runs_dirs)}: no run files (*.json) there; give study caches (toy_study_runs/)."
        )
    return runs


def _values(series: Sequence[float | None]) -> list[float]:
    return [v for v in series if v is not None and math.isfinite(v)]


def steps_window(record: dict, first: int, last: int, key: str = "entropy_target") -> list[float]:
    """The logged values of `key` in steps first..last (1-based, inclusive)."""
    series = record["series"].get(key)
    if not series or not _values(series):
        raise NotMeasured(f"no '{key}' series")
    values = _values(series[first - 1 : last])
    if not values:
        raise NotMeasured(f"no logged '{key}' value in steps {first}-{last}")
    return values


def initial(record: dict, key: str = "entropy_target") -> float:
    """Mean of the logged values of steps 1-5."""
    return statistics.fmean(steps_window(record, 1, 5, key))


def final(record: dict, key: str = "entropy_target") -> float:
    """Mean of the logged values of the last max(5, floor(T/10)) steps."""
    steps = record["steps"]
    return statistics.fmean(steps_window(record, steps - max(5, steps // 10) + 1, steps, key))


def second_half(record: dict, key: str = "entropy_target") -> float:
    """Mean of the logged values of steps floor(T/2)+1..T."""
    return statistics.fmean(steps_window(record, record["steps"] // 2 + 1, record["steps"], key))


def h0(record: dict, key: str = "entropy_target") -> float:
    """The value at step 1."""
    return steps_window(record, 1, 1, key)[0]


def ratio(record: dict) -> float:
    """final / initial target-domain entropy."""
    return final(record) / initial(record)


def aer_distance(record: dict) -> float:
    """|final / (tau x H0) - 1|: the distance of the final entropy from AER's target (eq. 10)."""
    return abs(final(record) / (AER_TAU * h0(record)) - 1.0)


def posadv_distance(record: dict) -> float:
    """|second-half mean entropy - delta| / delta: the distance from PosAdv's entropy threshold."""
    return abs(second_half(record) - POSADV_DELTA) / POSADV_DELTA


def pass_at(record: dict, k: int) -> float:
    held = record.get("held_out") or {}
    table = held.get("pass_at") or {}
    if str(k) not in table:
        raise NotMeasured(f"no held-out pass@{k}")
    if record.get("task") == "countdown" and "scorer" not in held:
        # cached before toy_reward verified registry rows: those scores counted one reference path only
        raise NotMeasured("held-out scores of this run exact-matched one reference path (rerun it)")
    return float(table[str(k)])


def flow_share(record: dict, key: str, window: float = 1.0) -> float:
    """Sum of the flow series `key` over the first `window` share of the run, over the summed total flow
    (increase + |decrease|) of the same steps: in [-1, 1]."""
    series = record["series"]
    if key not in series or "flow_increase" not in series:
        raise NotMeasured(f"no entropy-flow series ('{key}')")
    n = max(1, int(len(series[key]) * window))
    total = sum(abs(v) for name in ("flow_increase", "flow_decrease") for v in _values(series[name][:n]))
    return sum(_values(series[key][:n])) / total if total > 0 else 0.0


def _min_pass_at_k_margin(a: dict, b: dict) -> float:
    return min(pass_at(a, k) - pass_at(b, k) for k in PASS_K)


# ---------------------------------------------------------------------------------------------------------------------
# Claims as data
# ---------------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Arm:
    """The runs of one method: (method, regime, steps), and what the table calls them."""

    method: str
    regime: str
    steps: int
    label: str

    @property
    def key(self) -> Key:
        return (self.method, self.regime, self.steps)

    def runs(self, runs: Runs) -> dict[int, dict]:
        found = runs.get(self.key)
        if not found:
            raise NotMeasured(f"no {self.method} runs ({self.regime}, {self.steps} steps)")
        return found


def _condition_text(side: str, threshold: float, upper: float | None = None) -> str:
    if side == "within":
        return f"in [{threshold:g}, {upper:g}]"
    return f"{'<' if side == 'below' else '>'} {threshold:g}"


def verdict_of(side: str, threshold: float, low: float, high: float, upper: float | None = None) -> str:
    """held / not held / inconclusive of one interval against one condition."""
    if side == "within":
        if threshold <= low and high <= upper:
            return "held"
        return "not held" if high < threshold or low > upper else "inconclusive"
    if side == "below":
        return "held" if high < threshold else "not held" if low >= threshold else "inconclusive"
    if side == "above":
        return "held" if low > threshold else "not held" if high <= threshold else "inconclusive"
    raise ValueError(f"unknown side {side!r}")


@dataclass(frozen=True)
class Comparison:
    """A paired comparison: `stat(method run, other run)` per seed, on `side` of `threshold` (the paper's side)."""

    other: Arm
    description: str
    stat: Callable[[dict, dict], float]
    side: str = "above"
    threshold: float = 0.0

    def holds_if(self) -> str:
        return _condition_text(self.side, self.threshold)


@dataclass(frozen=True)
class Claim:
    """One paper claim as a check (see the module docstring).

    `stat` is the per-run statistic (the method's and the control's values; for a claim whose statistic is a paired
    difference, the quantity it is the difference of). `side` / `threshold` / `upper` are the own condition on the
    method's values, `None` for claims decided by their comparisons alone. `comparisons` enter the verdict,
    `reported` are shown beside it and do not."""

    id: str
    paper: str
    figure: str
    text: str
    quote: tuple[str, ...]
    quote_papers: tuple[str, ...]  # keys of PAPER_NAMES, one per quote
    form: str  # "single-run", "paired", "paired difference", "comparison set", "non-inferiority"
    statistic: str
    arm: Arm
    stat: Callable[[dict], float]
    side: str | None = None
    threshold: float | None = None
    upper: float | None = None
    control: Arm | None = None
    comparisons: tuple[Comparison, ...] = ()
    reported: tuple[Comparison, ...] = ()
    deviations: tuple[str, ...] = ()
    labelled: tuple[tuple[str, Claim], ...] = ()
    details: Callable[[Claim, Runs], tuple[list[str], dict]] | None = None

    def holds_if(self) -> str:
        parts = [] if self.side is None else [_condition_text(self.side, self.threshold, self.upper)]
        parts += [f"{c.description} {c.holds_if()}" for c in self.comparisons]
        return " and ".join(parts)

    def arms(self) -> list[Arm]:
        """Every arm the claim reads (the labelled rows' too)."""
        arms = [self.arm, *([self.control] if self.control else []), *(c.other for c in self.comparisons)]
        arms += [c.other for c in self.reported]
        for _, row in self.labelled:
            arms += row.arms()
        return list(dict.fromkeys(arms))


def _diff(stat: Callable[[dict], float]) -> Callable[[dict, dict], float]:
    return lambda a, b: stat(a) - stat(b)


# The arms of the claims (labels as the table shows them).
GRPO_FEW = Arm("grpo", "few_shot", 85, "GRPO")
GRPO_FULL = Arm("grpo", "full", 85, "GRPO")
GRPO_175 = Arm("grpo", "full", 175, "GRPO")
AER_175 = Arm("aer", "full", 175, "AER")
GRPO_N4 = Arm("grpo_n4", "full", 140, "GRPO (N4)")
AER_N4 = Arm("aer_n4", "full", 140, "AER (N4)")
POSADV_N4 = Arm("posadv_n4", "full", 140, "PosAdv (N4)")
NEG_N4 = Arm("neg_only_n4", "full", 140, "A<0-only (N4)")
POS_N4 = Arm("pos_only_n4", "full", 140, "A>0-only (N4)")
ENTADV_N4 = Arm("entropy_adv_n4", "full", 140, "Entropy-Adv (N4)")

Q_AER_COLLAPSE = (
    "As shown in Figure 3c, the policy entropy of vanilla GRPO drops sharply within the first 100 steps, indicating "
    "early entropy collapse."
)
Q_POSADV_FIG5 = (
    "Furthermore, training LLMs exclusively on tokens with advantages leads to the most severe entropy collapse, while "
    "training on tokens with advantages yields high entropy."
)
Q_FIG5_BASELINES = (
    "As shown, Clip-Cov, KL-Cov, Adaptive Entropy Regularization, and Rand-Pos-Clip effectively alleviate entropy "
    "collapse, whereas Ent-Adv intensifies it."
)
N1_AER = (
    "1 optimizer step per rollout batch (AER Table 3: 4); kept for the verdict because the budget was estimated for it "
    "(labelled extra E2 runs 4)"
)
SAME_MEASURE = (
    "H0 and the final entropy read the token-mean rollout entropy (entropy_target) for both arms; AER's controller "
    "steers the sequence-level entropy of the loss forward (aer/entropy)"
)


def _collapse(claim_id: str, arm: Arm, figure: str, text: str, quotes, files, labelled=()) -> Claim:
    return Claim(
        claim_id,
        "AER; PosAdv; OPEFO" if arm.regime == "full" else "HEAL (few-shot); AER, PosAdv, OPEFO",
        figure,
        text,
        quotes,
        files,
        "single-run",
        f"GRPO final / initial target entropy, {arm.regime}, {arm.steps} steps",
        arm,
        ratio,
        "below",
        0.5,
        labelled=labelled,
    )


def _aer_near_target(aer: Arm, grpo: Arm, labelled=(), deviations=()) -> Claim:
    return Claim(
        "aer-near-target",
        "AER (arXiv:2510.10959)",
        "AER Fig. 3c; Fig. 4b; eq. 10",
        f"AER keeps the entropy nearer tau x H0 (tau = {AER_TAU:g}) than GRPO does",
        (
            "AER maintains the policy entropy at a moderate target level throughout training, which help sustain "
            "consistent and balanced exploration.",
            "compared with vanilla GRPO, AER stabilizes the global entropy *near* the prescribed band",
        ),
        ("aer", "aer"),
        "paired",
        f"d = |final entropy / (tau x H0) - 1|, full, {aer.steps} steps",
        aer,
        aer_distance,
        "below",
        0.25,
        control=grpo,
        comparisons=(Comparison(grpo, "d(AER) - d(GRPO)", _diff(aer_distance), "below"),),
        deviations=deviations,
        labelled=labelled,
        details=_aer_details,
    )


def _aer_pass_at_k(aer: Arm, grpo: Arm, labelled=(), deviations=()) -> Claim:
    return Claim(
        "aer-pass-at-k",
        "AER (arXiv:2510.10959)",
        "AER Fig. 3a / 3d",
        "AER's pass@k is higher than GRPO's for every k up to 16",
        (
            "As shown in Figure 3a and Figure 3d, AER consistently achieves higher pass@ k performance across all k , "
            "indicating stronger exploration and reasoning diversity.",
        ),
        ("aer",),
        "paired difference",
        f"held-out pass@1 (columns); min over k in 1..16 of AER - GRPO pass@k, full, {aer.steps} steps",
        aer,
        lambda r: pass_at(r, 1),
        control=grpo,
        comparisons=(Comparison(grpo, "min_k (AER - GRPO pass@k)", _min_pass_at_k_margin, "above"),),
        deviations=deviations,
        labelled=labelled,
        details=_pass_at_k_details,
    )


def _pos_only(pos: Arm, grpo: Arm, posadv: Arm, neg: Arm, entadv: Arm | None, labelled=(), deviations=()) -> Claim:
    final_diff = _diff(final)
    return Claim(
        "pos-only-collapses",
        "PosAdv (arXiv:2511.05993)",
        "PosAdv Fig. 5; Table 2",
        "Training on A>0 tokens only collapses the entropy the most (below GRPO, PosAdv and A<0-only)",
        (Q_POSADV_FIG5,),
        ("posadv",),
        "comparison set",
        f"A>0-only final / initial entropy; final entropy A>0-only - X, {pos.regime}, {pos.steps} steps",
        pos,
        ratio,
        "below",
        0.5,
        control=grpo,
        comparisons=tuple(
            Comparison(x, f"final entropy - {x.label}", final_diff, "below") for x in (grpo, posadv, neg)
        ),
        reported=()
        if entadv is None
        else (Comparison(entadv, f"final entropy - {entadv.label}", final_diff, "below"),),
        deviations=deviations,
        labelled=labelled,
    )


def _neg_only(neg: Arm, grpo: Arm, pos: Arm, labelled=(), deviations=()) -> Claim:
    return Claim(
        "neg-only-keeps",
        "PosAdv (arXiv:2511.05993)",
        "PosAdv Fig. 5; Table 2",
        "Training on A<0 tokens only keeps the entropy high, above GRPO's",
        (Q_POSADV_FIG5,),
        ("posadv",),
        "paired",
        f"final / initial entropy, {neg.regime}, {neg.steps} steps",
        neg,
        ratio,
        "above",
        0.8,
        control=grpo,
        comparisons=(Comparison(grpo, "ratio - GRPO's", _diff(ratio), "above"),),
        reported=(Comparison(pos, "ratio - A>0-only's", _diff(ratio), "above"),),
        deviations=deviations,
        labelled=labelled,
    )


def _posadv_near(posadv: Arm, grpo: Arm, labelled=(), deviations=()) -> Claim:
    return Claim(
        "posadv-near-threshold",
        "PosAdv (arXiv:2511.05993)",
        "PosAdv Fig. 5",
        f"Entropy-guided Pos-Adv-Reweight holds the entropy nearer its threshold (delta = {POSADV_DELTA:g}) than GRPO",
        (
            "Meanwhile, Pos-Adv-Reweight (Entropy-guided) effectively maintains the model entropy around the target "
            "value of 0.2.",
        ),
        ("posadv",),
        "paired",
        f"d = |second-half mean entropy - delta| / delta, full, {posadv.steps} steps",
        posadv,
        posadv_distance,
        "below",
        0.5,
        control=grpo,
        comparisons=(Comparison(grpo, "d(PosAdv) - d(GRPO)", _diff(posadv_distance), "below"),),
        deviations=deviations,
        labelled=labelled,
        details=_lambda_details,
    )


def _final_entropy_vs(
    claim_id, text, quote, arm: Arm, control: Arm, side="above", labelled=(), deviations=(), figure=None, paper="posadv"
):
    """A claim whose statistic is the paired difference of the final target entropy, `arm` minus `control`: PosAdv's
    Figure 5 baselines against GRPO (the default paper and figure), HEAL's Figure 1 / 6 entropy claims."""
    return Claim(
        claim_id,
        {"posadv": "PosAdv (arXiv:2511.05993)", "heal": "HEAL"}[paper],
        figure or "PosAdv Fig. 5",
        text,
        (quote,),
        (paper,),
        "paired difference",
        f"final target entropy (columns); {arm.label} - {control.label}, {arm.regime}, {arm.steps} steps",
        arm,
        final,
        control=control,
        comparisons=(Comparison(control, f"final entropy - {control.label}'s", _diff(final), side),),
        deviations=deviations,
        labelled=labelled,
    )


def _opefo(opefo: Arm, grpo: Arm, labelled=(), deviations=()) -> Claim:
    return Claim(
        "opefo-smooth",
        "OPEFO",
        "OPEFO Fig. 4a",
        "OPEFO keeps the entropy: no collapse (above GRPO's) and no inflation",
        (
            "By comparison, OPEFO maintains a smooth and stable entropy trajectory, avoiding both premature "
            "determinism and uncontrolled entropy inflation.",
            "As shown on the Figure 4 (a), both standard GRPO and its strict on-policy variant exhibit a rapid "
            "collapse of policy entropy during training.",
        ),
        ("opefo", "opefo"),
        "paired",
        f"final / initial entropy, full, {opefo.steps} steps",
        opefo,
        ratio,
        "within",
        0.5,
        upper=2.0,
        control=grpo,
        comparisons=(Comparison(grpo, "ratio - GRPO's", _diff(ratio), "above"),),
        deviations=deviations,
        labelled=labelled,
    )


def _flow(claim_id, text, quote, key, side, arm: Arm, window: float = 1.0, figure="OPEFO Fig. 2c") -> Claim:
    return Claim(
        claim_id,
        "OPEFO",
        figure,
        text,
        (quote,),
        ("opefo",),
        "single-run",
        f"{key} / total flow over the {'first 20% of steps' if window < 1 else 'run'}, {arm.label}, full",
        arm,
        lambda r: flow_share(r, key, window),
        side,
        -0.2 if window < 1 else 0.0,
    )


# ---------------------------------------------------------------------------------------------------------------------
# What some claims report beside their verdict (not part of it): lines for claims.md, data for claims.json
# ---------------------------------------------------------------------------------------------------------------------
def _at(series: Sequence[float | None], step: int) -> float | None:
    return series[step - 1] if 0 < step <= len(series) else None


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _trailing(record: dict, step: int, window: int = 5) -> float | None:
    """Mean of the logged target entropy in the `window` steps up to `step` (None when none is logged there)."""
    values = _values(record["series"]["entropy_target"][max(0, step - window) : step])
    return statistics.fmean(values) if values else None


def crossing_step(record: dict, tau: float = AER_TAU, window: int = 5) -> int | None:
    """The first step whose trailing mean of the logged target entropy (the last `window` steps) is <= tau x H0."""
    target = tau * h0(record)
    for step in range(1, len(record["series"]["entropy_target"]) + 1):
        mean = _trailing(record, step, window)
        if mean is not None and mean <= target:
            return step
    return None


def _predicted_crossings(steps: int) -> dict[str, dict[int, int]]:
    """The pre-registered crossing estimates for a GRPO budget of `steps` (preregistration.json's `budget`)."""
    if not os.path.exists(PREREGISTRATION):
        return {}
    with open(PREREGISTRATION) as f:
        budget = json.load(f)["budget"]
    found = budget.get(f"predicted_crossing_step_at_{steps}", {})
    return {name: {int(s): v for s, v in by_seed.items()} for name, by_seed in found.items()}


def _controller_steps(steps: int) -> list[int]:
    return [1, *range(max(25, steps // 7 // 25 * 25), steps, max(25, steps // 7 // 25 * 25)), steps]


def _aer_details(claim: Claim, runs: Runs) -> tuple[list[str], dict]:
    aer, grpo = claim.arm.runs(runs), claim.control.runs(runs)
    steps = claim.arm.steps
    marks = [1, 50, 75, 100, 125, 150, 175] if steps == 175 else [1, *range(35, steps + 1, 35)]
    lines = [
        f"AER's alpha (`series.controller`) at steps {', '.join(map(str, marks))}, its first step above 0, and its "
        "controller's own entropy measure at the end (aer/entropy against aer/target_entropy, the sequence-level "
        "entropy of the loss forward), per seed:",
        "",
        "| seed | " + " | ".join(f"alpha@{m}" for m in marks) + " | first alpha > 0 | aer/entropy (end) | H* (aer) |",
        "|---|" + "---|" * (len(marks) + 3),
    ]
    data: dict = {"alpha": {}, "first_alpha_step": {}, "grpo_crossing_step": {}}
    for seed, record in sorted(aer.items()):
        alpha = record["series"].get("controller") or []
        first = next((i + 1 for i, v in enumerate(alpha) if v is not None and v > 0), None)
        ent = _values(record["series"].get("aer_entropy") or [])
        target = _values(record["series"].get("aer_target_entropy") or [])
        data["alpha"][seed] = {m: _at(alpha, m) for m in marks}
        data["first_alpha_step"][seed] = first
        row = [str(seed), *(_fmt(_at(alpha, m)) for m in marks), str(first or "never")]
        row += [_fmt(ent[-1] if ent else None), _fmt(target[-1] if target else None)]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "Beside it, the target-domain entropy (`entropy_target`, nats; mean of the logged values of the 5 steps up to "
        "each step) of AER / GRPO, and AER's target 0.4 x H0:",
        "",
        "| seed | " + " | ".join(f"H@{m} AER / GRPO" for m in marks) + " | 0.4 x H0 |",
        "|---|" + "---|" * (len(marks) + 1),
    ]
    data["entropy"] = {}
    for seed, record in sorted(aer.items()):
        if seed not in grpo:
            continue
        pair = [(_trailing(record, m), _trailing(grpo[seed], m)) for m in marks]
        data["entropy"][seed] = {m: {"aer": a, "grpo": g} for m, (a, g) in zip(marks, pair)}
        cells = [f"{_fmt(a)} / {_fmt(g)}" for a, g in pair]
        lines.append(f"| {seed} | " + " | ".join(cells) + f" | {_fmt(AER_TAU * h0(record))} |")
    predicted = _predicted_crossings(steps)
    lines += [
        "",
        "GRPO's observed crossing of 0.4 x H0 (first step whose 5-step trailing mean of the target entropy is <= "
        "0.4 x H0) against the pre-registered estimate (`benchmarks/crossing_estimate.py`), and the steps left after "
        "it (the steps in which AER's alpha could rise):",
        "",
        "| seed | GRPO observed crossing | steps after it | "
        + " | ".join(f"estimate ({name})" for name in predicted)
        + " |",
        "|---|---|---|" + "---|" * len(predicted),
    ]
    for seed, record in sorted(grpo.items()):
        observed = crossing_step(record)
        data["grpo_crossing_step"][seed] = observed
        estimates = [str(by_seed.get(seed, "-")) for by_seed in predicted.values()]
        left = steps - observed if observed else 0
        lines.append(f"| {seed} | {observed or 'not crossed'} | {left} | " + " | ".join(estimates) + " |")
    data["predicted_crossing_step"] = predicted
    return lines, data


def _pass_at_k_details(claim: Claim, runs: Runs) -> tuple[list[str], dict]:
    lines = ["Per k, AER - GRPO held-out pass@k (same seed), mean [95% CI]:", ""]
    data = {}
    for k in PASS_K:
        values = paired(runs, claim.arm, claim.control, lambda a, b, k=k: pass_at(a, k) - pass_at(b, k))
        low, high = bootstrap_interval(list(values.values()))
        data[k] = {"per_seed": values, "mean": statistics.fmean(values.values()), "interval": [low, high]}
        lines.append(f"- k = {k}: {statistics.fmean(values.values()):+.3f} [{low:+.3f}, {high:+.3f}]")
    return lines, data


def _lambda_details(claim: Claim, runs: Runs) -> tuple[list[str], dict]:
    steps = claim.arm.steps
    marks = [1, *range(steps // 4, steps + 1, steps // 4)]
    lines = [f"PosAdv's lambda (`series.controller`) at steps {', '.join(map(str, marks))}, per seed:", ""]
    data = {}
    for seed, record in sorted(claim.arm.runs(runs).items()):
        series = record["series"].get("controller") or []
        data[seed] = {m: _at(series, m) for m in marks}
        lines.append(f"- seed {seed}: " + ", ".join(_fmt(_at(series, m)) for m in marks))
    return lines, data


LABEL_N1_85 = "1 update per rollout batch, 85 steps (the study's runs; PosAdv App. E.2: 4)"
AER_85 = Arm("aer", "full", 85, "AER")
Q_FEW_COLLAPSE = (
    "As shown in Figure 1, compared to sufficient training data (Full-shot), Few-shot RLVR exhibits a significantly "
    "lower entropy magnitude."
)
Q_FULL_COLLAPSE = (
    Q_AER_COLLAPSE,
    "In contrast, LLMs trained without entropy regularization experience rapid entropy collapse, wherein entropy "
    "declines to a low value.",
    "Both curves exhibit highly similar dynamics: starting at an entropy of approximately 0.25, dropping sharply "
    "within the first 50 training steps, and rapidly converging to nearly zero.",
)
FULL_PAPERS = ("aer", "posadv", "opefo")
Q_RAND_POS_CLIP = (
    "Moreover, Rand-Pos-Clip, which randomly sets the gradients of a small subset of tokens with positive advantages "
    "to zero, mitigates entropy collapse relative to the GRPO baseline."
)
FEW = "few_shot"


def _few(method: str, label: str) -> Arm:
    return Arm(method, FEW, 85, label)


def _full85(method: str, label: str) -> Arm:
    return Arm(method, "full", 85, label)


def _n4(method: str, label: str) -> Arm:
    return Arm(method, "full", 140, label)


CLAIMS: tuple[Claim, ...] = (
    _collapse(
        "grpo-collapse-few",
        GRPO_FEW,
        "HEAL Fig. 1",
        "GRPO's entropy collapses (few-shot)",
        (Q_FEW_COLLAPSE, Q_AER_COLLAPSE),
        ("heal", "aer"),
    ),
    _collapse(
        "grpo-collapse-full",
        GRPO_175,
        "AER Fig. 3c; PosAdv Fig. 1; OPEFO Fig. 2a / 4a",
        "GRPO's entropy collapses (full data)",
        Q_FULL_COLLAPSE,
        FULL_PAPERS,
        labelled=(
            (
                "85 steps (the study's budget)",
                _collapse("grpo-collapse-full", GRPO_FULL, "", "", Q_FULL_COLLAPSE, FULL_PAPERS),
            ),
        ),
    ),
    _aer_near_target(
        AER_175,
        GRPO_175,
        labelled=(
            ("85 steps (the study's runs)", _aer_near_target(AER_85, GRPO_FULL)),
            ("E2: 4 updates per rollout batch (AER Table 3), 140 steps", _aer_near_target(AER_N4, GRPO_N4)),
        ),
        deviations=(N1_AER, SAME_MEASURE),
    ),
    _aer_pass_at_k(
        AER_175,
        GRPO_175,
        labelled=(("E2: 4 updates per rollout batch (AER Table 3), 140 steps", _aer_pass_at_k(AER_N4, GRPO_N4)),),
        deviations=("k up to 16 (20 held-out problems x 16 samples; the paper: k up to 256 on AIME)", N1_AER),
    ),
    _pos_only(
        POS_N4,
        GRPO_N4,
        POSADV_N4,
        NEG_N4,
        ENTADV_N4,
        labelled=(
            (
                "few-shot, " + LABEL_N1_85,
                _pos_only(
                    _few("pos_only", "A>0-only"),
                    GRPO_FEW,
                    _few("posadv", "PosAdv"),
                    _few("neg_only", "A<0-only"),
                    _few("entropy_adv", "Entropy-Adv"),
                ),
            ),
        ),
    ),
    _neg_only(
        NEG_N4,
        GRPO_N4,
        POS_N4,
        labelled=(
            (
                "few-shot, " + LABEL_N1_85,
                _neg_only(_few("neg_only", "A<0-only"), GRPO_FEW, _few("pos_only", "A>0-only")),
            ),
        ),
    ),
    _posadv_near(
        POSADV_N4,
        GRPO_N4,
        labelled=(("full, " + LABEL_N1_85, _posadv_near(_full85("posadv", "PosAdv"), GRPO_FULL)),),
    ),
    *(
        _final_entropy_vs(
            claim_id,
            text,
            quote,
            _n4(f"{method}_n4", f"{label} (N4)"),
            GRPO_N4,
            side=side,
            labelled=(
                (LABEL_N1_85, _final_entropy_vs(claim_id, text, quote, _full85(method, label), GRPO_FULL, side=side)),
            ),
        )
        for claim_id, text, quote, method, label, side in (
            (
                "rand-pos-clip-mitigates",
                "Rand-Pos-Clip mitigates the collapse (more final entropy than GRPO)",
                Q_RAND_POS_CLIP,
                "rand_pos_clip",
                "Rand-Pos-Clip",
                "above",
            ),
            (
                "clip-cov-mitigates",
                "Clip-Cov mitigates the collapse (more final entropy than GRPO)",
                Q_FIG5_BASELINES,
                "clip_cov",
                "Clip-Cov",
                "above",
            ),
        )
    ),
    _final_entropy_vs(
        "kl-cov-mitigates",
        "KL-Cov mitigates the collapse (more final entropy than GRPO)",
        Q_FIG5_BASELINES,
        _n4("kl_cov_paper", "KL-Cov (N4)"),
        GRPO_N4,
        labelled=(
            (
                "k 0.02 and 2 updates per rollout batch, 85 steps (the study's runs)",
                _final_entropy_vs(
                    "kl-cov-mitigates", "", Q_FIG5_BASELINES, _full85("kl_cov", "KL-Cov (k 0.02)"), GRPO_FULL
                ),
            ),
            (
                "E1: k 0.02, 4 updates per rollout batch, 140 steps",
                _final_entropy_vs(
                    "kl-cov-mitigates", "", Q_FIG5_BASELINES, _n4("kl_cov_n4_k02", "KL-Cov (k 0.02, N4)"), GRPO_N4
                ),
            ),
        ),
        deviations=("no ratio clipping, as the reference KL-Cov loss (epsilon 1e4)",),
    ),
    _final_entropy_vs(
        "entropy-adv-intensifies",
        "Entropy-Adv intensifies the collapse (less final entropy than GRPO)",
        Q_FIG5_BASELINES,
        ENTADV_N4,
        GRPO_N4,
        side="below",
        labelled=(
            (
                LABEL_N1_85,
                _final_entropy_vs(
                    "entropy-adv-intensifies",
                    "",
                    Q_FIG5_BASELINES,
                    _full85("entropy_adv", "Entropy-Adv"),
                    GRPO_FULL,
                    side="below",
                ),
            ),
        ),
    ),
    _opefo(
        _full85("opefo", "OPEFO"),
        GRPO_FULL,
        labelled=(
            (
                "diagnostic: exact first-order estimator (not the paper's eq. 6)",
                _opefo(_full85("opefo_exact", "OPEFO (exact estimator)"), GRPO_FULL),
            ),
        ),
        deviations=("the lr decays linearly (OPEFO: constant 2.83e-6 after a 10-step warm-up)",),
    ),
    _flow(
        "grpo-net-flow-negative",
        "GRPO's net predicted entropy change is strongly negative early",
        "Figure 2 (b) shows that this quantity is strongly negative during the first 50 steps, indicating that "
        "dynamics consistently bias entropy downward.",
        "flow_net",
        "below",
        GRPO_FULL,
        window=0.2,
        figure="OPEFO Fig. 2b",
    ),
    _flow(
        "upper-clipped-positive",
        "Under Clip-Higher, upper-clipped tokens carry positive entropy change",
        "Figure 2 (c) reveals a clear pattern: tokens clipped at the upper bound tend to exhibit positive entropy "
        "change",
        "flow_upper_clipped_net",
        "above",
        _full85("clip_higher", "Clip-Higher (N4)"),
    ),
    _flow(
        "lower-clipped-negative",
        "Under Clip-Higher, lower-clipped tokens carry negative entropy change",
        "whereas those clipped at the lower bound typically exhibit negative entropy change",
        "flow_lower_clipped_net",
        "below",
        _full85("clip_higher", "Clip-Higher (N4)"),
    ),
    _final_entropy_vs(
        "hybrid-keeps-more",
        "Few-shot: Hybrid keeps more target-domain entropy than GRPO",
        "As illustrated in Figure 1, this simple mixture notably alleviates entropy collapse in the target domain and "
        "leads to notable performance improvements compared to training only on few-shot target-domain data.",
        _few("hybrid", "Hybrid"),
        GRPO_FEW,
        figure="HEAL Fig. 1",
        paper="heal",
    ),
    _final_entropy_vs(
        "heal-keeps-most",
        "Few-shot: HEAL keeps more target-domain entropy than Hybrid",
        "While standard hybrid training (Hybrid) mitigates this collapse to some extent, the results in Figure 6 "
        "demonstrate the superior \u201chealing\u201d capability of our HEAL framework.",
        _few("heal", "HEAL"),
        _few("hybrid", "Hybrid"),
        figure="HEAL Fig. 1 / Fig. 6",
        paper="heal",
    ),
    Claim(
        "heal-approaches-full-shot",
        "HEAL",
        "HEAL Table 1",
        "HEAL's few-shot accuracy approaches full-shot GRPO's",
        (
            "Remarkably, with only 32 target-domain samples, our approach matches or even surpasses full-shot RLVR "
            "trained with 1K target-domain samples.",
        ),
        ("heal",),
        "non-inferiority",
        "held-out pass@1 (columns); HEAL few-shot / GRPO full, 85 steps",
        _few("heal", "HEAL few-shot"),
        lambda r: pass_at(r, 1),
        control=_full85("grpo", "GRPO full"),
        comparisons=(
            Comparison(
                _full85("grpo", "GRPO full"),
                "pass@1 ratio",
                lambda h, g: pass_at(h, 1) / max(pass_at(g, 1), 1e-9),
                "above",
                0.9,
            ),
        ),
    ),
)


def claim_arms() -> list[Arm]:
    """Every arm the claims read, labelled rows included."""
    return list(dict.fromkeys(arm for claim in CLAIMS for arm in claim.arms()))


# Arms whose runs live in a cache of their own, written by their own command (not `--pairs claims`).
OWN_CACHE = ("opefo_exact",)


def claim_pairs(steps: int) -> tuple[tuple[str, str], ...]:
    """The (method, regime) pairs the claims read at a budget of `steps` (`healtrl study --pairs claims --steps N`):
    85 -> the study's pairs, 175 -> AER and GRPO (set A), 140 -> the paper regime (set B and its extras); empty for
    a budget no claim reads. Arms in `OWN_CACHE` are left out."""
    arms = [arm for arm in claim_arms() if arm.steps == steps and arm.method not in OWN_CACHE]
    return tuple(dict.fromkeys((arm.method, arm.regime) for arm in arms))


CLAIM_PAIRS: tuple[tuple[str, str], ...] = claim_pairs(85)


# ---------------------------------------------------------------------------------------------------------------------
# Intervals and verdicts
# ---------------------------------------------------------------------------------------------------------------------
def bootstrap_interval(values: Sequence[float], resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean of `values` (resampled with replacement)."""
    if not values:
        raise ValueError("no values to bootstrap")
    rng = random.Random(seed)
    n = len(values)
    means = sorted(statistics.fmean(rng.choices(values, k=n)) for _ in range(resamples))
    return means[int(0.025 * (resamples - 1))], means[int(math.ceil(0.975 * (resamples - 1)))]


def t_interval(values: Sequence[float]) -> tuple[float, float] | None:
    """Student t 95% interval of the mean (None for fewer than 2 values or more than 11)."""
    n = len(values)
    if n - 1 not in T95:
        return None
    half = T95[n - 1] * statistics.stdev(values) / math.sqrt(n)
    mean = statistics.fmean(values)
    return mean - half, mean + half


def per_seed(arm: Arm, runs: Runs, stat: Callable[[dict], float]) -> dict[int, float]:
    return {seed: stat(record) for seed, record in sorted(arm.runs(runs).items())}


def paired(runs: Runs, a: Arm, b: Arm, stat: Callable[[dict, dict], float]) -> dict[int, float]:
    """stat(run of a, run of b) for every seed both have."""
    runs_a, runs_b = a.runs(runs), b.runs(runs)
    seeds = sorted(set(runs_a) & set(runs_b))
    if not seeds:
        raise NotMeasured(f"no seed with runs of both {a.method} and {b.method}")
    return {seed: stat(runs_a[seed], runs_b[seed]) for seed in seeds}


@dataclass
class Summary:
    """Per-seed values, their mean and 95% bootstrap interval."""

    values: dict[int, float]
    mean: float
    interval: tuple[float, float]

    @classmethod
    def of(cls, values: dict[int, float]) -> Summary:
        return cls(values, statistics.fmean(values.values()), bootstrap_interval(list(values.values())))

    def text(self, signed: bool = False) -> str:
        f = "+.3f" if signed else ".3f"
        return f"{self.mean:{f}} [{self.interval[0]:{f}}, {self.interval[1]:{f}}]"

    def as_json(self) -> dict:
        out = {"per_seed": self.values, "mean": self.mean, "interval_bootstrap95": list(self.interval)}
        t = t_interval(list(self.values.values()))
        if t is not None:
            out["interval_t95"] = list(t)
        return out


@dataclass
class Result:
    claim: Claim
    verdict: str
    method: Summary | None = None
    control: Summary | None = None
    comparisons: list[tuple[Comparison, Summary, str]] = field(default_factory=list)
    reported: list[tuple[Comparison, Summary]] = field(default_factory=list)
    own_verdict: str | None = None
    control_meets: bool = False
    reason: str = ""
    labelled: list[tuple[str, Result]] = field(default_factory=list)
    details: tuple[list[str], dict] | None = None


def combine(verdicts: Sequence[str]) -> str:
    """The claim's verdict from its conditions': held if all hold, not held if any fails, else inconclusive."""
    if "not held" in verdicts:
        return "not held"
    return "held" if all(v == "held" for v in verdicts) else "inconclusive"


def evaluate(claim: Claim, runs: Runs, with_labelled: bool = True) -> Result:
    labelled = [(label, evaluate(row, runs, False)) for label, row in claim.labelled] if with_labelled else []
    try:
        method = Summary.of(per_seed(claim.arm, runs, claim.stat))
        control = Summary.of(per_seed(claim.control, runs, claim.stat)) if claim.control else None
        comparisons = []
        for comp in claim.comparisons:
            summary = Summary.of(paired(runs, claim.arm, comp.other, comp.stat))
            comparisons.append((comp, summary, verdict_of(comp.side, comp.threshold, *summary.interval)))
        details = claim.details(claim, runs) if claim.details and with_labelled else None
    except NotMeasured as why:
        return Result(claim, "not measured", reason=str(why), labelled=labelled)
    reported = []  # beside the verdict, not in it: a missing arm leaves it out of the report only
    for comp in claim.reported:
        try:
            reported.append((comp, Summary.of(paired(runs, claim.arm, comp.other, comp.stat))))
        except NotMeasured:
            continue
    verdicts = [v for _, _, v in comparisons]
    own = control_meets = None
    if claim.side is not None:
        own = verdict_of(claim.side, claim.threshold, *method.interval, claim.upper)
        verdicts.insert(0, own)
        if control is not None:
            control_meets = verdict_of(claim.side, claim.threshold, *control.interval, claim.upper) == "held"
    return Result(
        claim,
        combine(verdicts),
        method,
        control,
        comparisons,
        reported,
        own,
        bool(control_meets),
        "",
        labelled,
        details,
    )


# ---------------------------------------------------------------------------------------------------------------------
# claims.md, claims.json, the README's table
# ---------------------------------------------------------------------------------------------------------------------
TABLE_HEADER = (
    "| claim | paper | statistic (holds if) | method: mean [95% CI] | control: mean [95% CI] | "
    "paired difference: mean [95% CI] | verdict |"
)


def _cell(text: str) -> str:
    """A markdown table cell: a `|` inside it (an absolute value, |x|) escaped, so it does not split the row."""
    return text.replace("|", "\\|")


def _row(result: Result, diagnostics: str | None, label: str | None = None) -> str:
    c = result.claim
    if label is None:
        name, paper, statistic = c.text, c.figure, f"{c.statistic} ({c.holds_if()})"
    else:
        name, paper, statistic = f"labelled row: {label}", "", f"same rule ({c.holds_if()})"
    if result.verdict == "not measured":
        method, control, diff = f"- ({result.reason})", "", ""
    else:
        method = f"{c.arm.label} {result.method.text()}"
        control = f"{c.control.label} {result.control.text()}" if result.control else "- (single-run claim)"
        diff = "; ".join(
            (f"{comp.description}: " if len(result.comparisons) > 1 else "") + s.text(signed=comp.threshold == 0)
            for comp, s, _ in result.comparisons
        )
        diff = diff or "-"
    verdict = f"**{result.verdict}**" if label is None else f"*{result.verdict}* (labelled: not the verdict)"
    if label is None and result.control_meets:
        verdict += "; the control also meets the threshold"
    if label is None and diagnostics and result.verdict != "held":
        verdict += f" ([diagnostic]({diagnostics}#{c.id}))"
    cells = (name, paper, statistic, method, control, diff, verdict)
    return "| " + " | ".join(_cell(x) for x in cells) + " |"


def table(results: Sequence[Result], diagnostics: str | None = None) -> str:
    """The claims table: a row per claim, then its labelled rows; with `diagnostics` (a markdown file with one
    `## <claim id>` section per claim), every verdict other than "held" links to the claim's section there."""
    lines = [TABLE_HEADER, "|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(_row(r, diagnostics))
        lines += [_row(row, diagnostics, label) for label, row in r.labelled]
    return "\n".join(lines)


def _details_section(result: Result) -> list[str]:
    c = result.claim
    lines = [f"### {c.id}", "", f"{c.paper}, {c.figure}. Form: {c.form}."]
    lines += [f"> {q} ({PAPER_NAMES[p]})" for q, p in zip(c.quote, c.quote_papers)]
    lines.append("")
    if c.deviations:
        lines += ["Deviations from the paper's settings (kept, labelled):", *[f"- {d}" for d in c.deviations], ""]
    if result.verdict == "not measured":
        return [*lines, f"Not measured: {result.reason}.", ""]
    seeds = sorted(result.method.values)
    lines += ["| seed | " + " | ".join(map(str, seeds)) + " |", "|---|" + "---|" * len(seeds)]
    rows = [(c.arm.label, result.method)] + ([(c.control.label, result.control)] if result.control else [])
    rows += [(comp.description, s) for comp, s, _ in result.comparisons]
    rows += [(f"{comp.description} (reported)", s) for comp, s in result.reported]
    for name, s in rows:
        lines.append(f"| {_cell(name)} | " + " | ".join(_fmt(s.values.get(seed)) for seed in seeds) + " |")
    lines.append("")
    for comp, s in result.reported:
        lines.append(f"Reported, not in the verdict: {comp.description} {s.text(signed=True)} ({comp.holds_if()}).")
    if result.details:
        lines += ["", *result.details[0]]
    return [*lines, ""]


def _result_json(result: Result) -> dict:
    c = result.claim
    out = {
        "id": c.id,
        "paper": c.paper,
        "figure": c.figure,
        "text": c.text,
        "quote": list(c.quote),
        "quote_papers": list(c.quote_papers),
        "form": c.form,
        "statistic": c.statistic,
        "holds_if": c.holds_if(),
        # the own condition's, or (a claim decided by one comparison) the comparison's
        "direction": c.side or (c.comparisons[0].side if len(c.comparisons) == 1 else None),
        "threshold": c.threshold if c.side else (c.comparisons[0].threshold if len(c.comparisons) == 1 else None),
        "upper": c.upper,
        "method": {"method": c.arm.method, "regime": c.arm.regime, "steps": c.arm.steps, "label": c.arm.label},
        "control": None
        if c.control is None
        else {
            "method": c.control.method,
            "regime": c.control.regime,
            "steps": c.control.steps,
            "label": c.control.label,
        },
        "deviations": list(c.deviations),
        "verdict": result.verdict,
    }
    if result.verdict == "not measured":
        out["reason"] = result.reason
    else:
        out["seeds"] = sorted(result.method.values)
        out["method_values"] = result.method.as_json()
        out["own_condition_verdict"] = result.own_verdict
        out["control_values"] = result.control.as_json() if result.control else None
        out["control_meets_threshold"] = result.control_meets
        out["paired_differences"] = [
            {
                "against": comp.other.key,
                "statistic": comp.description,
                "direction": comp.side,
                "threshold": comp.threshold,
                "verdict": v,
                **s.as_json(),
            }
            for comp, s, v in result.comparisons
        ]
        out["reported"] = [
            {"against": comp.other.key, "statistic": comp.description, **s.as_json()} for comp, s in result.reported
        ]
        if result.details:
            out["details"] = result.details[1]
    if result.labelled:
        out["labelled_rows"] = [{"label": label, **_result_json(row)} for label, row in result.labelled]
    return out


def write_json(results: Sequence[Result], path: str, command: str, runs_dirs: Sequence[str]) -> None:
    doc = {
        "written_by": command,
        "date": datetime.date.today().isoformat(),
        "runs": [os.path.relpath(d) for d in runs_dirs],
        "verdict_rule": VERDICT_RULE,
        "claims": [_result_json(r) for r in results],
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, default=str)
        f.write("\n")


README_HEADER = (
    "| claim | paper | statistic (holds if) | method | control | paired difference | verdict (mean [95% CI] over "
    "{seeds} seeds) |"
)


def _cells(row: str) -> list[str]:
    """The cells of one markdown table row, split at the `|` that are not escaped (`_cell`)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def readme_table(claims_md: str, folder: str, seeds: str = "5") -> str:
    """The README's form of the table in `claims_md` (written by `main(--output ...)`): the same rows, with the
    diagnostics' links made relative to the repository root (`folder`: the claims file's folder, as the README links
    it). The README's table is this, for the committed `claims.md` (a test checks it; `--readme` rewrites it)."""
    text = claims_md.splitlines()
    if TABLE_HEADER not in text:
        raise ValueError("no claims table in the text given (expected the rows that `table` writes)")
    rows = []
    for line in text[text.index(TABLE_HEADER) + 2 :]:  # the table's rows: up to its first non-row line
        if not line.startswith("| "):
            break
        rows.append(_cells(line))
    lines = [README_HEADER.format(seeds=seeds), "|---|---|---|---|---|---|---|"]
    for cells in rows:
        cells[-1] = cells[-1].replace("](diagnostics.md#", f"]({folder}/diagnostics.md#")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def replace_readme_table(readme: str, claims_md: str, folder: str, seeds: str = "5") -> str:
    """`readme` with its claims table (the block of rows from the line that starts like `README_HEADER`) replaced by
    `readme_table(claims_md, folder)`."""
    lines = readme.splitlines(keepends=True)
    prefix = README_HEADER.split(" (mean")[0]
    starts = [i for i, line in enumerate(lines) if line.startswith(prefix)]
    if len(starts) != 1:
        raise ValueError(f"expected one README line starting with {prefix!r}, found {len(starts)}")
    end = starts[0]
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "".join(lines[: starts[0]]) + readme_table(claims_md, folder, seeds) + "\n" + "".join(lines[end:])


def judge(args, command: str) -> list[Result]:
    """Judge every claim on the cached runs, print the table and, with `args.output`, write `claims.md`,
    `claims.json` beside it and (with `args.readme`) the README's table.

    Args:
        args: The options of `healtrl study --claims` (`healtrl.study.command.claims_parser`): `runs`, `seeds`,
            `output`, `diagnostics`, `readme`.
        command: The command line the written files name (e.g. `python benchmarks/claims.py --output ...`).

    Returns:
        One `Result` per claim of `CLAIMS`, in order.
    """
    runs = load_runs(args.runs, args.seeds)
    results = [evaluate(claim, runs) for claim in CLAIMS]
    text = table(results, args.diagnostics)
    print(text)
    if not args.output:
        return results
    seeds = sorted({seed for by_seed in runs.values() for seed in by_seed})
    header = (
        "# The papers' claims on the reasoning world, each against its control\n\n"
        f"Written by `{command}` on {datetime.date.today().isoformat()} from the cached runs in "
        f"{', '.join(f'`{os.path.relpath(d)}`' for d in args.runs)} (no training); seeds {', '.join(map(str, seeds))}. "
        "Claims, thresholds, budgets and the verdict rule were pre-registered before the 140- and 175-step runs "
        "(`preregistration.md`); the rule is in the docstring of `healtrl/study/claims.py`; the same data as JSON: "
        "`claims.json`. A verdict is about this world and budget: where the world gives a method's mechanism no room "
        'to act, "not held" says so much, not that the paper is wrong.\n\n'
    )
    details = ["", "## Per claim: quotes, per-seed values, what is reported beside the verdict", ""]
    for r in results:
        details += _details_section(r)
    with open(args.output, "w") as f:
        f.write(header + text + "\n" + "\n".join(details).rstrip() + "\n")
    json_path = os.path.join(os.path.dirname(os.path.abspath(args.output)), "claims.json")
    write_json(results, json_path, command, args.runs)
    print(f"wrote {args.output} and {json_path}")
    if args.readme:
        with open(args.output) as f:
            claims_md = f.read()
        with open(args.readme) as f:
            readme = f.read()
        folder = os.path.relpath(
            os.path.dirname(os.path.abspath(args.output)), os.path.dirname(os.path.abspath(args.readme))
        )
        with open(args.readme, "w") as f:
            f.write(replace_readme_table(readme, claims_md, folder, " / ".join(map(str, [len(seeds)]))))
        print(f"rewrote the claims table of {args.readme}")
    return results
