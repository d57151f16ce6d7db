"""Small context managers shared by the toy modules."""

from __future__ import annotations

import contextlib

import torch
from transformers.utils import logging as hf_logging


@contextlib.contextmanager
def torch_threads(num_threads: int | None):
    """Set torch's intra-op thread count inside the block and restore it afterwards; `None` changes nothing.

    One thread is the fastest setting for the toy models: their matrices are too small to amortise the threading
    overhead, and several threads slow down badly on a machine whose cores are busy with other work.
    """
    previous = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@contextlib.contextmanager
def quiet_progress_bars():
    """Hide transformers' progress bars (weight loading/saving) inside the block, restoring the setting afterwards."""
    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()
