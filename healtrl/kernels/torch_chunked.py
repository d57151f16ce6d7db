"""Chunked torch implementation of the fused LM-head statistics (CPU and any device).

Layout. The vocabulary is cut into slabs of ``S`` rows of the weight and the tokens into chunks of ``C`` rows; the
slab loop is outermost. For each (slab, chunk) one GEMM writes the fp32 logits tile, vocabulary-major
(``[S, C] = W_s @ h_c^T``, see ``_logits_tile``), into a reused buffer, and a second buffer of the same size holds
``exp``; every elementwise step works in place on these two. Only per-token statistics survive a tile:

    m = running max of z,   s = sum_v e^(z_v - m),   t = sum_v e^(z_v - m) (z_v - m)          (kept SHIFTED)
    q = sum_v e^(2(z_v - m)),   r = sum_v e^(2(z_v - m)) (z_v - m)                            (power sums only)
    z_y = logit of the target

and, at the end, with p_v = e^(z_v - m) / s and log p_v = (z_v - m) - log s:

    logp = (z_y - m) - log s,   entropy = -sum p log p = log s - mu,   mu = t / s = E_p[z - m]
    sum_p2 = q / s^2,  sum_p2_logp = sum p^2 log p = (r - q log s) / s^2

(``z_y - m`` first: with logits of 1e4, ``m + log s`` rounded to fp32 would be off by ~5e-4.) Every term keeps
its sign (z - m <= 0, s >= 1), so entropy >= 0 and sum_p2_logp <= 0 exactly in floating point.
Slabs are merged online: on a max change m -> m' (d = m - m' <= 0, a = e^d),
``s <- a s``, ``t <- a (t + d s)``, ``q <- a^2 q``, ``r <- a^2 (r + d q)``.

Backward (recompute, nothing of size [N, V] saved; saved per token: m, s, mu). With upstream grads g_l (logp) and
g_H (entropy) and the gradients with respect to z

    d logp / d z_j = 1[j = y] - p_j,     d H / d z_j = -p_j (log p_j + H) = -p_j (z'_j - mu),   z' = z - m,

(log s cancels exactly in log p_j + H, so no catastrophic cancellation for flat or peaked rows), the gradient with
respect to the pre-temperature logits (hW^T + b) is

    D_j = (g_l (1[j = y] - p_j) - g_H p_j (z'_j - mu)) / T = e_j (A z'_j + B) + C 1[j = y],
    e_j = e^(z'_j),   A = -g_H / (T s),   B = (g_H mu - g_l) / (T s),   C = g_l / T.

Per tile, in place: ``z' = z - m``, ``e = exp(z')``, ``z <- A z' + B`` (addcmul), ``z <- z * e``, ``+C`` at the
target; then ``dh_c (+)= D @ W_s``, ``dW_s (+)= D^T @ h_c``, ``dbias_s += D.sum(0)`` (the tile holds ``D^T``).
A missing upstream grad is skipped (no entropy grad: ``D = B e + C 1[j = y]``, one pass fewer).

Chunk sizes (defaults). Slab ``S = min(V, 2048)`` vocabulary rows (for every input dtype), rows
``C = 16 MiB / (4 S)`` rounded to a multiple of 16 (2048 tokens at V >= 2048), so each of the two fp32 tile buffers
takes <= 16 MiB. For bfloat16/float16 inputs the weight slab is upcast to fp32 (the CPU has no bf16 x bf16 -> fp32
GEMM in torch), so ``S`` is also capped to keep that copy and the fp32 ``dW`` slab accumulator at <= 64 MiB each
(only binding at H > 8192); the hidden states are upcast once (``N x H x 4`` bytes, the size of the fp32 ``dh``
accumulator the backward needs anyway). Peak extra memory: forward 2 x 16 MiB + O(N); backward 2 x 16 MiB + dW + dh
for float32 inputs (at N=2048, H=576, V=49152: ~145 MiB against ~409 MiB for TRL's chunked function with
4096-vocabulary chunks and ~1.9 GiB for the materialised version).

Why these sizes (measured on a 2-core AVX-512 CPU with MKL at N=2048, H=576, V=49152; see
benchmarks/results/kernel_cpu.md): the four GEMMs (forward, recompute, dh, dW) are ~90% of the time and run at
MKL's full rate (~190 GFLOP/s here) with these tiles (``benchmarks/kernel_gemm_floor.py`` times them alone). A
16 MiB tile is half the 32 MiB L3, so the elementwise passes after its GEMM mostly hit cache, where the earlier
32768 x 512 tiles of 64 MiB went to memory on every pass: in one rotating run, forward+backward took 2.69 s (best of
5) against 2.81 s with those tiles, and 1024 to 4096 rows per slab measured alike while 256 rows lost GEMM speed.
With all of a batch's tokens in one chunk (N <= 2048) each ``dW`` slab is one GEMM with K = N, no accumulation.
"""

