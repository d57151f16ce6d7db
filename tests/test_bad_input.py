"""Bad input that `train.py --dry_run` must catch, with the same error as the real run before it loads a model.

Every case ends with exit code 2 and an `error:` line naming the field and the fix, never a traceback. The real run
(`train_main` without `--dry_run`) is run in-process with model loading replaced by a failure (`no_model`): each of
these errors must come before the model. Nothing here trains or downloads.
"""

from __future__ import annotations

import json
import re
import warnings

import pytest
import yaml

from healtrl.checkpoints import MARKER_FILE, ResumeError, last_complete_checkpoint, read_marker
from healtrl.cli import train_main
from healtrl.cli.checks import FIELD_RANGES
from healtrl.cli.config import _classes_for, _field_default, _init_fields, parse
from healtrl.utils.yamlfile import DuplicateKeyError, load_yaml
from tests.test_config import base_config, write_yaml

pytestmark = pytest.mark.usefixtures("no_network")  # tests/conftest.py


@pytest.fixture
def no_model(monkeypatch):
    """The real run must stop before it resolves (builds, converts or downloads) the model."""

    def refuse(name, *args, **kwargs):
        raise AssertionError(f"the run got as far as loading the model {name!r}")

    monkeypatch.setattr("healtrl.models.resolve_model_path", refuse)


def run(capsys, argv, dry=True) -> tuple[int, str]:
    code = train_main([*argv, "--dry_run"] if dry else argv)
    return code, capsys.readouterr().err


def assert_refused(code: int, err: str, *expected: str) -> None:
    assert code == 2, err
    assert re.search(r"^error: ", err, re.M), err  # (a `datasets` progress bar may come first)
    assert "Traceback" not in err
    for text in expected:
        assert text in err, f"{text!r} not in:\n{err}"


def both_paths(tmp_path, capsys, argv, *expected):
    """The dry run and the real run refuse `argv` with the same message."""
    code, dry_err = run(capsys, argv, dry=True)
    assert_refused(code, dry_err, *expected)
    code, real_err = run(capsys, argv, dry=False)
    assert_refused(code, real_err, *expected)
    return dry_err, real_err


# ----------------------------------------------------------------------------------------------------------------
# Numeric ranges (healtrl.cli.checks)
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "key, value, bound",
    [
        ("per_device_train_batch_size", 0, "must be >= 1"),
        ("per_device_train_batch_size", -4, "must be >= 1"),
        ("learning_rate", -1e-3, "must be >= 0"),
        ("temperature", 0, "must be > 0"),
        ("torch_num_threads", 0, "must be >= 1"),
        ("gradient_accumulation_steps", 0, "must be >= 1"),
        ("num_generations", 0, "must be >= 2"),
        ("max_completion_length", 0, "must be >= 1"),
        ("max_steps", -3, "must be >= 1, or -1"),
        ("num_train_epochs", 0, "must be > 0"),
        ("top_p", 1.5, "must be in (0, 1]"),
        ("top_k", -1, "must be >= 0"),
        ("beta", -0.1, "must be >= 0"),
        ("epsilon", -0.2, "must be >= 0"),
        ("save_steps", 0, "must be > 0"),
        ("logging_steps", -5, "must be > 0"),
        ("seed", -1, "must be in [0, 4.29497e+09]"),
        ("learning_rate", float("nan"), "must be >= 0"),
    ],
)
def test_out_of_range_values_are_refused_before_the_model(tmp_path, key, value, bound, no_model, capsys):
    config = write_yaml(tmp_path, base_config(tmp_path, **{key: value}))
    dry_err, real_err = both_paths(
        tmp_path, capsys, ["--config", config], f"Invalid value for `{key}` in config file {config}", bound,
        f"Set `{key}` to a value in that range",
    )  # fmt: skip
    assert dry_err == real_err
    assert "divisible" not in dry_err  # a negative batch size is blamed on its sign, not on divisibility


def test_out_of_range_override_names_the_flag(tmp_path, no_model, capsys):
    config = write_yaml(tmp_path, base_config(tmp_path))
    both_paths(
        tmp_path, capsys, ["--config", config, "--temperature", "0"],
        "`temperature` on the command line (--temperature)", "must be > 0",
    )  # fmt: skip


def test_in_range_edge_values_are_accepted(tmp_path):
    """The documented special values stay valid: max_steps -1, top_k 0 (off), beta 0, max_grad_norm 0, top_p 1."""
    config = write_yaml(
        tmp_path,
        base_config(tmp_path, max_steps=-1, top_k=0, beta=0.0, max_grad_norm=0.0, top_p=1.0, learning_rate=0.0),
    )
    _, _, args, _ = parse(["--config", config])
    assert (args.max_steps, args.top_k, args.beta, args.top_p) == (-1, 0, 0.0, 1.0)


