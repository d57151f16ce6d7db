"""The chunked CUDA path of the LM head (cuBLAS GEMMs + Triton statistics) and the dispatch that picks it.

Same error measure and tolerances as ``tests/test_kernels.py`` (float64 materialised reference; 1e-5 for float32
inputs, 1e-2 for bfloat16/float16). The Triton kernels run under Triton's CPU interpreter in a child pytest process
(``test_chunked_interpreter``), as in ``test_kernels.py``; the ``cuda`` tests run only with a GPU (``pytest -m gpu``).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from healtrl.kernels import api as kapi
from healtrl.kernels import dispatch, triton_available
from tests.test_kernels import extreme_inputs, make_inputs, run_and_compare

CHILD = os.environ.get("HEALTRL_CHUNKED_CHILD") == "1"


# ---------------------------------------------------------------------------------------------------------------
# The plan (no Triton needed) and the dispatch table
# ---------------------------------------------------------------------------------------------------------------
def _plan(*args, **kwargs):
    pytest.importorskip("triton")
    from healtrl.kernels.triton_chunked import plan

    return plan(*args, **kwargs)


@pytest.mark.parametrize(
    "n,v,h,dtype",
    [
        (16384, 151936, 4096, torch.bfloat16),  # the anchors' shape
        (16384, 49152, 576, torch.bfloat16),  # SmolLM2-135M's head: tokens get chunked
        (8192, 32000, 4096, torch.float16),
        (3, 50, 8, torch.float32),  # tiny: one slab
        (100, 1000, 64, torch.float32),
    ],
)
def test_default_plan_bounds_the_buffer(n, v, h, dtype):
    from healtrl.kernels.triton_chunked import MIN_SLAB, SLAB_ALIGN

    rows, slab = _plan(n, v, h, dtype)
    assert 1 <= rows <= n and 1 <= slab <= v
    buffer = rows * slab * (4 + dtype.itemsize)  # fp32 Z and D in the input dtype
    weight_grad = v * h * dtype.itemsize
    # The stated bound, except where even MIN_SLAB columns of 64 tokens exceed it (then 64 tokens of one slab)
    assert buffer <= weight_grad / 4 or (rows == min(n, 64) and slab == min(v, MIN_SLAB))
    if rows == n and slab < v:
        assert slab % SLAB_ALIGN == 0 and slab >= min(v, MIN_SLAB)
        n_slabs = -(-v // slab)
        assert v - (n_slabs - 1) * slab > 0  # no empty slab


def test_plan_values_at_the_anchors_shape():
    # 1/4 of a bf16 dW of 151936 x 4096 is 297 MiB; 16384 tokens x 6 bytes fit 3165 columns -> 3072 (50 slabs)
    assert _plan(16384, 151936, 4096, torch.bfloat16) == (16384, 3072)
    # 1/4 of a 49152 x 576 bf16 dW is 13.5 MiB: under MIN_SLAB columns of all tokens, so 4608 tokens x 512 columns
    assert _plan(16384, 49152, 576, torch.bfloat16) == (4608, 512)
    assert _plan(16384, 49152, 576, torch.bfloat16, chunk_size=8192) == (16384, 8192)
    assert _plan(10, 300, 16, torch.float32, chunk_size=4096) == (10, 300)


def test_dispatch_table_lookup():
    table = {
        "NVIDIA H100": [(1024, "triton", None), (None, "chunked", None)],
        "NVIDIA H200": [(None, "chunked", 4096)],
    }
    bf16 = torch.bfloat16
    assert dispatch.choose("NVIDIA H100 80GB HBM3", bf16, 576, table)[:2] == ("triton", None)
    assert dispatch.choose("NVIDIA H100 80GB HBM3", bf16, 4096, table)[:2] == ("chunked", None)
    assert dispatch.choose("NVIDIA H200", torch.float16, 576, table)[:2] == ("chunked", 4096)
    assert dispatch.choose("NVIDIA H100 80GB HBM3", torch.float32, 4096, table)[:2] == ("triton", None)
    assert dispatch.choose("NVIDIA A100-SXM4-80GB", bf16, 4096, table) == dispatch.FALLBACK


def test_dispatch_table_entries_are_valid():
    dispatch.check_table(dispatch.TABLE)  # the committed table (empty until a GPU runs the sweep)
    assert all(prefix.startswith("NVIDIA") for prefix in dispatch.TABLE)
    dispatch.check_table({"NVIDIA H100": [(1024, "triton", None), (4096, "chunked", 2048), (None, "chunked", None)]})
    bad = [
        {"NVIDIA H100": [(1024, "triton", None)]},  # no class for any hidden size
        {"NVIDIA H100": [(4096, "triton", None), (1024, "chunked", None), (None, "triton", None)]},  # decreasing
        {"NVIDIA H100": [(None, "cublas", None)]},  # no such backend
        {"NVIDIA H100": [(None, "chunked", 0)]},  # chunk size
        {"": [(None, "triton", None)]},  # no prefix
    ]
    for table in bad:
        with pytest.raises(ValueError, match="dispatch table"):
            dispatch.choose("NVIDIA H100 80GB HBM3", torch.bfloat16, 576, table)


def test_auto_follows_the_table_and_the_self_checks(monkeypatch):
    cuda = torch.device("cuda")
    checks = {"triton": True, "chunked": True}
    monkeypatch.setattr(kapi, "triton_available", lambda: True)
    monkeypatch.setattr(kapi, "_triton_self_check", lambda device, which="triton": checks[which])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(dispatch, "TABLE", {"NVIDIA H100": [(1024, "triton", None), (None, "chunked", 2048)]})
    bf16 = torch.bfloat16
    assert kapi._auto_choice(cuda, bf16, 4096) == ("chunked", 2048)
    assert kapi._auto_choice(cuda, bf16, 576) == ("triton", None)
    assert kapi.resolve_backend("auto", cuda, dtype=bf16, hidden_size=4096) == "chunked"
    assert kapi.resolve_backend("auto", cuda) == "triton"  # no shape given: the fused kernel
    checks["chunked"] = False  # the chunked path failed its self-check: the fused kernel
    assert kapi._auto_choice(cuda, bf16, 4096) == ("triton", None)
    checks["triton"] = False  # the fused kernel failed too: torch
    assert kapi._auto_choice(cuda, bf16, 4096) == ("torch", None)
    assert kapi._auto_choice(torch.device("cpu"), bf16, 4096) == ("torch", None)


def test_auto_with_a_chunk_size_keeps_the_fused_meaning(monkeypatch):
    """Under "auto" a caller's chunk_size is the fused path's token chunk: where the table picks the chunked path
    (whose chunk_size is a slab width), the fused path runs with it instead."""
    pytest.importorskip("triton")
    calls = []
    monkeypatch.setattr(kapi, "_auto_choice", lambda device, dtype, h: ("chunked", 4096))
    monkeypatch.setattr(kapi, "_validate", lambda *a: None)
    import healtrl.kernels.triton_chunked as tc
    import healtrl.kernels.triton_fused as tf

    monkeypatch.setattr(tf, "triton_logprob_entropy", lambda *a, **k: calls.append(("fused", k["token_chunk"])))
    monkeypatch.setattr(tc, "chunked_logprob_entropy", lambda *a, **k: calls.append(("chunked", k["chunk_size"])))
    h, w, y, _ = make_inputs(4, 8, 30)
    kapi.fused_logprob_entropy(h, w, y, chunk_size=512)
    kapi.fused_logprob_entropy(h, w, y)
    assert calls == [("fused", 512), ("chunked", 4096)]


@pytest.mark.skipif(CHILD, reason="runs in the parent")
def test_chunked_needs_the_interpreter_on_cpu():
    if not triton_available():
        with pytest.raises(ImportError, match="needs the `triton` package"):
            kapi.resolve_backend("chunked", torch.device("cpu"))
    elif os.environ.get("TRITON_INTERPRET") != "1":
        with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
            kapi.resolve_backend("chunked", torch.device("cpu"))


# ---------------------------------------------------------------------------------------------------------------
# The Triton kernels under the CPU interpreter, in a child process
# ---------------------------------------------------------------------------------------------------------------
def _run_child(markers: str):
    env = {**os.environ, "TRITON_INTERPRET": "1", "HEALTRL_CHUNKED_CHILD": "1"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cmd = [sys.executable, "-m", "pytest", os.path.abspath(__file__), "-k", "chunked_child", "-m", markers, "-q",
           "-p", "no:cacheprovider"]  # fmt: skip
    return subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(CHILD, reason="this is the parent of the interpreter tests")
@pytest.mark.skipif(not triton_available(), reason="triton is not installed (pip install triton)")
@pytest.mark.parametrize(
    "markers", ["not slow", pytest.param("slow", marks=pytest.mark.slow)], ids=["default", "slow-variants"]
)
def test_chunked_interpreter(markers):
    proc = _run_child(markers)
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout and "failed" not in proc.stdout and "skipped" not in proc.stdout, tail


child = pytest.mark.skipif(
    not (CHILD and os.environ.get("TRITON_INTERPRET") == "1"), reason="runs in test_chunked_interpreter's child"
)


@child
@pytest.mark.parametrize(
    "n,h,v,bias,temperature,chunk_size",
    [
        (1, 16, 7, False, 1.0, None),  # N = 1, V below one block
        (37, 24, 301, True, 0.7, 128),  # three slabs, the last partial
        (70, 48, 300, True, 1.3, None),  # default plan: one slab
        (150, 40, 1000, False, 1.0, None),  # default plan: 64-token chunks x 512-column slabs (fp32 dW accumulator)
        (33, 17, 129, True, 1.0, 24),  # odd everything, 6 slabs, the last one 9 wide
    ],
)
def test_chunked_child_fp32(n, h, v, bias, temperature, chunk_size):
    hidden, weight, targets, b = make_inputs(n, h, v, bias=bias, seed=n)
    run_and_compare(hidden, weight, targets, b, temperature=temperature, backend="chunked", chunk_size=chunk_size)


@child
@pytest.mark.parametrize(
    "grad_mode, scale",
    [
        ("logp", 10.0),  # peaked rows, the log-prob gradient alone
        ("entropy", 0.01),  # flat rows, the entropy gradient alone
        pytest.param("logp", 0.01, marks=pytest.mark.slow),
        pytest.param("entropy", 10.0, marks=pytest.mark.slow),
        pytest.param(None, 0.01, marks=pytest.mark.slow),
        pytest.param(None, 10.0, marks=pytest.mark.slow),
    ],
)
def test_chunked_child_grad_modes(grad_mode, scale):
    hidden, weight, targets, b = make_inputs(19, 32, 200, scale=scale, bias=True, seed=2)
    run_and_compare(hidden, weight, targets, b, backend="chunked", grad_mode=grad_mode, chunk_size=64)


@child
def test_chunked_child_extreme():
    hidden, weight, targets = extreme_inputs()
    out, _ = run_and_compare(hidden, weight, targets, backend="chunked", chunk_size=16)
    assert abs(out.entropy[0].item() - 0.6931471805599453) < 1e-6


@child
@pytest.mark.parametrize(
    "dtype, chunk_size",
    [
        (torch.bfloat16, None),
        (torch.float16, 128),
        pytest.param(torch.bfloat16, 128, marks=pytest.mark.slow),
        pytest.param(torch.float16, None, marks=pytest.mark.slow),
    ],
)
def test_chunked_child_low_precision(dtype, chunk_size):
    hidden, weight, targets, b = make_inputs(29, 32, 300, bias=True, dtype=dtype, seed=7)
    run_and_compare(hidden, weight, targets, b, temperature=0.9, backend="chunked", chunk_size=chunk_size)


@child
def test_chunked_child_matches_the_fused_kernel():
    from healtrl.kernels import fused_logprob_entropy

    hidden, weight, targets, b = make_inputs(45, 32, 700, bias=True, seed=5)
    a = fused_logprob_entropy(hidden, weight, targets, bias=b, backend="chunked", power_sums=True, chunk_size=256)
    f = fused_logprob_entropy(hidden, weight, targets, bias=b, backend="triton", power_sums=True)
    for x, y in zip(a, f):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)


@child
def test_chunked_child_self_check(monkeypatch):
    """The one-time check that guards the chunked path under `auto`: passes, and catches a wrong kernel."""
    import healtrl.kernels.triton_chunked as triton_chunked

    monkeypatch.setattr(kapi, "_SELF_CHECKED", {})
    assert kapi._triton_self_check(torch.device("cpu"), "chunked") is True

    real = triton_chunked.chunked_logprob_entropy

    def wrong_gradient(*args, **kwargs):
        out = real(*args, **kwargs)
        return out._replace(logp=out.logp * 0.999 + out.logp.detach() * 0.001)  # same values, gradient off by 0.1%

    monkeypatch.setattr(triton_chunked, "chunked_logprob_entropy", wrong_gradient)
    monkeypatch.setattr(kapi, "_SELF_CHECKED", {})
    with pytest.warns(RuntimeWarning, match="chunked LM-head kernel failed its self-check"):
        assert kapi._triton_self_check(torch.device("cpu"), "chunked") is False


# ---------------------------------------------------------------------------------------------------------------
# CUDA (with a GPU only): cuBLAS with fp32 output and the compiled kernels
# ---------------------------------------------------------------------------------------------------------------
def cuda(test):
    """GPU-only: selected by `pytest -m gpu`, skipped without a CUDA device."""
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")(test))


@cuda
@pytest.mark.skipif(not triton_available(), reason="triton is not installed")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("grad_mode", ["both", "logp", "entropy"])
@pytest.mark.parametrize(
    "n,h,v,bias,chunk_size",
    [
        (1, 64, 7, False, None),
        (333, 96, 3001, True, 1000),
        (1030, 256, 20000, True, None),
        (2000, 96, 50000, False, None),
    ],
)
def test_cuda_chunked(n, h, v, bias, chunk_size, dtype, grad_mode):
    hidden, weight, targets, b = make_inputs(n, h, v, bias=bias, dtype=dtype, seed=n)
    to = lambda t: None if t is None else t.cuda()  # noqa: E731
    assert kapi._triton_self_check(torch.device("cuda"), "chunked")
    run_and_compare(
        to(hidden), to(weight), to(targets), to(b), temperature=0.8, backend="chunked", grad_mode=grad_mode,
        chunk_size=chunk_size,
    )  # fmt: skip


@cuda
@pytest.mark.skipif(not triton_available(), reason="triton is not installed")
def test_cuda_chunked_logits_are_exact_fp32():
    """logp/entropy within 1e-5 of float64 from bf16 inputs (fp32 logits), where bf16 logits are off by ~1e-3."""
    hidden, weight, targets, _ = make_inputs(512, 1024, 32000, dtype=torch.bfloat16, seed=3)
    run_and_compare(hidden.cuda(), weight.cuda(), targets.cuda(), backend="chunked", grad_mode=None, tol=1e-5)


@cuda
def test_cuda_chunked_refuses_fp32():
    pytest.importorskip("triton")
    from healtrl.kernels import fused_logprob_entropy

    hidden, weight, targets, _ = make_inputs(4, 16, 40)
    with pytest.raises(ValueError, match="bfloat16/float16 inputs on CUDA"):
        fused_logprob_entropy(hidden.cuda(), weight.cuda(), targets.cuda(), backend="chunked")
