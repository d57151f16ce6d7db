"""Model cards for checkpoints trained with healtrl.

Every healtrl trainer writes `README.md` (this card) and `curves.png` next to the weights when it saves a model
(`trainer.save_model(dir)`, checkpoints) and before it uploads to the Hub (`trainer.push_to_hub()`). The card holds:

* YAML front matter the Hub reads: `library_name`, `base_model` and `datasets` (Hub ids only: local paths and
  healtrl's offline/toy names are left out), `tags` (trl, grpo, healtrl and the method's tag);
* the base model by the name it was loaded with, never by a path of this machine (`published_model_name`): a toy or
  offline model's cache folder by its `healtrl-toy/...` / `healtrl-offline/...` name, any other local folder by its
  last path component, marked as local;
* the method, a two-line explanation and its paper;
* the training setup: base model, datasets, reward functions, the method's key hyper-parameters and the shared GRPO
  ones, the first and final logged entropy and reward, the entropy/reward curves image and, when the run wrote
  training-time entropy views (`inspect_every_steps`), the token-entropy summary `inspect_summary.png`;
* evaluation results, when the log history holds `eval/<task>/<metric>` entries (`PeriodicEvalCallback`) or the
  folder holds a `results.json` written by `healtrl eval` (omitted otherwise);
* a "Best checkpoint" section, added by `healtrl eval --checkpoints` (`set_card_section`): which checkpoint the
  recipe's rule chose, by which rule, and its score;
* how to load the checkpoint (transformers, or PEFT for an adapter) and the BibTeX of the papers and of healtrl.

`build_model_card` takes no trainer and writes nothing (it reads only the metadata file of a toy or offline model
folder given as `base_model`); the trainers' `create_model_card` / `save_model` gather its inputs (see
`healtrl.trainers.base.EntropyGRPOTrainer`).

Why this module is long: it is the whole published document, read top to bottom in the order the card is: the names
it may publish, the small formatters, the card's sections, and the "Best checkpoint" section that `healtrl eval`
rewrites in place. Splitting it would put one document's wording in several files.
"""

from __future__ import annotations

import json
import os
import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from healtrl.utils.numbers import is_finite_number

__all__ = [
    "CURVES_IMAGE",
    "GRPO_PAPER",
    "HEALTRL_CITATION",
    "RESULTS_JSON",
    "BEST_CHECKPOINT_SECTION",
    "TRL_CITATION",
    "best_checkpoint_section",
    "build_model_card",
    "eval_results_from_log_history",
    "format_value",
    "is_hub_id",
    "published_model_name",
    "read_eval_results",
    "set_card_section",
    "training_summary",
]

CURVES_IMAGE = "curves.png"
RESULTS_JSON = "results.json"  # written by `healtrl eval` (healtrl.evaluation.EvalResults.write)

# Names healtrl resolves itself (healtrl.models): they look like Hub ids but are not on the Hub.
LOCAL_NAME_PREFIXES = ("healtrl-toy/", "healtrl-offline/")

# The algorithm every healtrl trainer builds on. Title and arXiv id as cited in AER's references (Shao et al.
# 2024, arXiv:2402.03300).
GRPO_PAPER: dict[str, Any] = {
    "title": "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models",
    "id": "2402.03300",
    "citation": textwrap.dedent("""\
        @article{shao2024deepseekmath,
            title   = {{DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models}},
            author  = {Zhihong Shao and Peiyi Wang and Qihao Zhu and Runxin Xu and Junxiao Song and Xiao Bi and Haowei Zhang and Mingchuan Zhang and Y. K. Li and others},
            journal = {arXiv preprint arXiv:2402.03300},
            year    = {2024},
        }"""),
}

# From CITATION.cff (title, authors, version, license); tests/test_model_card.py checks that they agree.
HEALTRL_CITATION = textwrap.dedent("""\
    @software{healtrl,
        title   = {{healtrl: reinforcement learning from verifiable rewards without entropy collapse}},
        author  = {{The healtrl developers}},
        version = {0.1.0.dev0},
        license = {Apache-2.0},
    }""")