def test_every_ranged_field_exists_and_its_defaults_are_in_range():
    """A name in the table that no config class has would never be checked; a range that refuses a default would
    refuse every config that leaves the field alone."""
    from healtrl.trainers import TRAINERS

    seen = set()
    for _, config_cls in TRAINERS.values():
        for cls in _classes_for(config_cls).values():
            for name, f in _init_fields(cls).items():
                if name in FIELD_RANGES:
                    seen.add(name)
                    default = _field_default(f)
                    if isinstance(default, (int, float)) and not isinstance(default, bool):
                        assert FIELD_RANGES[name].accepts(default), f"{cls.__name__}.{name} default {default!r}"
    assert seen == set(FIELD_RANGES), sorted(set(FIELD_RANGES) - seen)


def test_method_field_checks_are_reported_cleanly(tmp_path, capsys):
    """A method's own `__post_init__` check (AER's tau) is reported like the table's, naming the field."""
    config = write_yaml(tmp_path, base_config(tmp_path, trainer="aer", tau=-0.5))
    code, err = run(capsys, ["--config", config])
    assert_refused(code, err, "AERConfig rejected the configuration", "tau must be > 0", "`tau` = -0.5")


def test_trl_checks_run_in_the_dry_run(tmp_path, capsys):
    """TRL's own `GRPOConfig.__post_init__` checks run in the dry run and read as config errors."""
    config = write_yaml(tmp_path, base_config(tmp_path, generation_batch_size=32, steps_per_generation=2))
    code, err = run(capsys, ["--config", config])
    assert_refused(code, err, "rejected the configuration", "can not be both configured", "`steps_per_generation` = 2")


# ----------------------------------------------------------------------------------------------------------------
# Paths and data
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("under", [False, True], ids=["the-file", "under-the-file"])
def test_output_dir_that_is_a_file(tmp_path, under, no_model, capsys):
    blocker = tmp_path / "taken"
    blocker.write_text("not a folder")
    output_dir = blocker / "run" if under else blocker
    config = write_yaml(tmp_path, base_config(tmp_path, output_dir=str(output_dir)))
    both_paths(
        tmp_path, capsys, ["--config", config], "Invalid value for `output_dir`", str(output_dir),
        "is an existing file" if not under else f"lies under {blocker}, which is a file", "Set `output_dir` to a folder",
    )  # fmt: skip


@pytest.mark.parametrize("text", ["", "\n\n"], ids=["empty", "blank-lines"])
def test_empty_dataset_file(tmp_path, text, no_model, capsys):
    data = tmp_path / "train.jsonl"
    data.write_text(text)
    config = write_yaml(tmp_path, base_config(tmp_path, dataset_name=str(data)))
    dry_err, real_err = both_paths(
        tmp_path, capsys, ["--config", config], f"The dataset file '{data}' holds no rows", "`dataset_name`"
    )
    assert "StopIteration" not in dry_err + real_err and "corresponds to no data" not in dry_err + real_err


# ----------------------------------------------------------------------------------------------------------------
# Duplicate keys and a repeated --config
# ----------------------------------------------------------------------------------------------------------------
def test_duplicate_top_level_key(tmp_path, no_model, capsys):
    text = yaml.safe_dump(base_config(tmp_path, learning_rate=1e-5)) + "learning_rate: 5.0e+9\n"
    config = write_yaml(tmp_path, text)
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines, 1) if line.startswith("learning_rate:"))
    both_paths(
        tmp_path, capsys, ["--config", config], f"Config file '{config}' sets a key twice", "duplicate key `learning_rate`",
        f"lines {first} and {len(lines)}", "Remove one of the two",
    )  # fmt: skip


def test_duplicate_nested_key(tmp_path, capsys):
    text = (
        yaml.safe_dump(base_config(tmp_path))
        + "best_checkpoint:\n  tasks: [toy-add]\n  metric: pass@1\n  k: 4\n  k: 8\n"
    )
    config = write_yaml(tmp_path, text)
    code, err = run(capsys, ["--config", config])
    assert_refused(code, err, "duplicate key `best_checkpoint.k`")


def test_duplicate_key_in_a_command_line_mapping(tmp_path, capsys):
    config = write_yaml(tmp_path, base_config(tmp_path))
    code, err = run(capsys, ["--config", config, "--best_checkpoint", "{metric: pass@1, metric: avg@k}"])
    assert_refused(code, err, "The value of `best_checkpoint` on the command line", "duplicate key `metric`")


def test_duplicate_key_in_a_mapping_written_as_a_string(tmp_path, capsys):
    # a YAML file may hold a mapping field as a string (as the command line does): its keys are checked too
    config = write_yaml(
        tmp_path, {**base_config(tmp_path), "best_checkpoint": "{tasks: [toy-add], metric: pass@1, metric: reward}"}
    )
    code, err = run(capsys, ["--config", config])
    assert_refused(code, err, "Invalid value for `best_checkpoint`", "duplicate key `metric`", "Remove one of the two")


