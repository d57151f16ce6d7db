"""Which path ``backend="auto"`` takes on a CUDA device, by device and shape class, from measurements.

Two exact CUDA paths compute the same statistics: ``"triton"``, the fused kernel (``triton_fused``: the logits never
reach memory, its GEMMs are Triton's) and ``"chunked"`` (``triton_chunked``: cuBLAS GEMMs into a bounded fp32 logits
buffer, Triton for the softmax statistics). Which is faster depends on the device and on the head's shape (a small
hidden size makes the logits' memory traffic weigh more against the GEMMs), so the choice is read from
:data:`TABLE`, written from the sweep ``benchmarks/lm_head_sweep.py`` that ``benchmarks/gpu_check.sh`` runs on each
device (its results are to go in a results file named lm_head_gpu.md under benchmarks/results/; no GPU has run
it yet, so the table is empty).

Lookup: the entry whose ``device`` is a prefix of ``torch.cuda.get_device_name()``; within it the first shape class
whose ``max_hidden`` bounds the head's hidden size; its ``backend`` and ``chunk_size`` (``None``: the path's own
default). A device with no entry, and float32 inputs everywhere, take the fused kernel: the path every earlier GPU
check covered, and the chunked path refuses fp32 on CUDA (TF32; see ``triton_chunked``).
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Choice(NamedTuple):
    backend: str  # "triton" (fused) or "chunked"
    chunk_size: int | None  # the path's chunk_size; None: its default
    source: str  # which table entry decided, for logs and tests


# device-name prefix -> shape classes, first match wins; each (max_hidden or None for any, backend, chunk_size).
# Measured in bf16 at N=16384 (see the module docstring for the command).
TABLE: dict[str, list[tuple[int | None, str, int | None]]] = {}

FALLBACK = Choice("triton", None, "no measurement for this device: the fused kernel")


def check_table(table) -> None:
    """Raise ``ValueError`` naming the entry of a malformed dispatch table: each device prefix maps to shape classes
    ``(max_hidden, backend, chunk_size)`` with increasing integer bounds, the last one ``None`` (any hidden size), a
    backend ``"triton"`` or ``"chunked"`` and a chunk size ``None`` or a positive int."""
    for prefix, classes in table.items():
        if not isinstance(prefix, str) or not prefix or not classes:
            raise ValueError(f"dispatch table: entry {prefix!r} needs a device-name prefix and shape classes")
        bounds = [c[0] for c in classes]
        if (
            bounds[-1] is not None
            or any(not isinstance(b, int) for b in bounds[:-1])
            or bounds[:-1] != sorted(set(bounds[:-1]))
        ):
            raise ValueError(f"dispatch table: {prefix!r}: bounds {bounds} must increase and end with None (any H)")
        for _, backend, chunk in classes:
            if backend not in ("triton", "chunked") or not (chunk is None or (isinstance(chunk, int) and chunk > 0)):
                raise ValueError(f"dispatch table: {prefix!r}: ({backend!r}, {chunk!r}) is no backend / chunk size")


def choose(device_name: str, dtype: torch.dtype, hidden_size: int, table=None) -> Choice:
    """The CUDA path for a head of ``hidden_size`` in ``dtype`` on the device named ``device_name``."""
    if table is None:
        table = TABLE  # validated once, at import (below): this runs on every policy forward under "auto"
    else:
        check_table(table)
    if dtype == torch.float32:
        return Choice("triton", None, "float32: the fused kernel (IEEE fp32 products)")
    for prefix, classes in table.items():
        if device_name.startswith(prefix):
            for max_hidden, backend, chunk in classes:
                if max_hidden is None or hidden_size <= max_hidden:
                    bound = "any H" if max_hidden is None else f"H <= {max_hidden}"
                    return Choice(backend, chunk, f"{prefix}, {bound}")
    return FALLBACK


check_table(TABLE)  # a malformed committed table fails at import, not at a first CUDA forward