# TRL, listed in CITATION.cff's references.
TRL_CITATION = textwrap.dedent("""\
    @software{vonwerra2020trl,
        title  = {{TRL: Transformer Reinforcement Learning}},
        author = {Leandro von Werra and others},
        url    = {https://github.com/huggingface/trl},
    }""")

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_EVAL_METRIC = re.compile(r"^(avg|pass)@(\d+)$")


# ----------------------------------------------------------------------------------------------------------------
# Small helpers
# ----------------------------------------------------------------------------------------------------------------
def is_hub_id(name: str | None) -> bool:
    """Whether `name` can go into the card's front matter as a Hub repository id.

    Args:
        name: A model or dataset name as the user gave it.

    Returns:
        `True` for `namespace/name` ids that are not an existing local path and not one of healtrl's own offline or
        toy names (`healtrl-toy/...`, `healtrl-offline/...`); `False` otherwise (including `None`, absolute or
        relative paths, `task:<name>` and single-segment names, whose namespace the card cannot know).
    """
    if not isinstance(name, str) or not _HUB_ID.match(name):
        return False
    if name.startswith(LOCAL_NAME_PREFIXES) or ".." in name:
        return False
    return not os.path.exists(name)


def _is_local_path(name: str) -> bool:
    """Whether `name` is written as a path (absolute, `~`, `./`, `../`) or names something that exists here."""
    return os.path.isabs(name) or name.startswith(("~", ".")) or os.path.exists(name)


def published_model_name(name: str) -> tuple[str, str]:
    """The name a model card shows for a model given by `name`, and what kind of name it is.

    The rules, first match wins:

    1. a folder holding a toy model's `healtrl_toy.json` (what `healtrl.toy.load_toy_model` loads from, e.g. a
       model's `config.name_or_path`) -> the `healtrl-toy/...` name it was built for, kind `"healtrl"`;
    2. a folder holding an offline model's `healtrl_offline.json` -> its `healtrl-offline/...` name, kind
       `"healtrl"`;
    3. `healtrl-toy/...` and `healtrl-offline/...` names -> unchanged, kind `"healtrl"`;
    4. a Hub id (`is_hub_id`) -> unchanged, kind `"hub"`;
    5. any other path (absolute, `~`, `./`, `../`, or existing here) -> its last path component, kind `"local"`;
    6. anything else (e.g. a single-segment name such as `gpt2`) -> unchanged, kind `"name"`.

    Args:
        name: A model as the user gave it, or a model config's `name_or_path`.

    Returns:
        `(shown_name, kind)`; no path of this machine is ever returned whole.
    """
    if os.path.isdir(name):
        from healtrl.models import MARKER_FILE
        from healtrl.toy.cache import toy_model_name

        toy = toy_model_name(name)
        if toy is not None:
            return toy, "healtrl"
        marker = os.path.join(name, MARKER_FILE)
        if os.path.isfile(marker):
            with open(marker, encoding="utf-8") as f:
                offline = json.load(f).get("name")
            if isinstance(offline, str) and offline.startswith(LOCAL_NAME_PREFIXES):
                return offline, "healtrl"
    if name.startswith(LOCAL_NAME_PREFIXES):
        return name, "healtrl"
    if is_hub_id(name):
        return name, "hub"
    if _is_local_path(name):
        return os.path.basename(os.path.normpath(os.path.expanduser(name))) or name, "local"
    return name, "name"


def _toy_build_note(name: str) -> str:
    """`; built with <param>=<value>, ...` for a toy model folder of a non-default build, else ``."""
    from healtrl.toy.cache import toy_build_overrides, toy_model_name

    if not os.path.isdir(name) or toy_model_name(name) is None:
        return ""
    overrides = toy_build_overrides(name)
    if not overrides:
        return ""
    return "; a non-default build: " + ", ".join(f"{key}={value}" for key, value in overrides.items())


def format_value(value: Any) -> str:
    """A hyper-parameter value as it appears in the card's tables (floats keep their exact `repr`).

    Args:
        value: A config field's value.

    Returns:
        The value as a Markdown code span (pipes escaped so they cannot break the table).
    """
    if isinstance(value, float):
        text = repr(value)
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(format_value(v).strip("`") for v in value) + "]"
    else:
        text = str(value)
    return "`" + text.replace("|", "\\|").replace("`", "'") + "`"


