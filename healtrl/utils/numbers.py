"""Type checks of config values, shared by the modules that validate settings: YAML and keyword values reach them
as Python objects, and `True` is an `int` in Python, so a bare `isinstance` would accept `temperature: true`."""

from __future__ import annotations

import math

__all__ = ["is_finite_number", "is_int", "is_number"]


def is_int(value) -> bool:
    """An `int` that is not a `bool`."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    """An `int` or `float` that is not a `bool` (NaN and infinities included)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite_number(value) -> bool:
    """An `int` or `float` that is not a `bool`, and is finite."""
    return is_number(value) and math.isfinite(value)
