"""Configuration of `train.py`: one flat YAML file, overridable from the command line, checked field by field.

A config names its trainer and sets fields of three dataclasses, in TRL's flat style:

```yaml
trainer: grpo                              # a key of `healtrl.trainers.TRAINERS`
model_name_or_path: healtrl-toy/qwen2-add  # -> trl.ModelConfig
dataset_name: healtrl-toy/add              # -> healtrl.cli.script_args.ScriptArguments
reward_funcs: [toy]
learning_rate: 5.0e-4                      # -> the trainer's config class (e.g. EntropyGRPOConfig)
```

`parse(argv)` reads `--config path.yaml`, applies `--key value` / `--key=value` overrides on top (command line wins),
and returns `(script_args, model_args, trainer_args, trainer_name)`; `resolve(argv)` also returns where each key was
set. Without `--config`, the base layer is `DEFAULT_CONFIG_YAML`, `configs/main.yaml` read from the package
(`shipped_config`), so that a bare `python train.py` works from any directory.

What this adds to TRL's `TrlParser` (and the `HfArgumentParser` under it), which reads the same YAML-plus-command-line
shape, and why it cannot hand the work to them:

1. The `trainer:` key chooses the config class the remaining keys belong to (`TrlParser` takes a fixed list of
   dataclasses), and a key several dataclasses define goes to exactly one of them (`route_fields`; argparse refuses
   the second definition of an option).
2. YAML values are checked and converted like command-line text (`checks.coerce_value`): `TrlParser` sets them as
   argparse defaults, which argparse converts only when they are strings, so `max_steps: 2.5` or a list where a
   number belongs reaches the trainer unchecked (and fails later in its `__post_init__`, or not at all).
3. Every mistake is a `ConfigError` naming the key, where it was set (file or command line) and the fix: unknown
   keys get their closest names, or the trainer that has the field; argparse instead prints a usage line of every
   field and exits with status 2, reads `--num_generation` as an abbreviation or calls it ambiguous, and `TrlParser`
   lists a YAML file's unknown keys without suggestions.
   Numbers are also checked against their ranges (`checks.FIELD_RANGES`: a batch size of 0, `temperature: 0`, a
   negative learning rate), a key set twice in the YAML file (`healtrl.utils.yamlfile.load_yaml`) or a second `--config`
   is refused (YAML and argparse keep the last one silently), and so is an `output_dir` that is a file: `resolve`
   serves the dry run and the run, so both refuse the same input before anything is built.
4. `HfArgumentParser` cannot build a parser for `ScriptArguments` at all: `train_repeats` is `int | "auto" | None`,
   and it allows one type per argument. So the command line is split here (`split_argv`) and values are read with
   `yaml.safe_load`, as a YAML file reads them (`--reward_funcs [toy,other]`, `--bf16 true`); a string field keeps
   the text exactly as typed.
5. An `adjust` hook between reading and building (the dry run replaces GPU-only settings on a CPU and says so),
   the run's `config.yaml` that reproduces it (`ResolvedConfig.to_yaml`), and `--help` listing the chosen trainer's
   fields with their types (for healtrl's own trainers the text shipped for the installed versions, `help_text`).

What is TRL's and used as it is: the dataclasses themselves (`trl.ModelConfig`, the trainers' `GRPOConfig`
subclasses, with their `__post_init__` checks, whose errors are re-raised naming the values involved) and the reading
of booleans written as text (`transformers.hf_argparser.string_to_bool`). TRL's conventions are kept where its code
cannot be called without its argparse half: the `--config` flag, and a YAML file's `env:` mapping exported before
anything is built.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import re
import sys
import textwrap
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..utils.yamlfile import DuplicateKeyError, load_yaml
from . import checks
from .checks import ConfigError, coerce_value, describe_type, to_plain
from .help_text import shipped_help
from .script_args import ScriptArguments

__all__ = [
    "DEFAULT_CONFIG_NAME",
    "DEFAULT_CONFIG_YAML",
    "FIELD_OWNERS",
    "ConfigError",
    "ResolvedConfig",
    "ScriptArguments",
    "coerce_value",
    "format_help",
    "parse",
    "resolve",
]


# ----------------------------------------------------------------------------------------------------------------
# The embedded default run
# ----------------------------------------------------------------------------------------------------------------
DEFAULT_CONFIG_NAME = "configs/main.yaml"


def shipped_config(name: str) -> str:
    """The text of a config shipped with healtrl (`healtrl/configs/<name>`, package data; the repository's `configs/`
    is a link to that folder)."""
    from importlib.resources import files

    return (files("healtrl") / "configs" / name).read_text(encoding="utf-8")


# A bare `python train.py` runs it as step 2 of the main job (healtrl/cli/main_job.py), after the selection that
# writes its general data.
DEFAULT_CONFIG_YAML = shipped_config("main.yaml")


# ----------------------------------------------------------------------------------------------------------------
# Routing keys to dataclasses
# ----------------------------------------------------------------------------------------------------------------
GROUPS = ("script", "model", "trainer")

# A key defined by several of the dataclasses goes to exactly one of them: the one named here, else the first of
# `ROUTING_PRIORITY` that defines it. The others keep their defaults.
FIELD_OWNERS: dict[str, str] = {
    "model_name_or_path": "model",
    "model_revision": "model",
    "dtype": "model",
    "dataset_name": "script",
    "dataset_config": "script",
    "reward_funcs": "script",
}
ROUTING_PRIORITY = ("model", "trainer", "script")

# Keys that are not dataclass fields.
SPECIAL_KEYS = {
    "trainer": "Name of the trainer (a key of healtrl.trainers.TRAINERS).",
    "env": "Mapping of environment variables to set before anything is built (YAML only).",
    "config": "Path of the YAML config (command line only).",
}


def _init_fields(cls) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls) if f.init}


@functools.cache
def _type_hints(cls) -> dict[str, Any]:
    """Resolved type hints of a dataclass (every shipped config class resolves; a config class whose hints do not is
    a bug to fix there, as it is for `HfArgumentParser`)."""
    return typing.get_type_hints(cls)


def route_fields(classes: dict[str, type]) -> dict[str, str]:
    """Map every settable key to the one group (`script`, `model`, `trainer`) whose dataclass receives it."""
    owners: dict[str, list[str]] = {}
    for group, cls in classes.items():
        for name in _init_fields(cls):
            owners.setdefault(name, []).append(group)
    routes = {}
    for name, groups in owners.items():
        if len(groups) == 1:
            routes[name] = groups[0]
        elif FIELD_OWNERS.get(name) in groups:
            routes[name] = FIELD_OWNERS[name]
        else:
            routes[name] = next(g for g in ROUTING_PRIORITY if g in groups)
    return routes


# Command line -----------------------------------------------------------------------------------------------------
@dataclass
class _CommandLine:
    config_path: str | None = None
    help: bool = False
    # (key, raw text or None for a bare flag, the option as typed)
    overrides: list[tuple[str, list[str] | None, str]] = field(default_factory=list)


def split_argv(argv: list[str]) -> _CommandLine:
    """Split `argv` into `--config`, `--help` and `--key value` overrides (values are kept as text)."""
    cli = _CommandLine()
    i = 0
    while i < len(argv):
        token = argv[i]
        if token in ("-h", "--help"):
            cli.help = True
            i += 1
            continue
        if not token.startswith("--") or token == "--":
            raise ConfigError(
                f"Unexpected command-line argument {token!r}. Arguments are `--config path.yaml` and overrides of "
                "the form `--key value` or `--key=value`; quote values that contain spaces."
            )
        body = token[2:]
        if "=" in body:
            key, text = body.split("=", 1)
            values: list[str] | None = [text]
            i += 1
        else:
            key = body
            values = []
            i += 1
            while i < len(argv) and not argv[i].startswith("--") and argv[i] != "-h":
                values.append(argv[i])
                i += 1
            if not values:
                values = None
        key = key.replace("-", "_")
        if key == "config":
            if not values or len(values) != 1:
                raise ConfigError(
                    "`--config` needs exactly one value: the path of a YAML config, e.g. "
                    "`--config configs/toy_grpo.yaml`."
                )
            if cli.config_path is not None:
                raise ConfigError(
                    f"`--config` is given twice ({cli.config_path}, then {values[0]}): a run reads one config file, "
                    "and configs are not merged. Pass `--config` once, and set the keys that differ as `--key value` "
                    "overrides on the command line."
                )
            cli.config_path = values[0]
            continue
        cli.overrides.append((key, values, token))
    return cli


def _parse_cli_value(values: list[str]):
    """The YAML reading of one or more command-line words (several words form a list, as with nargs='+'); raises
    `DuplicateKeyError` for a mapping that repeats a key (`--best_checkpoint "{k: 1, k: 2}"`)."""

    def one(text: str):
        try:
            return load_yaml(text) if text.strip() else text
        except DuplicateKeyError:
            raise
        except yaml.YAMLError:
            return text

    if len(values) == 1:
        return one(values[0]), values[0]
    return [one(v) for v in values], None


# ----------------------------------------------------------------------------------------------------------------
# Resolution
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class ResolvedConfig:
    """The outcome of `resolve`: the built argument dataclasses plus where every explicitly set key came from."""

    trainer_name: str
    script_args: ScriptArguments
    model_args: Any
    trainer_args: Any
    values: dict[str, Any]
    sources: dict[str, str]
    config_path: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    def as_tuple(self) -> tuple[ScriptArguments, Any, Any, str]:
        return self.script_args, self.model_args, self.trainer_args, self.trainer_name

    def to_yaml(self) -> str:
        """The explicitly set keys as a flat YAML config that reproduces the run with `--config`."""
        data: dict[str, Any] = {"trainer": self.trainer_name}
        if self.env:
            data["env"] = dict(self.env)
        data.update({k: to_plain(v) for k, v in self.values.items() if k != "trainer"})
        return yaml.safe_dump(data, sort_keys=False)


def _trainer_registry(registry):
    if registry is not None:
        return registry
    from healtrl.trainers import TRAINERS

    return TRAINERS


def _get_trainer_classes(name, registry, source: str) -> tuple[type, type]:
    registry = _trainer_registry(registry)
    if name is None:
        raise ConfigError(
            f"No trainer is set ({source}). Add `trainer: <name>` to the YAML config or pass `--trainer <name>`; "
            f"available trainers: {', '.join(sorted(registry))}."
        )
    if not isinstance(name, str) or name not in registry:
        close = difflib.get_close_matches(str(name), list(registry), n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ConfigError(
            f"Unknown trainer {name!r} ({source}). Available trainers: {', '.join(sorted(registry))}.{hint} Set "
            "`trainer:` in the config (or `--trainer` on the command line) to one of them."
        )
    return registry[name]


def _load_yaml(path: str) -> dict[str, Any]:
    if not os.path.isfile(path):
        raise ConfigError(
            f"Config file {path!r} does not exist (working directory: {os.getcwd()}). Pass the path of a YAML "
            "config with `--config`, e.g. `--config configs/toy_grpo.yaml`."
        )
    with open(path) as f:
        try:
            data = load_yaml(f)
        except DuplicateKeyError as exc:
            raise ConfigError(f"Config file {path!r} sets a key twice: {exc}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"Config file {path!r} is not valid YAML: {exc}. Fix the syntax at that line.") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"Config file {path!r} must be a YAML mapping of `key: value` lines, found a {type(data).__name__}."
        )
    return data


def _classes_for(trainer_config_cls) -> dict[str, type]:
    from trl import ModelConfig

    return {"script": ScriptArguments, "model": ModelConfig, "trainer": trainer_config_cls}


def _help_hint(config_path: str | None, prog: str = "train.py") -> str:
    where = f"--config {config_path} " if config_path else ""
    command = f"python {prog}" if prog.endswith(".py") else prog
    return f"`{command} {where}--help`"


def resolve(
    argv: list[str] | None = None,
    *,
    default: dict[str, Any] | str | None = None,
    registry: dict[str, tuple[type, type]] | None = None,
    prog: str = "train.py",
    adjust: Callable[[dict[str, Any], dict[str, str]], None] | None = None,
) -> ResolvedConfig:
    """Parse `argv` into the three argument dataclasses; see `parse`.

    Args:
        argv: Command-line words (default `sys.argv[1:]`).
        default: Config used when `argv` has no `--config`: a mapping or YAML text. `None` means no default (then
            `trainer` and the other keys must come from the command line).
        registry: Trainer registry, name -> (trainer class, config class); defaults to `healtrl.trainers.TRAINERS`.
        prog: Program name shown by `--help`.
        adjust: Called as `adjust(values, sources)` with the merged, type-checked values (key -> value) and where each
            was set, just before the dataclasses are built; it may change both in place (`train.py --dry_run` uses
            it to build GPU configs on a machine without one, and says so).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    cli = split_argv(argv)

    # 1. The base layer: the YAML file, else the embedded default.
    if cli.config_path is not None:
        base = _load_yaml(cli.config_path)
        base_source = f"in config file {cli.config_path}"
    elif default is not None:
        base = load_yaml(default) if isinstance(default, str) else dict(default)
        base_source = f"in the embedded default config ({DEFAULT_CONFIG_NAME})"
    else:
        base, base_source = {}, None

    if "config" in base:
        raise ConfigError(
            f"`config` is set {base_source}; a YAML config cannot include another. Remove the key and pass the "
            "path with `--config` on the command line."
        )
    env = base.pop("env", None)
    if env is not None:
        if not isinstance(env, dict):
            raise ConfigError(f"`env` {base_source} must be a mapping of environment variable names to values.")
        env = {str(name): str(value) for name, value in env.items()}
        os.environ.update(env)

    # 2. The trainer decides which config class the remaining keys belong to.
    trainer_name, trainer_source = base.get("trainer"), base_source or "no config file given"
    for key, values, _ in cli.overrides:
        if key == "trainer":
            if not values or len(values) != 1:
                raise ConfigError("`--trainer` needs one value, the trainer's name, e.g. `--trainer grpo`.")
            trainer_name, trainer_source = values[0], "on the command line"
    live = registry is not None or "healtrl.trainers" in sys.modules  # imported: live text, registrations included
    if cli.help and not live and (text := shipped_help(trainer_name, prog)) is not None:
        print(text, end="")  # healtrl's own trainers: the text shipped for these versions (`help_text`)
        raise SystemExit(0)
    if trainer_name is None and cli.help:
        print(format_help(None, registry=registry, prog=prog))
        raise SystemExit(0)
    _, config_cls = _get_trainer_classes(trainer_name, registry, trainer_source)
    classes = _classes_for(config_cls)
    if cli.help:
        print(format_help(trainer_name, registry=registry, prog=prog))
        raise SystemExit(0)

    routes = route_fields(classes)
    fields = {group: _init_fields(cls) for group, cls in classes.items()}
    hints = {group: _type_hints(cls) for group, cls in classes.items()}
    known = sorted(set(routes) | set(SPECIAL_KEYS))

    def unknown(key: str, where: str):
        other = [
            name
            for name, (_, cls) in sorted(_trainer_registry(registry).items())
            if name != trainer_name and key in _init_fields(cls)
        ]
        close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
        if other:
            suggestion = (
                f" It is a field of the trainer{'s' if len(other) > 1 else ''} "
                + ", ".join(f"'{name}'" for name in other)
                + f"; set `trainer:` to {'one of them' if len(other) > 1 else 'it'} to use it."
            )
        elif close:
            suggestion = " Did you mean " + " or ".join(f"`{c}`" for c in close) + "?"
        else:
            suggestion = " No key has a similar name."
        return ConfigError(
            f"Unknown key `{key}` {where}.{suggestion} Keys are the fields of ScriptArguments, ModelConfig and "
            f"{config_cls.__name__} (trainer '{trainer_name}'); list them with {_help_hint(cli.config_path, prog)}."
        )

    def convert(key: str, value, raw, where: str):
        group = routes[key]
        hint = hints[group].get(key, Any)
        f = fields[group][key]
        try:
            converted = coerce_value(value, hint, raw)
        except DuplicateKeyError as exc:
            raise ConfigError(f"Invalid value for `{key}` {where}: the mapping written as text has a {exc}") from None
        except ValueError:
            default_value = _field_default(f)
            example = f" Its default is {default_value!r}." if default_value is not _MISSING else ""
            shown = raw if raw is not None else value
            raise ConfigError(
                f"Invalid value for `{key}` {where}: expected {describe_type(hint)}, got {shown!r} "
                f"({type(value).__name__}).{example} Set `{key}` to a value of that type (quote strings in YAML; "
                f"run {_help_hint(cli.config_path, prog)} for the meaning of each field)."
            ) from None
        choices = f.metadata.get("choices")
        if choices is not None and converted is not None and converted not in list(choices):
            raise ConfigError(
                f"Invalid value for `{key}` {where}: {converted!r} is not one of "
                f"{', '.join(repr(c) for c in choices)}. Set `{key}` to one of them."
            )
        return converted

    # 3. Merge: the base layer, then the command line.
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key, value in base.items():
        if key == "trainer":
            continue
        if not isinstance(key, str) or key not in routes:
            raise unknown(str(key), base_source)
        values[key] = convert(key, value, None, base_source)
        sources[key] = base_source
    for key, words, token in cli.overrides:
        if key == "trainer":
            continue
        where = f"on the command line ({token.split('=', 1)[0]})"
        if key not in routes:
            raise unknown(key, where)
        if words is None:  # a bare `--flag`
            hint = hints[routes[key]].get(key, Any)
            if not checks.accepts_bool(hint):
                raise ConfigError(
                    f"`--{key}` on the command line has no value; `{key}` expects {describe_type(hint)}. Pass it as "
                    f"`--{key} VALUE` or `--{key}=VALUE`."
                )
            value, raw = True, None
        else:
            try:
                value, raw = _parse_cli_value(words)
            except DuplicateKeyError as exc:
                raise ConfigError(f"The value of `{key}` {where} sets a key twice: {exc}") from None
        values[key] = convert(key, value, raw, where)
        sources[key] = where

    # 3b. Ranges (`checks.FIELD_RANGES`): values the dataclasses would accept and the run would crash on.
    out_of_range = checks.check_ranges(values)
    if out_of_range is not None:
        key, value, bounds = out_of_range
        f = fields[routes[key]][key]
        default_value = _field_default(f)
        example = f" Its default is {to_plain(default_value)!r}." if default_value is not _MISSING else ""
        raise ConfigError(
            f"Invalid value for `{key}` {sources[key]}: {value!r} is out of range ({bounds.meaning}); `{key}` must "
            f"be {bounds.describe()}.{example} Set `{key}` to a value in that range."
        )

    if adjust is not None:
        adjust(values, sources)

    # 4. Build the dataclasses; their own checks (__post_init__) become ConfigErrors too.
    kwargs: dict[str, dict[str, Any]] = {group: {} for group in GROUPS}
    for key, value in values.items():
        kwargs[routes[key]][key] = value
    built = {}
    for group in GROUPS:
        cls = classes[group]
        try:
            built[group] = cls(**kwargs[group])
        except (ValueError, TypeError, ArithmeticError) as exc:  # ArithmeticError: a division by a value set to 0
            message = str(exc).strip()
            named = [k for k in kwargs[group] if re.search(rf"\b{re.escape(k)}\b", message)]
            involved = "; ".join(f"`{k}` = {to_plain(values[k])!r} {sources[k]}" for k in named)
            involved = f" Values involved: {involved}." if involved else ""
            if message and message[-1] not in ".!?":
                message += "."
            raise ConfigError(
                f"{cls.__name__} rejected the configuration: {message}{involved} Change these values in the config "
                "file or on the command line."
            ) from exc

    script_args, model_args = built["script"], built["model"]
    checks.check_required_fields(script_args, model_args, sources, cli.config_path)
    checks.check_output_dir(built["trainer"].output_dir, sources)
    return ResolvedConfig(
        trainer_name=trainer_name,
        script_args=script_args,
        model_args=model_args,
        trainer_args=built["trainer"],
        values=values,
        sources=sources,
        config_path=cli.config_path,
        env=env or {},
    )


