"""The config parser (`healtrl.cli.config`), the data helpers (`healtrl.data`) and the shipped config files.

Nothing here trains or loads a model: every test runs in well under a second once TRL is imported.
"""

from __future__ import annotations

import dataclasses
import enum
import glob
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest
import yaml

from healtrl.cli.config import (
    DEFAULT_CONFIG_YAML,
    ConfigError,
    ScriptArguments,
    coerce_value,
    parse,
    resolve,
    route_fields,
)
from healtrl.data import check_columns, get_reward_func, load_train_dataset, register_reward, reward_columns
from healtrl.trainers import TRAINERS, EntropyGRPOConfig, EntropyGRPOTrainer

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"


def write_yaml(tmp_path, data: dict | str, name: str = "run.yaml") -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return str(path)


def base_config(tmp_path, **extra) -> dict:
    data = {
        "trainer": "grpo",
        "model_name_or_path": "healtrl-toy/qwen2-add",
        "dataset_name": "healtrl-toy/add",
        "reward_funcs": ["toy"],
        "output_dir": str(tmp_path / "out"),
        "use_cpu": True,
        "per_device_train_batch_size": 16,
        "num_generations": 8,
        "report_to": "none",
        "activation_checkpointing": False,
    }
    data.update(extra)
    return data


# ----------------------------------------------------------------------------------------------------------------
# Shipped files
# ----------------------------------------------------------------------------------------------------------------
def test_embedded_default_matches_configs_file():
    assert yaml.safe_load((CONFIGS / "main.yaml").read_text()) == yaml.safe_load(DEFAULT_CONFIG_YAML)


@pytest.mark.parametrize("name", ["toy_grpo.yaml", "toy_grpo_lora.yaml", "smollm2_grpo.yaml"])
def test_training_configs_parse(name):
    script_args, model_args, trainer_args, trainer = parse(["--config", str(CONFIGS / name)], default=None)
    assert trainer == "grpo"
    assert isinstance(trainer_args, EntropyGRPOConfig)
    assert script_args.reward_funcs == ["toy"]
    if name == "toy_grpo_lora.yaml":
        from trl import get_peft_config

        assert model_args.use_peft and get_peft_config(model_args).r == 8


def test_accelerate_configs_load_with_accelerate_schema():
    from accelerate.commands.config.config_args import load_config_from_file

    files = sorted(glob.glob(str(CONFIGS / "accelerate" / "*.yaml")))
    names = {os.path.basename(f) for f in files}
    assert {"ddp_8gpu.yaml", "fsdp2_8gpu.yaml", "deepspeed_zero3_8gpu.yaml", "multinode_2x8.yaml"} <= names
    assert {"ddp_cpu2.yaml", "fsdp2_cpu2.yaml"} <= names  # CPU rehearsals (tests/test_accelerate_launch.py)
    for path in files:
        config = load_config_from_file(path)  # a dataclass: unknown fields would raise
        per_machine = 2 if path.endswith("_cpu2.yaml") else 8
        assert config.num_processes == config.num_machines * per_machine


# ----------------------------------------------------------------------------------------------------------------
# Layers and precedence
# ----------------------------------------------------------------------------------------------------------------
def test_without_config_the_embedded_default_runs():
    script_args, model_args, trainer_args, trainer = parse([])
    assert trainer == "heal"  # the main job's HEAL run (configs/main.yaml)
    assert model_args.model_name_or_path == "healtrl-toy/qwen2-add+compare"
    assert script_args.dataset_name == "healtrl-toy/add" and script_args.num_train_samples == 8
    assert trainer_args.general_dataset_name == "outputs/main/select/selected"
    assert trainer_args.num_generations == 8 and trainer_args.per_device_train_batch_size == 128
    assert trainer_args.learning_rate == 5e-4 and trainer_args.use_cpu


