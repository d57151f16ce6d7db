"""Lazy re-exports for a package's `__init__`: the public names of its modules, imported on first access (PEP 562).

A package such as `healtrl.evaluation` offers `from healtrl.evaluation import evaluate` without importing every module
it holds when one of them is imported (`healtrl.evaluation.callback` imports TRL's trainer stack; the cheap command
line helps import `healtrl.recipes.metrics` alone), and without import cycles between a package's `__init__` and its
modules.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[list[str], Callable, Callable]:
    """`(__all__, __getattr__, __dir__)` for `package`, whose public name `n` lives in its module `exports[n]`.

    `__getattr__` imports that module on the first access of `n`, binds `n` in the package so that later accesses
    skip it, and raises AttributeError for any other name, as a module without `__getattr__` does.
    """
    names = sorted(exports)

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        setattr(importlib.import_module(package), name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(importlib.import_module(package)), *names})

    return names, __getattr__, __dir__
