"""`healtrl select`'s options come from one place, `healtrl.selection.config.SelectionConfig` (issue #28): the parser
built from its fields has the options, types and defaults the hand-written parser had (recorded below from it), every
field carries its help, and `select_general_data` takes a config or, as before, the fields as arguments."""

from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from healtrl.cli import main
from healtrl.cli.select import _build_parser
from healtrl.selection.config import SelectionConfig, SelectionError
from healtrl.selection.pipeline import select_general_data

# `healtrl select`'s options before SelectionConfig: dest -> (option strings, default, kind), in the parser's order.
OPTIONS_BEFORE = {
    "config": (["--config"], None, "str"),
    "model": (["--model"], None, "str"),
    "dataset": (["--dataset"], None, "str"),
    "dataset_config": (["--dataset_config"], None, "str"),
    "split": (["--split"], "train", "str"),
    "prompt_column": (["--prompt_column"], None, "str"),
    "question_column": (["--question_column"], None, "str"),
    "prompt_template": (["--prompt_template"], None, "str"),
    "raw_prompt": (["--raw_prompt"], False, "flag"),
    "answer_column": (["--answer_column"], None, "str"),
    "reward": (["--reward"], None, "str"),
    "correct_threshold": (["--correct_threshold"], 0.5, "float"),
    "num_rollouts": (["--num_rollouts"], 8, "int"),
    "top_k": (["--top_k"], 384, "int"),
    "top_fraction": (["--top_fraction"], 0.2, "float"),
    "temperature": (["--temperature"], 0.7, "float"),
    "top_p": (["--top_p"], 1.0, "float"),
    "max_new_tokens": (["--max_new_tokens"], 3072, "int"),
    "batch_size": (["--batch_size"], 4, "int"),
    "forward_batch_size": (["--forward_batch_size"], None, "int"),
    "seed": (["--seed"], 0, "int"),
    "max_questions": (["--max_questions"], None, "int"),
    "dtype": (["--dtype"], "auto", "str"),
    "device": (["--device"], None, "str"),
    "use_vllm": (["--use_vllm"], False, "flag"),
    "vllm_gpu_memory_utilization": (["--vllm_gpu_memory_utilization"], 0.5, "float"),
    "vllm_max_model_len": (["--vllm_max_model_len"], None, "int"),
    "output_dir": (["--output_dir"], None, "str"),
    "overwrite": (["--overwrite"], False, "flag"),
    "push_to_hub": (["--push_to_hub"], False, "flag"),
    "hub_dataset_id": (["--hub_dataset_id"], None, "str"),
    "hub_private": (["--hub_private"], False, "flag"),
    "no_progress": (["--no_progress"], False, "flag"),
    "dry_run": (["--dry_run"], False, "flag"),
}
# Options of the command, not settings of the selection.
COMMAND_OPTIONS = ("config", "no_progress", "dry_run")


def _options(parser: argparse.ArgumentParser) -> dict:
    out = {}
    for action in parser._actions:
        if action.dest == "help":
            continue
        if isinstance(action, argparse._StoreTrueAction):
            kind = "flag"
        else:
            kind = "str" if action.type in (None, str) else action.type.__name__
        out[action.dest] = (action.option_strings, action.default, kind)
    return out


def test_parser_has_the_options_and_defaults_of_before():
    options = _options(_build_parser("healtrl select"))
    assert list(options) == list(OPTIONS_BEFORE)
    assert options == OPTIONS_BEFORE


def test_the_settings_are_the_config_fields_each_with_help():
    names = [f.name for f in fields(SelectionConfig)]
    assert names == [name for name in OPTIONS_BEFORE if name not in COMMAND_OPTIONS]
    config = SelectionConfig()
    for f in fields(SelectionConfig):
        assert isinstance(f.metadata.get("help"), str) and f.metadata["help"], f.name
        assert getattr(config, f.name) == OPTIONS_BEFORE[f.name][1], f.name
        assert f"{f.name} (`" in SelectionConfig.__doc__, f"{f.name} is not in SelectionConfig's Parameters"


def test_help_lists_every_option_with_its_default(capsys):
    assert main(["select", "--help"]) == 0
    text = capsys.readouterr().out
    for name, (flags, _, _) in OPTIONS_BEFORE.items():
        assert flags[0] in text, name
    assert "(default: 384)" in text and "(default: 3072)" in text and "(default: train)" in text


def test_select_general_data_takes_a_config_or_its_fields(tmp_path):
    required = {"reward": "toy", "output_dir": str(tmp_path)}
    # The checks run first, so a bad value shows that each way of calling reaches the same settings.
    with pytest.raises(SelectionError, match="--top_k must be >= 1"):
        select_general_data("healtrl-toy/qwen2-add", "healtrl-toy/add", top_k=0, **required)
    with pytest.raises(SelectionError, match="--top_k must be >= 1"):
        select_general_data(model="healtrl-toy/qwen2-add", dataset="healtrl-toy/add", top_k=0, **required)
    config = SelectionConfig(model="healtrl-toy/qwen2-add", dataset="healtrl-toy/add", top_k=0, **required)
    with pytest.raises(SelectionError, match="--top_k must be >= 1"):
        select_general_data(config)
    with pytest.raises(SelectionError, match="--num_rollouts must be >= 2"):
        select_general_data(config, top_k=1, num_rollouts=1)  # keywords replace the config's fields
    with pytest.raises(SelectionError, match="--reward is required"):
        select_general_data("healtrl-toy/qwen2-add", "healtrl-toy/add", output_dir=str(tmp_path))
    with pytest.raises(TypeError, match="num_rolouts"):
        select_general_data("healtrl-toy/qwen2-add", "healtrl-toy/add", num_rolouts=4, **required)
    with pytest.raises(TypeError, match="model"):
        select_general_data("healtrl-toy/qwen2-add", model="healtrl-toy/qwen2-add", **required)