def test_defaults_then_yaml_then_command_line(tmp_path):
    path = write_yaml(tmp_path, base_config(tmp_path, learning_rate=1e-3, max_steps=7, beta=0.1))
    resolved = resolve(["--config", path, "--learning_rate", "2e-3", "--beta=0.0", "--temperature", "0.7"])
    args = resolved.trainer_args
    assert args.learning_rate == 2e-3  # command line beats YAML
    assert args.beta == 0.0  # `--key=value`
    assert args.max_steps == 7  # YAML beats the default
    assert args.temperature == 0.7
    assert args.epsilon == EntropyGRPOConfig.__dataclass_fields__["epsilon"].default  # untouched default
    assert resolved.sources["learning_rate"].startswith("on the command line")
    assert resolved.sources["max_steps"] == f"in config file {path}"
    # the resolved config reproduces the run
    again = resolve(["--config", write_yaml(tmp_path, resolved.to_yaml(), "again.yaml")])
    assert again.trainer_args.learning_rate == 2e-3 and again.trainer_args.max_steps == 7


def test_command_line_overrides_the_embedded_default():
    _, _, trainer_args, _ = parse(["--max_steps", "3", "--learning-rate", "1e-4"])
    assert trainer_args.max_steps == 3 and trainer_args.learning_rate == 1e-4


def test_cli_trainer_and_flags(tmp_path):
    path = write_yaml(tmp_path, base_config(tmp_path))
    _, model_args, trainer_args, trainer = parse(
        ["--config", path, "--trainer", "grpo", "--use_peft", "--lora_target_modules", "q_proj", "v_proj"]
    )
    assert trainer == "grpo" and model_args.use_peft is True
    assert model_args.lora_target_modules == ["q_proj", "v_proj"]
    _, model_args, _, _ = parse(["--config", path, "--lora_target_modules", "q_proj,k_proj"])
    assert model_args.lora_target_modules == ["q_proj", "k_proj"]


def test_yaml_env_is_exported(tmp_path, monkeypatch):
    monkeypatch.delenv("HEALTRL_TEST_VAR", raising=False)
    data = base_config(tmp_path, env={"HEALTRL_TEST_VAR": 3})
    parse(["--config", write_yaml(tmp_path, data)])
    assert os.environ["HEALTRL_TEST_VAR"] == "3"


# ----------------------------------------------------------------------------------------------------------------
# Coercion
# ----------------------------------------------------------------------------------------------------------------
class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@pytest.mark.parametrize(
    ("value", "hint", "expected"),
    [
        (True, bool, True),
        ("yes", bool, True),
        ("False", bool, False),
        (0, bool, False),
        (3, int, 3),
        (3.0, int, 3),
        ("1e3", int, 1000),
        ("12", int, 12),
        (1, float, 1.0),
        ("5e-4", float, 5e-4),  # YAML 1.1 reads 5e-4 (no dot) as a string
        (0.25, float, 0.25),
        ("abc", str, "abc"),
        (12, str, "12"),
        (None, int | None, None),
        ("7", int | None, 7),
        (False, str | bool, False),
        ("auto", str | bool, "auto"),
        ("x", list[str], ["x"]),
        ("a,b", list[str], ["a", "b"]),
        (["1", 2], list[int], [1, 2]),
        ({"a": "1"}, dict[str, int], {"a": 1}),
        ('{"a": 1}', dict, {"a": 1}),
        ("b", Literal["a", "b"], "b"),
        ("BLUE", Color, "blue"),
        ("red", Color | str, "red"),
        (None, str | None | Literal[False], None),
        (False, str | None | Literal[False], False),
    ],
)
def test_coercion(value, hint, expected):
    result = coerce_value(value, hint)
    assert result == expected and type(result) is type(expected)


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        ("fast", float),
        (True, float),
        ("3.5", int),
        (True, int),
        ("maybe", bool),
        (None, int),
        ([1], str),
        ("c", Literal["a", "b"]),
        ("green", Color | str),
        ("notadict", dict),
    ],
)
def test_coercion_rejects(value, hint):
    with pytest.raises(ValueError, match="expected"):
        coerce_value(value, hint)


def test_booleans_written_as_text_are_read_as_trl_reads_them():
    """A YAML or command-line boolean written as text means what it means on TRL's command line (transformers'
    `string_to_bool`), so a flag copied from a TRL script reads the same here."""
    from transformers.hf_argparser import string_to_bool

    for word in ("yes", "no", "true", "false", "t", "f", "y", "n", "1", "0", "TRUE", "No", "T"):
        assert coerce_value(word, bool) is string_to_bool(word), word
    for word in ("maybe", "2", ""):
        with pytest.raises(ValueError, match="expected bool"):
            coerce_value(word, bool)


