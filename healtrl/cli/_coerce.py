"""Coercion of config values to a dataclass field's type hint, with the expected type named when it fails.

TRL's `TrlParser` hands YAML values to the dataclasses unconverted and converts command-line text with argparse
`type=` callables (one type per field; an error exits the process with a usage line). A flat healtrl config needs one
conversion for both layers that raises instead, so that the caller can name the key, where it was set and the fix:
`coerce_value`. Booleans written as text are read by transformers' own `string_to_bool` (the words TRL's command
line accepts).
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any, Literal, Union

import yaml

from healtrl.utils.yamlfile import DuplicateKeyError, load_yaml

__all__ = ["coerce_value", "describe_type"]


class _Mismatch(Exception):
    """The value does not fit the type hint."""


_NONE_TYPE = type(None)


def _is_union(hint) -> bool:
    return typing.get_origin(hint) in (Union, types.UnionType)


def _is_enum(hint) -> bool:
    return isinstance(hint, type) and issubclass(hint, enum.Enum)


def _union_members(hint) -> list:
    """Members of a union, with HF's `SomeEnum | str` read as "one of the enum's values"."""
    members = list(typing.get_args(hint))
    if any(_is_enum(m) for m in members) and str in members:
        members.remove(str)
    return members


def describe_type(hint) -> str:
    """Human-readable name of a type hint, for error messages and `--help`."""
    if hint is Any:
        return "any value"
    if hint is _NONE_TYPE or hint is None:
        return "null"
    if _is_union(hint):
        members = _union_members(hint)
        names = [describe_type(m) for m in members if m is not _NONE_TYPE]
        text = " or ".join(dict.fromkeys(names))
        return f"{text} or null" if _NONE_TYPE in members else text
    origin = typing.get_origin(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if _is_enum(hint):
        return "one of " + ", ".join(repr(m.value) for m in hint)
    if origin in (list, tuple, set, frozenset) or hint in (list, tuple, set):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return f"list of {describe_type(args[0])}" if args else "list"
    if origin is dict or hint is dict:
        return "mapping"
    if isinstance(hint, type):
        return hint.__name__
    return str(hint)


def _fits_exactly(value, hint) -> bool:
    """Whether `value` already has the type `hint` names (no conversion), for picking a union member."""
    if hint is Any:
        return True
    if hint is _NONE_TYPE:
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, float)
    if hint is str:
        return isinstance(value, str)
    origin = typing.get_origin(hint)
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in typing.get_args(hint))
    if _is_enum(hint):
        return isinstance(value, hint) or any(value == m.value for m in hint)
    if origin in (list, tuple, set, frozenset) or hint in (list, tuple, set):
        return isinstance(value, (list, tuple))
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return False


def coerce_value(value, hint, raw: str | None = None):
    """Convert `value` to the type hint `hint`, or raise `ValueError` naming the expected type.

    `raw` is the text typed on the command line (string fields keep it verbatim). Accepted conversions: strings such
    as "5e-4" to float (YAML reads `5e-4` without a dot as a string), integral floats and numeric strings to int,
    0/1 and the words of `transformers.hf_argparser.string_to_bool` (true/false, yes/no, t/f, y/n, 1/0, any case)
    to bool, numbers to str, a scalar or a comma-separated string to a one-or-more item list, enum values (HF's
    `lr_scheduler_type`, `optim`, ...) checked against their choices, and YAML's unquoted yes/no/on/off booleans to
    the matching string choice (`save_strategy: no`).
    """
    try:
        return _coerce(value, hint, raw)
    except _Mismatch:
        pass
    if raw is not None and raw != value:  # e.g. `--save_strategy no`: YAML reads `no` as False; the text fits
        try:
            return _coerce(raw, hint, raw)
        except _Mismatch:
            pass
    raise ValueError(f"expected {describe_type(hint)}")


def _read_text(read, text: str, error: type[Exception] = ValueError):
    """`read(text)`, with its `error` turned into a mismatch."""
    try:
        return read(text)
    except error:
        raise _Mismatch from None