def test_yaml_loader_nesting_and_merge_keys():
    with pytest.raises(DuplicateKeyError, match=r"`runs\[1\]\.lr` \(lines 3 and 4\)"):
        load_yaml("runs:\n  - {lr: 1}\n  - lr: 1\n    lr: 2\n")
    # a merge key's keys may be overridden: that is YAML's rule, not a duplicate
    assert load_yaml("base: &b {lr: 1, seed: 3}\nrun:\n  <<: *b\n  lr: 2\n")["run"] == {"lr": 2, "seed": 3}
    assert load_yaml("") is None


def test_duplicate_keys_in_select_and_eval_configs(tmp_path, capsys):
    from healtrl.cli.select import select_main
    from healtrl.recipes.recipe import read_run_config

    path = write_yaml(tmp_path, "model: healtrl-toy/qwen2-add\ntop_k: 4\ntop_k: 40\n", "select.yaml")
    assert select_main(["--config", path, "--dry_run"]) == 2
    err = capsys.readouterr().err
    assert "sets a key twice" in err and "duplicate key `top_k` (lines 2 and 3)" in err and "Traceback" not in err
    run_config = write_yaml(tmp_path, "trainer: grpo\nbest_checkpoint:\n  metric: pass@1\n  metric: avg@k\n", "c.yaml")
    with pytest.raises(ValueError, match=r"duplicate key `best_checkpoint\.metric`"):
        read_run_config(run_config)


def test_repeated_config_flag(tmp_path, no_model, capsys):
    first = write_yaml(tmp_path, base_config(tmp_path), "a.yaml")
    second = write_yaml(tmp_path, base_config(tmp_path, learning_rate=1e-3), "b.yaml")
    both_paths(
        tmp_path, capsys, ["--config", first, "--config", second], f"`--config` is given twice ({first}, then {second})",
        "Pass `--config` once",
    )  # fmt: skip
    from healtrl.cli.select import select_main

    assert select_main(["--config", first, "--config", second]) == 2
    assert "--config is given twice" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------------
# A corrupt checkpoint marker (healtrl.checkpoints): skipped when discovered, refused when named
# ----------------------------------------------------------------------------------------------------------------
def checkpoint(output_dir, step: int, marker: str | None):
    folder = output_dir / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    if marker is not None:
        (folder / MARKER_FILE).write_text(marker)
    return folder


GOOD = json.dumps({"format": 1, "complete": True, "trainer": "GRPOBaselineTrainer", "global_step": 1})


def test_corrupt_marker_named_by_the_user_is_refused(tmp_path, no_model, capsys):
    output_dir = tmp_path / "out"
    bad = checkpoint(output_dir, 2, '{"format": 1, "compl')
    with pytest.raises(ResumeError, match="is corrupt: not valid JSON"):
        read_marker(str(bad))
    config = write_yaml(tmp_path, base_config(tmp_path, resume_from_checkpoint=str(bad)))
    both_paths(
        tmp_path, capsys, ["--config", config], f"resume_from_checkpoint: {bad / MARKER_FILE} is corrupt",
        "Point `resume_from_checkpoint` at another checkpoint",
    )  # fmt: skip


def test_corrupt_marker_is_skipped_when_discovering_the_latest(tmp_path, capsys):
    output_dir = tmp_path / "out"
    good = checkpoint(output_dir, 1, GOOD)
    bad = checkpoint(output_dir, 2, "[1, 2]")
    with pytest.warns(RuntimeWarning, match=rf"{bad / MARKER_FILE} is corrupt: not a JSON object"):
        assert last_complete_checkpoint(str(output_dir)) == str(good)
    config = write_yaml(tmp_path, base_config(tmp_path, resume_from_checkpoint="latest"))
    code = train_main(["--config", config, "--dry_run"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    flat = " ".join(captured.out.split())
    assert f"resume: from {good}" in flat and f"{bad / MARKER_FILE} is corrupt" in flat
    # with nothing else left, `latest` is refused, naming the folder
    (good / MARKER_FILE).write_text("")
    code, err = run(capsys, ["--config", config])
    assert_refused(code, err, "no complete checkpoint in", str(bad))


def test_corrupt_marker_is_skipped_by_the_best_checkpoint_search(tmp_path):
    from healtrl.evaluation.best_checkpoint import find_checkpoints

    good = checkpoint(tmp_path, 10, GOOD)
    bad = checkpoint(tmp_path, 20, "not json")
    with pytest.warns(UserWarning, match=rf"{bad / MARKER_FILE} is corrupt"):
        found = find_checkpoints(tmp_path)
    assert [c["path"] for c in found] == [str(good)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a readable marker raises no warning
        (bad / MARKER_FILE).write_text(GOOD)
        assert [c["step"] for c in find_checkpoints(tmp_path)] == [10, 20]