def test_command_line_strings_are_kept_verbatim(tmp_path):
    path = write_yaml(tmp_path, base_config(tmp_path))
    script_args, model_args, _, _ = parse(["--config", path, "--model_revision", "1.10", "--dataset_config", "007"])
    assert model_args.model_revision == "1.10" and script_args.dataset_config == "007"


def test_hf_enum_fields_and_report_to(tmp_path):
    path = write_yaml(tmp_path, base_config(tmp_path, lr_scheduler_type="cosine", report_to=["none"]))
    _, _, args, _ = parse(["--config", path, "--optim", "adamw_torch", "--save_strategy", "no"])
    assert str(args.lr_scheduler_type.value) == "cosine" and args.optim.value == "adamw_torch"
    _, _, args, _ = parse(["--config", path, "--report_to", "none"])
    assert args.report_to in ([], "none", ["none"])


def test_yaml_1_1_quirks(tmp_path):
    # 5e-4 without a dot is a string in YAML 1.1; an unquoted `no` is the boolean False
    text = yaml.safe_dump(base_config(tmp_path)) + "learning_rate: 5e-4\nsave_strategy: no\n"
    _, _, args, _ = parse(["--config", write_yaml(tmp_path, text, "quirks.yaml")])
    assert args.learning_rate == 5e-4 and args.save_strategy.value == "no"


# ----------------------------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------------------------
def test_unknown_key_in_yaml_names_key_file_and_suggestion(tmp_path):
    path = write_yaml(tmp_path, base_config(tmp_path, learnin_rate=1e-3))
    with pytest.raises(ConfigError) as info:
        parse(["--config", path])
    message = str(info.value)
    assert "`learnin_rate`" in message and path in message and "`learning_rate`" in message


def test_unknown_key_on_command_line(tmp_path):
    with pytest.raises(ConfigError) as info:
        parse(["--num_generation", "4"])
    message = str(info.value)
    assert "`num_generation`" in message and "command line" in message and "`num_generations`" in message


def test_wrong_type_names_key_expected_type_and_value(tmp_path):
    path = write_yaml(tmp_path, base_config(tmp_path, max_steps="many"))
    with pytest.raises(ConfigError) as info:
        parse(["--config", path])
    message = str(info.value)
    assert "`max_steps`" in message and "expected int" in message and "'many'" in message and path in message
    with pytest.raises(ConfigError, match=r"`learning_rate`.*expected float.*'fast'"):
        parse(["--learning_rate", "fast"])
    with pytest.raises(ConfigError, match=r"`lr_scheduler_type`.*expected one of 'linear'"):
        parse(["--lr_scheduler_type", "cosin"])
    with pytest.raises(ConfigError, match=r"`log_level`.*not one of"):
        parse(["--log_level", "loud"])


def test_flag_without_value_needs_a_boolean_field():
    with pytest.raises(ConfigError, match=r"`--max_steps` on the command line has no value"):
        parse(["--max_steps"])


def test_unknown_trainer_lists_available(tmp_path):
    path = write_yaml(tmp_path, base_config(tmp_path, trainer="grpp"))
    with pytest.raises(ConfigError) as info:
        parse(["--config", path])
    message = str(info.value)
    assert "'grpp'" in message and "Available trainers: " in message and "grpo" in message
    with pytest.raises(ConfigError, match="Unknown trainer 'nope'"):
        parse(["--trainer", "nope"])


def test_missing_trainer(tmp_path):
    data = base_config(tmp_path)
    del data["trainer"]
    with pytest.raises(ConfigError) as info:
        parse(["--config", write_yaml(tmp_path, data)])
    assert "No trainer is set" in str(info.value) and "grpo" in str(info.value)
    with pytest.raises(ConfigError, match="No trainer is set"):
        parse([], default=None)


def test_config_class_checks_become_config_errors(tmp_path):
    with pytest.raises(ConfigError) as info:
        parse(["--num_generations", "3"])
    message = str(info.value)
    assert "HEALConfig" in message and "`num_generations` = 3" in message and "command line" in message


