"""Every Triton kernel variant the dispatcher can launch compiles for real GPUs (sm_80, sm_90, sm_100), on the CPU.

Triton's bundled ptxas assembles the kernels for CUDA targets without a GPU (``healtrl.kernels.compile_check``).
A variant fails on a compile error, on register spills (``ptxas -v`` spill stores/loads > 0), on needing more
shared memory than the SM has, or, on sm_90 for bf16/fp16, on a K loop whose loads are not pipelined (no
``cp.async`` / TMA issued inside the loop that holds the ``wgmma``: the ``num_stages`` software pipeline did not
happen). The variants are those the dispatcher launches on each architecture (``default_config`` per compute
capability). These are compile-time facts, not GPU measurements.
"""

from __future__ import annotations

import pytest

pytest.importorskip("triton")
pytest.importorskip("triton.backends.nvidia")

from healtrl.kernels import compile_check as cc  # noqa: E402

_ALL = {cap: cc.dispatcher_variants(cap) for cap in cc.ARCHS}
# Default suite: the bf16 forward with power sums and the full backward, for A100 and H100 (~4 compiles)
_FAST = [
    v
    for v in _ALL[90]
    if v.dtype == "bf16"
    and not dict(v.flags)["HAS_BIAS"]
    and (dict(v.flags).get("POWER") or (dict(v.flags).get("HAS_A") and dict(v.flags).get("HAS_C")))
]


def _check(var: cc.Variant, cap: int) -> None:
    if not cc.ptxas_supports(cap):
        pytest.skip(f"the bundled ptxas cannot target sm_{cap}")
    res = cc.compile_variant(var, cap)  # raises on a compile error
    where = f"{var.name} on sm_{cap}"
    assert res.registers <= 255, where
    assert not res.spills, (
        f"{where} spills: {res.registers} registers, {res.spill_stores} B spill stores, "
        f"{res.spill_loads} B spill loads, {res.stack_bytes} B stack frame (config {var.cfg})"
    )
    smem_limit = cc.SM_LIMITS[cap]["smem"]
    assert res.shared_bytes <= smem_limit, f"{where} needs {res.shared_bytes} B shared memory > {smem_limit}"
    occ = cc.occupancy(res)
    assert occ["blocks"] >= 1, f"{where} cannot be resident on one SM: {occ}"
    if cap == 90 and var.dtype in ("bf16", "fp16"):
        assert res.k_loop_async, f"{where}: K-loop loads are not pipelined (no cp.async / TMA inside the K loop)"
        assert res.wgmma, f"{where}: no wgmma in the PTX (the dot does not use Hopper's warp-group MMA)"


def test_fast_subset_is_representative():
    kernels = {v.kernel for v in _FAST}
    assert kernels == {"_fwd_kernel", "_dlogits_kernel"} and len(_FAST) == 2


def test_dispatcher_variants_cover_launches():
    # per arch: 3 dtypes x (fwd: bias x power = 4, bwd: bias x {A+C, A, C} = 6)
    for cap, variants in _ALL.items():
        assert len(variants) == 30 and len(set(variants)) == 30, cap


def test_dispatcher_configs_per_arch():
    """What the dispatcher launches per compute capability is what the compile check enumerates."""
    import torch

    from healtrl.kernels.triton_fused import default_config, forward_config

    cuda = torch.device("cuda")
    for cap, variants in _ALL.items():
        for var in variants:
            cfg = default_config(cuda, cc._DTYPES[var.dtype], cap)
            if var.kernel == "_fwd_kernel":
                cfg = forward_config(cfg)
            assert var.cfg == {k: cfg[k] for k in var.cfg}, (var.name, cap)
    # bf16/fp16 on Hopper (measured on an H200): forward 128 x 128 x 32, backward 128 x 128 x 64, both 4 stages;
    # elsewhere the shared 128 x 64 x 64
    for dt in (torch.bfloat16, torch.float16):
        hopper = forward_config(default_config(cuda, dt, 90))
        assert (hopper["BLOCK_N"], hopper["BLOCK_V"], hopper["BLOCK_K"], hopper["num_stages"]) == (128, 128, 32, 4)
        backward = default_config(cuda, dt, 90)
        assert (backward["BLOCK_N"], backward["BLOCK_V"], backward["BLOCK_K"], backward["num_stages"]) == (
            128,
            128,
            64,
            4,
        )
        for cap in (80, 100):
            assert forward_config(default_config(cuda, dt, cap)) == default_config(cuda, dt, cap)
    # sm_80 / sm_90 unchanged; fp32 on Blackwell (major >= 10) pipelines 3 stages instead of 2 (2 stages spill)
    for cap in (80, 86, 89, 90):
        assert default_config(cuda, torch.float32, cap)["num_stages"] == 2
    for cap in (100, 103, 120):
        assert default_config(cuda, torch.float32, cap)["num_stages"] == 3
    for cap in (80, 100, 120):  # sm_90's 4 stages: above
        for dt in (torch.bfloat16, torch.float16):
            assert default_config(cuda, dt, cap)["num_stages"] == 3
        fp32 = default_config(cuda, torch.float32, cap)
        assert (fp32["BLOCK_N"], fp32["BLOCK_V"], fp32["BLOCK_K"], fp32["num_warps"]) == (64, 128, 32, 8)


@pytest.mark.parametrize("cap", [80, 90])
@pytest.mark.parametrize("var", _FAST, ids=lambda v: v.name)
def test_compiles_without_spills_fast(var, cap):
    _check(var, cap)


