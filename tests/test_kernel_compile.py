"""Every Triton kernel variant the dispatcher can launch compiles for real GPUs (sm_80, sm_90, sm_100), on the CPU.

Triton's bundled ptxas assembles the kernels for CUDA targets without a GPU (``healtrl.kernels.compile_check``).
A variant fails on a compile error, on register spills (``ptxas -v`` spill stores/loads > 0), on needing more
shared memory than the SM has, or, on sm_90 for bf16/fp16, on a K loop whose loads are not asynchronous
(no ``cp.async`` / TMA in the PTX: the ``num_stages`` software pipeline did not happen). These are compile-time
facts, not GPU measurements.
"""

from __future__ import annotations

import pytest

pytest.importorskip("triton")
pytest.importorskip("triton.backends.nvidia")

from healtrl.kernels import compile_check as cc  # noqa: E402

_ALL = cc.dispatcher_variants()
# Default suite: the bf16 forward with power sums and the full backward, for A100 and H100 (~4 compiles)
_FAST = [
    v
    for v in _ALL
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
        assert res.async_loads, f"{where}: main-loop loads are not asynchronous (no cp.async / TMA in the PTX)"
        assert res.wgmma, f"{where}: no wgmma in the PTX (the dot does not use Hopper's warp-group MMA)"


def test_fast_subset_is_representative():
    kernels = {v.kernel for v in _FAST}
    assert kernels == {"_fwd_kernel", "_dlogits_kernel"} and len(_FAST) == 2


def test_dispatcher_variants_cover_launches():
    # 3 dtypes x (fwd: bias x power = 4, bwd: bias x {A+C, A, C} = 6)
    assert len(_ALL) == 30
    assert len(set(_ALL)) == 30


@pytest.mark.parametrize("cap", [80, 90])
@pytest.mark.parametrize("var", _FAST, ids=lambda v: v.name)
def test_compiles_without_spills_fast(var, cap):
    _check(var, cap)


# Known defect (measured with Triton 3.9's bundled ptxas): on sm_100 the fp32 forward without power sums is held
# to 128 registers and spills (48/40 B spill stores, 16 B stack at 64x128x32, 8 warps, 2 stages; 64x64 and
# 4 warps spill too). strict: this fails once they stop spilling, so the marker must then be removed.
_KNOWN_SPILLS = {("_fwd_kernel[fp32]", 100), ("_fwd_kernel[fp32+HAS_BIAS]", 100)}


def _all_cases():
    for cap in cc.ARCHS:
        for var in _ALL:
            marks = ()
            if (var.name, cap) in _KNOWN_SPILLS:
                reason = "sm_100 fp32 forward without power sums: 128 registers, spills (ptxas -v, Triton 3.9)"
                marks = (pytest.mark.xfail(strict=True, reason=reason),)
            yield pytest.param(var, cap, marks=marks, id=f"{var.name}-sm_{cap}")


@pytest.mark.slow
@pytest.mark.parametrize(("var", "cap"), list(_all_cases()))
def test_compiles_without_spills_all(var, cap):
    _check(var, cap)


def test_occupancy_arithmetic():
    var = _ALL[0]
    # 128 registers x 256 threads = 32768 registers per block: 2 blocks by registers on a 64K-register SM
    res = cc.Resources(var, 90, 128, 0, 0, 0, 64 * 1024, 8, True, False, True)
    occ = cc.occupancy(res)
    assert occ == {"blocks": 2, "warps": 16, "occupancy": 0.25, "limiter": "registers"}
    # 100 KiB of shared memory per block on A100 (164 KiB): one block, limited by shared memory
    res = cc.Resources(var, 80, 64, 0, 0, 0, 100 * 1024, 4, True, False, False)
    assert cc.occupancy(res)["blocks"] == 1 and cc.occupancy(res)["limiter"] == "shared memory"
