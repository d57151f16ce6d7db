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
# # The reasoning world: GRPO and AER on Countdown
#
# The toy world of the other notebooks answers single-digit sums in a character or two: there is one path to each
# answer and little to explore. The *reasoning world* (`healtrl.toy.world`) keeps what makes entropy matter on real
# models, at a size that runs on a CPU: written-out steps, several correct paths, and a minority of high-entropy
# forks among many confident tokens. Its model is a 0.8M-parameter Qwen2 (`healtrl-toy/qwen2-countdown+sumchain`)
# that builds in about 8 minutes on a CPU and trains in a second or two per step.
#
# * **Countdown** (target domain): reach a target from three or four numbers in 1..12 with `+` and `-`, each step
#   written out, every number used once: `2,5,11,12>20` is solved by `11+2=13,12-5=7,13+7=20` and by
#   `12+11=23,23-5=18,18+2=20`. Every problem has at least two correct paths, so a policy that keeps trying other
#   first steps can find another way; the verifier (`healtrl.toy.countdown.verify_countdown`) accepts any of them.
# * **Sum chains** (general domain, one path, no search): `3+5+2` -> `3+5=8,8+2=10`.
#
# The model is warmed up on *imperfect* demonstrations (a correct path half of the time, else a wrong one) until
# about a quarter of its sampled Countdown answers are right. Its card (`benchmarks/results/reasoning_world.md` in
# the repository) measures pass@1 0.22 and pass@16 0.89 on training problems, 23% of groups of 8 completions with
# equal rewards, 17 completion tokens on average, and a token-entropy distribution with many confident tokens and a
# minority of forks (10.7% of tokens at 0.7 nats or more): the tokens where the paths part.
#
# This notebook trains TRL's GRPO and AER (Zhang et al., *Revisiting Entropy Regularization: Adaptive Coefficient
# Unlocks Its Potential for LLM Reinforcement Learning*) on Countdown from the same start and shows what happens to
# the entropy. AER adds $\mathbb{E}_q[\lambda_t(q) H(\pi_\theta(\cdot \mid q))]$ to the GRPO objective (AER eq. 7):
#
# * **difficulty-aware coefficients** (eq. 8-9): with $g(q)$ the accuracy of prompt $q$'s group,
#   $\lambda_t(q) = \alpha_t \max(0, \rho - g(q)) / (\rho + \epsilon)$: only prompts solved less often than
#   $\rho = 0.2$ get a bonus, the harder the larger;
# * **target entropy** (eq. 10): $H^* = \tau H_0$, $H_0$ the entropy at the first step ($\tau = 0.4$);
# * **global scale** (eq. 11): $\alpha_{t+1} = \max(0, \alpha_t + \eta\, \mathrm{sign}(H^* - H_t))$,
#   $\eta = 0.005$, growing while the entropy is below target and shrinking above it.
#
# healtrl starts from $\alpha_0 = 0$ (`alpha_init`), so AER is GRPO until the entropy first falls below $H^*$.

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
# `SMALL` picks the path. Both stay in the reasoning world and need no network: there is no Hub model here.
#
# * **Full** (the default): the world by name, `healtrl-toy/qwen2-countdown+sumchain`, built with its card's
#   settings (`healtrl.toy.world.WORLD_BUILD`). **The first build takes about 8 minutes on a 2-core CPU** (on
#   Colab too: the warm-up runs on the CPU); the model is then cached in `~/.cache/healtrl` and loads in a second.
#   Each method trains 200 steps of 16 prompts x 8 completions on 256 training problems, about five minutes per
#   run on a CPU.
# * **Small** (`HEALTRL_NOTEBOOK_SMALL=1`, what CI runs): the world's recipe at a tiny size (a 2-layer, 48-wide
#   Qwen2 warmed up for about a minute), built in this notebook's folder, then a few dozen steps per
#   method. Every cell runs; the tiny model is right on a few percent of its Countdown samples, so the numbers are a
#   smoke test, not a result.
#
# The outputs stored in this notebook come from the full path on a 2-core CPU (`python notebooks/_build.py --full
# 06_reasoning_world` in the repository; the date and versions of that run are in the notebook's metadata); CI runs
# the small path.

