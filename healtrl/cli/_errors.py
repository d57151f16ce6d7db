"""The error of a configuration mistake, shared by the config modules of the command line."""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A configuration mistake: the message names the field, where it was set, and the fix."""
