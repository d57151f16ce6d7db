"""Chunked CUDA path of the LM-head statistics: cuBLAS for every matrix product, Triton for the softmax statistics.

The fused kernel (``triton_fused``) computes the logits with ``tl.dot`` inside its own loops, so they never reach
memory; on Hopper a Triton GEMM does not reach cuBLAS, and the fused head lost to TRL's chunked function there
(``benchmarks/results/kernel_h200.md``). This path keeps cuBLAS for the four products an exact head cannot avoid and
does everything else in two small Triton kernels over an fp32 logits buffer:

Forward, for each vocabulary slab ``[v0, v1)`` (width ``S``) and token chunk (``R`` rows; all tokens by default):

    Z = h_c @ W_s^T                      cuBLAS, bf16/fp16 operands, fp32 output (``torch.mm(..., out_dtype=fp32)``)
    _stats_kernel(Z)                     z = (Z + b_s) / T, folded into the running per-token statistics
                                         (m, s, t, q, r, z_y), the same online rule as the fused forward
                                         (``triton_fused``), started from the previous slab's values

Backward (recompute; saved per token: m, s, mu = t / s), for each slab and chunk:

    Z = h_c @ W_s^T                      cuBLAS, fp32 output
    D = _grad_kernel(Z)                  D = e (A z' + B) + C 1[v = y],  z' = z - m,  e = e^z'   (torch_chunked)
                                         written in the input dtype
    dh_c  += D @ W_s                     cuBLAS, fp32 accumulator [N, H] (``out_dtype=fp32``)
    dW_s   = D^T @ h                     cuBLAS; with all tokens in one chunk this is one product with K = N whose
                                         fp32 accumulation happens inside cuBLAS and is rounded once into dW;
                                         with several chunks an fp32 slab accumulator [S, H] sums them first

Why vocabulary slabs and not token chunks: the weight gradient is then written slab by slab, finished, and needs no
fp32 ``[V, H]`` accumulator (2.4 GiB at V=151936, H=4096); what accumulates across slabs is ``dh`` (``N x H`` fp32),
smaller than ``dW`` whenever N < V.

Buffer and its bound: ``Z`` (fp32) and ``D`` (input dtype) of ``R x S`` each, ``R x S x (4 + itemsize)`` bytes.
Default: at most a quarter of the weight gradient's bytes (``V x H x itemsize / 4``), all tokens per chunk and the
widest slab (a multiple of 128 columns, slabs balanced) that fits; if fewer than ``MIN_SLAB`` columns of all tokens
fit, the slab is ``MIN_SLAB`` wide and the tokens are chunked to fit instead (at least 64 tokens per chunk, so on
tiny heads the buffer can exceed the quarter: 64 x ``MIN_SLAB`` elements at most). At N=16384, H=4096, V=151936, bf16:
50 slabs of 3072 columns, buffer 288 MiB beside dW's 1,187 MiB. ``chunk_size`` sets the slab width (all tokens per
chunk, buffer ``N x chunk_size x (4 + itemsize)`` bytes) for shapes where wider slabs pay (the dispatch table,
``dispatch``, records which).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._types import LogProbEntropy
from .torch_chunked import finish_forward, grad_coefficients
from .triton_fused import _addmm_fp32

MIN_SLAB = 512  # narrowest default slab (columns) before the tokens are chunked instead
SLAB_ALIGN = 128
_NSTAT = 6  # m, s, t, q, r, zy


def plan(n: int, v: int, h: int, dtype: torch.dtype, chunk_size: int | None = None) -> tuple[int, int]:
    """``(rows R, slab S)``: tokens per chunk and vocabulary columns per slab (rule in the module docstring)."""
    if chunk_size is not None:
        return max(1, n), min(v, chunk_size)
    per_elem = 4 + dtype.itemsize
    budget = v * h * dtype.itemsize // 4
    cols = budget // (max(n, 1) * per_elem) // SLAB_ALIGN * SLAB_ALIGN
    if cols >= min(v, MIN_SLAB):
        if cols >= v:
            return max(1, n), v
        n_slabs = triton.cdiv(v, cols)
        slab = triton.cdiv(triton.cdiv(v, n_slabs), SLAB_ALIGN) * SLAB_ALIGN  # balanced, still <= cols
        return max(1, n), min(v, slab)
    slab = min(v, MIN_SLAB)
    rows = max(64, budget // (slab * per_elem) // 64 * 64)
    return max(1, min(n, rows)), slab


def default_config(device: torch.device) -> dict:
    """Launch parameters of the two Triton kernels (rows x columns per program; small under the interpreter)."""
    if device.type != "cuda":
        return {"STATS_R": 8, "STATS_C": 64, "stats_warps": 4, "GRAD_R": 16, "GRAD_C": 64, "grad_warps": 4}
    return {"STATS_R": 4, "STATS_C": 1024, "stats_warps": 8, "GRAD_R": 32, "GRAD_C": 256, "grad_warps": 8}


def _logits_fp32(out: torch.Tensor, h_c: torch.Tensor, w_s: torch.Tensor) -> torch.Tensor:
    """``out [R, S] (fp32) = h_c @ w_s^T`` with fp32 accumulation and fp32 output from any input dtype."""
    if h_c.dtype == torch.float32:
        return torch.mm(h_c, w_s.t(), out=out)
    if h_c.device.type == "cuda":
        try:
            return torch.mm(h_c, w_s.t(), out_dtype=torch.float32, out=out)
        except TypeError as exc:  # a torch whose mm has no out_dtype
            raise RuntimeError(
                f"backend='chunked' needs torch.mm(..., out_dtype=torch.float32) (fp32 logits from {h_c.dtype} "
                f"operands through cuBLAS); this PyTorch ({torch.__version__}) has no such argument ({exc}). Use "
                "backend='triton' or 'auto', or a newer PyTorch."
            ) from None
    # CPU (tests under the interpreter): torch has no bf16 x bf16 -> fp32 product here; upcast (same products)
    return torch.mm(h_c.float(), w_s.float().t(), out=out)


def _mm_into(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``out = a @ b`` in ``out``'s dtype, the products accumulated in fp32 (cuBLAS does so for bf16/fp16)."""
    if out.device.type == "cuda" or a.dtype == torch.float32:
        torch.mm(a, b, out=out)
    else:
        out.copy_(a.float() @ b.float())