def _coerce(value, hint, raw):
    if hint is Any or hint is object:
        return value
    if hint is _NONE_TYPE or hint is None:
        if value is None:
            return None
        raise _Mismatch
    if _is_union(hint):
        members = _union_members(hint)
        if value is None:
            if _NONE_TYPE in members:
                return None
            raise _Mismatch
        members = [m for m in members if m is not _NONE_TYPE]
        for member in members:  # a member the value already is, without conversion, wins
            if _fits_exactly(value, member):
                return _coerce(value, member, raw)
        for member in members:
            try:
                return _coerce(value, member, raw)
            except _Mismatch:
                continue
        raise _Mismatch
    origin = typing.get_origin(hint)
    if isinstance(value, bool) and (origin is Literal or _is_enum(hint)):
        # YAML 1.1 reads unquoted yes/no/on/off/true/false as booleans: `save_strategy: no` means the choice "no".
        choices = [m.value for m in hint] if _is_enum(hint) else list(typing.get_args(hint))
        if value not in [c for c in choices if isinstance(c, bool)]:
            spellings = ("yes", "true", "on", "y") if value else ("no", "false", "off", "n")
            for text in spellings:
                if text in choices:
                    return text
    if origin is Literal:
        for choice in typing.get_args(hint):
            if value == choice and type(value) is type(choice):
                return choice
            try:
                if _coerce(value, type(choice), raw) == choice:
                    return choice
            except _Mismatch:
                pass
        raise _Mismatch
    if _is_enum(hint):
        if isinstance(value, hint):
            return value.value
        for member in hint:
            if value == member.value or (isinstance(value, str) and value.lower() == str(member.value).lower()):
                return member.value
        raise _Mismatch
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str):
            from argparse import ArgumentTypeError

            from transformers.hf_argparser import string_to_bool

            return _read_text(string_to_bool, value.strip(), ArgumentTypeError)
        raise _Mismatch
    if hint is int:
        if isinstance(value, bool):
            raise _Mismatch
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            text = value.strip().replace("_", "")
            try:
                return int(text)
            except ValueError:
                pass
            number = _read_text(float, text)
            if number.is_integer():
                return int(number)
        raise _Mismatch
    if hint is float:
        if isinstance(value, bool):
            raise _Mismatch
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            return _read_text(float, value.strip())
        raise _Mismatch
    if hint is str:
        if isinstance(value, str):
            return value
        if raw is not None and not isinstance(value, (list, dict)):
            return raw
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise _Mismatch
    if origin in (list, tuple, set, frozenset) or hint in (list, tuple, set):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        item_hint = args[0] if args else Any
        if isinstance(value, (list, tuple)):
            items = list(value)
        elif isinstance(value, str) and "," in value:
            items = [part.strip() for part in value.split(",") if part.strip()]
        elif value is None:
            raise _Mismatch
        else:
            items = [value]
        return [_coerce(item, item_hint, None) for item in items]
    if origin is dict or hint is dict:
        if isinstance(value, str):  # a JSON/YAML mapping written as a string
            try:
                parsed = load_yaml(value)
            except DuplicateKeyError:
                raise  # named by the caller: the text is a mapping, with a key set twice
            except yaml.YAMLError:
                raise _Mismatch from None
            value = parsed
        if not isinstance(value, dict):
            raise _Mismatch
        args = typing.get_args(hint)
        if len(args) == 2:
            return {_coerce(k, args[0], None): _coerce(v, args[1], None) for k, v in value.items()}
        return dict(value)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if isinstance(value, hint):
            return value
        if isinstance(value, dict):
            try:
                return hint(**value)
            except TypeError:
                raise _Mismatch from None
        raise _Mismatch
    if isinstance(hint, type):
        if isinstance(value, hint):
            return value
        raise _Mismatch
    return value  # an exotic hint (TypeVar, Callable, ...): pass the value through


def _accepts_bool(hint) -> bool:
    if hint is bool or hint is Any:
        return True
    if _is_union(hint):
        return any(_accepts_bool(m) for m in typing.get_args(hint))
    return False


def _to_plain(value):
    """A YAML-safe copy of a coerced value (enum members to their values)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _to_plain(dataclasses.asdict(value))
    return value
