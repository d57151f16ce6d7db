"""`train.py --dry_run`: every shipped config passes it offline, and broken configs fail naming the field.

The dry run builds no model and downloads nothing: these tests block every network connection while it runs.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from healtrl.cli import dry_run, main, train_main
from tests.test_config import base_config

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))


def _kind(path: Path) -> str:
    """'train' (a `train.py` config: has `trainer:`) or 'select' (a `healtrl select` config: model + dataset + reward)."""
    data = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}  # libyaml: fast
    if "trainer" in data:
        return "train"
    if {"model", "dataset", "reward"} <= set(data):
        return "select"
    return "unknown"


KINDS = {p: _kind(p) for p in CONFIGS}
TRAIN_CONFIGS = [p for p in CONFIGS if KINDS[p] == "train"]
SELECT_CONFIGS = [p for p in CONFIGS if KINDS[p] == "select"]

# Each paper's budget as the dry run reads it (keyed by the paper configs' prefix, the registered method; a paper
# config whose paper is missing here fails), at the processes the configs are written for: (generation batches,
# prompts per generation batch). Every run of a paper's comparison, its method and its baselines, sees the same
# rollout batches, so they compare at equal compute (e.g. OPEFO's off-policy baselines take 8 optimizer steps per
# batch: 4000 steps are its 500 batches).
PAPER_BUDGETS = {"aer": (9420, 128), "heal": (200, 128), "opefo": (500, 32), "posadv": (345, 256)}
# The shipped configs that are GRPO at their own settings (one update per rollout batch, so a clip or penalty that
# acts on the ratio does nothing): the dry run warns for these and no other.
EQUIVALENT_AS_WRITTEN = {
    "baseline_clip_higher_toy.yaml",
    "heal_baseline_clip_higher_qwen3_1.7b_medicine.yaml",
    "heal_baseline_kl_cov_qwen3_1.7b_medicine.yaml",
}


@pytest.fixture
def keep_environ():
    """Configs may set `env:`; the dry run applies it like a real run. Restore the process environment after."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def report_entries(out: str) -> list[tuple[str, str]]:
    """(label, text) of each entry of a dry-run report (wrapped continuation lines joined)."""
    entries = []
    for line in out.splitlines():
        match = re.match(r"^([a-zA-Z][\w ()]*):\s+(.*)$", line)
        if match:
            entries.append((match.group(1), match.group(2)))
        elif line.startswith(" ") and entries and not line.lstrip().startswith("- "):
            entries[-1] = (entries[-1][0], entries[-1][1] + " " + line.strip())
    return entries