@triton.jit
def _stats_kernel(
    z_ptr,
    stride_z,
    b_ptr,
    y_ptr,
    st_ptr,
    stride_st,
    R,
    W,
    v0,
    inv_t,
    HAS_BIAS: tl.constexpr,
    POWER: tl.constexpr,
    FIRST: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """Fold the logits ``Z [R, W]`` of one slab into the running statistics ``st [6, R]`` (one program: BLOCK_R
    tokens, looping over the slab's columns)."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_mask = rows < R
    y = tl.load(y_ptr + rows, mask=row_mask, other=-1) - v0  # target column inside this slab (any value if not)
    if FIRST:
        m = tl.full((BLOCK_R,), float("-inf"), dtype=tl.float32)
        s = tl.zeros((BLOCK_R,), dtype=tl.float32)
        t = tl.zeros((BLOCK_R,), dtype=tl.float32)
        q = tl.zeros((BLOCK_R,), dtype=tl.float32)
        r = tl.zeros((BLOCK_R,), dtype=tl.float32)
        zy = tl.zeros((BLOCK_R,), dtype=tl.float32)
    else:
        m = tl.load(st_ptr + rows, mask=row_mask, other=0.0)
        s = tl.load(st_ptr + stride_st + rows, mask=row_mask, other=1.0)
        t = tl.load(st_ptr + 2 * stride_st + rows, mask=row_mask, other=0.0)
        q = tl.load(st_ptr + 3 * stride_st + rows, mask=row_mask, other=0.0)
        r = tl.load(st_ptr + 4 * stride_st + rows, mask=row_mask, other=0.0)
        zy = tl.load(st_ptr + 5 * stride_st + rows, mask=row_mask, other=0.0)
    z_rows = z_ptr + rows.to(tl.int64)[:, None] * stride_z
    for c0 in range(0, W, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        col_mask = cols < W
        z = tl.load(z_rows + cols[None, :], mask=row_mask[:, None] & col_mask[None, :], other=0.0)
        if HAS_BIAS:
            z += tl.load(b_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
        z = z * inv_t
        zy += tl.sum(tl.where(cols[None, :].to(tl.int64) == y[:, None], z, 0.0), axis=1)
        z = tl.where(col_mask[None, :], z, float("-inf"))
        m_new = tl.maximum(m, tl.max(z, axis=1))  # finite: every tile has a valid column
        d = tl.where(s > 0, m - m_new, 0.0)  # first tile of the first slab: m = -inf, s = t = 0
        alpha = tl.exp(m - m_new)
        zs = z - m_new[:, None]  # <= 0, -inf on masked columns
        e = tl.exp(zs)  # 0 on masked columns
        zs = tl.where(col_mask[None, :], zs, 0.0)
        t = alpha * (t + d * s) + tl.sum(e * zs, axis=1)
        s = alpha * s + tl.sum(e, axis=1)
        if POWER:
            e2 = e * e
            a2 = alpha * alpha
            r = a2 * (r + d * q) + tl.sum(e2 * zs, axis=1)
            q = a2 * q + tl.sum(e2, axis=1)
        m = m_new
    tl.store(st_ptr + rows, m, mask=row_mask)
    tl.store(st_ptr + stride_st + rows, s, mask=row_mask)
    tl.store(st_ptr + 2 * stride_st + rows, t, mask=row_mask)
    tl.store(st_ptr + 3 * stride_st + rows, q, mask=row_mask)
    tl.store(st_ptr + 4 * stride_st + rows, r, mask=row_mask)
    tl.store(st_ptr + 5 * stride_st + rows, zy, mask=row_mask)


@triton.jit
def _grad_kernel(
    z_ptr,
    stride_z,
    d_ptr,
    stride_d,
    b_ptr,
    y_ptr,
    m_ptr,
    a_ptr,
    bc_ptr,
    c_ptr,
    R,
    W,
    v0,
    inv_t,
    HAS_BIAS: tl.constexpr,
    HAS_A: tl.constexpr,
    HAS_C: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """``D [R, W]`` (input dtype) = dL/d(pre-temperature logits) of one slab from its recomputed logits ``Z``."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    row_mask = rows < R
    col_mask = cols < W
    mask = row_mask[:, None] & col_mask[None, :]
    z = tl.load(z_ptr + rows.to(tl.int64)[:, None] * stride_z + cols[None, :], mask=mask, other=0.0)
    if HAS_BIAS:
        z += tl.load(b_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    m = tl.load(m_ptr + rows, mask=row_mask, other=0.0)
    zs = z * inv_t - m[:, None]  # z' = z - m <= 0
    e = tl.exp(zs)  # s p
    coef = tl.load(bc_ptr + rows, mask=row_mask, other=0.0)[:, None]  # B
    if HAS_A:
        coef = coef + tl.load(a_ptr + rows, mask=row_mask, other=0.0)[:, None] * zs  # A z' + B
    dz = e * coef
    if HAS_C:
        y = tl.load(y_ptr + rows, mask=row_mask, other=-1) - v0
        c = tl.load(c_ptr + rows, mask=row_mask, other=0.0)
        dz += tl.where(cols[None, :].to(tl.int64) == y[:, None], c[:, None], 0.0)
    ptrs = d_ptr + rows.to(tl.int64)[:, None] * stride_d + cols[None, :]
    tl.store(ptrs, dz.to(d_ptr.dtype.element_ty), mask=mask)


class _ChunkedLogProbEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, power_sums, chunk_size, cfg):
        ctx.set_materialize_grads(False)
        n, h = hidden.shape
        v = weight.shape[0]
        dev = hidden.device
        rows, slab = plan(n, v, h, hidden.dtype, chunk_size)
        inv_t = 1.0 / temperature
        targets = targets.contiguous()
        st = torch.zeros(_NSTAT, n, dtype=torch.float32, device=dev)
        zbuf = torch.empty(rows * slab, dtype=torch.float32, device=dev)
        with torch.autocast(dev.type, enabled=False):
            for v0 in range(0, v, slab):
                v1 = min(v, v0 + slab)
                width = v1 - v0
                w_s = weight[v0:v1]
                for r0 in range(0, n, rows):
                    r1 = min(n, r0 + rows)
                    z = _logits_fp32(zbuf[: (r1 - r0) * width].view(r1 - r0, width), hidden[r0:r1], w_s)
                    _stats_kernel[(triton.cdiv(r1 - r0, cfg["STATS_R"]),)](
                        z,
                        z.stride(0),
                        bias[v0:v1] if bias is not None else z,
                        targets[r0:r1],
                        st[:, r0:r1],
                        st.stride(0),
                        r1 - r0,
                        width,
                        v0,
                        inv_t,
                        HAS_BIAS=bias is not None,
                        POWER=bool(power_sums),
                        FIRST=v0 == 0,
                        BLOCK_R=cfg["STATS_R"],
                        BLOCK_C=cfg["STATS_C"],
                        num_warps=cfg["stats_warps"],
                    )
        del zbuf
        ctx.temperature = temperature
        ctx.chunk_size = chunk_size
        ctx.cfg = cfg
        stats = dict(zip(("m", "s", "t", "q", "r", "zy"), st.unbind(0)))
        return finish_forward(ctx, (hidden, weight, bias, targets), stats, power_sums)

    @staticmethod
    def backward(ctx, g_logp, g_ent, *unused):
        hidden, weight, bias, targets, m, s, mu = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        none = (None,) * 8
        if (g_logp is None and g_ent is None) or not (need_h or need_w or need_b):
            return none
        n, h = hidden.shape
        v = weight.shape[0]
        dev = hidden.device
        f32 = torch.float32
        cfg = ctx.cfg
        rows, slab = plan(n, v, h, hidden.dtype, ctx.chunk_size)
        inv_t = 1.0 / ctx.temperature
        a, b, c = grad_coefficients(g_logp, g_ent, s, mu, inv_t)
        a = None if a is None else a.contiguous()
        c = None if c is None else c.contiguous()
        b = b.contiguous()
        m = m.contiguous()

        dh = torch.zeros(n, h, dtype=f32, device=dev) if need_h else None
        dw = torch.empty_like(weight) if need_w else None
        one_chunk = rows >= n
        dw_acc = torch.empty(slab, h, dtype=f32, device=dev) if need_w and not one_chunk else None
        db = torch.zeros(v, dtype=f32, device=dev) if need_b else None
        zbuf = torch.empty(rows * slab, dtype=f32, device=dev)
        dbuf = torch.empty(rows * slab, dtype=hidden.dtype, device=dev)
        with torch.autocast(dev.type, enabled=False):
            for v0 in range(0, v, slab):
                v1 = min(v, v0 + slab)
                width = v1 - v0
                w_s = weight[v0:v1]
                for r0 in range(0, n, rows):
                    r1 = min(n, r0 + rows)
                    cnt = r1 - r0
                    h_c = hidden[r0:r1]
                    z = _logits_fp32(zbuf[: cnt * width].view(cnt, width), h_c, w_s)
                    d = dbuf[: cnt * width].view(cnt, width)
                    grid = (triton.cdiv(cnt, cfg["GRAD_R"]), triton.cdiv(width, cfg["GRAD_C"]))
                    _grad_kernel[grid](
                        z,
                        z.stride(0),
                        d,
                        d.stride(0),
                        bias[v0:v1] if bias is not None else z,
                        targets[r0:r1],
                        m[r0:r1],
                        a[r0:r1] if a is not None else b,
                        b[r0:r1],
                        c[r0:r1] if c is not None else b,
                        cnt,
                        width,
                        v0,
                        inv_t,
                        HAS_BIAS=bias is not None,
                        HAS_A=a is not None,
                        HAS_C=c is not None,
                        BLOCK_R=cfg["GRAD_R"],
                        BLOCK_C=cfg["GRAD_C"],
                        num_warps=cfg["grad_warps"],
                    )
                    if need_h:
                        _addmm_fp32(dh[r0:r1], d, w_s)
                    if need_w and one_chunk:
                        _mm_into(dw[v0:v1], d.t(), h_c)
                    elif need_w:
                        if r0 == 0:
                            dw_acc[:width].zero_()
                        _addmm_fp32(dw_acc[:width], d.t(), h_c)
                    if need_b:
                        db[v0:v1] += d.sum(0, dtype=f32)
                if dw_acc is not None:
                    dw[v0:v1].copy_(dw_acc[:width])

        grad_h = None if dh is None else dh.to(hidden.dtype)
        grad_b = None if db is None else db.to(bias.dtype)
        return grad_h, dw, grad_b, None, None, None, None, None


def chunked_logprob_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    power_sums: bool = False,
    chunk_size: int | None = None,
    config: dict | None = None,
) -> LogProbEntropy:
    """Chunked backend of :func:`healtrl.kernels.fused_logprob_entropy` (inputs assumed validated).

    bf16/fp16 inputs on CUDA; fp32 inputs only off CUDA (the tests, under Triton's interpreter): on CUDA an fp32
    ``torch.mm`` follows the caller's TF32 setting, which would round the logits' products to TF32 silently.

    ``chunk_size``: vocabulary columns per slab (default: the buffer bound of the module docstring). ``config``
    overrides entries of :func:`default_config` (the Triton kernels' block sizes and warps).
    """
    if hidden.device.type == "cuda" and hidden.dtype == torch.float32:
        raise ValueError(
            "backend='chunked' takes bfloat16/float16 inputs on CUDA (its fp32 products would follow the caller's "
            "TF32 setting); use backend='triton' (the fused kernel, IEEE fp32) or 'auto' for float32"
        )
    cfg = {**default_config(hidden.device), **(config or {})}
    out = _ChunkedLogProbEntropy.apply(hidden, weight, bias, targets, temperature, bool(power_sums), chunk_size, cfg)
    return LogProbEntropy(*out) if power_sums else LogProbEntropy(out[0], out[1], None, None)
