"""Compile healtrl's Triton kernels for CUDA GPUs without a GPU, and read their resource use.

Triton compiles a ``@triton.jit`` kernel for any CUDA target on a machine without a GPU: the frontend lowers it to
PTX and Triton's bundled ``ptxas`` assembles the cubin. This module does that for every kernel variant the
dispatcher (:func:`healtrl.kernels.triton_fused.default_config` and the launch sites in ``triton_fused``; the chunked
path's two kernels, :func:`chunked_variants`, from ``triton_chunked``) can launch
on a GPU, and reads what ``ptxas -v`` reports (registers per thread, stack frame, spill stores/loads), the shared
memory Triton requests, and which data-movement instructions the PTX uses (``cp.async``, TMA ``cp.async.bulk``,
``wgmma``), and whether the K loop's loads are pipelined (:func:`k_loop_async`: asynchronous copies issued inside
the loop that holds the MMA). :func:`occupancy` turns these into the resident warps per SM they allow.

Everything here is compile-time evidence: it says a kernel assembles for a target, whether it spills and how many
warps can be resident, not how fast it runs. The arguments are specialized as Triton's JIT specializes a real
launch (pointers 16-byte aligned, unit strides folded into constants, integers divisible by 16 marked so), for the
representative problem :data:`PROBLEM` (a Qwen2.5-7B-sized LM head).

Used by ``tests/test_kernel_compile.py`` and ``benchmarks/kernel_resources.py``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator

import torch

#: Representative launch (tokens N, hidden H, vocabulary V) whose integer arguments the kernels are specialized on.
PROBLEM = {"N": 4093, "H": 3584, "V": 152064}

#: Compute capabilities checked: A100 (sm_80), H100 (sm_90, compiled as sm_90a), B200 (sm_100, as sm_100a).
ARCHS = (80, 90, 100)

#: Per-SM limits used by :func:`occupancy` (CUDA C Programming Guide, "Compute Capabilities" table).
SM_LIMITS = {
    80: {"name": "A100", "regs": 65536, "smem": 164 * 1024, "warps": 64, "blocks": 32},
    90: {"name": "H100", "regs": 65536, "smem": 228 * 1024, "warps": 64, "blocks": 32},
    100: {"name": "B200", "regs": 65536, "smem": 228 * 1024, "warps": 64, "blocks": 32},
}
_SMEM_RESERVED_PER_BLOCK = 1024  # the driver reserves 1 KiB of shared memory per resident block (sm_80 and later)
_REG_ALLOC_UNIT = 256  # registers are allocated per warp in units of 256

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclasses.dataclass(frozen=True)
class Variant:
    """One kernel specialization the dispatcher can launch on a GPU.

    ``flags`` holds the boolean constexprs (``HAS_BIAS``, ``POWER`` for the forward; ``HAS_BIAS``, ``HAS_A``,
    ``HAS_C`` for the backward); ``config`` the block sizes and launch parameters from ``default_config``.
    """

    kernel: str  # "_fwd_kernel" or "_dlogits_kernel" (fused); "_stats_kernel" or "_grad_kernel" (chunked)
    dtype: str  # "bf16", "fp16", "fp32"
    flags: tuple[tuple[str, bool], ...]
    config: tuple[tuple[str, int], ...]

    @property
    def name(self) -> str:
        on = [k for k, v in self.flags if v]
        return f"{self.kernel}[{self.dtype}{''.join('+' + k for k in on)}]"

    @property
    def cfg(self) -> dict:
        return dict(self.config)


@dataclasses.dataclass(frozen=True)
class Resources:
    """Compiled resource use of one variant on one architecture (from ``ptxas -v`` and the PTX)."""

    variant: Variant
    capability: int
    registers: int
    stack_bytes: int
    spill_stores: int
    spill_loads: int
    shared_bytes: int  # dynamic shared memory Triton launches with, plus ptxas' static shared memory
    num_warps: int
    cp_async: bool  # Ampere-style asynchronous global -> shared copies in the PTX
    tma: bool  # Hopper tensor-memory-accelerator bulk copies in the PTX
    wgmma: bool  # Hopper warp-group MMA in the PTX
    k_loop_async: bool = False  # asynchronous copies (cp.async / TMA) inside the K loop: its loads are pipelined

    @property
    def spills(self) -> bool:
        return self.spill_stores > 0 or self.spill_loads > 0

    @property
    def async_loads(self) -> bool:
        return self.cp_async or self.tma


def dispatcher_variants(capability: int, dtypes: tuple[str, ...] = ("bf16", "fp16", "fp32")) -> list[Variant]:
    """Every (kernel, dtype, constexpr flags, config) the dispatcher can launch on a CUDA device of ``capability``.

    The configuration is ``default_config`` for that compute capability (it differs per architecture: fp32 on
    sm_100 uses 3 pipeline stages; the bf16/fp16 forward on sm_90 has its own tile, ``forward_config``). On CUDA
    ``IEEE`` is ``dtype == fp32`` and ``DOT_F32`` is False (it is an interpreter-only workaround); the backward always
    has ``B`` and has ``A`` (entropy gradient) and/or ``C`` (log-prob gradient), never neither.
    """
    from .triton_fused import default_config, forward_config

    keys = ("BLOCK_N", "BLOCK_V", "BLOCK_K", "num_warps", "num_stages")
    out = []
    for dt in dtypes:
        cfg = default_config(torch.device("cuda"), _DTYPES[dt], capability)
        fwd = forward_config(cfg)
        fwd_cfg = tuple((k, fwd[k]) for k in keys)
        bwd_cfg = tuple((k, cfg[k]) for k in keys) + (("GROUP", cfg["GROUP"]),)
        for bias in (False, True):
            for power in (False, True):
                out.append(Variant("_fwd_kernel", dt, (("HAS_BIAS", bias), ("POWER", power)), fwd_cfg))
            for has_a, has_c in ((True, True), (True, False), (False, True)):
                flags = (("HAS_BIAS", bias), ("HAS_A", has_a), ("HAS_C", has_c))
                out.append(Variant("_dlogits_kernel", dt, flags, bwd_cfg))
    return out


def chunked_variants(capability: int, dtypes: tuple[str, ...] = ("bf16", "fp16")) -> list[Variant]:
    """Every kernel specialization the chunked path (``triton_chunked``) can launch on a CUDA device.

    Its configuration does not depend on the architecture; it runs bf16/fp16 on CUDA (fp32 is refused there). The
    statistics kernel has ``HAS_BIAS`` x ``POWER`` x ``FIRST`` (first slab or not); the gradient kernel ``HAS_BIAS``
    and ``A`` and/or ``C`` as the fused backward. ``num_stages`` is Triton's default (3), which the launches use.
    """
    from .triton_chunked import default_config

    cfg = default_config(torch.device("cuda"))
    stats_cfg = (("BLOCK_R", cfg["STATS_R"]), ("BLOCK_C", cfg["STATS_C"]), ("num_warps", cfg["stats_warps"]),
                 ("num_stages", 3))  # fmt: skip
    grad_cfg = (("BLOCK_R", cfg["GRAD_R"]), ("BLOCK_C", cfg["GRAD_C"]), ("num_warps", cfg["grad_warps"]),
                ("num_stages", 3))  # fmt: skip
    out = []
    for dt in dtypes:
        for bias in (False, True):
            for power in (False, True):
                for first in (False, True):
                    flags = (("HAS_BIAS", bias), ("POWER", power), ("FIRST", first))
                    out.append(Variant("_stats_kernel", dt, flags, stats_cfg))
            for has_a, has_c in ((True, True), (True, False), (False, True)):
                out.append(
                    Variant("_grad_kernel", dt, (("HAS_BIAS", bias), ("HAS_A", has_a), ("HAS_C", has_c)), grad_cfg)
                )
    return out


#: The chunked path's kernels (``triton_chunked``); the others are the fused kernel's (``triton_fused``).
CHUNKED_KERNELS = ("_stats_kernel", "_grad_kernel")


def _chunked_launch_args(variant: Variant) -> dict:
    """Representative arguments of a chunked-path launch: all tokens of :data:`PROBLEM`, a 3072-column slab."""
    n, rows, slab = PROBLEM["N"], PROBLEM["N"], 3072
    dt = _DTYPES[variant.dtype]
    cfg = variant.cfg
    z = torch.empty(16, dtype=torch.float32)
    common = {
        "z_ptr": z,
        "stride_z": slab,
        "b_ptr": torch.empty(16, dtype=dt),
        "y_ptr": torch.empty(16, dtype=torch.int64),
        "R": rows,
        "W": slab,
        "v0": 3 * slab,
        "inv_t": 1.0 / 0.7,
        "BLOCK_R": cfg["BLOCK_R"],
        "BLOCK_C": cfg["BLOCK_C"],
        **dict(variant.flags),
    }
    if variant.kernel == "_stats_kernel":
        return {**common, "st_ptr": z, "stride_st": n + 3}  # a view into [6, N]: any stride
    return {**common, "d_ptr": torch.empty(16, dtype=dt), "stride_d": slab, "m_ptr": z, "a_ptr": z, "bc_ptr": z,
            "c_ptr": z}  # fmt: skip


def _launch_args(variant: Variant) -> dict:
    """Representative argument values of a launch of ``variant`` on :data:`PROBLEM` (as in ``triton_fused``)."""
    if variant.kernel in CHUNKED_KERNELS:
        return _chunked_launch_args(variant)
    n, h, v = PROBLEM["N"], PROBLEM["H"], PROBLEM["V"]
    cfg = variant.cfg
    dt = _DTYPES[variant.dtype]
    # Small stand-ins: only dtype and alignment of a tensor argument enter the specialization
    x = torch.empty(16, dtype=dt)
    f32 = torch.empty(16, dtype=torch.float32)
    ids = torch.empty(16, dtype=torch.int64)
    flags = dict(variant.flags)
    common = {
        "h_ptr": x,
        "w_ptr": x,
        "b_ptr": x,
        "y_ptr": ids,
        "H": h,
        "stride_hn": h,
        "stride_hk": 1,
        "stride_wv": h,
        "stride_wk": 1,
        "inv_t": 1.0 / 0.7,
        "IEEE": variant.dtype == "fp32",
        "DOT_F32": False,
        "BLOCK_N": cfg["BLOCK_N"],
        "BLOCK_V": cfg["BLOCK_V"],
        "BLOCK_K": cfg["BLOCK_K"],
        **flags,
    }
    if variant.kernel == "_fwd_kernel":
        tiles = math.ceil(v / cfg["BLOCK_V"])
        splits = 12
        return {
            **common,
            "part_ptr": f32,
            "N": n,
            "V": v,
            "v_per_split": math.ceil(tiles / splits) * cfg["BLOCK_V"],
            "n_splits": splits,
        }
    slab = 16384
    chunk = max(cfg["BLOCK_N"], 256 * 2**20 // (slab * dt.itemsize))
    return {
        **common,
        "m_ptr": f32,
        "a_ptr": f32,
        "bc_ptr": f32,
        "c_ptr": f32,
        "d_ptr": x,
        "n0": 0,
        "n_rows": min(n, chunk),
        "v0": 0,
        "width": slab,
        "stride_dn": slab,
        "GROUP": cfg["GROUP"],
    }


def ast_source(variant: Variant):
    """``triton.compiler.ASTSource`` of ``variant`` specialized as Triton's JIT specializes a real launch."""
    import triton.runtime.jit as tjit
    from triton.backends.compiler import BaseBackend
    from triton.compiler import ASTSource

    from . import triton_chunked, triton_fused

    module = triton_chunked if variant.kernel in CHUNKED_KERNELS else triton_fused
    fn = getattr(module, variant.kernel)
    args = _launch_args(variant)
    constexpr_idx = {p.num for p in fn.params if p.is_constexpr}
    signature, constexprs, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        if name not in args:
            raise KeyError(f"no representative value for argument {name!r} of {variant.kernel}")
        val = args[name]
        if i in constexpr_idx:
            signature[name], constexprs[name] = "constexpr", val
            continue
        ty, attr = tjit.native_specialize_impl(BaseBackend, val, False, True, True)
        signature[name] = ty
        if ty == "constexpr":  # e.g. an integer equal to 1 (unit stride)
            constexprs[name] = attr
        elif isinstance(attr, str) and attr:
            attrs[(i,)] = BaseBackend.parse_attr(attr)
    return ASTSource(fn, signature, constexprs, attrs)


