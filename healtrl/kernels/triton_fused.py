"""Fused Triton implementation of the LM-head statistics (CUDA; CPU tensors under ``TRITON_INTERPRET=1``).

Forward (``_fwd_kernel``): the matmul is fused with the online reduction, so logits never reach device memory
(the Liger SM90 / Cut-Cross-Entropy approach). Program ``(j, i)`` takes row block ``i`` (``BLOCK_N`` tokens) and
vocabulary split ``j``; it loops over vocabulary tiles (``BLOCK_V``) and, inside, over K tiles (``BLOCK_K`` of H)
accumulating ``h @ W^T`` in fp32 with ``tl.dot``; splits vary fastest in the launch order, so the programs that
run together form a patch of row blocks x splits and read both h and W tiles from L2. Each logit tile
``z = (acc + bias) / T`` is folded into the per-row statistics (kept SHIFTED by the running max, so that logits
of +-1e4 stay exact):

    m' = max(m, max_v z_v),  d = m - m' <= 0,  a = e^d,  e_v = e^(z_v - m')
    s <- a s + sum e_v
    t <- a (t + d s) + sum e_v (z_v - m')                       (t = sum e^(z - m) (z - m))
    q <- a^2 q + sum e_v^2,   r <- a^2 (r + d q) + sum e_v^2 (z_v - m')      (power sums only)
    z_y += z_v where v == y

Splits write partial statistics ``[6, splits, N]`` that a small torch step merges with the same rule; then
``logp = (z_y - m) - log s``, ``entropy = log s - t / s``, ``sum_p2 = q / s^2``,
``sum_p2_logp = (r - q log s) / s^2`` (see ``torch_chunked``). Splits: ``max(12, ceil(2 x SMs / row blocks))``,
capped by the number of vocabulary tiles (L2 reuse, and short batches still fill the GPU).

Backward, without an fp32 ``[V, H]`` accumulator: the vocabulary is looped outermost in slabs of ``VOCAB_SLAB``
rows; for each slab and each token chunk, ``_dlogits_kernel`` recomputes the logit tile with ``tl.dot`` and writes

    D = dL/d(pre-temperature logits) = e (A z' + B) + C 1[v = y],   z' = z - m,  e = e^z',  mu = t / s,
    A = -g_H / (T s),  B = (g_H mu - g_l) / (T s),  C = g_l / T
    (from dlogp/dz = 1[v=y] - p and dH/dz = -p (log p + H) = -p (z' - mu); derivation in ``torch_chunked``)

into a bounded workspace ``[token_chunk, VOCAB_SLAB]`` in the input dtype (fp32 for fp32 inputs); then cuBLAS adds
``dh (fp32 [N, H]) += D @ W_slab`` and ``dW_slab (fp32 [VOCAB_SLAB, H]) += D^T @ h_chunk`` (fp32 accumulation
from bf16/fp16 operands with ``out_dtype`` where torch supports it), and the slab is cast into ``dW``. For fp32
inputs ``dW`` itself is the accumulator. Workspaces (defaults): D ``token_chunk x 16384`` with ``token_chunk``
chosen so that D <= 256 MiB (8192 tokens in bf16, 4096 in fp32); ``dW_slab`` 16384 x H x 4 bytes (256 MiB at
H = 4096); ``dh`` N x H x 4 bytes. At N=16384, H=4096, V=151936, bf16: ~0.75 GiB of workspaces besides the
gradients themselves (dW 1.16 GiB, dh 128 MiB).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._types import LogProbEntropy
from .torch_chunked import finish_forward, grad_coefficients

VOCAB_SLAB = 16384
MIN_SPLITS = 12  # ~sqrt(number of SMs)
WORKSPACE_BYTES = 256 * 2**20
_NSTAT = 6  # m, s, t, q, r, zy


@triton.jit
def _logit_tile(
    h_ptr,
    w_ptr,
    b_ptr,
    rows,
    row_mask,
    cols,
    col_mask,
    H,
    stride_hn,
    stride_hk,
    stride_wv,
    stride_wk,
    inv_t,
    HAS_BIAS: tl.constexpr,
    IEEE: tl.constexpr,
    DOT_F32: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """fp32 ``(h[rows] @ W[cols]^T + bias[cols]) / T`` for one ``[BLOCK_N, BLOCK_V]`` tile."""
    acc = tl.zeros((BLOCK_N, BLOCK_V), dtype=tl.float32)
    h_rows = h_ptr + rows.to(tl.int64)[:, None] * stride_hn
    w_rows = w_ptr + cols.to(tl.int64)[:, None] * stride_wv
    for k0 in range(0, H, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_mask = ks < H
        a = tl.load(h_rows + ks[None, :] * stride_hk, mask=row_mask[:, None] & k_mask[None, :], other=0.0)
        b = tl.load(w_rows + ks[None, :] * stride_wk, mask=col_mask[:, None] & k_mask[None, :], other=0.0)
        if DOT_F32:  # interpreter only: its bf16 tl.dot multiplies bit patterns (triton-lang/triton#11584)
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        if IEEE:  # fp32 inputs: full fp32 products, not TF32
            acc = tl.dot(a, tl.trans(b), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, tl.trans(b), acc)
    z = acc * inv_t
    if HAS_BIAS:
        bias = tl.load(b_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
        z += bias[None, :] * inv_t
    return z


@triton.jit
def _fwd_kernel(
    h_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    part_ptr,
    N,
    V,
    H,
    v_per_split,
    n_splits,
    stride_hn,
    stride_hk,
    stride_wv,
    stride_wk,
    inv_t,
    HAS_BIAS: tl.constexpr,
    POWER: tl.constexpr,
    IEEE: tl.constexpr,
    DOT_F32: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    # Splits vary fastest: the programs running together share row blocks of h (from L2) as well as W tiles
    pid_s = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = rows < N
    y = tl.load(y_ptr + rows, mask=row_mask, other=-1)

    m = tl.full((BLOCK_N,), float("-inf"), dtype=tl.float32)
    s = tl.zeros((BLOCK_N,), dtype=tl.float32)
    t = tl.zeros((BLOCK_N,), dtype=tl.float32)
    q = tl.zeros((BLOCK_N,), dtype=tl.float32)
    r = tl.zeros((BLOCK_N,), dtype=tl.float32)
    zy = tl.zeros((BLOCK_N,), dtype=tl.float32)

    v_start = pid_s * v_per_split
    v_end = tl.minimum(v_start + v_per_split, V)
    for v0 in range(v_start, v_end, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)
        col_mask = cols < v_end
        z = _logit_tile(
            h_ptr,
            w_ptr,
            b_ptr,
            rows,
            row_mask,
            cols,
            col_mask,
            H,
            stride_hn,
            stride_hk,
            stride_wv,
            stride_wk,
            inv_t,
            HAS_BIAS,
            IEEE,
            DOT_F32,
            BLOCK_N,
            BLOCK_V,
            BLOCK_K,
        )
        is_y = cols[None, :].to(tl.int64) == y[:, None]
        zy += tl.sum(tl.where(is_y, z, 0.0), axis=1)
        z = tl.where(col_mask[None, :], z, float("-inf"))
        m_new = tl.maximum(m, tl.max(z, axis=1))  # finite: every tile has a valid column
        d = tl.where(s > 0, m - m_new, 0.0)  # first tile: m = -inf, s = t = 0
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

    out = part_ptr + pid_s * N + rows
    stat_stride = n_splits * N
    tl.store(out, m, mask=row_mask)
    tl.store(out + stat_stride, s, mask=row_mask)
    tl.store(out + 2 * stat_stride, t, mask=row_mask)
    tl.store(out + 3 * stat_stride, q, mask=row_mask)
    tl.store(out + 4 * stat_stride, r, mask=row_mask)
    tl.store(out + 5 * stat_stride, zy, mask=row_mask)


@triton.jit
def _dlogits_kernel(
    h_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    m_ptr,
    a_ptr,
    bc_ptr,
    c_ptr,
    d_ptr,
    n0,
    n_rows,
    v0,
    width,
    H,
    stride_hn,
    stride_hk,
    stride_wv,
    stride_wk,
    stride_dn,
    inv_t,
    HAS_BIAS: tl.constexpr,
    HAS_A: tl.constexpr,
    HAS_C: tl.constexpr,
    IEEE: tl.constexpr,
    DOT_F32: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP: tl.constexpr,
):
    # Grouped ordering (as in Triton's matmul tutorial): programs running together cover GROUP row tiles x a few
    # vocabulary tiles, so both operands are reused from L2
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(n_rows, BLOCK_N)
    tiles_v = tl.cdiv(width, BLOCK_V)
    per_group = GROUP * tiles_v
    first_n = (pid // per_group) * GROUP
    group_size = tl.minimum(tiles_n - first_n, GROUP)
    pid_n = first_n + (pid % per_group) % group_size
    pid_v = (pid % per_group) // group_size
    loc_rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_mask = loc_rows < n_rows
    rows = n0 + loc_rows
    loc_cols = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    col_mask = loc_cols < width
    cols = v0 + loc_cols
    z = _logit_tile(
        h_ptr,
        w_ptr,
        b_ptr,
        rows,
        row_mask,
        cols,
        col_mask,
        H,
        stride_hn,
        stride_hk,
        stride_wv,
        stride_wk,
        inv_t,
        HAS_BIAS,
        IEEE,
        DOT_F32,
        BLOCK_N,
        BLOCK_V,
        BLOCK_K,
    )
    m = tl.load(m_ptr + rows, mask=row_mask, other=0.0)
    zs = z - m[:, None]  # z' = z - m <= 0
    e = tl.exp(zs)  # s p
    coef = tl.load(bc_ptr + rows, mask=row_mask, other=0.0)[:, None]  # B
    if HAS_A:
        coef = coef + tl.load(a_ptr + rows, mask=row_mask, other=0.0)[:, None] * zs  # A z' + B
    dz = e * coef
    if HAS_C:
        y = tl.load(y_ptr + rows, mask=row_mask, other=-1)
        c = tl.load(c_ptr + rows, mask=row_mask, other=0.0)
        dz += tl.where(cols[None, :].to(tl.int64) == y[:, None], c[:, None], 0.0)
    ptrs = d_ptr + loc_rows.to(tl.int64)[:, None] * stride_dn + loc_cols[None, :]
    tl.store(ptrs, dz.to(d_ptr.dtype.element_ty), mask=row_mask[:, None] & col_mask[None, :])


def device_capability(device: torch.device) -> int:
    """Compute capability of a CUDA ``device`` as one integer (``(9, 0)`` -> 90, ``(10, 0)`` -> 100)."""
    major, minor = torch.cuda.get_device_capability(device)
    return 10 * major + minor


def default_config(device: torch.device, dtype: torch.dtype, capability: int | None = None) -> dict:
    """Block sizes and launch parameters (GPU defaults sized for Hopper; small blocks under the interpreter).

    ``capability``: the CUDA compute capability the launch targets (``10 * major + minor``); read from ``device``
    when None. It changes one setting: fp32 on compute capability major >= 10 (Blackwell) uses 3 pipeline stages.
    """
    if device.type != "cuda":  # interpreter: numpy does each block, fewer programs run faster
        return {
            "BLOCK_N": 32,
            "BLOCK_V": 64,
            "BLOCK_K": 32,
            "GROUP": 2,
            "num_warps": 4,
            "num_stages": 1,
            "splits": None,
        }
    if capability is None:
        capability = device_capability(device)
    if dtype == torch.float32:  # fp32 tiles take twice the shared memory
        # sm_100: with 2 stages, ptxas (Triton 3.9) holds the forward without power sums to 128 registers and it
        # spills (48/32 B spill stores/loads); with 3 stages the same 64 x 128 x 32 tile uses 168 registers, no
        # spills (benchmarks/results/kernel_resources.md). sm_80 / sm_90 keep 2 stages (no spills there).
        return {
            "BLOCK_N": 64,
            "BLOCK_V": 128,
            "BLOCK_K": 32,
            "GROUP": 8,
            "num_warps": 8,
            "num_stages": 3 if capability >= 100 else 2,
            "splits": None,
        }
    # bf16/fp16: BLOCK_V = 64, not 128. Compiled with Triton 3.9's ptxas (healtrl.kernels.compile_check), a
    # 128 x 128 x 64 tile hits the 255-register cap and spills in the forward on sm_80, sm_90 and sm_100; 128 x 64
    # uses 146-176 registers, no spills, and keeps cp.async + wgmma on sm_90 (benchmarks/results/kernel_resources.md).
    cfg = {"BLOCK_N": 128, "BLOCK_V": 64, "BLOCK_K": 64, "GROUP": 8, "num_warps": 8, "num_stages": 3, "splits": None}
    if capability == 90:
        # Hopper: the backward's recompute kernel at 128 x 128 x 64, 4 stages (127-222 registers, 128 KiB shared, no
        # spills with Triton 3.9's ptxas); the forward at 128 x 128 x 32, 4 stages (188-255 registers, no spills; at
        # K = 64 it spills). Measured on an H200 (benchmarks/results/kernel_configs_h200.md, third sweep) at N=16384,
        # H=4096, V=151936: forward 0.68-0.79x the 128 x 64 x 64 tile's time; forward + backward 1.20x TRL's chunked
        # function against 1.27x with the backward at 128 x 64 x 64.
        cfg.update(BLOCK_V=128, num_stages=4)
        cfg["fwd"] = {"BLOCK_V": 128, "BLOCK_K": 32, "num_stages": 4}
    return cfg


def forward_config(cfg: dict) -> dict:
    """The forward kernel's launch configuration: ``cfg`` with its ``"fwd"`` overrides applied."""
    return {**{k: v for k, v in cfg.items() if k != "fwd"}, **cfg.get("fwd", {})}


