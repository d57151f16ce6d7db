"""Your run vs the paper: the numbers of a recipe's `paper_results` that belong to a run (`select_paper_rows`), the
comparison with the run's `healtrl eval` results (`compare_with_paper`) and its Markdown (`render_comparison`), written
by `healtrl eval --compare_paper` as `paper_comparison.md` / `paper_comparison.json`. The recipe fields are parsed in
`healtrl.recipes`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from healtrl.recipes.metrics import metric_value, parse_metric
from healtrl.recipes.recipe import PaperProtocol, PaperResult

__all__ = [
    "COMPARISON_JSON",
    "COMPARISON_MD",
    "PaperRowMismatch",
    "compare_with_paper",
    "describe_protocol",
    "render_comparison",
    "row_mismatches",
    "select_paper_rows",
]

COMPARISON_MD = "paper_comparison.md"
COMPARISON_JSON = "paper_comparison.json"


def describe_protocol(settings: Mapping[str, Any], ks: Sequence[int] = ()) -> str:
    """One line of decoding settings (a `PaperProtocol` as a dict, or `results.json` settings): k, temperature, top_p,
    max_new_tokens, each "not stated" (with ours, if set) when None, then the source."""
    ours = settings.get("ours") or {}

    def show(key):
        value = settings.get(key)
        if value is None:
            return "not stated" + (f" (ours: {ours[key]})" if ours.get(key) is not None else "")
        return f"{value:g}" if isinstance(value, float) else str(value)

    k_values = sorted(set(ks)) or ([settings["k"]] if settings.get("k") is not None else [])
    k_text = ", ".join(str(k) for k in k_values) if k_values else "not stated"
    text = (
        f"k={k_text}, temperature={show('temperature')}, top_p={show('top_p')}, max_new_tokens={show('max_new_tokens')}"
    )
    return text + (f" ({settings['source']})" if settings.get("source") else "")


def _your_tasks(results: Sequence[Mapping[str, Any]]) -> dict[str, tuple[Mapping, Mapping]]:
    """task -> (its record, the settings it was sampled with), over several `results.json` contents."""
    out = {}
    for data in results:
        settings = data.get("settings") or {}
        for task, record in (data.get("tasks") or {}).items():
            if task in out:
                raise ValueError(f"Task '{task}' appears in two evaluation results; pass each task's results once.")
            out[task] = (record, settings)
    return out


class PaperRowMismatch(ValueError):
    """The run's model or training data is not those of any `paper_results` entry: no comparison is written."""


def _same(run_value, paper_value) -> bool:
    if paper_value is None or run_value is None:
        return True
    return str(run_value).rstrip("/") == str(paper_value).rstrip("/")


def row_mismatches(entry: PaperResult, run: Mapping[str, Any] | None) -> list[str]:
    """How the run (`{"model", "dataset"}`, from its config's model_name_or_path and dataset_name) differs from the
    model and training data of a paper number: e.g. ["model Qwen/Qwen3-8B-Base vs the paper's Qwen/Qwen3-4B-Base"]."""
    if run is None:
        return []
    out = []
    for key in ("model", "dataset"):
        if not _same(run.get(key), getattr(entry, key)):
            out.append(f"{key} {run.get(key)} vs the paper's {getattr(entry, key)}")
    values = run.get("settings")
    for key, value in (entry.settings or {}).items():
        if values is None or key not in values or values[key] is None:
            continue  # the run's value is not known: not compared
        if values[key] != value:
            out.append(f"{key} {values[key]} vs the paper's {value}")
    return out


def select_paper_rows(
    paper_results: Sequence[PaperResult],
    run: Mapping[str, Any] | None,
    *,
    allow_mismatch: bool = False,
    override: str = "--compare_anyway",
) -> list[PaperResult]:
    """The paper numbers that belong to the run's model and training data.

    Args:
        paper_results: The parsed `paper_results` (each entry's `model` / `dataset` filled from `paper_protocol`).
        run: `{"model", "dataset"}` of the run (its config's `model_name_or_path` and `dataset_name`); None when
            unknown (a model that is not a `train.py` run folder): every entry is kept.
        allow_mismatch: When no entry matches, keep them all instead of raising (`compare_with_paper(run=...)` then
            marks each row's differences).
        override: How the user sets `allow_mismatch`, quoted in the error.

    Raises:
        PaperRowMismatch: no entry has the run's model and training data (and not `allow_mismatch`); the message names
            the run's and the paper's.
    """
    if run is None:
        return list(paper_results)
    matching = [e for e in paper_results if not row_mismatches(e, run)]
    if matching or not paper_results or allow_mismatch:
        return matching or list(paper_results)
    rows = sorted({(e.model, e.dataset) for e in paper_results}, key=str)
    paper = "; ".join(f"model {m or 'not stated'}, training data {d or 'not stated'}" for m, d in rows)
    differences = "; ".join(dict.fromkeys(m for e in paper_results for m in row_mismatches(e, run)))
    raise PaperRowMismatch(
        f"the run's model {run.get('model')} and training data {run.get('dataset')} are not those of the paper's "
        f"numbers in this recipe ({paper}), or its settings differ ({differences}), so no comparison is made: the "
        "numbers belong to another row of the paper. Add that row's numbers to paper_results (entries with their own `model` / `dataset`) or pass a "
        f"recipe that has them with --compare_paper, or pass {override} to compare anyway (the table marks every "
        "row)."
    )