from __future__ import annotations

import torch

from ._types import LogProbEntropy

# Bytes of one fp32 [S, C] tile buffer (two are live: logits and exp)
TILE_BUDGET_BYTES = 16 * 2**20
# Vocabulary rows per slab (every input dtype; bfloat16/float16 also capped by LOWP_SLAB_BUDGET_BYTES)
FP32_VOCAB_SLAB = 2048
# Bytes of the fp32 weight-slab copy (and of the fp32 dW slab) for bfloat16/float16 inputs
LOWP_SLAB_BUDGET_BYTES = 64 * 2**20


def plan_chunks(n: int, v: int, h: int, dtype: torch.dtype, chunk_size: int | None = None) -> tuple[int, int]:
    """``(rows C, vocab slab S)`` used for ``n`` tokens, ``v`` vocabulary rows of hidden size ``h``."""
    slab = min(v, FP32_VOCAB_SLAB)
    if dtype != torch.float32:
        slab = min(slab, max(256, LOWP_SLAB_BUDGET_BYTES // (4 * h)))
    if chunk_size is None:
        chunk_size = max(16, (TILE_BUDGET_BYTES // (4 * slab)) // 16 * 16)
    return max(1, min(n, chunk_size)), slab


def _merge(st: dict[str, torch.Tensor], sl: slice, new: dict[str, torch.Tensor], power_sums: bool) -> None:
    """Fold a tile's statistics ``new`` (shifted by ``new['m']`` >= ``st['m'][sl]``) into the running ones."""
    d = st["m"][sl] - new["m"]  # <= 0
    a = torch.exp(d)
    s_old = st["s"][sl]
    st["t"][sl] = a * (st["t"][sl] + d * s_old) + new["t"]
    st["s"][sl] = a * s_old + new["s"]
    if power_sums:
        a2 = a * a
        q_old = st["q"][sl]
        st["r"][sl] = a2 * (st["r"][sl] + d * q_old) + new["r"]
        st["q"][sl] = a2 * q_old + new["q"]
    st["m"][sl] = new["m"]


def finalize(st: dict[str, torch.Tensor], power_sums: bool) -> dict[str, torch.Tensor]:
    """Outputs (``logp``, ``entropy``, power sums) and the saved ``mu = t / s`` from the merged statistics."""
    log_s = torch.log(st["s"])
    mu = st["t"] / st["s"]
    out = {"logp": (st["zy"] - st["m"]) - log_s, "entropy": log_s - mu, "mu": mu}
    if power_sums:
        inv_s2 = st["s"].reciprocal().square()
        out["sum_p2"] = st["q"] * inv_s2
        out["sum_p2_logp"] = (st["r"] - st["q"] * log_s) * inv_s2
    return out


def finish_forward(ctx, inputs: tuple, st: dict[str, torch.Tensor], power_sums: bool) -> tuple:
    """A backend's forward outputs from its merged statistics ``st``, for every backend alike: saves what each
    backward reads (the inputs ``(hidden, weight, bias, targets)``, then m, s and mu = t / s) and marks the power
    sums non-differentiable."""
    out = finalize(st, power_sums)
    ctx.save_for_backward(*inputs, st["m"], st["s"], out["mu"])
    if power_sums:
        ctx.mark_non_differentiable(out["sum_p2"], out["sum_p2_logp"])
        return out["logp"], out["entropy"], out["sum_p2"], out["sum_p2_logp"]
    return out["logp"], out["entropy"]


def grad_coefficients(g_logp, g_ent, s, mu, inv_t):
    """Per-token ``A, B, C`` of ``D_j = e_j (A z'_j + B) + C 1[j = y]`` (``A``/``C`` None without g_H/g_l)."""
    g_l = None if g_logp is None else g_logp.float()
    g_h = None if g_ent is None else g_ent.float()
    inv_ts = inv_t / s
    a = None if g_h is None else -g_h * inv_ts
    if g_h is None:
        b = -g_l * inv_ts
    elif g_l is None:
        b = g_h * mu * inv_ts
    else:
        b = (g_h * mu - g_l) * inv_ts
    c = None if g_l is None else g_l * inv_t
    return a, b, c


def _logits_tile(out, h_c, w_s, b_s, inv_t):
    """Transposed fp32 logits tile ``out [S, C] = (w_s @ h_c^T + b_s) / T`` (``b_s`` already divided by T).

    Vocabulary-major: on CPU (MKL) the GEMM with the long vocabulary side as M runs at the speed of the
    unchunked GEMM, while ``h_c @ w_s^T`` ([C, S]) loses ~10-15% at C = 512; the per-token reductions run along
    dim 0 and the backward GEMMs take ``D^T`` as it is.
    """
    if inv_t != 1.0:
        h_c = h_c * inv_t
    torch.mm(w_s, h_c.t(), out=out)
    if b_s is not None:
        out.add_(b_s.unsqueeze(1))
    return out


class _ChunkedLogProbEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, power_sums, chunk_size):
        # An unused output (e.g. entropy logged only) gets no zero-filled gradient and costs nothing in backward
        ctx.set_materialize_grads(False)
        n, h = hidden.shape
        v = weight.shape[0]
        f32 = torch.float32
        dev = hidden.device
        rows, slab = plan_chunks(n, v, h, hidden.dtype, chunk_size)
        inv_t = 1.0 / temperature
        h32 = hidden if hidden.dtype == f32 else hidden.float()

        st = {k: torch.zeros(n, dtype=f32, device=dev) for k in ("m", "s", "t", "zy")}
        if power_sums:
            st["q"] = torch.zeros(n, dtype=f32, device=dev)
            st["r"] = torch.zeros(n, dtype=f32, device=dev)
        zbuf = torch.empty(rows * slab, dtype=f32, device=dev)
        ebuf = torch.empty(rows * slab, dtype=f32, device=dev)

        with torch.autocast(dev.type, enabled=False):
            for v0 in range(0, v, slab):
                v1 = min(v, v0 + slab)
                w = v1 - v0
                w_s = weight[v0:v1] if weight.dtype == f32 else weight[v0:v1].float()
                b_s = None if bias is None else bias[v0:v1].float() * inv_t
                for r0 in range(0, n, rows):
                    r1 = min(n, r0 + rows)
                    c = r1 - r0
                    sl = slice(r0, r1)
                    z = _logits_tile(zbuf[: w * c].view(w, c), h32[sl], w_s, b_s, inv_t)
                    e = ebuf[: w * c].view(w, c)
                    # Target logit (unshifted), from the slab that holds it
                    y_loc = targets[sl] - v0
                    zy = z.gather(0, y_loc.clamp(0, w - 1).unsqueeze(0)).squeeze(0)
                    if v0 == 0 and v1 == v:
                        st["zy"][sl] = zy
                    else:
                        in_slab = (y_loc >= 0) & (y_loc < w)
                        st["zy"][sl] = torch.where(in_slab, zy, st["zy"][sl])
                    # Tile statistics, all in place on the two buffers (no other [S, C] temporary)
                    m = z.amax(0)
                    if v0 > 0:
                        m = torch.maximum(st["m"][sl], m)
                    z.sub_(m)  # z - m <= 0
                    torch.exp(z, out=e)  # e = e^(z - m)
                    new = {"m": m, "s": e.sum(0)}
                    z.mul_(e)  # e (z - m)
                    new["t"] = z.sum(0)
                    if power_sums:
                        z.mul_(e)  # e^2 (z - m)
                        new["r"] = z.sum(0)
                        e.mul_(e)  # e^2
                        new["q"] = e.sum(0)
                    if v0 == 0:
                        for k, val in new.items():
                            st[k][sl] = val
                    else:
                        _merge(st, sl, new, power_sums)
        del zbuf, ebuf

        ctx.temperature = temperature
        ctx.chunk_size = chunk_size
        return finish_forward(ctx, (hidden, weight, bias, targets), st, power_sums)

    @staticmethod
    def backward(ctx, g_logp, g_ent, *unused):
        hidden, weight, bias, targets, m, s, mu = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        if (g_logp is None and g_ent is None) or not (need_h or need_w or need_b):
            return None, None, None, None, None, None, None
        n, h = hidden.shape
        v = weight.shape[0]
        f32 = torch.float32
        dev = hidden.device
        rows, slab = plan_chunks(n, v, h, hidden.dtype, ctx.chunk_size)
        inv_t = 1.0 / ctx.temperature
        h32 = hidden if hidden.dtype == f32 else hidden.float()

        # D_j = e_j (A z'_j + B) + C 1[j = y]   (see the module docstring)
        a, b, c = grad_coefficients(g_logp, g_ent, s, mu, inv_t)

        dh = torch.empty(n, h, dtype=f32, device=dev) if need_h else None
        dw = torch.empty_like(weight) if need_w else None
        dw_acc = None
        if need_w and weight.dtype != f32:
            dw_acc = torch.empty(slab, h, dtype=f32, device=dev)
        db = torch.zeros(v, dtype=f32, device=dev) if need_b else None
        zbuf = torch.empty(rows * slab, dtype=f32, device=dev)
        ebuf = torch.empty(rows * slab, dtype=f32, device=dev)

        with torch.autocast(dev.type, enabled=False):
            for v0 in range(0, v, slab):
                v1 = min(v, v0 + slab)
                w = v1 - v0
                w_s = weight[v0:v1] if weight.dtype == f32 else weight[v0:v1].float()
                b_s = None if bias is None else bias[v0:v1].float() * inv_t
                dw_s = None
                if need_w:
                    dw_s = dw[v0:v1] if dw_acc is None else dw_acc[:w]
                for r0 in range(0, n, rows):
                    r1 = min(n, r0 + rows)
                    cnt = r1 - r0
                    sl = slice(r0, r1)
                    h_c = h32[sl]
                    z = _logits_tile(zbuf[: w * cnt].view(w, cnt), h_c, w_s, b_s, inv_t)
                    e = ebuf[: w * cnt].view(w, cnt)
                    z.sub_(m[sl])  # z' = z - m
                    torch.exp(z, out=e)  # e = e^z' = s p
                    if a is not None:
                        torch.addcmul(b[sl], z, a[sl], out=z)  # A z' + B
                        z.mul_(e)  # D^T without the target term
                    else:
                        torch.mul(e, b[sl], out=z)
                    if c is not None:
                        y_loc = targets[sl] - v0
                        if v0 == 0 and v1 == v:
                            z[y_loc, torch.arange(cnt, device=dev)] += c[sl]
                        else:
                            idx = torch.nonzero((y_loc >= 0) & (y_loc < w)).squeeze(1)
                            if idx.numel():
                                z[y_loc[idx], idx] += c[sl][idx]
                    # z now holds D^T [S, C]
                    if need_h:
                        if v0 == 0:
                            torch.mm(z.t(), w_s, out=dh[sl])
                        else:
                            dh[sl].addmm_(z.t(), w_s)
                    if need_w:
                        if r0 == 0:
                            torch.mm(z, h_c, out=dw_s)
                        else:
                            dw_s.addmm_(z, h_c)
                    if need_b:
                        db[v0:v1] += z.sum(1)
                if dw_acc is not None:
                    dw[v0:v1].copy_(dw_s)

        grad_h = None if dh is None else dh.to(hidden.dtype)
        grad_b = None if db is None else db.to(bias.dtype)
        return grad_h, dw, grad_b, None, None, None, None


def torch_logprob_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    power_sums: bool = False,
    chunk_size: int | None = None,
) -> LogProbEntropy:
    """Torch chunked backend of :func:`healtrl.kernels.fused_logprob_entropy` (inputs assumed validated).

    ``chunk_size`` overrides the rows per tile (default: ``TILE_BUDGET_BYTES / (4 S)``, see the module docstring).
    """
    out = _ChunkedLogProbEntropy.apply(hidden, weight, bias, targets, temperature, bool(power_sums), chunk_size)
    return LogProbEntropy(*out) if power_sums else LogProbEntropy(out[0], out[1], None, None)