# %% tags=["small-switch"]
import os

AER_FIELDS = {"rho": 0.2, "eta": 0.005, "alpha_init": 0.0}  # AER Table 3; tau (eq. 10) follows below
# Small path: the world's recipe at a tiny size, built here in about a minute, and a few dozen training steps on
# the CPU, no network. CI runs every notebook this way (HEALTRL_NOTEBOOK_SMALL=1).
# Full path (the default): the reasoning world itself (built once, about 8 minutes on a CPU, then cached) and
# 200 steps per run. Everything runs on a CPU; on a GPU the runs train in bf16 (as in every notebook).
SMALL = os.environ.get("HEALTRL_NOTEBOOK_SMALL", "0") == "1"
PUSH_TO_HUB = False  # True pushes the trained model and its card to the Hub (log in first: `hf auth login`)

# %%
import torch
from IPython.display import Image, Markdown, display

from healtrl import notebook as nb
from healtrl.data import load_train_dataset
from healtrl.evaluation import evaluate
from healtrl.toy import load_toy_model
from healtrl.toy.world import MAX_COMPLETION_LENGTH, WORLD_BUILD, WORLD_MODEL, world_statistics
from healtrl.views import plot_curves

OUTPUT_DIR = "outputs/06_reasoning_world"
# The world's build (`WORLD_BUILD`: 128 wide, 3 layers, warmed up until 25% of sampled Countdown answers are right)
# and, on the small path, the same recipe at a size that builds in about a minute.
# The tiny build stops at max_steps, well below the world's target accuracy (a warning says so); its accuracy probe
# is 64 problems instead of 512 (cheaper; the training is the same).
TINY_WORLD = dict(WORLD_BUILD, hidden_size=48, num_layers=2, num_heads=2, max_steps=1200, batch_size=32,
                  demo_rows=2048, eval_every=1200, lr_warmup_steps=20, threads=1, probe_size=64)  # fmt: skip
torch.set_num_threads(1)  # a model this small trains fastest on one thread
if SMALL:  # cached in this notebook's folder, not in ~/.cache/healtrl
    world, tokenizer = load_toy_model(WORLD_MODEL, cache_dir=os.path.join(OUTPUT_DIR, "world"), **TINY_WORLD)
else:  # built once with WORLD_BUILD (about 8 minutes on a CPU), then loaded from ~/.cache/healtrl
    world, tokenizer = load_toy_model(WORLD_MODEL)
print(f"{WORLD_MODEL}{' (tiny build)' if SMALL else ''}: {world.num_parameters() / 1e6:.2f}M parameters")

dtype = torch.float32
if torch.cuda.is_available():  # bf16 on a GPU, as in every notebook
    dtype = torch.bfloat16
SIZES = {  # the run size of each path; a step is `batch_size` completions, `num_generations` per prompt
    True: dict(steps=30, batch_size=64, logging_steps=2, eval_k=4),  # 8 prompts x 8 completions
    False: dict(steps=200, batch_size=128, logging_steps=5, eval_k=16),  # 16 prompts x 8, as in the repository's study
}
# What `nb.train_runs`, `nb.show_entropy_view` and `nb.report` read (healtrl/notebook.py): the model (by name, or the
# tiny build's folder), Countdown's training problems (`healtrl-toy/countdown`, as the world's card and the study use
# them), the toy reward (the Countdown verifier for rows whose `task` is "countdown", exact match for sum chains), and
# the held-out tasks of the registry.
S = nb.Setup(
    name="toy",
    small=SMALL,
    output_dir=OUTPUT_DIR,
    model=os.path.relpath(world.config.name_or_path) if SMALL else WORLD_MODEL,
    train="healtrl-toy/countdown",
    train_rows=256,  # the study's "full" regime; the 20 held-out problems are never among them
    eval_tasks=["toy-countdown", "toy-sumchain"],
    reward="toy",
    learning_rate=5e-4,
    num_generations=8,
    max_completion_length=MAX_COMPLETION_LENGTH,  # 32 tokens: the longest solution is 24 characters
    eval_problems=None,  # all 20 held-out problems of each task
    dtype=dtype,
    **SIZES[SMALL],
)
print(f"{S.model} on {S.train}, {S.steps} steps per run")