def run(args, capsys) -> tuple[int, str, str]:
    code = train_main([*args, "--dry_run"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_every_config_is_covered():
    """Every configs/*.yaml is a training config (dry-run below) or a `healtrl select` config (parsed below)."""
    names = {p.name for p in TRAIN_CONFIGS}
    assert len(TRAIN_CONFIGS) >= 20 and "toy_grpo.yaml" in names
    unknown = [p.name for p in CONFIGS if _kind(p) == "unknown"]
    assert not unknown, f"configs that are neither train.py nor healtrl select configs: {unknown}"
    stray = sorted(p.name for p in (REPO / "configs").glob("*.yml"))
    assert not stray, f"configs must end in .yaml to be dry-run tested: {stray}"


@pytest.mark.parametrize("path", SELECT_CONFIGS, ids=[p.name for p in SELECT_CONFIGS])
def test_shipped_select_config_parses(path, no_network, capsys):
    """`healtrl select` configs are not training configs: their options are checked by the select command's own
    parser (`--help` stops after the YAML file has been validated)."""
    from healtrl.cli.select import select_main

    assert select_main(["--config", str(path), "--help"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    # `healtrl select --dry_run` validates it like train.py --dry_run validates a training config
    assert select_main(["--config", str(path), "--dry_run"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "Dry run OK: the selection config is valid." in out
    for label in ("model:", "reward:", "pool:", "rollouts:", "selection:"):
        assert label in out, f"{label} missing from the select dry run of {path.name}"
    # and the training dry run says what it is instead of pretending to check it
    assert train_main(["--config", str(path), "--dry_run"]) == 2
    assert "No trainer is set" in capsys.readouterr().err


@pytest.mark.parametrize("path", TRAIN_CONFIGS, ids=[p.name for p in TRAIN_CONFIGS])
def test_shipped_config_passes_the_dry_run(path, no_network, keep_environ, capsys):
    config = yaml.safe_load(path.read_text())
    trainer = config["trainer"]
    # Paper recipes are written for several GPUs: check their batch geometry for 8 processes (32 for AER's node).
    # CPU configs (the toy world) run as one process: with 8, a few-shot set would not fill a generation batch.
    processes = "32" if path.name.startswith("aer_") and "toy" not in path.name else "8"
    if config.get("use_cpu"):
        processes = "1"
    code, out, err = run(["--config", str(path), "--num_processes", processes], capsys)
    assert code == 0, f"{path.name} failed the dry run:\n{err}\n{out}"
    assert "Dry run OK" in out and re.search(rf"^trainer:\s+{trainer}: ", out, re.M)
    for label in ("model:", "rewards:", "data (train):", "batch:", "length:", "hygiene:", "method:", "output:"):
        assert label in out, f"{label} missing from the report of {path.name}"
    # Each dataset is either checked on real rows or explicitly reported as not checked.
    entries = report_entries(out)
    data = [text for label, text in entries if label.startswith("data (")]
    assert data, out
    for text in data:
        assert "columns are present" in text or "dataset mapping not checked: Hub-only" in text, text
    warned = any(label == "equivalent" for label, _ in entries)
    assert warned == (path.name in EQUIVALENT_AS_WRITTEN), f"{path.name}: dry-run equivalence warning {warned}"
    paper = path.stem.split("_")[0]
    if "paper_results" in config:  # a paper config (tests/test_paper_configs.py): its paper's budget, none skipped
        assert paper in PAPER_BUDGETS, f"tests/test_dry_run.py PAPER_BUDGETS has no budget for {paper} ({path.name})"
        (length,) = [text for label, text in entries if label == "length"]
        budget = re.search(r"= (\d+) generation batches of (\d+) prompts", length)
        assert budget and (int(budget[1]), int(budget[2])) == PAPER_BUDGETS[paper], f"{path.name}: {length}"


def test_on_policy_clip_higher_and_kl_cov_are_named_as_grpo(no_network, capsys):
    """One update per rollout batch: Clip-Higher's epsilon_high and KL-Cov's penalty do nothing (warned, not
    refused); with two updates per rollout batch the warning goes away."""
    clip = [
        "--config",
        str(REPO / "configs/heal_baseline_clip_higher_qwen3_1.7b_medicine.yaml"),
        "--num_processes",
        "8",
    ]
    code, out, _ = run(clip, capsys)
    warning = " ".join(text for label, text in report_entries(out) if label == "equivalent")
    assert code == 0 and "this run is GRPO: Clip-Higher's epsilon_high 0.28 != epsilon 0.2" in warning
    assert "gradient_accumulation_steps 8 is a multiple of steps_per_generation 8 x num_iterations 1" in warning
    code, out, _ = run([*clip, "--steps_per_generation", "16"], capsys)
    assert code == 0 and "equivalent:" not in out and "serves 2 optimizer steps" in " ".join(out.split())
    code, out, _ = run([*clip, "--epsilon_high", "0.2"], capsys)  # plain GRPO's clip: nothing to warn about
    assert code == 0 and "equivalent:" not in out
    kl = ["--config", str(REPO / "configs/baseline_kl_cov_toy.yaml"), "--num_iterations", "1"]
    code, out, _ = run(kl, capsys)
    assert code == 0 and "this run is GRPO: entropy_method kl_cov: its penalty |logp - logp_old|" in " ".join(
        out.split()
    )


def test_dry_run_cli_entry_points(no_network, capsys):
    assert main(["train", "--config", "configs/toy_grpo.yaml", "--dry_run"]) == 0
    out = capsys.readouterr().out
    assert "Dry run of configs/toy_grpo.yaml" in out and "16 prompts x 8 generations" in out
    # the function itself, with the process count as an argument
    assert dry_run(["--config", "configs/toy_grpo.yaml"], num_processes=2) == 0
    assert "2 processes x 128 completions" in " ".join(capsys.readouterr().out.split())
    # --num_processes needs --dry_run
    assert main(["train", "--num_processes", "8"]) == 2
    assert "only applies to `--dry_run`" in capsys.readouterr().err
    assert main(["train", "--dry_run", "--num_processes", "zero"]) == 2
    assert "positive number" in capsys.readouterr().err


@pytest.mark.slow
def test_dry_run_from_the_command_line_offline(tmp_path):
    """`python train.py --dry_run` in a fresh process with HF_HUB_OFFLINE=1 on a Hub recipe (~10 s, mostly imports)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "train.py", "--config", "configs/opefo_qwen3_4b_base.yaml", "--dry_run", "--num_processes",
         "8"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Dry run OK" in result.stdout
    assert "32 prompts x 8 generations" in result.stdout and "serves 1 optimizer step" in result.stdout
    assert "Hub id Qwen/Qwen3-4B-Base" in result.stdout


def toy_config(tmp_path, **extra) -> str:
    data = base_config(tmp_path, **extra)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize(
    "extra, overrides, expected",
    [
        ({"learning_rate": "fast"}, [], ["`learning_rate`", "expected float"]),
        ({"learnin_rate": 1e-3}, [], ["Unknown key `learnin_rate`", "`learning_rate`"]),
        ({"trainer": "aerr"}, [], ["Unknown trainer 'aerr'", "Did you mean 'aer'"]),
        ({"num_generations": 6}, [], ["`num_generations` = 6", "must be divisible by num_generations (6)"]),
        (
            {"generation_batch_size": 48},
            ["--num_processes", "2"],
            ["generation_batch_size (48) must be divisible by per_device_train_batch_size x processes (16 x 2 = 32)"],
        ),
        ({"model_name_or_path": "./no/such/model"}, [], ["model_name_or_path", "does not exist"]),
        ({"model_name_or_path": "healtrl-toy/qwen9-add"}, [], ["model_name_or_path", "Unknown architecture"]),
        ({"model_name_or_path": "not a/valid id"}, [], ["model_name_or_path", "valid Hub id"]),
        ({"reward_funcs": ["healtrl.rewards.no_such_reward"]}, [], ["reward_funcs", "no_such_reward"]),
        ({"dataset_name": "task:no-such-task"}, [], ["Unknown task 'no-such-task'"]),
        ({"dataset_name": "./missing.jsonl"}, [], ["'./missing.jsonl'", "does not exist"]),
        ({"eval_tasks": ["toy-ad"]}, [], ["Unknown task 'toy-ad'", "toy-add"]),
        ({"eval_k": 0}, [], ["eval_k must be a positive integer"]),
    ],
)
def test_broken_configs_fail_naming_the_field(tmp_path, extra, overrides, expected, no_network, capsys):
    code, out, err = run(["--config", toy_config(tmp_path, **extra), *overrides], capsys)
    assert code == 2
    for text in expected:
        assert text in err, f"{text!r} not in:\n{err}"
    assert err.startswith("error: ")


def test_missing_reward_column_is_found_on_the_local_sample(tmp_path, no_network, capsys):
    from datasets import Dataset

    data = tmp_path / "data.jsonl"
    Dataset.from_dict({"prompt": ["1+1=", "2+2="], "solution": ["2", "4"]}).to_json(str(data))
    code, out, err = run(["--config", toy_config(tmp_path, dataset_name=str(data))], capsys)
    assert code == 2
    assert "'answer' (needed by reward 'toy')" in err and "Columns found: prompt, solution" in err
    assert "local data (2 rows)" in out and "Dry run FAILED: 1 problem" in out


def test_hub_datasets_are_reported_as_unchecked_not_passed(tmp_path, no_network, capsys):
    code, out, err = run(["--config", toy_config(tmp_path, dataset_name="some-org/some-dataset")], capsys)
    assert code == 0
    assert (
        "some-org/some-dataset [train]: Hub dataset some-org/some-dataset: dataset mapping not checked: Hub-only"
        in (" ".join(out.split()))
    )
    assert "columns are present" not in out


def test_raw_hub_id_of_a_task_points_to_the_task(tmp_path, no_network, capsys):
    code, out, _ = run(
        ["--config", toy_config(tmp_path, dataset_name="agentica-org/DeepScaleR-Preview-Dataset")], capsys
    )
    assert code == 0
    assert "`dataset_name: task:deepscaler`" in " ".join(out.split())


def test_task_datasets_are_mapped_from_a_local_sample(tmp_path, no_network, capsys):
    config = toy_config(tmp_path, dataset_name="task:gsm8k", reward_funcs=["math"])
    code, out, err = run(["--config", config], capsys)
    assert code == 0, err
    flat = " ".join(out.split())
    assert "task 'gsm8k' mapped from the local sample" in flat and "columns are present" in flat
    # a reward that reads a column the task does not have is caught
    code, out, err = run(["--config", config, "--reward_funcs", "accuracy_reward"], capsys)
    assert code == 2 and "'solution' (needed by reward 'accuracy_reward')" in err


def test_gpu_settings_are_replaced_for_the_check_and_said_so(tmp_path, no_network, capsys):
    import torch

    from healtrl.utils.compat import is_available

    config = toy_config(tmp_path, use_cpu=False, bf16=True, use_vllm=True)
    code, out, err = run(["--config", config], capsys)
    assert code == 0, err
    if not torch.cuda.is_available():
        assert "no CUDA GPU: the config asks for bf16" in out
    if not is_available("vllm"):
        assert "vllm is not installed: the config sets use_vllm=true" in out
        assert "rollouts:     vLLM (colocate mode)" in out  # the report shows the config's value, not the stand-in


def test_periodic_eval_settings_are_reported(tmp_path, no_network, capsys):
    # dataset_seed 0: healtrl-toy/add holds out the problems of task toy-add's test split only with seed 0 (with the
    # default seed 42 the hygiene check finds 17 of its 20 test problems in the training data: tests/test_hygiene.py)
    config = toy_config(tmp_path, eval_tasks=["toy-add", "toy-compare"], eval_k=8, eval_every_steps=25, dataset_seed=0)
    code, out, _ = run(["--config", config], capsys)
    assert code == 0
    assert "toy-add, toy-compare: avg@8 and pass@k every 25 steps" in " ".join(out.split())


def test_dataset_written_by_an_earlier_select_step(tmp_path, no_network, capsys):
    """HEAL recipes train on `<select output_dir>/selected`: before `healtrl select` has run, the dry run checks the
    selection pool instead, and says the step must run first; a missing folder nothing writes is an error."""
    selected = tmp_path / "sel" / "selected"
    select = {"model": "healtrl-toy/qwen2-add+compare", "dataset": "healtrl-toy/compare", "reward": "toy",
              "output_dir": str(tmp_path / "sel")}  # fmt: skip
    (tmp_path / "select_toy.yaml").write_text("# select\n" + yaml.safe_dump(select))
    config = toy_config(
        tmp_path, trainer="heal", model_name_or_path="healtrl-toy/qwen2-add+compare", general_dataset_name=str(selected)
    )
    code, out, err = run(["--config", config], capsys)
    assert code == 0, err
    flat = " ".join(out.split())
    assert f"written by `healtrl select --config {os.path.relpath(tmp_path / 'select_toy.yaml')}` (not run yet)" in flat
    assert "rows of healtrl-toy/compare [train]" in flat and "columns are present" in flat
    assert "does not exist yet: run `healtrl select" in flat

    (tmp_path / "select_toy.yaml").unlink()
    code, out, err = run(["--config", config], capsys)
    assert code == 2 and f"general dataset '{selected}'" in err and "does not exist" in err


def test_num_target_is_the_few_shot_size(tmp_path):
    from healtrl.cli.config import ConfigError, resolve

    resolved = resolve(
        ["--config", str(REPO / "configs/heal_toy.yaml"), "--num_target", "4", "--num_train_samples", "4"]
    )
    assert resolved.script_args.num_train_samples == 4
    resolved = resolve(
        ["--config", str(REPO / "configs/toy_grpo.yaml"), "--num_target", "8", "--num_train_samples", "null"]
    )
    assert resolved.script_args.num_train_samples == 8
    with pytest.raises(ConfigError, match="num_target .* and num_train_samples .* both set"):
        resolve(["--config", str(REPO / "configs/heal_toy.yaml"), "--num_target", "4", "--num_train_samples", "6"])


# ----------------------------------------------------------------------------------------------------------------
# The registry owns what the dry run knows about each trainer
# ----------------------------------------------------------------------------------------------------------------
TRAINER_NEUTRAL = ("healtrl/cli/dry_run.py", "healtrl/cli/dry_run_checks.py")
# What the registry offers the command line: using these is how the dry run learns about a trainer.
REGISTRY_API = {"TRAINERS", "get_trainer_classes", "added_datasets", "method_fields", "on_policy_inert"}
# Methods by the names the papers and the docs use (registry keys and entropy baselines are read from the code).
METHOD_DISPLAY_NAMES = ("HEAL", "AER", "PosAdv", "OPEFO", "Clip-Cov", "KL-Cov", "Entropy-Adv")


def _trainer_names() -> tuple[set[str], set[str]]:
    """(identifiers, method names) that only trainer-specific code would use: the classes healtrl.trainers exports,
    TRL's GRPO classes and the fields a trainer's config adds to EntropyGRPOConfig (HEAL's `general_dataset_name`,
    the baselines' `entropy_method`, ...); the registry keys and the entropy baselines' names."""
    import dataclasses

    import healtrl.trainers as trainers
    from healtrl.trainers.baselines import ENTROPY_METHODS

    shared = {f.name for f in dataclasses.fields(trainers.EntropyGRPOConfig)}
    own = {f.name for _, cls in trainers.TRAINERS.values() for f in dataclasses.fields(cls)} - shared
    identifiers = (set(trainers.__all__) - REGISTRY_API) | {"GRPOConfig", "GRPOTrainer"} | own
    methods = (set(trainers.TRAINERS) | set(ENTROPY_METHODS) | own) - {"none"}
    return identifiers, methods


def trainer_names_in(source: str, identifiers: set[str], methods: set[str]) -> list[str]:
    """Where `source` names a trainer class or a method: an identifier (name, attribute, import, argument) from
    `identifiers`, a string (docstrings aside) equal to a method name or prefixed by one (`f"{method}_..."` pieces
    included), or a string mentioning a method's display name."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    display = re.compile(r"(?<![\w-])(" + "|".join(re.escape(n) for n in METHOD_DISPLAY_NAMES) + r")(?![\w-])")
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.alias):
            names = [node.name.rsplit(".", 1)[-1], node.asname or ""]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        found += [f"line {node.lineno}: {name}" for name in names if name in identifiers]
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value
            if text in methods or any(text.startswith(f"{m}_") for m in methods) or display.search(text):
                found.append(f"line {node.lineno}: {text!r}")
    return found


@pytest.mark.parametrize("module", TRAINER_NEUTRAL)
def test_dry_run_names_no_trainer(module):
    """The dry run and its checks learn about trainers from the registry (healtrl.trainers: TRAINERS,
    added_datasets, method_fields) only, so that a new trainer needs no change there."""
    found = trainer_names_in((REPO / module).read_text(), *_trainer_names())
    assert not found, f"{module} names trainers or methods; ask the registry instead: {found}"


@pytest.mark.parametrize(
    "planted",
    [
        "from healtrl.trainers import HEALConfig\n",
        "import dataclasses\nfrom trl import GRPOConfig\nFIELDS = dataclasses.fields(GRPOConfig)\n",
        "def f(resolved):\n    return resolved.trainer_name != 'grpo'\n",
        "def f(args):\n    return getattr(args, 'general_dataset_name', None)\n",
        "def f(args):\n    return args.entropy_method\n",
        "def f(name):\n    return name.startswith(f'{\"kl_cov\"}_')\n",
        'MESSAGE = "HEAL\'s general data"\n',
    ],
)
def test_trainer_name_check_catches_a_planted_name(planted):
    source = (REPO / TRAINER_NEUTRAL[0]).read_text() + "\n" + planted
    assert trainer_names_in(source, *_trainer_names())