def _dot_in_f32(hidden: torch.Tensor) -> bool:
    """Upcast bf16 operands before ``tl.dot`` under the CPU interpreter (its bf16 dot returns garbage)."""
    return hidden.device.type != "cuda" and hidden.dtype == torch.bfloat16


def _num_splits(n_row_blocks: int, n_vocab_tiles: int, device: torch.device) -> int:
    """Vocabulary splits of the forward: >= MIN_SPLITS so that the ~SM-count programs running together form a
    patch of row blocks x splits (h and W tiles both reused from L2), and enough programs to fill the GPU."""
    if device.type != "cuda":
        return 1
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(n_vocab_tiles, max(MIN_SPLITS, triton.cdiv(2 * sms, n_row_blocks))))


def merge_splits(part: torch.Tensor, power_sums: bool) -> dict[str, torch.Tensor]:
    """Merge partial statistics ``[6, splits, N]`` of the vocabulary splits (rule in the module docstring)."""
    m, s, t, q, r, zy = part.unbind(0)
    mm = m.max(0).values
    d = m - mm  # <= 0, finite (no split is empty)
    a = torch.exp(d)
    st = {"m": mm, "s": (a * s).sum(0), "t": (a * (t + d * s)).sum(0), "zy": zy.sum(0)}
    if power_sums:
        a2 = a * a
        st["q"] = (a2 * q).sum(0)
        st["r"] = (a2 * (r + d * q)).sum(0)
    return st