def _first_and_last(history: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> tuple[str, list] | None:
    """(key, [(step, value), ...]) of the first key in `keys` with finite logged values, else None."""
    for key in keys:
        points = [(entry.get("step"), float(entry[key])) for entry in history if is_finite_number(entry.get(key))]
        if points:
            return key, points
    return None


# Training metrics reported in the card: row label -> log keys (first present wins). TRL logs `entropy` (the mean
# token entropy of the loss forward) and `reward` (the weighted sum of the rewards); healtrl's rollout entropy is the
# fallback, as in `healtrl.views.curves.DEFAULT_PANELS`.
SUMMARY_METRICS: dict[str, tuple[str, ...]] = {
    "entropy": ("entropy", "rollout/entropy"),
    "reward": ("reward",),
}


def training_summary(
    log_history: Sequence[Mapping[str, Any]], extra_keys: Sequence[str] = ()
) -> list[tuple[str, tuple[Any, float], tuple[Any, float]]]:
    """First and final logged value of the entropy, the reward and `extra_keys` (training entries only).

    Args:
        log_history: `trainer.state.log_history`.
        extra_keys: Further log keys to report (e.g. a method's `heal/entropy_target`), when logged.

    Returns:
        `[(label, (first_step, first_value), (final_step, final_value)), ...]` for every metric that was logged.
    """
    rows = []
    wanted = list(SUMMARY_METRICS.items()) + [(key, (key,)) for key in extra_keys]
    for label, keys in wanted:
        found = _first_and_last(log_history, keys)
        if found is not None:
            key, points = found
            rows.append((label if key == keys[0] else f"{label} (`{key}`)", points[0], points[-1]))
    return rows


def _metric_order(metric: str) -> tuple:
    match = _EVAL_METRIC.match(metric)
    if match:
        return (0 if match.group(1) == "avg" else 1, int(match.group(2)), metric)
    return (2, 0, metric)


def eval_results_from_log_history(log_history: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The latest `eval/<task>/<metric>` values of a log history (logged by `healtrl.evaluation.callback.PeriodicEvalCallback`).

    Args:
        log_history: `trainer.state.log_history`.

    Returns:
        `{task: {"step": step, "metrics": {metric: value}}}` with the values of the last step that logged the task
        (task names may contain `/`, e.g. `rg/basic_arithmetic`: the metric is the last path segment). Empty when no
        `eval/` key was logged.
    """
    latest: dict[str, dict[str, Any]] = {}
    for entry in log_history:
        for key, value in entry.items():
            if not key.startswith("eval/") or not is_finite_number(value):
                continue
            task, _, metric = key[len("eval/") :].rpartition("/")
            if not task:
                continue
            record = latest.setdefault(task, {"step": None, "metrics": {}})
            step = entry.get("step")
            if record["step"] != step:  # a newer evaluation of the task replaces the older one
                record["step"], record["metrics"] = step, {}
            record["metrics"][metric] = float(value)
    return latest


def read_eval_results(path: str | os.PathLike) -> dict[str, Any] | None:
    """The contents of a `results.json` written by `healtrl eval`, or None when there is no such file.

    Args:
        path: The `results.json` file, or the folder that holds it.

    Returns:
        The parsed file (`{"model", "backend", "settings", "tasks": {task: {"split", "num_problems", "metrics"}}}`),
        or `None` when the file does not exist.

    Raises:
        ValueError: the file is not valid JSON or lacks the `tasks` / `metrics` fields `healtrl eval` writes.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, RESULTS_JSON)
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path} is not valid JSON ({exc}); the model card reads it as `healtrl eval` results. Rewrite it with "
            "`healtrl eval --output_dir <this folder>` or remove it."
        ) from exc
    tasks = data.get("tasks") if isinstance(data, dict) else None
    if not isinstance(tasks, dict) or not all(
        isinstance(t, dict) and isinstance(t.get("metrics"), dict) for t in tasks.values()
    ):
        raise ValueError(
            f"{path} has no `tasks` mapping of task -> {{'metrics': {{...}}}} as `healtrl eval` writes it; the model "
            "card cannot read its evaluation results. Rewrite it with `healtrl eval --output_dir <this folder>` or "
            "remove it."
        )
    return data