def _bin_dir() -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")


def ptxas_supports(capability: int) -> bool:
    """Whether Triton's bundled ptxas can assemble for ``capability`` (checked on an empty PTX module)."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    try:
        ptxas = get_ptxas(capability).path
    except Exception:
        return False
    arch = sm_arch_from_capability(capability)
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "e.ptx")
        with open(src, "w") as fh:
            fh.write(f".version 8.0\n.target {arch}\n.address_size 64\n")
        res = subprocess.run([ptxas, f"--gpu-name={arch}", src, "-o", os.path.join(d, "e.o")], capture_output=True)
    return res.returncode == 0


# LLVM's verbose-asm block annotations in Triton's PTX: a block starts at a label or a "// %bb.N:" line; its loop
# is named in the comment on that line or the comment lines right after it
_BLOCK_START = re.compile(r"^(?:\$L__BB(\d+_\d+):|// %bb\.\d+:)(.*)$")
_LOOP_HEADER = re.compile(r"=>\s*This (?:Inner )?Loop Header: Depth=(\d+)")
_IN_LOOP = re.compile(r"in Loop: Header=BB(\d+_\d+) Depth=(\d+)")
_MMA = re.compile(r"\b(?:wgmma\.mma_async|mma\.sync|tcgen05\.mma)\b")
_CP_ASYNC = re.compile(r"\bcp\.async\.(?:ca|cg)\.")  # Ampere-style asynchronous copies
_TMA = re.compile(r"\bcp\.async\.bulk\.")  # Hopper bulk tensor copies


def loop_bodies(ptx: str) -> dict[str, tuple[int, list[str]]]:
    """``{header: (depth, instructions)}`` of the loops in ``ptx``: each loop's own blocks, not its child loops'.

    Read from the loop annotations LLVM writes into the PTX (``=>This Loop Header: Depth=1``,
    ``in Loop: Header=BB0_4 Depth=2``), so a rotated loop whose blocks are laid out apart is still one loop.
    """
    loops: dict[str, tuple[int, list[str]]] = {}
    label, loop, in_head = None, None, False
    for raw in ptx.splitlines():
        line = raw.strip()
        start = _BLOCK_START.match(line)
        comment = None
        if start:
            label, loop, in_head, comment = start.group(1), None, True, start.group(2)
        elif in_head and line.startswith("//"):
            comment = line
        else:
            in_head = False
        if comment is not None:
            if loop is None and (hdr := _LOOP_HEADER.search(comment)) and label is not None:
                loop = label
                loops.setdefault(loop, (int(hdr.group(1)), []))
            elif loop is None and (inl := _IN_LOOP.search(comment)):
                loop = inl.group(1)
                loops.setdefault(loop, (int(inl.group(2)), []))
            continue
        if loop is not None and line and not line.startswith("//"):
            loops[loop][1].append(line)
    return loops


def k_loop_async(ptx: str) -> bool:
    """Whether the K loop of ``ptx`` issues asynchronous copies (``cp.async``, TMA ``cp.async.bulk``) itself.

    The K loop is the deepest loop whose own blocks hold the MMA (``mma.sync``, ``wgmma``, ``tcgen05.mma``), or
    without an MMA (fp32 products on FMA units) the deepest loop. Copies issued inside it load later K tiles while
    the current one is multiplied: Triton's ``num_stages`` software pipeline. An unpipelined loop loads with plain
    ``ld.global`` (or has asynchronous copies only before it, in the prologue), and this returns False; so it does
    for PTX without loop annotations.
    """
    loops = loop_bodies(ptx)
    with_mma = [v for v in loops.values() if any(_MMA.search(i) for i in v[1])]
    candidates = with_mma or list(loops.values())
    if not candidates:
        return False
    deepest = max(depth for depth, _ in candidates)
    return all(
        any(_CP_ASYNC.search(i) or _TMA.search(i) for i in body) for depth, body in candidates if depth == deepest
    )


_PTXAS_USED = re.compile(r"Used (\d+) registers")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")


def _ptxas_report(ptx: str, capability: int) -> dict:
    """Registers, stack and spills that ptxas reports for ``ptx`` (the flags Triton uses, plus ``-v``)."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    ptxas = get_ptxas(capability).path
    arch = sm_arch_from_capability(capability)
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as fh:
            fh.write(ptx)
        cmd = [
            ptxas,
            "-lineinfo",
            "-v",
            "--regAllocOptLevel=2",
            f"--gpu-name={arch}",
            src,
            "-o",
            os.path.join(d, "k.cubin"),
        ]
        res = subprocess.run(cmd, capture_output=True, text=True)
    log = res.stdout + res.stderr
    if res.returncode != 0:
        raise RuntimeError(f"ptxas failed for {arch}:\n{log}")
    used, frame = _PTXAS_USED.search(log), _PTXAS_FRAME.search(log)
    if used is None or frame is None:
        raise RuntimeError(f"could not read ptxas -v output:\n{log}")
    smem = _PTXAS_SMEM.search(log)
    return {
        "registers": int(used.group(1)),
        "stack_bytes": int(frame.group(1)),
        "spill_stores": int(frame.group(2)),
        "spill_loads": int(frame.group(3)),
        "static_smem": int(smem.group(1)) if smem else 0,
    }