def parse(
    argv: list[str] | None = None,
    *,
    default: dict[str, Any] | str | None = DEFAULT_CONFIG_YAML,
    registry: dict[str, tuple[type, type]] | None = None,
) -> tuple[ScriptArguments, Any, Any, str]:
    """Parse a YAML config plus command-line overrides into `(script_args, model_args, trainer_args, trainer_name)`.

    `argv` defaults to `sys.argv[1:]`. Without `--config`, the embedded default (`DEFAULT_CONFIG_YAML`) is the base
    layer; pass `default=None` to start from nothing. Raises `ConfigError` for any mistake; prints the fields and
    exits on `--help`.
    """
    return resolve(argv, default=default, registry=registry).as_tuple()


class _MissingType:
    def __repr__(self):
        return "<required>"


_MISSING = _MissingType()


def _field_default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        try:
            return f.default_factory()  # type: ignore[misc]
        except Exception:  # pragma: no cover
            return _MISSING
    return _MISSING


# ----------------------------------------------------------------------------------------------------------------
# --help
# ----------------------------------------------------------------------------------------------------------------
def _first_paragraph(text: str) -> str:
    return " ".join(text.split())


def format_help(trainer_name: str | None, *, registry=None, prog: str = "train.py") -> str:
    """The `--help` text: usage, the trainers, then every field (type, default, help) of the chosen trainer's config."""
    registry = _trainer_registry(registry)
    width = 100
    lines = [
        f"usage: {prog} [--config CONFIG.yaml] [--key VALUE ...] [--dry_run] [--help] [--version]",
        "",
        "Train with a healtrl trainer. Keys come from a flat YAML config (--config) and are overridden by --key VALUE "
        "or --key=VALUE on the command line. Without --config the embedded default "
        f"({DEFAULT_CONFIG_NAME}) runs.",
        "",
        "trainer (--trainer NAME):",
    ]
    for name, (trainer_cls, config_cls) in sorted(registry.items()):
        mark = " (selected)" if name == trainer_name else ""
        lines.append(f"  {name}: {trainer_cls.__name__} with {config_cls.__name__}{mark}")
    if trainer_name is None:
        from trl import ModelConfig

        classes = {"script": ScriptArguments, "model": ModelConfig}
        lines += ["", "Set a trainer (--trainer NAME or `trainer:` in the config) to list the trainer's fields too."]
    else:
        classes = _classes_for(registry[trainer_name][1])
    routes = route_fields(classes)
    titles = {"script": "script arguments", "model": "model arguments", "trainer": "trainer arguments"}
    for group, cls in classes.items():
        lines += ["", f"{titles[group]} ({cls.__name__}):"]
        hints = _type_hints(cls)
        for name, f in _init_fields(cls).items():
            if routes.get(name) != group:
                continue
            default_value = _field_default(f)
            default_text = "required" if default_value is _MISSING else f"default: {to_plain(default_value)!r}"
            lines.append(f"  --{name} ({describe_type(hints.get(name, Any))}; {default_text})")
            help_text = _first_paragraph(f.metadata.get("help", ""))
            if help_text:
                lines += textwrap.wrap(help_text, width=width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)