def _check_paper(paper: Mapping[str, Any] | None, argument: str) -> None:
    if paper is None:
        return
    if not isinstance(paper, Mapping) or not paper.get("title") or not paper.get("citation"):
        raise ValueError(
            f"`{argument}` must be a mapping with non-empty 'title' and 'citation' (BibTeX) entries, and optionally "
            f"'id' (arXiv id) and 'url'; got {paper!r}."
        )


def _paper_link(paper: Mapping[str, Any]) -> str:
    title = f"*{paper['title']}*"
    if paper.get("id"):
        return f"[{title}](https://arxiv.org/abs/{paper['id']}) (arXiv:{paper['id']})"
    if paper.get("url"):
        return f"[{title}]({paper['url']})"
    return title


def _model_link(name: str) -> str:
    shown, kind = published_model_name(name)
    if kind == "hub":
        return f"[{shown}](https://huggingface.co/{shown})"
    return f"`{shown}`" + (" (local)" if kind == "local" else "")


def _base_model_line(name: str | None) -> str:
    """The card's `- Base model:` entry: the name and why it is or is not in the front matter."""
    if not name:
        return (
            "not recorded (set `trainer.model_card_base_model` to the Hub id or healtrl name the model was loaded with)"
        )
    shown, kind = published_model_name(name)
    if kind == "hub":
        return _model_link(name)
    if kind == "healtrl":
        origin = "a toy model healtrl builds" if shown.startswith("healtrl-toy/") else "a model healtrl converts"
        return f"`{shown}` ({origin} on first use, not a Hub id{_toy_build_note(name)})"
    if kind == "local":
        return (
            f"`{shown}` (local: a folder on the training machine, so the card's metadata names no `base_model`; set "
            "`trainer.model_card_base_model` to the Hub id it came from)"
        )
    return f"`{shown}` (not a `namespace/name` Hub id, so the card's metadata names no `base_model`)"


def _dataset_link(name: str) -> str:
    if is_hub_id(name):
        return f"[{name}](https://huggingface.co/datasets/{name})"
    if _is_local_path(name) and not name.startswith(LOCAL_NAME_PREFIXES):
        return f"`{os.path.basename(os.path.normpath(os.path.expanduser(name))) or name}` (local)"
    return f"`{name}`"


def _table(rows: Sequence[Sequence[str]], header: Sequence[str], align: str | None = None) -> list[str]:
    align = align or "|" + "|".join(["---"] * len(header)) + "|"
    return ["| " + " | ".join(header) + " |", align] + ["| " + " | ".join(row) + " |" for row in rows]


def _percent(value: Any) -> str:
    return f"{100 * value:.1f}" if is_finite_number(value) else "—"


def _eval_table(tasks: Mapping[str, Mapping[str, Any]], columns: Sequence[tuple[str, str]]) -> list[str]:
    """One row per task: `columns` ((header, key) of each task's record), avg@k / pass@j (in %), mean length."""
    metrics = sorted(
        {m for t in tasks.values() for m in t["metrics"] if _EVAL_METRIC.match(m)},
        key=_metric_order,
    )
    has_length = any("mean_response_length" in t["metrics"] for t in tasks.values())
    header = ["task", *[head for head, _ in columns], *[f"{m} (%)" for m in metrics]] + (
        ["mean length"] if has_length else []
    )
    rows = []
    for name, task in tasks.items():
        values = task["metrics"]
        row = [f"`{name}`", *[str(task.get(key, "—")) for _, key in columns]]
        row += [_percent(values.get(m)) for m in metrics]
        if has_length:
            length = values.get("mean_response_length")
            row.append(f"{length:.1f}" if is_finite_number(length) else "—")
        rows.append(row)
    return _table(rows, header)