def compile_ptx(variant: Variant, capability: int) -> tuple[str, int]:
    """PTX of ``variant`` compiled for ``sm_<capability>`` and the dynamic shared memory (bytes) it launches with."""
    import triton
    from triton.backends.compiler import GPUTarget

    cfg = variant.cfg
    kernel = triton.compile(
        ast_source(variant),
        target=GPUTarget("cuda", capability, 32),
        options={"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]},
    )
    return kernel.asm["ptx"], int(kernel.metadata.shared)


def compile_variant(variant: Variant, capability: int) -> Resources:
    """Compile ``variant`` for ``sm_<capability>`` (no GPU needed) and read its resource use.

    Raises whatever Triton or ptxas raise on a compile error.
    """
    ptx, shared = compile_ptx(variant, capability)
    rep = _ptxas_report(ptx, capability)
    return Resources(
        variant=variant,
        capability=capability,
        registers=rep["registers"],
        stack_bytes=rep["stack_bytes"],
        spill_stores=rep["spill_stores"],
        spill_loads=rep["spill_loads"],
        shared_bytes=shared + rep["static_smem"],
        num_warps=variant.cfg["num_warps"],
        cp_async=_CP_ASYNC.search(ptx) is not None,
        tma=_TMA.search(ptx) is not None,
        wgmma=re.search(r"\bwgmma\.", ptx) is not None,
        k_loop_async=k_loop_async(ptx),
    )


def occupancy(res: Resources) -> dict:
    """Resident blocks and warps per SM that ``res`` allows on its architecture, and the limiting resource.

    Registers are allocated per warp in units of 256; each block also takes 1 KiB of reserved shared memory.
    """
    lim = SM_LIMITS[res.capability]
    regs_per_warp = math.ceil(res.registers * 32 / _REG_ALLOC_UNIT) * _REG_ALLOC_UNIT
    by = {
        "registers": lim["regs"] // (regs_per_warp * res.num_warps),
        "shared memory": lim["smem"] // (res.shared_bytes + _SMEM_RESERVED_PER_BLOCK),
        "warps": lim["warps"] // res.num_warps,
        "blocks": lim["blocks"],
    }
    blocks = min(by.values())
    limiter = min(by, key=by.get)
    return {
        "blocks": blocks,
        "warps": blocks * res.num_warps,
        "occupancy": blocks * res.num_warps / lim["warps"],
        "limiter": limiter,
    }


def compile_all(archs: tuple[int, ...] = ARCHS) -> Iterator[Resources]:
    """:func:`compile_variant` of every :func:`dispatcher_variants` of each arch (archs the bundled ptxas cannot
    target are skipped)."""
    for cap in archs:
        if not ptxas_supports(cap):
            continue
        for var in dispatcher_variants(cap) + chunked_variants(cap):
            yield compile_variant(var, cap)
