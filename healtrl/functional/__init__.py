"""Pure tensor functions behind healtrl's methods: no trainer state, usable directly in tests and user code.

Each function cites the paper and equation it implements.
"""

from .entropy_change import ESTIMATORS, token_entropy_change

__all__ = ["ESTIMATORS", "token_entropy_change"]