# A K loop with its MMA but asynchronous copies only before it (in the prologue), and the same loop pipelined
_PTX_PROLOGUE_ONLY = """
// %bb.0:
\tcp.async.cg.shared.global [ %r1 + 0 ], [ %rd1 + 0 ], 0x10, %r2;
\tcp.async.commit_group;
$L__BB0_2:                              // %.lr.ph
                                        // =>This Inner Loop Header: Depth=1
\tld.global.v4.b32 { %r3, %r4, %r5, %r6 }, [ %rd2 + 0 ];
\twgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%r7}, %rd3, %rd4, %p1, 1, 1, 0, 0;
\t@%p2 bra \t$L__BB0_2;
$L__BB0_3:                              // %._crit_edge
\tret;
"""
_PTX_PIPELINED = _PTX_PROLOGUE_ONLY.replace(
    "\tld.global.v4.b32 { %r3, %r4, %r5, %r6 }, [ %rd2 + 0 ];",
    "\tcp.async.wait_group \t1;\n\tcp.async.cg.shared.global [ %r3 + 0 ], [ %rd2 + 0 ], 0x10, %r4;",
)


def test_k_loop_check_needs_async_copies_inside_the_loop():
    assert "cp.async.cg" in _PTX_PROLOGUE_ONLY  # the old check (cp.async anywhere) would pass this
    assert not cc.k_loop_async(_PTX_PROLOGUE_ONLY)
    assert cc.k_loop_async(_PTX_PIPELINED)
    assert not cc.k_loop_async("")  # no loop annotations: not pipelined


def test_k_loop_check_fails_an_unpipelined_kernel():
    """sm_90 bf16 forward compiled with num_stages=1 (no software pipeline): the check must fail it."""
    if not cc.ptxas_supports(90):
        pytest.skip("the bundled ptxas cannot target sm_90")
    var = next(v for v in _FAST if v.kernel == "_fwd_kernel")
    flat = cc.Variant(
        var.kernel, var.dtype, var.flags, tuple((k, 1 if k == "num_stages" else x) for k, x in var.config)
    )
    ptx, _ = cc.compile_ptx(flat, 90)
    assert "wgmma.mma_async" in ptx
    assert not cc.k_loop_async(ptx)
    with pytest.raises(AssertionError, match="not pipelined"):
        _check(flat, 90)
    ptx, _ = cc.compile_ptx(var, 90)  # the dispatcher's 3 stages
    assert cc.k_loop_async(ptx)


def _all_cases():
    for cap in cc.ARCHS:
        for var in _ALL[cap]:
            yield pytest.param(var, cap, id=f"{var.name}-sm_{cap}")


@pytest.mark.slow
@pytest.mark.parametrize(("var", "cap"), list(_all_cases()))
def test_compiles_without_spills_all(var, cap):
    _check(var, cap)


def test_occupancy_arithmetic():
    var = _ALL[90][0]
    # 128 registers x 256 threads = 32768 registers per block: 2 blocks by registers on a 64K-register SM
    res = cc.Resources(var, 90, 128, 0, 0, 0, 64 * 1024, 8, True, False, True)
    occ = cc.occupancy(res)
    assert occ == {"blocks": 2, "warps": 16, "occupancy": 0.25, "limiter": "registers"}
    # 100 KiB of shared memory per block on A100 (164 KiB): one block, limited by shared memory
    res = cc.Resources(var, 80, 64, 0, 0, 0, 100 * 1024, 4, True, False, False)
    assert cc.occupancy(res)["blocks"] == 1 and cc.occupancy(res)["limiter"] == "shared memory"


# The chunked path's two kernels (healtrl.kernels.triton_chunked): memory-bound, no dot, so no pipelining or wgmma
# to check; they must compile without spills and leave room for enough resident warps to stream their buffer.
_CHUNKED = {cap: cc.chunked_variants(cap) for cap in cc.ARCHS}
_CHUNKED_FAST = [
    v
    for v in _CHUNKED[90]
    if v.dtype == "bf16" and not dict(v.flags)["HAS_BIAS"] and not dict(v.flags).get("FIRST")
    and (dict(v.flags).get("POWER") or (dict(v.flags).get("HAS_A") and dict(v.flags).get("HAS_C")))
]  # fmt: skip


def _check_chunked(var: cc.Variant, cap: int) -> None:
    if not cc.ptxas_supports(cap):
        pytest.skip(f"the bundled ptxas cannot target sm_{cap}")
    res = cc.compile_variant(var, cap)
    where = f"{var.name} on sm_{cap}"
    assert res.registers <= 255 and not res.spills, (
        f"{where} spills: {res.registers} registers, {res.spill_stores} B / {res.spill_loads} B spill stores/loads"
    )
    occ = cc.occupancy(res)
    assert occ["warps"] >= 16, f"{where}: only {occ['warps']} resident warps per SM ({occ})"


def test_chunked_variants_cover_launches():
    # per arch: 2 dtypes x (stats: bias x power x first = 8, grad: bias x {A+C, A, C} = 6)
    for cap, variants in _CHUNKED.items():
        assert len(variants) == 28 and len(set(variants)) == 28, cap
    assert {v.kernel for v in _CHUNKED_FAST} == {"_stats_kernel", "_grad_kernel"} and len(_CHUNKED_FAST) == 2


@pytest.mark.parametrize("cap", [80, 90, 100])
@pytest.mark.parametrize("var", _CHUNKED_FAST, ids=lambda v: v.name)
def test_chunked_compiles_without_spills_fast(var, cap):
    _check_chunked(var, cap)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("var", "cap"), [pytest.param(v, c, id=f"{v.name}-sm_{c}") for c in cc.ARCHS for v in _CHUNKED[c]]
)
def test_chunked_compiles_without_spills_all(var, cap):
    _check_chunked(var, cap)
