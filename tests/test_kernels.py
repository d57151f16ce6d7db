"""Fused LM-head kernel (healtrl.kernels) against the float64 materialised reference.

Error measure: ``rel_err(x, ref) = max |x - ref| / max(max |ref|, floor)``, the worst absolute error in units of
the largest reference value. For logp and entropy (in nats) the floor is 1 nat, so that a batch of very peaked rows
(entropies ~1e-20) is judged by absolute error; gradients use floor 0. Tolerances: 1e-5 for float32 inputs, 1e-2 for
bfloat16/float16 inputs.

The Triton path runs under Triton's CPU interpreter, which must be enabled before triton is first imported: the
``test_triton_child_*`` tests run only in a child pytest process that ``test_triton_interpreter`` starts with
``TRITON_INTERPRET=1`` (so the variable never leaks into this process or other test modules).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from healtrl.kernels import (
    LogProbEntropy,
    fused_logprob_entropy,
    reference_logprob_entropy,
    resolve_backend,
    torch_chunked,
    triton_available,
)
from healtrl.kernels import api as kapi

CHILD = os.environ.get("HEALTRL_TRITON_CHILD") == "1"
FP32_TOL = 1e-5
LOWP_TOL = 1e-2


def rel_err(x: torch.Tensor, ref: torch.Tensor, floor: float = 0.0) -> float:
    assert x.shape == ref.shape, (x.shape, ref.shape)
    x, ref = x.double(), ref.double()
    assert torch.isfinite(x).all(), "non-finite values"
    scale = max(ref.abs().max().item(), floor)
    return (x - ref).abs().max().item() / scale if scale > 0 else (x - ref).abs().max().item()


def make_inputs(n, h, v, *, scale=2.0, bias=False, dtype=torch.float32, seed=0):
    """Inputs whose logits have standard deviation ~``scale`` (0.01: flat, 20: very peaked)."""
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=g) * (scale / h**0.5) ** 0.5
    weight = torch.randn(v, h, generator=g) * (scale / h**0.5) ** 0.5
    b = torch.randn(v, generator=g) * 0.5 * scale if bias else None
    targets = torch.randint(0, v, (n,), generator=g)
    cast = lambda t: None if t is None else t.to(dtype)  # noqa: E731
    return cast(hidden), cast(weight), targets, cast(b)


def extreme_inputs(n=9, v=40, seed=0):
    """Logits that are exact integers in [-1e4, 1e4] (one-hot hidden rows pick columns of an integer weight), with
    exact ties at the maximum in some rows."""
    g = torch.Generator().manual_seed(seed)
    h = 8
    weight = torch.randint(-10000, 10001, (v, h), generator=g).float()
    weight[1] = weight[0]  # token 1 ties with token 0 everywhere
    weight[0, 0] = weight[1, 0] = 10000.0  # and both hold the row maximum when hidden picks column 0
    weight[2:, 0] = weight[2:, 0].clamp(max=9990.0)
    hidden = torch.zeros(n, h)
    hidden[torch.arange(n), torch.arange(n) % h] = 1.0
    targets = torch.randint(0, v, (n,), generator=g)
    targets[0] = 1
    return hidden, weight, targets


def run_and_compare(
    hidden,
    weight,
    targets,
    bias=None,
    *,
    temperature=1.0,
    backend="torch",
    grad_mode="both",
    power_sums=True,
    tol=None,
    seed=1,
    **kwargs,
):
    """Forward (+ backward with random upstream grads) of the kernel against the float64 reference."""
    lowp = hidden.dtype != torch.float32
    tol = tol or (LOWP_TOL if lowp else FP32_TOL)
    leaves = [t.detach().clone().requires_grad_() if t is not None else None for t in (hidden, weight, bias)]
    refs = [t.detach().double().requires_grad_() if t is not None else None for t in (hidden, weight, bias)]
    if backend == "triton-direct":
        from healtrl.kernels.triton_fused import triton_logprob_entropy

        out = triton_logprob_entropy(
            leaves[0], leaves[1], targets, bias=leaves[2], temperature=temperature, power_sums=power_sums, **kwargs
        )
    else:
        out = fused_logprob_entropy(
            leaves[0],
            leaves[1],
            targets,
            bias=leaves[2],
            temperature=temperature,
            power_sums=power_sums,
            backend=backend,
            **kwargs,
        )
    ref = reference_logprob_entropy(
        refs[0], refs[1], targets, bias=refs[2], temperature=temperature, power_sums=power_sums
    )
    assert isinstance(out, LogProbEntropy)
    for x in (out.logp, out.entropy):
        assert x.dtype == torch.float32 and x.shape == targets.shape
    errs = {"logp": rel_err(out.logp, ref.logp, 1.0), "entropy": rel_err(out.entropy, ref.entropy, 1.0)}
    if power_sums:
        assert out.sum_p2.dtype == torch.float32 and not out.sum_p2.requires_grad
        assert not out.sum_p2_logp.requires_grad
        errs["sum_p2"] = rel_err(out.sum_p2, ref.sum_p2, 1.0)
        errs["sum_p2_logp"] = rel_err(out.sum_p2_logp, ref.sum_p2_logp, 1.0)
    else:
        assert out.sum_p2 is None and out.sum_p2_logp is None

    if grad_mode is not None:
        g = torch.Generator().manual_seed(seed)
        g_l = torch.randn(targets.shape[0], generator=g, dtype=torch.float64).to(targets.device)
        g_h = torch.randn(targets.shape[0], generator=g, dtype=torch.float64).to(targets.device)
        loss = {
            "both": lambda o: (o.logp * g_l.to(o.logp.dtype)).sum() + (o.entropy * g_h.to(o.logp.dtype)).sum(),
            "logp": lambda o: (o.logp * g_l.to(o.logp.dtype)).sum(),
            "entropy": lambda o: (o.entropy * g_h.to(o.logp.dtype)).sum(),
        }[grad_mode]
        loss(out).backward()
        loss(ref).backward()
        for name, leaf, r in zip(("d_hidden", "d_weight", "d_bias"), leaves, refs):
            if leaf is None:
                continue
            assert leaf.grad is not None and leaf.grad.dtype == leaf.dtype, name
            errs[name] = rel_err(leaf.grad, r.grad)
    bad = {k: e for k, e in errs.items() if not e < tol}
    assert not bad, f"errors above {tol}: {bad} (all: {errs})"
    return out, errs


# ---------------------------------------------------------------------------------------------------------------
# Torch chunked path
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "n,h,v,chunk",
    [(1, 16, 7, None), (37, 24, 301, 8), (64, 40, 1000, None), (50, 17, 129, 7)],
)
@pytest.mark.parametrize("bias", [False, True])
def test_torch_shapes(n, h, v, chunk, bias):
    hidden, weight, targets, b = make_inputs(n, h, v, bias=bias, seed=n + v)
    run_and_compare(hidden, weight, targets, b, chunk_size=chunk)


@pytest.mark.parametrize("temperature", [0.7, 1.3])
@pytest.mark.parametrize("scale", [0.01, 2.0, 20.0])
def test_torch_temperature_and_scale(temperature, scale):
    # scale 20: logits up to ~150, entropies ~1e-3..1e-20. Beyond that the fp32 rounding of the logits themselves
    # (~1e-7 |z|) exceeds 1e-5 in the gradients for any fp32 implementation (a materialised fp32 log_softmax has
    # the same error); logits of 1e4 are covered exactly by test_torch_extreme_logits.
    hidden, weight, targets, b = make_inputs(33, 32, 517, scale=scale, bias=True, seed=3)
    run_and_compare(hidden, weight, targets, b, temperature=temperature, chunk_size=16)


@pytest.mark.parametrize("grad_mode", ["both", "logp", "entropy"])
def test_torch_multi_slab(monkeypatch, grad_mode):
    # Several vocabulary slabs (online merge across slabs), uneven last slab and chunk
    monkeypatch.setattr(torch_chunked, "FP32_VOCAB_SLAB", 96)
    hidden, weight, targets, b = make_inputs(41, 24, 350, scale=5.0, bias=True, seed=5)
    targets[:3] = torch.tensor([0, 95, 349])  # first/last of a slab, last token
    run_and_compare(hidden, weight, targets, b, temperature=0.8, chunk_size=12, grad_mode=grad_mode)


@pytest.mark.parametrize("grad_mode", ["both", "entropy"])
def test_torch_default_plan_awkward(grad_mode):
    # The default tiling itself (no monkeypatched sizes): 3 vocabulary slabs, the last of 77 rows, and 2 token
    # chunks, the last of 52 rows; targets on slab edges and in the short slab
    n, v = 2100, 2 * torch_chunked.FP32_VOCAB_SLAB + 77
    rows, slab = torch_chunked.plan_chunks(n, v, 24, torch.float32)
    assert (rows, slab) == (2048, 2048), (rows, slab)
    hidden, weight, targets, b = make_inputs(n, 24, v, scale=4.0, bias=True, seed=17)
    targets[:5] = torch.tensor([0, slab - 1, slab, 2 * slab, v - 1])
    targets[-3:] = torch.tensor([slab - 1, 2 * slab + 3, v - 1])  # in the short last chunk
    run_and_compare(hidden, weight, targets, b, temperature=0.9, grad_mode=grad_mode)


@pytest.mark.parametrize("multi_slab", [False, True])
def test_torch_extreme_logits(monkeypatch, multi_slab):
    if multi_slab:
        monkeypatch.setattr(torch_chunked, "FP32_VOCAB_SLAB", 16)
    hidden, weight, targets = extreme_inputs()
    out, _ = run_and_compare(hidden, weight, targets, chunk_size=4)
    # Row 0: tokens 0 and 1 tie at 1e4, all others <= 9990 -> p = 1/2 each, entropy = log 2
    assert abs(out.logp[0].item() + 0.6931471805599453) < 1e-6
    assert abs(out.entropy[0].item() - 0.6931471805599453) < 1e-6
    # T = 2: gaps of 15 nats. (At T <= 1 some rows have gaps of 30+ nats and entropy gradients of ~1e-12; the
    # float64 autograd reference then cancels terms of size 1 to reach them, so its own error is ~1e-4 relative.)
    run_and_compare(hidden, weight, targets, temperature=2.0, chunk_size=4, grad_mode="entropy")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("grad_mode", ["both", "logp"])
def test_torch_low_precision(monkeypatch, dtype, grad_mode):
    monkeypatch.setattr(torch_chunked, "LOWP_SLAB_BUDGET_BYTES", 4 * 24 * 100)  # slabs of 256 vocab rows
    hidden, weight, targets, b = make_inputs(29, 24, 700, bias=True, dtype=dtype, seed=7)
    out, _ = run_and_compare(hidden, weight, targets, b, temperature=0.9, grad_mode=grad_mode)
    assert out.logp.dtype == torch.float32


def test_power_sums_identities():
    # sum_p2 in (0, 1], sum_p2_logp <= 0; a uniform distribution gives 1/V and -log(V)/V
    hidden, weight, targets, _ = make_inputs(8, 16, 200, seed=11)
    out = fused_logprob_entropy(hidden, weight, targets, power_sums=True)
    assert (out.sum_p2 > 0).all() and (out.sum_p2 <= 1).all() and (out.sum_p2_logp <= 0).all()
    flat = fused_logprob_entropy(torch.zeros(3, 16), weight, targets[:3], power_sums=True)
    torch.testing.assert_close(flat.sum_p2, torch.full((3,), 1 / 200))
    torch.testing.assert_close(flat.sum_p2_logp, torch.full((3,), -torch.log(torch.tensor(200.0)).item() / 200))
    torch.testing.assert_close(flat.entropy, torch.full((3,), torch.log(torch.tensor(200.0)).item()))


class _OpRecorder(TorchDispatchMode):
    """Records every aten op called and the largest number of elements of any tensor it returns."""

    def __init__(self):
        super().__init__()
        self.ops = Counter()
        self.max_numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops[str(func.overloadpacket.__name__)] += 1
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.max_numel = max(self.max_numel, t.numel())
        return out


def test_torch_never_allocates_n_by_v(monkeypatch):
    # Tiles of 4 MiB against N * V * 4 = 16 MiB: every tensor created in forward and backward must stay a tile
    monkeypatch.setattr(torch_chunked, "TILE_BUDGET_BYTES", 4 * 2**20)
    n, h, v = 1024, 8, 4096
    hidden, weight, targets, b = make_inputs(n, h, v, bias=True, seed=13)
    rows, slab = torch_chunked.plan_chunks(n, v, h, torch.float32)
    assert rows < n and rows * slab * 4 <= torch_chunked.TILE_BUDGET_BYTES
    hidden.requires_grad_()
    weight.requires_grad_()
    b.requires_grad_()
    for chunk in (None, 64):
        rec = _OpRecorder()
        with rec:
            out = fused_logprob_entropy(hidden, weight, targets, bias=b, power_sums=True, chunk_size=chunk)
            (out.logp.sum() + out.entropy.sum()).backward()
        tile = (chunk or rows) * slab
        assert rec.max_numel <= tile < n * v, (chunk, rec.max_numel, tile, n * v)
        hidden.grad = weight.grad = b.grad = None

    # The same as bytes held by torch's CPU allocator (profiler memory events, replayed in time order)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fused_logprob_entropy(hidden, weight, targets, bias=b, chunk_size=64)
        (out.logp.sum() + out.entropy.sum()).backward()
    cur = peak = 0
    for _, nbytes in sorted(
        (e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
    ):
        cur += nbytes
        peak = max(peak, cur)
    assert 0 < peak < n * v * 4 / 4, f"peak {peak / 2**20:.1f} MiB vs N*V*4 = {n * v * 4 / 2**20:.0f} MiB"


def test_torch_skips_unneeded_work():
    hidden, weight, targets, _ = make_inputs(20, 16, 300, seed=17)
    hidden.requires_grad_()
    weight.requires_grad_()
    # Entropy computed but unused: no entropy term (addcmul) in the backward
    rec = _OpRecorder()
    out = fused_logprob_entropy(hidden, weight, targets)
    with rec:
        out.logp.sum().backward()
    assert rec.ops["addcmul"] == 0 and rec.ops["mm"] >= 1
    # Frozen head (LoRA): no dW GEMM, only recompute + dh
    hidden.grad = weight.grad = None
    weight.requires_grad_(False)
    out = fused_logprob_entropy(hidden, weight, targets, chunk_size=5)
    rec = _OpRecorder()
    with rec:
        (out.logp + out.entropy).sum().backward()
    assert weight.grad is None and hidden.grad is not None
    assert rec.ops["mm"] == 2 * 4 and rec.ops["addmm_"] == 0, rec.ops  # 4 chunks x (recompute, dh)


def test_empty_batch():
    _, weight, _, _ = make_inputs(1, 16, 50)
    out = fused_logprob_entropy(torch.zeros(0, 16), weight, torch.zeros(0, dtype=torch.long), power_sums=True)
    assert out.logp.shape == (0,) and out.entropy.shape == (0,) and out.sum_p2.shape == (0,)


# ---------------------------------------------------------------------------------------------------------------
# Validation and dispatch
# ---------------------------------------------------------------------------------------------------------------
def test_validation_errors():
    hidden, weight, targets, b = make_inputs(4, 8, 30, bias=True)
    with pytest.raises(ValueError, match="2-D"):
        fused_logprob_entropy(hidden[0], weight, targets)
    with pytest.raises(ValueError, match="H differs"):
        fused_logprob_entropy(hidden[:, :4], weight, targets)
    with pytest.raises(ValueError, match="entries"):
        fused_logprob_entropy(hidden, weight, targets[:3])
    with pytest.raises(TypeError, match="same dtype"):
        fused_logprob_entropy(hidden, weight.double(), targets)
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        fused_logprob_entropy(hidden.double(), weight.double(), targets)
    with pytest.raises(TypeError, match="int64"):
        fused_logprob_entropy(hidden, weight, targets.int())
    with pytest.raises(ValueError, match="shape"):
        fused_logprob_entropy(hidden, weight, targets, bias=b[:5])
    with pytest.raises(ValueError, match="padding positions"):
        fused_logprob_entropy(hidden, weight, torch.tensor([0, 1, -100, 2]))
    with pytest.raises(ValueError, match=r"\[0, 30\)"):
        fused_logprob_entropy(hidden, weight, torch.tensor([0, 1, 30, 2]))
    with pytest.raises(ValueError, match="temperature"):
        fused_logprob_entropy(hidden, weight, targets, temperature=0.0)
    with pytest.raises(ValueError, match="backend"):
        fused_logprob_entropy(hidden, weight, targets, backend="cuda")
    with pytest.raises(ValueError, match="chunk_size"):
        fused_logprob_entropy(hidden, weight, targets, chunk_size=0)
    with pytest.raises(ValueError, match="one device"):
        fused_logprob_entropy(hidden, weight, targets.to("meta"))


def test_dispatch(monkeypatch):
    cpu = torch.device("cpu")
    assert resolve_backend("auto", cpu) == "torch"
    assert resolve_backend("torch", cpu) == "torch"
    monkeypatch.setattr(kapi, "triton_available", lambda: False)
    assert resolve_backend("auto", torch.device("cuda")) == "torch"
    with pytest.raises(ImportError, match="`triton` package"):
        resolve_backend("triton", cpu)
    monkeypatch.setattr(kapi, "triton_available", lambda: True)
    monkeypatch.setattr(kapi, "_triton_self_check", lambda device, which="triton": True)  # see test_auto_falls_back_...
    assert resolve_backend("auto", torch.device("cuda")) == "triton"
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="TRITON_INTERPRET"):
        resolve_backend("triton", cpu)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert resolve_backend("triton", cpu) == "triton"


# ---------------------------------------------------------------------------------------------------------------
# Triton path, under the CPU interpreter in a child process
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.skipif(CHILD, reason="this is the parent of the interpreter tests")
@pytest.mark.skipif(not triton_available(), reason="triton is not installed (pip install triton)")
def test_triton_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1", "HEALTRL_TRITON_CHILD": "1"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        os.path.abspath(__file__),
        "-k",
        "triton_child",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    proc = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True, timeout=300)
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout and "failed" not in proc.stdout, tail


child = pytest.mark.skipif(
    not (CHILD and os.environ.get("TRITON_INTERPRET") == "1"), reason="runs in test_triton_interpreter's child"
)


@child
@pytest.mark.parametrize(
    "n,h,v,bias,temperature,splits,token_chunk,slab",
    [
        (1, 16, 7, False, 1.0, None, None, 64),  # V < block, N = 1
        (37, 24, 301, True, 0.7, 3, 16, 64),  # uneven everything, vocab splits merged, several token chunks/slabs
        (70, 48, 300, True, 1.3, 2, None, 256),  # 3 x 4 tiles per slab: grouped tile order with a partial group
    ],
)
def test_triton_child_fp32(monkeypatch, n, h, v, bias, temperature, splits, token_chunk, slab):
    from healtrl.kernels import triton_fused

    monkeypatch.setattr(triton_fused, "VOCAB_SLAB", slab)  # several backward slabs
    hidden, weight, targets, b = make_inputs(n, h, v, bias=bias, seed=n)
    run_and_compare(
        hidden,
        weight,
        targets,
        b,
        temperature=temperature,
        backend="triton-direct",
        token_chunk=token_chunk,
        config={"splits": splits},
    )


@child
@pytest.mark.parametrize("grad_mode", ["logp", "entropy"])
@pytest.mark.parametrize("scale", [0.01, 10.0])
def test_triton_child_grad_modes(grad_mode, scale):
    hidden, weight, targets, b = make_inputs(19, 32, 200, scale=scale, bias=True, seed=2)
    run_and_compare(hidden, weight, targets, b, backend="triton", grad_mode=grad_mode)


@child
def test_triton_child_extreme():
    hidden, weight, targets = extreme_inputs()
    out, _ = run_and_compare(hidden, weight, targets, backend="triton-direct", config={"splits": 2})
    assert abs(out.entropy[0].item() - 0.6931471805599453) < 1e-6


@child
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_triton_child_low_precision(monkeypatch, dtype):
    from healtrl.kernels import triton_fused

    monkeypatch.setattr(triton_fused, "VOCAB_SLAB", 128)
    hidden, weight, targets, b = make_inputs(29, 32, 300, bias=True, dtype=dtype, seed=7)
    run_and_compare(hidden, weight, targets, b, temperature=0.9, backend="triton-direct", token_chunk=16)


@child
def test_triton_child_dispatch():
    hidden, weight, targets, _ = make_inputs(5, 16, 40)
    assert resolve_backend("triton", hidden.device) == "triton"
    assert resolve_backend("auto", hidden.device) == "torch"  # auto never picks the interpreter
    a = fused_logprob_entropy(hidden, weight, targets, backend="triton", power_sums=True)
    b = fused_logprob_entropy(hidden, weight, targets, backend="torch", power_sums=True)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)


@child
def test_triton_child_self_check(monkeypatch):
    """The one-time check that guards `backend="auto"`: passes on a correct kernel, catches a wrong one."""
    import healtrl.kernels.api as api
    import healtrl.kernels.triton_fused as triton_fused

    monkeypatch.setattr(api, "_SELF_CHECKED", {})
    assert api._triton_self_check(torch.device("cpu")) is True

    real = triton_fused.triton_logprob_entropy

    def off_by_a_bit(*args, **kwargs):
        out = real(*args, **kwargs)
        return out._replace(entropy=out.entropy * 1.001)

    monkeypatch.setattr(triton_fused, "triton_logprob_entropy", off_by_a_bit)
    monkeypatch.setattr(api, "_SELF_CHECKED", {})
    with pytest.warns(RuntimeWarning, match="failed its self-check"):
        assert api._triton_self_check(torch.device("cpu")) is False


def test_auto_falls_back_when_the_self_check_fails(monkeypatch):
    import healtrl.kernels.api as api

    cuda = torch.device("cuda")
    monkeypatch.setattr(api, "triton_available", lambda: True)
    monkeypatch.setattr(api, "_triton_self_check", lambda device, which="triton": False)
    assert api.resolve_backend("auto", cuda) == "torch"
    monkeypatch.setattr(api, "_triton_self_check", lambda device, which="triton": True)
    assert api.resolve_backend("auto", cuda) == "triton"


# ---------------------------------------------------------------------------------------------------------------
# CUDA (runs only where a GPU is present: compiled Triton kernels and the torch path on the device)
# ---------------------------------------------------------------------------------------------------------------
def cuda(test):
    """GPU-only: selected by `pytest -m gpu`, skipped without a CUDA device."""
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")(test))


@cuda
@pytest.mark.skipif(not triton_available(), reason="triton is not installed")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("grad_mode", ["both", "logp", "entropy"])
@pytest.mark.parametrize("n,h,v,bias", [(1, 64, 7, False), (333, 96, 3001, True), (1030, 256, 20000, True)])
def test_cuda_triton(n, h, v, bias, dtype, grad_mode):
    hidden, weight, targets, b = make_inputs(n, h, v, bias=bias, dtype=dtype, seed=n)
    to = lambda t: None if t is None else t.cuda()  # noqa: E731
    assert resolve_backend("auto", torch.device("cuda")) == "triton"
    run_and_compare(to(hidden), to(weight), to(targets), to(b), temperature=0.8, backend="auto", grad_mode=grad_mode)


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_torch_path(dtype):
    hidden, weight, targets, b = make_inputs(300, 64, 5000, bias=True, dtype=dtype, seed=3)
    to = lambda t: t.cuda()  # noqa: E731
    run_and_compare(to(hidden), to(weight), to(targets), to(b), temperature=1.2, backend="torch")