# ----------------------------------------------------------------------------------------------------------------
# The card
# ----------------------------------------------------------------------------------------------------------------
def build_model_card(
    *,
    model_name: str,
    method: str,
    description: str,
    load_path: str,
    paper: Mapping[str, Any] | None = None,
    base_paper: Mapping[str, Any] | None = GRPO_PAPER,
    base_model: str | None = None,
    datasets: Sequence[str] = (),
    method_hyperparameters: Mapping[str, Any] | None = None,
    training_hyperparameters: Mapping[str, Any] | None = None,
    reward_functions: Mapping[str, float] | None = None,
    log_history: Sequence[Mapping[str, Any]] = (),
    summary_keys: Sequence[str] = (),
    curves_image: str | None = None,
    entropy_image: str | None = None,
    eval_results: Mapping[str, Any] | None = None,
    is_peft: bool = False,
    tags: Sequence[str] = (),
    trainer_name: str | None = None,
    versions: Mapping[str, str] | None = None,
) -> str:
    """Build the Markdown model card (with YAML front matter) of a checkpoint trained with healtrl.

    Args:
        model_name: Title of the card (e.g. the output folder's name or the Hub repository's name).
        method: The method's name, e.g. `"HEAL"`.
        description: Two lines explaining the method.
        load_path: What `from_pretrained` loads the checkpoint from: its Hub id or local folder.
        paper: The method's paper: `{"title", "citation"` (BibTeX)`, "id"` (arXiv id or None)`, "url"` (optional)`}`.
        base_paper: The algorithm the method builds on, cited as well when it differs from `paper` (GRPO by default;
            `None` for none).
        base_model: The model training started from: a Hub id, a healtrl name, or a local path (a model's
            `config.name_or_path`). Only a Hub id goes into the front matter; the text shows the name of
            `published_model_name`, so a toy model's cache folder appears as its `healtrl-toy/...` name and no other
            local path appears whole (only its last component).
        datasets: Training datasets (Hub ids, task names, local paths). Only Hub ids go into the front matter; a
            local path appears as its last component. Empty: "not recorded", with how to record them.
        method_hyperparameters: The method's key config fields -> values.
        training_hyperparameters: Shared GRPO config fields -> values.
        reward_functions: Reward function name -> weight.
        log_history: `trainer.state.log_history`: the first/final entropy and reward, and `eval/` results.
        summary_keys: Further log keys whose first and final values are reported (e.g. `heal/entropy_target`).
        curves_image: File name of the curves image next to the card (e.g. `"curves.png"`); `None`: no image.
        entropy_image: File name of the token-entropy summary next to the card (`"inspect_summary.png"`, from the
            training-time entropy views of `inspect_every_steps`: histogram, entropy by position, high-entropy
            tokens, first and last view); `None`: no image.
        eval_results: The contents of a `results.json` written by `healtrl eval` (see `read_eval_results`).
        is_peft: Whether the checkpoint is a PEFT adapter (the loading snippet then uses PEFT, `library_name: peft`).
        tags: Hub tags (healtrl's `trl`, `grpo`, `healtrl` and the method tag are the trainer's).
        trainer_name: Class name of the trainer, e.g. `"HEALTrainer"`.
        versions: Library -> version, listed under "Framework versions".

    Returns:
        The card: YAML front matter between `---` lines, then Markdown.
    """
    for name, value in (("model_name", model_name), ("method", method), ("load_path", load_path)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"`{name}` must be a non-empty string, got {value!r}.")
    if not isinstance(description, str):
        raise ValueError(f"`description` must be a string (two lines explaining {method}), got {description!r}.")
    if isinstance(datasets, str):
        raise ValueError(f"`datasets` must be a list of names, got the string {datasets!r}; pass [{datasets!r}].")
    _check_paper(paper, "paper")
    _check_paper(base_paper, "base_paper")

    datasets = list(dict.fromkeys(d for d in datasets if d))
    tags = list(dict.fromkeys(t for t in tags if t))
    front: dict[str, Any] = {}
    if base_model and published_model_name(base_model)[1] == "hub":
        front["base_model"] = base_model
    hub_datasets = [d for d in datasets if is_hub_id(d)]
    if hub_datasets:
        front["datasets"] = hub_datasets
    front["library_name"] = "peft" if is_peft else "transformers"
    front["model_name"] = model_name
    front["pipeline_tag"] = "text-generation"
    front["tags"] = tags
    lines = ["---", yaml.safe_dump(front, sort_keys=False, allow_unicode=True).strip(), "---", ""]

    # Title and method
    trained_with = f"`{trainer_name}` of healtrl" if trainer_name else "healtrl"
    subject = "This PEFT adapter" if is_peft else "This model"
    relation = "an adapter for" if is_peft else "a fine-tuned version of"
    base_text = f" is {relation} {_model_link(base_model)}; it" if base_model else ""
    lines += [
        f"# Model Card for {model_name}",
        "",
        f"{subject}{base_text} was trained with **{method}** by the {trained_with} (reinforcement learning from "
        "verifiable rewards on top of TRL's `GRPOTrainer`).",
        "",
        f"## Method: {method}",
        "",
        description.strip(),
        "",
    ]
    if paper is not None:
        lines += [f"Paper: {_paper_link(paper)}.", ""]
    if base_paper is not None and (paper is None or base_paper["title"] != paper["title"]):
        lines += [f"Built on GRPO: {_paper_link(base_paper)}.", ""]

    # Training
    lines += ["## Training", ""]
    lines.append(f"- Base model: {_base_model_line(base_model)}")
    if datasets:
        lines.append("- Datasets: " + ", ".join(_dataset_link(d) for d in datasets))
    else:
        lines.append(
            "- Datasets: not recorded (set `trainer.model_card_datasets` to the dataset or task names, or give the "
            "trainer a dataset whose `info.dataset_name` is set)"
        )
    if reward_functions:
        rewards = ", ".join(
            f"`{name}` (weight {format_value(float(w)).strip('`')})" for name, w in reward_functions.items()
        )
        lines.append(f"- Rewards: {rewards}")
    if trainer_name:
        lines.append(f"- Trainer: `{trainer_name}`")
    lines.append("")
    if method_hyperparameters:
        lines += [f"### {method} hyper-parameters", ""]
        lines += _table([(f"`{k}`", format_value(v)) for k, v in method_hyperparameters.items()], ["field", "value"])
        lines.append("")
    if training_hyperparameters:
        lines += ["### GRPO hyper-parameters", ""]
        lines += _table([(f"`{k}`", format_value(v)) for k, v in training_hyperparameters.items()], ["field", "value"])
        lines.append("")

    summary = training_summary(log_history, summary_keys)
    if summary or curves_image or entropy_image:
        lines += ["### Entropy and reward", ""]
    if summary:
        rows = [
            (label, f"{first[1]:.4g} (step {first[0]})", f"{last[1]:.4g} (step {last[0]})")
            for label, first, last in summary
        ]
        lines += _table(rows, ["metric", "first logged", "final"])
        lines.append("")
    if curves_image:
        lines += [f"![curves]({curves_image})", ""]
    if entropy_image:
        lines += [
            "Token entropies of the rollouts shown by the training-time entropy views (first and last; "
            "`output_dir/inspect/`): histogram, mean entropy by position, most frequent high-entropy tokens.",
            "",
            f"![token entropy]({entropy_image})",
            "",
        ]

    # Evaluation (only when there are results)
    logged = eval_results_from_log_history(log_history)
    if logged or eval_results:
        lines += ["## Evaluation", ""]
    if logged:
        steps = sorted({str(t["step"]) for t in logged.values()})
        lines += [
            f"During training (`eval/<task>/<metric>` of the log history, step {', '.join(steps)}); scores in %:",
            "",
        ]
        lines += _eval_table(logged, [("step", "step")])
        lines.append("")
    if eval_results:
        settings = eval_results.get("settings") or {}
        described = ", ".join(
            f"{k}={settings[k]}" for k in ("k", "temperature", "top_p", "max_new_tokens") if k in settings
        )
        lines += [
            f"`healtrl eval` ({RESULTS_JSON}" + (f"; {described}" if described else "") + "); scores in %:",
            "",
        ]
        lines += _eval_table(eval_results["tasks"], [("split", "split"), ("problems", "num_problems")])
        lines.append("")

    # How to load
    lines += ["## How to load", ""]
    if is_peft:
        lines += [
            "```python",
            "from peft import AutoPeftModelForCausalLM",
            "from transformers import AutoTokenizer",
            "",
            f'model = AutoPeftModelForCausalLM.from_pretrained("{load_path}")  # the base model and this adapter',
            f'tokenizer = AutoTokenizer.from_pretrained("{load_path}")',
            "model = model.merge_and_unload()  # optional: a plain transformers model",
            "```",
        ]
    else:
        lines += [
            "```python",
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            "",
            f'model = AutoModelForCausalLM.from_pretrained("{load_path}")',
            f'tokenizer = AutoTokenizer.from_pretrained("{load_path}")',
            "```",
        ]
    lines += [
        "",
        "Prompts follow the tokenizer's chat template, as in training:",
        "",
        "```python",
        'messages = [{"role": "user", "content": "..."}]',
        'inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")',
        "print(tokenizer.decode(model.generate(inputs, max_new_tokens=256)[0], skip_special_tokens=True))",
        "```",
        "",
    ]
    if versions:
        lines += ["## Framework versions", ""]
        lines += [f"- {name}: {version}" for name, version in versions.items()]
        lines.append("")

    # Citation
    lines += ["## Citation", ""]
    entries = []
    if paper is not None:
        entries.append((f"{method}:", paper["citation"]))
    if base_paper is not None and (paper is None or base_paper["title"] != paper["title"]):
        entries.append(("GRPO:", base_paper["citation"]))
    entries += [("healtrl:", HEALTRL_CITATION), ("TRL:", TRL_CITATION)]
    for label, bibtex in entries:
        lines += [label, "", "```bibtex", bibtex.strip(), "```", ""]
    return "\n".join(lines).rstrip() + "\n"


