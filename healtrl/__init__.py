"""healtrl: reinforcement learning from verifiable rewards without entropy collapse, on top of TRL."""

from ._compat import check_trl_version
from ._version import __version__

TRL_VERSION = check_trl_version()

from . import trainers as _trainers  # noqa: E402
from .trainers import *  # noqa: E402, F403 - the trainers and configs are the package's public API

__all__ = [*_trainers.__all__, "__version__"]