_OUT_DTYPE_OK: dict[str, bool] = {}


def _addmm_fp32(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``acc += a @ b`` with an fp32 ``acc``, accumulating bf16/fp16 products in fp32 (no rounding to bf16)."""
    if a.dtype == torch.float32:
        acc.addmm_(a, b)
        return
    key = acc.device.type
    if _OUT_DTYPE_OK.get(key, key == "cuda"):
        try:
            torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)
            _OUT_DTYPE_OK[key] = True
            return
        except (TypeError, RuntimeError, NotImplementedError):
            _OUT_DTYPE_OK[key] = False
    acc.addmm_(a.float(), b.float())


class _TritonLogProbEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, power_sums, token_chunk, cfg):
        ctx.set_materialize_grads(False)
        n, h = hidden.shape
        v = weight.shape[0]
        dev = hidden.device
        inv_t = 1.0 / temperature
        fcfg = forward_config(cfg)
        bn, bv, bk = fcfg["BLOCK_N"], fcfg["BLOCK_V"], fcfg["BLOCK_K"]
        row_blocks = triton.cdiv(n, bn)
        vocab_tiles = triton.cdiv(v, bv)
        splits = fcfg["splits"] or _num_splits(row_blocks, vocab_tiles, dev)
        splits = max(1, min(splits, vocab_tiles))
        v_per_split = triton.cdiv(vocab_tiles, splits) * bv
        splits = triton.cdiv(v, v_per_split)  # every split non-empty
        part = torch.empty(_NSTAT, splits, n, dtype=torch.float32, device=dev)
        targets = targets.contiguous()
        if n > 0:
            _fwd_kernel[(splits, row_blocks)](
                hidden,
                weight,
                bias if bias is not None else hidden,
                targets,
                part,
                n,
                v,
                h,
                v_per_split,
                splits,
                hidden.stride(0),
                hidden.stride(1),
                weight.stride(0),
                weight.stride(1),
                inv_t,
                HAS_BIAS=bias is not None,
                POWER=bool(power_sums),
                IEEE=hidden.dtype == torch.float32,
                DOT_F32=_dot_in_f32(hidden),
                BLOCK_N=bn,
                BLOCK_V=bv,
                BLOCK_K=bk,
                num_warps=fcfg["num_warps"],
                num_stages=fcfg["num_stages"],
            )
        st = merge_splits(part, power_sums)
        st["m"] = st["m"].contiguous()
        ctx.temperature = temperature
        ctx.token_chunk = token_chunk
        ctx.cfg = cfg
        return finish_forward(ctx, (hidden, weight, bias, targets), st, power_sums)

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
        inv_t = 1.0 / ctx.temperature
        slab = min(v, VOCAB_SLAB)
        ws_dtype = hidden.dtype  # D in the input dtype (fp32 for fp32 inputs)
        token_chunk = ctx.token_chunk or max(cfg["BLOCK_N"], WORKSPACE_BYTES // (slab * ws_dtype.itemsize))
        token_chunk = min(n, token_chunk)

        # D_v = e_v (A z'_v + B) + C 1[v = y],  z' = z - m,  e = e^z'   (see torch_chunked)
        a, b, c = grad_coefficients(g_logp, g_ent, s, mu, inv_t)
        a = None if a is None else a.contiguous()
        c = None if c is None else c.contiguous()
        b = b.contiguous()

        dh = torch.zeros(n, h, dtype=f32, device=dev) if need_h else None
        dw = torch.empty_like(weight) if need_w else None
        dw_acc = torch.empty(slab, h, dtype=f32, device=dev) if need_w and weight.dtype != f32 else None
        db = torch.zeros(v, dtype=f32, device=dev) if need_b else None
        work = torch.empty(token_chunk, slab, dtype=ws_dtype, device=dev)
        bn, bv, bk = cfg["BLOCK_N"], cfg["BLOCK_V"], cfg["BLOCK_K"]
        h_in = hidden

        with torch.autocast(dev.type, enabled=False):  # the gradient GEMMs keep their dtypes
            for v0 in range(0, v, slab):
                v1 = min(v, v0 + slab)
                width = v1 - v0
                w_s = weight[v0:v1]
                dw_s = None
                if need_w:
                    dw_s = dw[v0:v1] if dw_acc is None else dw_acc[:width]
                    dw_s.zero_()
                for r0 in range(0, n, token_chunk):
                    r1 = min(n, r0 + token_chunk)
                    rows = r1 - r0
                    d = work[:rows, :width]
                    grid = (triton.cdiv(rows, bn) * triton.cdiv(width, bv),)
                    _dlogits_kernel[grid](
                        h_in,
                        weight,
                        bias if bias is not None else h_in,
                        targets,
                        m,
                        a if a is not None else b,
                        b,
                        c if c is not None else b,
                        d,
                        r0,
                        rows,
                        v0,
                        width,
                        h,
                        h_in.stride(0),
                        h_in.stride(1),
                        weight.stride(0),
                        weight.stride(1),
                        d.stride(0),
                        inv_t,
                        HAS_BIAS=bias is not None,
                        HAS_A=a is not None,
                        HAS_C=c is not None,
                        IEEE=hidden.dtype == f32,
                        DOT_F32=_dot_in_f32(hidden),
                        BLOCK_N=bn,
                        BLOCK_V=bv,
                        BLOCK_K=bk,
                        GROUP=cfg["GROUP"],
                        num_warps=cfg["num_warps"],
                        num_stages=cfg["num_stages"],
                    )
                    if need_h:
                        _addmm_fp32(dh[r0:r1], d, w_s)
                    if need_w:
                        _addmm_fp32(dw_s, d.t(), h_in[r0:r1])
                    if need_b:
                        db[v0:v1] += d.sum(0, dtype=f32)
                if dw_acc is not None:
                    dw[v0:v1].copy_(dw_s)

        grad_h = None if dh is None else dh.to(hidden.dtype)
        grad_b = None if db is None else db.to(bias.dtype)
        return grad_h, dw, grad_b, None, None, None, None, None


def triton_logprob_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    power_sums: bool = False,
    token_chunk: int | None = None,
    config: dict | None = None,
) -> LogProbEntropy:
    """Triton backend of :func:`healtrl.kernels.fused_logprob_entropy` (inputs assumed validated).

    ``token_chunk``: tokens per backward workspace (default: D workspace <= ``WORKSPACE_BYTES``). ``config``
    overrides entries of :func:`default_config` (block sizes, ``splits``: vocabulary splits of the forward); block
    sizes given there apply to both kernels unless ``config`` has its own ``"fwd"`` overrides for the forward.
    """
    cfg = default_config(hidden.device, hidden.dtype)
    if config:
        if "fwd" not in config and set(config) & set(cfg.get("fwd", {})):
            cfg.pop("fwd")
        cfg.update(config)
    out = _TritonLogProbEntropy.apply(hidden, weight, bias, targets, temperature, bool(power_sums), token_chunk, cfg)
    return LogProbEntropy(*out) if power_sums else LogProbEntropy(out[0], out[1], None, None)