# %% [markdown]
# ## The world before training
#
# `world_statistics` samples 16 completions per problem at temperature 1 and measures what the world's card
# reports: pass@1 and pass@16 (unbiased), the share of groups of 8 completions whose rewards are all equal (a GRPO
# group with equal rewards has zero advantages and gives no gradient), the completion length in tokens, and the
# token entropies (confident: below 0.1 nats; forks: 0.7 nats or more).

# %%
STATS_PROBLEMS = 8 if SMALL else 128  # the card: 128 training problems, the 20 held out, 64 sum chains
probes = {
    "Countdown, training problems": load_train_dataset(S.train, num_samples=STATS_PROBLEMS, seed=0),
    "Countdown, held-out": load_train_dataset(S.train, split="test"),
    "sum chains (general)": load_train_dataset("healtrl-toy/sumchain", num_samples=STATS_PROBLEMS // 2, seed=0),
}
stats = {name: world_statistics(world, tokenizer, rows, k=16, group=8) for name, rows in probes.items()}
columns = ["problems", "pass@1", "pass@16", "equal_reward_groups", "mean_length", "confident", "forks", "mean_entropy"]
table = [f"| probe | {' | '.join(columns)} |", "|---|" + "---:|" * len(columns)]
table += [f"| {name} | " + " | ".join(f"{s[c]:.3g}" for c in columns) + " |" for name, s in stats.items()]
display(Markdown("\n".join(table)))
bins = stats["Countdown, training problems"]["entropy_bins"]
shares = "\n".join(f"| {interval} | {share:.1%} |" for interval, share in bins.items())
display(Markdown("| token entropy (nats), Countdown training problems | share |\n|---|---:|\n" + shares))

# %% [markdown]
# ## Data and reward
#
# 256 of Countdown's training problems. Its 20 held-out problems (`healtrl.toy.tasks.held_out_indices("countdown")`:
# the test split of `healtrl-toy/countdown` and of the task registry's `toy-countdown`) are never trained on, nor used
# in the world's warm-up. The reward verifies a completion's steps (`verify_countdown`) rather than comparing it with
# the `answer` column, which holds only one of the correct paths: every path below earns 1.

# %%
from healtrl.toy.countdown import parse_countdown, solutions

train_dataset, reward_func = nb.load_data(S)
held_out = {row["prompt"][0]["content"] for row in probes["Countdown, held-out"]}
overlap = held_out & {row["prompt"][0]["content"] for row in train_dataset}
print(f"{len(held_out)} held-out Countdown problems, {len(overlap)} of them among the training prompts")
row = train_dataset[0]
paths = solutions(*parse_countdown(row["prompt"][0]["content"]))
rewards = reward_func(prompts=[row["prompt"]] * len(paths), completions=paths, answer=[row["answer"]] * len(paths),
                      task=[row["task"]] * len(paths))  # fmt: skip
print(f"{row['prompt'][0]['content']}: {len(paths)} correct paths {paths}, rewards {rewards}")

# %% [markdown]
# ## Training
#
# TRL's GRPO (`GRPOBaselineTrainer` with its default `entropy_method="none"`) and AER, each from a fresh copy of the
# same model, on the same data with the same seed. The small path's runs are too short for the entropy to fall to
# $0.4 H_0$, so they use $\tau = 0.9$ to let the controller act.

# %%
from healtrl import AERConfig, AERTrainer

RUNS = {"AER": (AERTrainer, AERConfig, {**AER_FIELDS, "tau": 0.9 if SMALL else 0.4}, "aer")}  # label -> run
trainers = nb.train_runs(S, RUNS, train_dataset, reward_func)
trainer = trainers["AER"]

# %% [markdown]
# ## Curves

# %% tags=["plot"]
panels = {
    "groups with equal rewards (no gradient)": "frac_reward_zero_std",
    "AER alpha_t (eq. 11)": "aer/alpha",
}
curves = plot_curves(nb.histories(trainers), S.path("curves.png"), panels={**nb.CURVES, **panels}, title=S.title())
display(Image(curves))

# %% [markdown]
# In the full world GRPO's entropy falls as its reward rises. In the repository's study of this world
# (`benchmarks/results/reasoning_study/toy_study.md`: 256 training problems, 85 steps, the learning rate decaying
# to 0 where this notebook keeps it constant, five seeds) the mean token entropy of GRPO's rollouts falls from 0.19
# nats over the first 20 steps to 0.11 over the last 20, the training reward climbs from 0.34 to 0.61, and the share
# of groups with equal rewards is 0.31-0.50 at step 85. AER's $\alpha_t$ stays at 0 until the entropy is below
# $H^* = \tau H_0$, then climbs by $\eta$ per step while it stays there, adding an entropy bonus on the prompts whose
# group accuracy is below $\rho$. The claims table (`benchmarks/results/reasoning_study/claims.md`) runs AER against
# GRPO for 175 steps, long enough for the controller to act: GRPO's entropy falls below $0.4 H_0$ at steps 49-58,
# AER's $\alpha_t$ leaves 0 at steps 34-50 and reaches 0.53-0.58, yet AER ends within 0.01 nats of GRPO (both near
# 0.04 nats against targets near 0.10): late in training only 8-10% of the prompts are below $\rho$, and only those get
# the bonus. AER's two claims (entropy near its target, higher pass@k than GRPO) are not held in this world. On the
# small path the tiny model is right on a few percent of its samples, most
# groups have equal (zero) rewards, and 30 steps show only that every part runs. $H_0$, $H^*$ and the last
# $\alpha_t$ of this run:

# %%
history = trainer.state.log_history
AER_END = {"H0": nb.final(history, "aer/initial_entropy", 1), "H_star": nb.final(history, "aer/target_entropy", 1)}
AER_END["alpha"] = nb.final(history, "aer/alpha", 1)
print(f"H0 = {AER_END['H0']:.3f}, H* = tau * H0 = {AER_END['H_star']:.3f}, final alpha = {AER_END['alpha']:.4f}")

# %% [markdown]
# ## Token entropies of the trained policies
#
# `healtrl.views.inspection.inspect_models` samples k completions of a few held-out Countdown problems from the starting
# model and from both trained policies with the same seed, and colours each token by the exact entropy of the
# sampling distribution there (hover a token for its entropy and probability). In this world one can see where the
# forks are: in completions of the full world, the operator and the second number of a step (which numbers to
# combine, and how) carry most of the entropy, the digits of a result some (the warmed-up model is not sure of its
# arithmetic), and `=`, `,` and the end of the answer almost none. The PNG sums it up: histogram of token entropies,
# mean entropy by position, the most frequent high-entropy tokens. `nb.show_entropy_view` displays both and writes
# them to the notebook's output folder (`entropy_view/inspect.html`).

# %% tags=["entropy-view"]
nb.show_entropy_view(S, trainers)

# %% [markdown]
# ## Evaluation on held-out problems
#
# avg@k and pass@k on the 20 held-out problems of the registry's `toy-countdown` and `toy-sumchain` tasks: Countdown,
# the target domain, and sum chains, the general domain that training on Countdown should not damage.


# %% tags=["eval"]
def evaluate_model(run):  # avg@k and pass@k: k samples per held-out problem (`healtrl.evaluation.evaluate`)
    return evaluate(run.model, S.eval_tasks, tokenizer=run.processing_class, **S.eval_options())


metrics = nb.report(S, trainers, {label: evaluate_model(run) for label, run in trainers.items()})
metrics.update({f"AER/{key}": value for key, value in AER_END.items()})
metrics.update({f"world/{key}": stats["Countdown, training problems"][key] for key in ("pass@1", "pass@16")})

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
# [00_overview](00_overview.ipynb) compares the methods side by side on the single-digit toy world;
# [02_aer](02_aer.ipynb) takes AER alone, on a real model when the Hub is reachable. In your own runs the world is
# a name like any model: `healtrl-toy/qwen2-countdown+sumchain` (`healtrl.toy.load_toy_model`, or wherever healtrl
# takes a model name), with the data `healtrl-toy/countdown` and `healtrl-toy/sumchain`. The repository's
# `benchmarks/toy_study.py --task countdown` runs the methods in this world over seeds and two data regimes, and
# `benchmarks/claims.py` judges each paper's claim against its control (the table in the README's "What holds").