def test_missing_file_bad_yaml_and_stray_arguments(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        parse(["--config", str(tmp_path / "nope.yaml")])
    with pytest.raises(ConfigError, match="YAML mapping"):
        parse(["--config", write_yaml(tmp_path, "- a\n- b\n", "list.yaml")])
    with pytest.raises(ConfigError, match="Unexpected command-line argument"):
        parse(["stray"])


def test_unknown_reward_and_required_fields(tmp_path):
    with pytest.raises(ConfigError, match="Did you mean 'toy'"):
        parse(["--reward_funcs", "toyy"])
    data = base_config(tmp_path)
    del data["model_name_or_path"]
    with pytest.raises(ConfigError, match="`model_name_or_path` is not set"):
        parse(["--config", write_yaml(tmp_path, data)])


def test_help_lists_trainer_fields(capsys):
    with pytest.raises(SystemExit) as info:
        parse(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for name in ("--learning_rate", "--num_generations", "--rollout_entropy", "--model_name_or_path", "--reward_funcs"):
        assert name in out
    assert "GRPOBaselineConfig" in out and "grpo" in out


# ----------------------------------------------------------------------------------------------------------------
# Routing of keys shared by several dataclasses
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class SharedFieldsConfig(EntropyGRPOConfig):
    """A trainer config that (unwisely) redefines fields of ScriptArguments and ModelConfig."""

    model_name_or_path: str | None = field(default=None, metadata={"help": "Clashes with ModelConfig."})
    num_train_samples: int | None = field(default=None, metadata={"help": "Clashes with ScriptArguments."})
    dataset_name: str | None = field(default=None, metadata={"help": "Clashes with ScriptArguments."})


def test_duplicate_keys_are_routed_to_exactly_one_dataclass(tmp_path):
    from trl import ModelConfig

    routes = route_fields({"script": ScriptArguments, "model": ModelConfig, "trainer": SharedFieldsConfig})
    assert routes["model_name_or_path"] == "model"  # FIELD_OWNERS
    assert routes["dataset_name"] == "script"  # FIELD_OWNERS
    assert routes["num_train_samples"] == "trainer"  # ROUTING_PRIORITY: model, trainer, script
    # no field of the three dataclasses is left out or routed twice
    names = {f.name for cls in (ScriptArguments, ModelConfig, SharedFieldsConfig) for f in dataclasses.fields(cls)}
    assert set(routes) == names

    registry = dict(TRAINERS, shared=(EntropyGRPOTrainer, SharedFieldsConfig))
    path = write_yaml(tmp_path, base_config(tmp_path, trainer="shared", num_train_samples=5))
    script_args, model_args, trainer_args, trainer = parse(["--config", path], registry=registry)
    assert trainer == "shared"
    assert model_args.model_name_or_path == "healtrl-toy/qwen2-add" and trainer_args.model_name_or_path is None
    assert script_args.dataset_name == "healtrl-toy/add" and trainer_args.dataset_name is None
    assert trainer_args.num_train_samples == 5 and script_args.num_train_samples is None


def test_unknown_key_that_belongs_to_another_trainer(tmp_path):
    @dataclass
    class OtherConfig(EntropyGRPOConfig):
        special_coef: float = field(default=0.1, metadata={"help": "A field only this trainer has."})

    registry = dict(TRAINERS, other=(EntropyGRPOTrainer, OtherConfig))
    with pytest.raises(ConfigError, match=r"`special_coef`.*field of the trainer 'other'"):
        parse(["--special_coef", "0.5"], registry=registry)
    grpo_default = (CONFIGS / "toy_grpo.yaml").read_text()  # the main job's default is HEAL's, with HEAL-only keys
    _, _, args, _ = parse(["--trainer", "other", "--special_coef", "0.5"], registry=registry, default=grpo_default)
    assert args.special_coef == 0.5


def test_no_accidental_overlap_between_shipped_dataclasses():
    from trl import ModelConfig

    seen: dict[str, str] = {}
    for cls in (ScriptArguments, ModelConfig, EntropyGRPOConfig):
        for f in dataclasses.fields(cls):
            assert f.name not in seen, f"{f.name} is defined by both {seen[f.name]} and {cls.__name__}"
            seen[f.name] = cls.__name__


# ----------------------------------------------------------------------------------------------------------------
# Data and rewards
# ----------------------------------------------------------------------------------------------------------------
def test_toy_datasets_and_mixtures():
    train = load_train_dataset("healtrl-toy/add", num_samples=50, seed=1)
    assert len(train) == 50 and {"prompt", "answer", "domain", "task"} <= set(train.column_names)
    test = load_train_dataset("healtrl-toy/add", split="test")
    train_prompts = {row["prompt"][0]["content"] for row in load_train_dataset("healtrl-toy/add")}
    assert not train_prompts & {row["prompt"][0]["content"] for row in test}
    mixed = load_train_dataset("healtrl-toy/add+compare", num_samples=40)
    assert set(mixed["domain"]) == {"target", "general"} and set(mixed["task"]) == {"add", "compare"}
    with pytest.raises(ValueError, match="nope"):
        load_train_dataset("healtrl-toy/nope")


def test_local_files_and_saved_folders(tmp_path):
    from datasets import Dataset, DatasetDict

    data = Dataset.from_dict({"prompt": ["1+1=", "2+2=", "3+3="], "answer": ["2", "4", "6"]})
    data.to_json(str(tmp_path / "data.jsonl"))
    assert load_train_dataset(str(tmp_path / "data.jsonl"))["answer"] == ["2", "4", "6"]
    DatasetDict(train=data, test=data.select([0])).save_to_disk(str(tmp_path / "saved"))
    assert len(load_train_dataset(str(tmp_path / "saved"), split="test")) == 1
    assert len(load_train_dataset(str(tmp_path / "saved"), num_samples=2)) == 2
    with pytest.raises(ValueError, match="no split 'dev'"):
        load_train_dataset(str(tmp_path / "saved"), split="dev")
    with pytest.raises(ValueError, match="does not exist"):
        load_train_dataset(str(tmp_path / "missing.jsonl"))


def test_missing_dataset_column_error():
    from datasets import Dataset

    data = Dataset.from_dict({"prompt": ["1+1="], "solution": ["2"]})
    with pytest.raises(ValueError) as info:
        check_columns(data, reward_columns=reward_columns(["toy"]), dataset_name="mine")
    message = str(info.value)
    assert "'answer'" in message and "reward 'toy'" in message and "prompt, solution" in message and "mine" in message
    with pytest.raises(ValueError, match="'prompt' \\(needed by the trainer\\)"):
        check_columns(Dataset.from_dict({"question": ["x"]}))
    check_columns(data, reward_columns=["accuracy_reward"])  # `solution` is there


def test_reward_registry():
    from healtrl.toy import toy_reward

    assert get_reward_func("toy") is toy_reward
    assert get_reward_func("healtrl.toy.toy_reward") is toy_reward  # dotted path

    def my_reward(prompts, completions, target, **kwargs):
        return [0.0] * len(completions)

    register_reward("test_my_reward", my_reward)
    try:
        assert reward_columns(["test_my_reward"]) == {"test_my_reward": ("target",)}
        assert get_reward_func("test_my_reward") is my_reward
    finally:
        from healtrl.data import REWARD_FUNCS

        REWARD_FUNCS.pop("test_my_reward")
    with pytest.raises(ValueError, match="Did you mean 'toy'"):
        get_reward_func("tyo")


def test_configs_ship_once_as_package_data(tmp_path):
    """The configs live in healtrl/configs (the repository's configs/ links there) and every one is in the wheel, so
    an installed healtrl runs its main job and reads the shipped configs without a checkout."""
    import subprocess
    import sys
    import zipfile
    from pathlib import Path

    from healtrl.cli.config import DEFAULT_CONFIG_YAML, shipped_config

    repo = Path(__file__).resolve().parents[1]
    assert (repo / "configs").is_symlink() and (repo / "configs").resolve() == (repo / "healtrl" / "configs")
    shipped = sorted(p.relative_to(repo).as_posix() for p in (repo / "healtrl" / "configs").rglob("*.yaml"))
    assert "healtrl/configs/main.yaml" in shipped and "healtrl/configs/accelerate/fsdp2_cpu2.yaml" in shipped
    assert DEFAULT_CONFIG_YAML == shipped_config("main.yaml") == (repo / "configs" / "main.yaml").read_text()
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(repo), "-w", str(tmp_path)],
        check=True, capture_output=True, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("healtrl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert set(shipped) <= names, sorted(set(shipped) - names)
