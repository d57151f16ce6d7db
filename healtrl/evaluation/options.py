"""The evaluation's options that the command line reads before anything heavy is imported: `healtrl eval --help`
builds its parser from them without torch (`healtrl.evaluation.engine` imports torch; this module imports nothing).
"""

from __future__ import annotations

__all__ = ["BACKENDS", "DEFAULT_THRESHOLD"]

DEFAULT_THRESHOLD = 1.0
"""A completion is correct when its reward is at least this (full credit for 0/1 rewards and all-tests-pass code)."""
BACKENDS = ("auto", "vllm", "transformers")
"""The generation backends of `evaluate`: `auto` takes vLLM where it is installed and a CUDA device is present."""