def compare_with_paper(
    paper_results: Sequence[PaperResult],
    protocol: PaperProtocol | None,
    results: Sequence[Mapping[str, Any]],
    run: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One comparison row per paper number: yours (from `results.json` contents of `healtrl eval`), the paper's, the
    difference in percentage points, and the protocol differences.

    Args:
        paper_results: The paper's numbers (`parse_paper_results`).
        protocol: The paper's decoding protocol (`parse_paper_protocol`); None: not stated.
        results: One or more `EvalResults.to_dict()` / `results.json` contents.
        run: `{"model", "dataset"}` of the evaluated run: a number of another model or training data is marked
            (select the rows first with `select_paper_rows`, which refuses such a comparison unless asked).

    Returns:
        Rows `{"benchmark", "metric", "paper_k", "your_k", "yours", "paper", "difference", "mismatches", "table",
        "model", "dataset"}` (the paper number's model and training data);
        `yours` and `difference` are None when the benchmark was not evaluated or your k is too small for the metric.
        `mismatches` lists each protocol setting that differs ("k 8 vs 32"); settings the paper does not state are
        listed as "temperature not stated by the paper".
    """
    protocol = protocol or PaperProtocol()
    yours = _your_tasks(results)
    rows = []
    for entry in paper_results:
        kind, j = parse_metric(entry.metric, "metric")
        row = {
            "benchmark": entry.benchmark,
            "metric": entry.label,
            "paper_k": entry.k,
            "your_k": None,
            "paper": float(entry.value),
            "yours": None,
            "difference": None,
            "mismatches": row_mismatches(entry, run),
            "table": entry.table,
            "model": entry.model,
            "dataset": entry.dataset,
        }
        found = yours.get(entry.benchmark)
        if found is None:
            row["mismatches"].append("not evaluated")
            rows.append(row)
            continue
        record, settings = found
        your_k = int(record.get("k", settings.get("k")))
        row["your_k"] = your_k
        # avg@k estimates the same quantity at any k (the mean correctness); pass@j needs j samples.
        j = (entry.k if j is None else j) if kind == "pass" else None
        if j is not None and your_k < j:
            row["mismatches"].append(f"k {your_k} < {j}: pass@{j} cannot be estimated")
        else:
            row["yours"] = 100 * metric_value(record["correct"], your_k, kind, j)
            row["difference"] = row["yours"] - row["paper"]
        if your_k != entry.k:
            row["mismatches"].append(f"k {your_k} vs {entry.k}")
        for key in ("temperature", "top_p", "max_new_tokens"):
            paper_value, your_value = getattr(protocol, key), settings.get(key)
            if paper_value is None:
                ours = (protocol.ours or {}).get(key)
                row["mismatches"].append(
                    f"{key} not stated by the paper" + (f" (ours: {ours})" if ours is not None else "")
                )
            elif your_value is None or not math.isclose(float(your_value), float(paper_value)):
                row["mismatches"].append(f"{key} {your_value} vs {paper_value}")
        rows.append(row)
    return rows


def render_comparison(
    rows: Sequence[Mapping[str, Any]],
    protocol: PaperProtocol | None,
    results: Sequence[Mapping[str, Any]],
    title: str = "Your run vs the paper",
    model: str | None = None,
    run: Mapping[str, Any] | None = None,
) -> str:
    """Markdown: both protocols above a table of benchmark, metric, yours, the paper's, the difference, and a protocol
    column that flags every mismatch (⚠) or says `same`."""
    protocol = protocol or PaperProtocol()
    your_settings = [dict(data.get("settings") or {}) for data in results]
    your_ks = [int(r["your_k"]) for r in rows if r["your_k"] is not None]
    lines = [f"# {title}", ""]
    if model:
        lines += [f"Model: `{model}`.", ""]
    paper_rows = sorted({(r.get("model"), r.get("dataset")) for r in rows}, key=str)
    if any(m or d for m, d in paper_rows):
        lines.append(
            "- Paper's model and training data: "
            + "; ".join(f"{m or 'not stated'}, {d or 'not stated'}" for m, d in paper_rows)
        )
        if run is None:
            lines.append("- Yours: not a train.py run folder, so its model and training data are not checked")
        else:
            lines.append(f"- Yours: {run.get('model')}, {run.get('dataset')}")
    lines.append(f"- Paper protocol: {describe_protocol(asdict(protocol), [r['paper_k'] for r in rows])}")
    for settings in your_settings or [{}]:
        lines.append(f"- Your protocol: {describe_protocol({**settings, 'source': None}, your_ks)}")
    tables = list(dict.fromkeys(r["table"] for r in rows if r["table"]))
    one_table = len(tables) <= 1 and all(r["table"] for r in rows)
    if one_table and tables:
        lines.append(f"- Paper's numbers: {tables[0]}")
    lines += [
        "",
        "Scores in %; difference = yours - paper's, in percentage points. Protocol: `same`, or ⚠ with each setting "
        "that differs (yours vs the paper's) or that the paper does not state.",
        "",
    ]
    header = ["benchmark", "metric", "yours", "paper", "difference", "protocol"] + ([] if one_table else ["source"])
    lines += ["| " + " | ".join(header) + " |", "|---|---|---:|---:|---:|---|" + ("" if one_table else "---|")]
    for row in rows:
        cells = [
            row["benchmark"],
            row["metric"],
            "—" if row["yours"] is None else f"{row['yours']:.1f}",
            f"{row['paper']:.1f}",
            "—" if row["difference"] is None else f"{row['difference']:+.1f}",
            "same" if not row["mismatches"] else "⚠ " + "; ".join(row["mismatches"]),
        ]
        if not one_table:
            cells.append(row["table"] or "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