# ----------------------------------------------------------------------------------------------------------------
# Best checkpoint (written by `healtrl eval --checkpoints`, healtrl.evaluation.best_checkpoint.evaluate_checkpoints)
# ----------------------------------------------------------------------------------------------------------------
BEST_CHECKPOINT_SECTION = "Best checkpoint"


def best_checkpoint_section(
    *,
    checkpoint: str,
    step: int | None,
    score: float,
    values: Mapping[str, float],
    metric: str,
    rule: str,
    candidates: int,
    table: str,
    here: bool,
) -> str:
    """The body of the card's "Best checkpoint" section.

    Args:
        checkpoint: Name of the chosen folder (`checkpoint-N`, or `final`).
        step: Its optimizer step (None when unknown).
        score: Its score under the rule, in [0, 1].
        values: The rule's metric per validation task, in [0, 1].
        metric: The rule's metric (e.g. `pass@1`).
        rule: The rule in words (`BestCheckpointRule.describe()`).
        candidates: How many checkpoints were compared.
        table: Path of the table of every candidate, relative to the card's folder.
        here: Whether the card belongs to the chosen folder (else it is the run folder's card).
    """
    at_step = f" (step {step})" if step is not None else ""
    subject = "This checkpoint" if here else f"`{checkpoint}`{at_step}"
    lines = [
        f"{subject}{at_step if here else ''} is the one the recipe's rule selects among {candidates} evaluated "
        f"checkpoint{'s' if candidates != 1 else ''} of the run"
        + ("" if here else "; this folder holds a different model")
        + ".",
        "",
        f"- Rule: {rule}.",
        f"- Score: {100 * score:.2f} ({metric}, %); per task: "
        + ", ".join(f"`{task}` {100 * value:.2f}" for task, value in values.items()),
        f"- Every candidate: [{table}]({table}) (written by `healtrl eval --checkpoints`).",
    ]
    return "\n".join(lines)


def set_card_section(card: str, title: str, body: str | None, before: str = "How to load") -> str:
    """`card` with its `## {title}` section replaced by `body` (added before `## {before}`, else at the end, when the
    card has none; removed when `body` is None)."""
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    block = "" if body is None else f"## {title}\n\n{body.strip()}\n\n"
    if pattern.search(card):
        new = pattern.sub(lambda _: block, card, count=1)
    elif body is None:
        return card
    else:
        anchor = re.search(rf"^## {re.escape(before)}\n", card, re.M)
        if anchor:
            new = card[: anchor.start()] + block + card[anchor.start() :]
        else:
            new = card.rstrip() + "\n\n" + block
    return new.rstrip() + "\n"
