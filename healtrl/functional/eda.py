"""HEAL's Entropy Dynamics Alignment (EDA) reward (HEAL, arXiv:2604.17928, §3.2, eq. 2-4, and Appendix A.2, eq. 8-11).

The entropy dynamics of a trajectory is the sequence of its token entropies, tau = (H_1, ..., H_|y|). EDA rewards a
target-domain trajectory whose entropy dynamics is more similar to some general-domain trajectory than to every other
target-domain trajectory of the batch:

    S_intra(i) = max_{j in B_tgt, j != i} s(tau_i, tau_j)        (eq. 2)
    S_inter(i) = max_{k in B_gen} s(tau_i, tau_k)                 (eq. 3)
    r_EDA(i)   = 1 if S_inter(i) > S_intra(i) else 0              (eq. 4)

with one of three similarities s (Appendix A.2): ``"kl"`` (the paper's default, eq. 8-9), ``"hti"`` (high-entropy
token intersection, eq. 10) and ``"pl"`` (Pearson linear, eq. 11).

Functions:

- `entropy_dynamics_similarity`: s for one pair, written plainly with `torch.nn.functional.interpolate`;
- `pairwise_entropy_similarity`: the [N, N] matrix S[i, j] = s(tau_i, tau_j), batched on the inputs' device in tiles
  of bounded size, with no Python loop over pairs;
- `eda_rewards`: the 0/1 rewards, with the paper's semantics (``mode="paper"``) or the authors' public code's
  (``mode="reference"``).

Length alignment (eq. 8, 10) is nearest-neighbour interpolation with exactly the index rule of
``F.interpolate(x[None, None], size=M, mode="nearest")`` for a float32 x (the authors' code stretches float32
entropies): position t of the stretched sequence reads source index ``floor(float32(t) * (float32(L) / float32(M)))``,
computed in float32 (torch also clamps the index to L - 1; for M < 2**23, the longest length accepted here, the clamp
is never active). The same rule is used for every input dtype and device. It is torch's rule on CUDA for every dtype;
on CPU, torch computes the index of a float64 tensor in float64 instead, which moves it by one position at some
(L, M), e.g. t = 23 for L = 14, M = 46 (exact product 7: float32 gives 6, float64 gives 7).

How the batched KL avoids redundant work. Centre each sequence, c = tau - max tau, and let e = exp(c), z = sum e, so
that log-softmax(tau) = c - log z. For a pair with the shorter sequence a, stretched by the index map g to a' of length
M = L_b, and the longer b (eq. 8-9):

    KL(P_a' || P_b) = sum_t e_a[g(t)] d_t / z_a' - (log z_a' - log z_b),
    KL(P_b || P_a') = (log z_a' - log z_b) - sum_t e_b[t] d_t / z_b,     d_t = c_a[g(t)] - c_b[t],  z_a' = sum_t e_a[g(t)]

(the max terms cancel; z_a' is the only per-pair normaliser, the logsumexp of the stretched sequence). So both
directions come from one pass over the pair: two 1-D gathers (e_a and c_a at g(t)), one fused difference d, and three
dot products over t. Differences are taken before summing, so float32 keeps the precision of the individual terms, and
identical sequences (same length) and constant sequences (of any lengths) get KL = 0 exactly, hence exact ties.
Sequences are sorted by length so that each unordered pair is computed once (the shorter one is the row); pairs run in
tiles of at most `tile_elements` (row, column, position) entries whose time axis is cut at the tile's longest column.
Work is O(pairs x L), memory O(tile_elements); `eda_rewards` only computes the pairs it needs (in paper mode, no pair of
two general-domain trajectories).

Why this module is long: it is one computation, eq. 2-4 over a whole rollout batch, with the two similarity
measures of Appendix A.2 and the batched, tiled pairwise pass that keeps it linear in memory; each piece is only
used here, and the equations read best next to the code that evaluates them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import torch
import torch.nn.functional as F

SIMILARITIES = ("kl", "hti", "pl")
MODES = ("paper", "reference")
KL_ORDERS = ("shorter_first", "given")
REFERENCE_MIN_LENGTH = 50  # the authors' code gives r_EDA = 0 to responses of <= 50 tokens
_MAX_LENGTH = 2**23  # float32 nearest-index arithmetic is exact (and torch's clamp inactive) below this length
_DEFAULT_TILE_ELEMENTS = {"cpu": 2**21}  # pair-positions per tile; other devices: _DEFAULT_TILE_ELEMENTS_ACCEL
_DEFAULT_TILE_ELEMENTS_ACCEL = 2**26

EntropiesLike = torch.Tensor | Sequence[torch.Tensor]


# ---------------------------------------------------------------------------------------------------------------
# Input handling
# ---------------------------------------------------------------------------------------------------------------
def _check_choice(name: str, value, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ValueError(f"{name} must be one of {valid}, got {value!r}.")


def _check_top_fraction(top_fraction: float) -> Fraction:
    if isinstance(top_fraction, bool) or not isinstance(top_fraction, int | float) or not 0 < top_fraction <= 1:
        raise ValueError(f"top_fraction must be a number in (0, 1], got {top_fraction!r}.")
    return Fraction(top_fraction).limit_denominator(10**6)


def _top_count(length, frac: Fraction):
    """Number of top-entropy positions of a sequence of `length` (int or integer tensor): ceil(frac * length)."""
    return (length * frac.numerator + frac.denominator - 1) // frac.denominator


def _float_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def _as_padded(entropies: EntropiesLike, lengths: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, T) float tensor with zeros beyond each length, and the (N,) int64 lengths, from either input form."""
    if isinstance(entropies, torch.Tensor):
        if entropies.dim() != 2:
            raise ValueError(
                f"entropies must be a list of 1-D tensors or a padded (N, T) tensor, got a tensor of shape "
                f"{tuple(entropies.shape)}."
            )
        if lengths is None:
            raise ValueError(
                "lengths is required with a padded (N, T) entropies tensor: pass lengths=mask.sum(-1) for a right-"
                "padded batch (or torch.full((N,), T) when nothing is padded)."
            )
        x = entropies
    else:
        if lengths is not None:
            raise ValueError("lengths must be None when entropies is a list of 1-D tensors (their sizes are used).")
        seqs = list(entropies)
        for i, s in enumerate(seqs):
            if not isinstance(s, torch.Tensor) or s.dim() != 1:
                raise ValueError(
                    f"entropies[{i}] must be a 1-D tensor, got {type(s).__name__} {getattr(s, 'shape', '')}."
                )
        if seqs and len({s.device for s in seqs}) > 1:
            raise ValueError("all entropies tensors must be on the same device.")
        device = seqs[0].device if seqs else torch.device("cpu")
        dtype = torch.float32
        for s in seqs:
            if not s.dtype.is_floating_point:
                raise ValueError(f"entropies must be floating-point tensors, got dtype {s.dtype}.")
            dtype = torch.promote_types(dtype, s.dtype)
        lengths = torch.tensor([s.numel() for s in seqs], dtype=torch.long, device=device)
        width = int(lengths.max()) if seqs else 0
        x = torch.zeros(len(seqs), width, dtype=dtype, device=device)
        for i, s in enumerate(seqs):
            x[i, : s.numel()] = s
    if not x.dtype.is_floating_point:
        raise ValueError(f"entropies must be a floating-point tensor, got dtype {x.dtype}.")
    x = x.detach().to(_float_dtype(x.dtype))
    n, width = x.shape
    if width >= _MAX_LENGTH:
        raise ValueError(f"entropy sequences longer than {_MAX_LENGTH - 1} tokens are not supported, got {width}.")
    lengths = torch.as_tensor(lengths, device=x.device)
    if lengths.shape != (n,) or lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise ValueError(
            f"lengths must be an integer tensor of shape ({n},) (one length per row of entropies), got "
            f"{lengths.dtype} {tuple(lengths.shape)}."
        )
    lengths = lengths.long()
    if n and (int(lengths.min()) < 0 or int(lengths.max()) > width):
        raise ValueError(f"lengths must lie in [0, {width}] (the padded width of entropies), got {lengths.tolist()}.")
    valid = torch.arange(width, device=x.device) < lengths[:, None]
    if not bool(torch.isfinite(x[valid]).all()):
        raise ValueError("entropies contain NaN or infinite values inside the sequences' lengths.")
    return x.masked_fill(~valid, 0.0), lengths


def _stretch(x: torch.Tensor, size: int) -> torch.Tensor:
    """Nearest-neighbour stretch of a 1-D tensor to `size` (HEAL Appendix A.2, eq. 8), with the index map that
    ``F.interpolate(mode="nearest")`` uses for float32 tensors (whatever the dtype of `x`)."""
    if x.numel() == size:
        return x
    source = torch.arange(x.numel(), dtype=torch.float32, device=x.device)
    index = F.interpolate(source[None, None], size=size, mode="nearest")[0, 0].long()
    return x[index]


# ---------------------------------------------------------------------------------------------------------------
# One pair
# ---------------------------------------------------------------------------------------------------------------
def _top_mask_1d(x: torch.Tensor, k: int) -> torch.Tensor:
    """Top-k positions of a 1-D tensor; equal values are ranked by position (earlier first)."""
    perm = torch.sort(x, descending=True, stable=True).indices
    mask = torch.zeros(x.numel(), dtype=torch.bool, device=x.device)
    mask[perm[:k]] = True
    return mask


def _linear_fit(x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Least-squares slope k and Pearson r of entropy against position index 0..L-1, per row of a padded (N, T) x.

    Rows of length < 2 get k = 0 and r = 0; constant rows (max == min) get r = 0 (their k is 0).
    """
    n, width = x.shape
    if width == 0:  # all sequences empty
        return x.new_zeros(n), x.new_zeros(n)
    t = torch.arange(width, device=x.device, dtype=x.dtype)
    valid = t < lengths[:, None]
    length = lengths.to(x.dtype)
    t_mean = (length - 1) / 2
    y_mean = x.sum(1) / length.clamp_min(1)
    tc = torch.where(valid, t - t_mean[:, None], 0.0)
    yc = torch.where(valid, x - y_mean[:, None], 0.0)
    s_ty = (tc * yc).sum(1)  # sum (t - t_mean)(y - y_mean)
    s_tt = length * (length * length - 1) / 12  # sum (t - t_mean)^2 over t = 0..L-1
    s_yy = (yc * yc).sum(1)
    constant = x.masked_fill(~valid, -math.inf).amax(1) == x.masked_fill(~valid, math.inf).amin(1)
    ok = lengths >= 2
    s_tt = torch.where(ok, s_tt, 1.0)
    slope = torch.where(ok, s_ty / s_tt, 0.0)  # least-squares slope (eq. 11's k)
    r = torch.where(ok & ~constant, s_ty / (s_tt * s_yy).sqrt().clamp_min(torch.finfo(x.dtype).tiny), 0.0)
    return slope, r.clamp(-1.0, 1.0)  # Pearson r (eq. 11's delta); |r| <= 1 up to rounding


def _pl_from_fits(k_a, r_a, k_b, r_b):
    return (torch.cos(torch.atan(k_a) - torch.atan(k_b)) * r_a * r_b).abs()  # HEAL eq. 11


def entropy_dynamics_similarity(
    tau_a: torch.Tensor,
    tau_b: torch.Tensor,
    method: str = "kl",
    *,
    top_fraction: float = 0.2,
    kl_order: str = "shorter_first",
) -> torch.Tensor:
    """Similarity s(tau_a, tau_b) of two entropy dynamics (HEAL Appendix A.2).

    - ``"kl"`` (eq. 8-9): the shorter sequence is stretched to the longer one's length by nearest-neighbour
      interpolation (``F.interpolate(mode="nearest")``: source index floor(t * L_short / L_long)), each is turned
      into a distribution over time by a softmax, and s = -KL(softmax(shorter') || softmax(longer)). For equal
      lengths s(a, b) = -KL(P_a || P_b). With ``kl_order="given"``, s(a, b) = -KL(P_a' || P_b') whichever is
      stretched (the direction used by the authors' code).
    - ``"hti"`` (eq. 10): both are aligned to N = the longer length (nearest interpolation); I_a, I_b are the
      ceil(top_fraction * N) positions of highest entropy of each (equal values ranked by position, earlier first;
      the copies made by stretching are equal values); s = sum_t min(tau_a,t 1[t in I_a], tau_b,t 1[t in I_b]).
      The count is rounded up so that every non-empty sequence has at least one top position (a 1-4 token
      sequence compares its highest token) and the set covers at least `top_fraction` of the positions; it is
      computed in exact rational arithmetic (0.2 is read as 1/5, so N = 15 gives 3, not ceil(3.0000000000000004)).
    - ``"pl"`` (eq. 11): slope k and Pearson r of the least-squares line of entropy against position index
      0..L-1 of each sequence (no alignment); s = |cos(arctan k_a - arctan k_b) r_a r_b|. Sequences of length
      < 2 and constant sequences have r = 0 (no linear trend), hence s = 0.

    Args:
        tau_a: 1-D tensor of token entropies.
        tau_b: 1-D tensor of token entropies.
        method: ``"kl"``, ``"hti"`` or ``"pl"``.
        top_fraction: Share of positions counted as high-entropy for ``"hti"`` (paper: 0.2).
        kl_order: ``"shorter_first"`` (paper, eq. 9) or ``"given"`` (authors' code), for ``"kl"`` only.

    Returns:
        0-dim tensor (the inputs' floating dtype, at least float32). Higher means more similar.
    """
    _check_choice("method", method, SIMILARITIES)
    _check_choice("kl_order", kl_order, KL_ORDERS)
    frac = _check_top_fraction(top_fraction)
    for name, tau in (("tau_a", tau_a), ("tau_b", tau_b)):
        if not isinstance(tau, torch.Tensor) or tau.dim() != 1 or not tau.dtype.is_floating_point:
            raise ValueError(f"{name} must be a 1-D floating-point tensor, got {getattr(tau, 'shape', type(tau))}.")
    dtype = _float_dtype(torch.promote_types(tau_a.dtype, tau_b.dtype))
    a, b = tau_a.detach().to(dtype), tau_b.detach().to(dtype)
    if method == "pl":
        x, lengths = _as_padded([a, b], None)
        k, r = _linear_fit(x, lengths)
        return _pl_from_fits(k[0], r[0], k[1], r[1])
    if a.numel() == 0 or b.numel() == 0:
        raise ValueError(f"method={method!r} needs non-empty sequences, got lengths {a.numel()} and {b.numel()}.")
    size = max(a.numel(), b.numel())
    a_s, b_s = _stretch(a, size), _stretch(b, size)  # one of the two is unchanged
    if method == "kl":
        if kl_order == "shorter_first" and b.numel() < a.numel():
            a_s, b_s = b_s, a_s  # eq. 8-9: the stretched shorter sequence is the first argument of the KL
        log_p, log_q = F.log_softmax(a_s, dim=0), F.log_softmax(b_s, dim=0)  # eq. 8
        return -(log_p.exp() * (log_p - log_q)).sum()  # eq. 9: s = -KL(P || Q)
    k = _top_count(size, frac)
    top_a, top_b = _top_mask_1d(a_s, k), _top_mask_1d(b_s, k)
    return torch.minimum(a_s * top_a, b_s * top_b).sum()  # eq. 10


# ---------------------------------------------------------------------------------------------------------------
# All pairs
# ---------------------------------------------------------------------------------------------------------------
def _stretch_index(len_rows: torch.Tensor, len_cols: torch.Tensor, width: int) -> torch.Tensor:
    """(C, R, width) int32 source indices of each row sequence stretched to max(len_row, len_col).

    torch's nearest rule: floor(float32(t) * (float32(L_src) / float32(L_dst))). Positions t >= L_dst get indices
    >= L_src - 1 that stay inside the row's zero padding (width <= padded width); callers mask them.
    """
    dst = torch.maximum(len_rows[None, :], len_cols[:, None])
    scale = len_rows[None, :].to(torch.float32) / dst.clamp_min(1).to(torch.float32)
    t = torch.arange(width, device=len_rows.device, dtype=torch.float32)
    return (t * scale[..., None]).to(torch.int32)  # trunc == floor (non-negative)


class _SortedBatch:
    """Sequences sorted by length (stable), with the per-sequence quantities the tiles share."""

    def __init__(self, x: torch.Tensor, lengths: torch.Tensor):
        self.n, self.width = x.shape
        self.device, self.dtype = x.device, x.dtype
        self.len, self.order = torch.sort(lengths, stable=True)
        self.lens = self.len.tolist()
        self.x = x[self.order]
        self.valid = torch.arange(self.width, device=x.device) < self.len[:, None]
        self.base = torch.arange(self.n, device=x.device, dtype=torch.int32) * (self.width + 1)

    def padded_table(self, channels: list[torch.Tensor]) -> torch.Tensor:
        """(N * (width + 1), channels) table: row p holds sorted sequence p then one zero position."""
        table = torch.zeros(self.n, self.width + 1, len(channels), dtype=self.dtype, device=self.device)
        for c, values in enumerate(channels):
            table[:, : self.width, c] = values
        return table.view(-1, len(channels))

    def unsort(self, out: torch.Tensor) -> torch.Tensor:
        inverse = torch.empty_like(self.order)
        inverse[self.order] = torch.arange(self.n, device=self.device)
        return out[inverse][:, inverse]


def _pair_passes(focus: list[bool], active: list[bool]) -> list[tuple[list[int], list[int], bool]]:
    """Passes (rows, cols, strict) covering each unordered pair of active sequences with at least one in focus once.

    Positions are sorted positions, so row <= col means len(row) <= len(col): the row is the sequence stretched.
    Pass 1: focus rows x active cols with row <= col; pass 2: non-focus rows x focus cols with row < col.
    """
    rows_1 = [p for p, f in enumerate(focus) if f]
    cols_1 = [p for p, a in enumerate(active) if a]
    rows_2 = [p for p, (f, a) in enumerate(zip(focus, active)) if a and not f]
    return [(rows_1, cols_1, False), (rows_2, rows_1, True)]


def _tiles(rows: list[int], cols: list[int], strict: bool, lens: list[int], tile_elements: int):
    """(row block, column block) tiles of at most about tile_elements (row, col, position) entries with at least one
    pair row <= col (row < col if strict), column blocks outermost."""
    if not rows or not cols:
        return
    width = max(lens[cols[-1]], 1)
    r_size = max(1, min(len(rows), math.isqrt(max(tile_elements // width, 1))))
    c_size = max(1, tile_elements // (width * r_size))
    for j in range(0, len(cols), c_size):
        cb = cols[j : j + c_size]
        for i in range(0, len(rows), r_size):
            rb = rows[i : i + r_size]
            if rb[0] > cb[-1] or (strict and rb[0] == cb[-1]):
                break  # rows ascend: every later row block is past this column block too
            yield rb, cb


def _write_pairs(out, rp, cp, valid, forward, backward) -> None:
    """out[row, col] = forward and out[col, row] = backward for the valid pairs of a tile (all (C, R))."""
    idx_rc = (rp[:, None], cp[None, :])
    out[idx_rc] = torch.where(valid.T, forward.T, out[idx_rc])
    idx_cr = (cp[:, None], rp[None, :])
    out[idx_cr] = torch.where(valid, backward, out[idx_cr])


def _similarity_matrix(
    x: torch.Tensor,
    lengths: torch.Tensor,
    method: str,
    kl_order: str,
    frac: Fraction,
    tile_elements: int,
    focus: torch.Tensor | None = None,
    active: torch.Tensor | None = None,
) -> torch.Tensor:
    """S[i, j] for every pair of active sequences with at least one in focus (NaN elsewhere for kl/hti).

    focus and active are (N,) bool masks (default: the non-empty sequences); focus must lie inside active, and empty
    sequences are never active for kl and hti.
    """
    if method == "pl":
        k, r = _linear_fit(x, lengths)
        return _pl_from_fits(k[:, None], r[:, None], k[None, :], r[None, :])
    batch = _SortedBatch(x, lengths)
    nonempty = lengths > 0
    active = nonempty if active is None else active & nonempty
    focus = active if focus is None else focus & active
    passes = _pair_passes(focus[batch.order].tolist(), active[batch.order].tolist())
    out = torch.full((batch.n, batch.n), math.nan, dtype=x.dtype, device=x.device)
    if not any(rows and cols for rows, cols, _ in passes):
        pass  # nothing to compare (e.g. all sequences empty)
    elif method == "kl":
        _kl_tiles(batch, passes, kl_order, tile_elements, out)
    else:
        _hti_tiles(batch, passes, frac, tile_elements, out)
    return batch.unsort(out)


def _kl_tiles(batch: _SortedBatch, passes, kl_order: str, tile_elements: int, out: torch.Tensor) -> None:
    valid = batch.valid
    m = torch.where(batch.len > 0, batch.x.masked_fill(~valid, -math.inf).amax(1), 0.0)  # max tau (0 for empties)
    xc = torch.where(valid, batch.x - m[:, None], 0.0)  # centred: log-softmax(tau) = xc - log z
    e = torch.where(valid, torch.exp(xc), 0.0)
    z = e.sum(1)  # softmax normaliser (eq. 8) of the centred sequence
    log_z = torch.log(z)
    e_table, x_table = batch.padded_table([e]).view(-1), batch.padded_table([xc]).view(-1)
    for rows, cols, strict in passes:
        col_key = None
        for rb, cb in _tiles(rows, cols, strict, batch.lens, tile_elements):
            w = batch.lens[cb[-1]]  # longest column of the tile: the tile's time axis
            rp = torch.tensor(rb, device=batch.device)
            cp = torch.tensor(cb, device=batch.device)
            if col_key != (cb[0], cb[-1]):
                col_key = (cb[0], cb[-1])
                neg_xb = -xc[cp, None, :w]  # (C, 1, w), zero beyond each column's length
                e_b = e[cp, None, :w]
                mask_b = valid[cp, None, :w].to(batch.dtype)
            len_a, len_b = batch.len[rp], batch.len[cp]
            idx = _stretch_index(len_a, len_b, w).add_(batch.base[rp][None, :, None]).view(-1)
            e_a = e_table.index_select(0, idx).view(len(cb), len(rb), w)  # exp of the stretched row a' (eq. 8)
            d = torch.addcmul(neg_xb, x_table.index_select(0, idx).view_as(e_a), mask_b)  # a'_t - b_t, t < L_b
            z_a = torch.linalg.vecdot(e_a, mask_b)  # normaliser of a' over t < L_b
            # unstretched rows: the same sum as the columns' z, so identical sequences give exactly KL = 0
            z_a = torch.where(len_a[None, :] == len_b[:, None], z[rp][None, :], z_a)
            log_ratio = torch.log(z_a) - log_z[cp][:, None]  # log z_a' - log z_b
            kl_ab = torch.linalg.vecdot(e_a, d) / z_a - log_ratio  # KL(softmax(a') || softmax(b)), eq. 9
            kl_ba = log_ratio - torch.linalg.vecdot(d, e_b) / z[cp][:, None]  # KL(softmax(b) || softmax(a'))
            if kl_order == "shorter_first":
                kl_ba = torch.where(len_a[None, :] < len_b[:, None], kl_ab, kl_ba)  # s(b, a) = s(a, b), a shorter
            pair_ok = rp[None, :] < cp[:, None] if strict else rp[None, :] <= cp[:, None]
            _write_pairs(out, rp, cp, pair_ok, -kl_ab, -kl_ba)


def _rank_top_mask(values: torch.Tensor, valid: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Top-k positions along the last dim among `valid` ones, equal values ranked by position (earlier first)."""
    perm = torch.sort(values.masked_fill(~valid, -math.inf), dim=-1, descending=True, stable=True).indices
    rank = torch.empty_like(perm)
    rank.scatter_(-1, perm, torch.arange(values.shape[-1], device=values.device).expand_as(perm))
    return (rank < k[..., None]) & valid


def _hti_tiles(batch: _SortedBatch, passes, frac: Fraction, tile_elements: int, out: torch.Tensor) -> None:
    xs = batch.x
    table = batch.padded_table([xs]).view(-1)
    t_all = torch.arange(batch.width, device=batch.device)
    for rows, cols, strict in passes:
        for rb, cb in _tiles(rows, cols, strict, batch.lens, tile_elements):
            w = batch.lens[cb[-1]]
            rp = torch.tensor(rb, device=batch.device)
            cp = torch.tensor(cb, device=batch.device)
            len_b = batch.len[cp]
            in_b = t_all[:w] < len_b[:, None]  # (C, w); valid pairs: common length N = the column's length
            k = _top_count(len_b, frac)
            b = xs[cp, :w]
            top_b = _rank_top_mask(b, in_b, k)
            idx = _stretch_index(batch.len[rp], len_b, w) + batch.base[rp][None, :, None]
            a = table.index_select(0, idx.view(-1)).view(len(cb), len(rb), w)  # stretched rows a'
            in_a = in_b[:, None, :].expand_as(a)
            top_a = _rank_top_mask(a, in_a, k[:, None].expand(-1, len(rb)))
            sim = torch.minimum(a * top_a, (b * top_b)[:, None, :]).masked_fill(~in_a, 0.0).sum(-1)  # eq. 10
            pair_ok = rp[None, :] < cp[:, None] if strict else rp[None, :] <= cp[:, None]
            _write_pairs(out, rp, cp, pair_ok, sim, sim)


def _default_tile_elements(device: torch.device) -> int:
    return _DEFAULT_TILE_ELEMENTS.get(device.type, _DEFAULT_TILE_ELEMENTS_ACCEL)


def _check_tile_elements(tile_elements) -> None:
    if tile_elements is not None and (
        isinstance(tile_elements, bool) or not isinstance(tile_elements, int) or tile_elements < 1
    ):
        raise ValueError(f"tile_elements must be a positive int or None, got {tile_elements!r}.")


def pairwise_entropy_similarity(
    entropies: EntropiesLike,
    method: str = "kl",
    *,
    lengths: torch.Tensor | None = None,
    top_fraction: float = 0.2,
    kl_order: str = "shorter_first",
    tile_elements: int | None = None,
) -> torch.Tensor:
    """All-pairs similarity matrix S[i, j] = s(tau_i, tau_j) of `entropy_dynamics_similarity`, batched.

    Computed on the inputs' device without a Python loop over pairs: sequences are sorted by length and the
    (shorter, longer) pairs are processed in tiles of at most about `tile_elements` (row x column x position)
    entries, each tile's time axis cut at its longest sequence. Each unordered pair is aligned once; for ``"kl"``
    both KL directions come from the same gathered values (see the module docstring).

    Empty sequences (length 0) have no ``"kl"`` or ``"hti"`` similarity: their rows and columns are NaN. For
    ``"pl"`` they have r = 0, hence similarity 0.

    Args:
        entropies: A list of N 1-D tensors of token entropies, or a right-padded (N, T) tensor with `lengths`.
        method: ``"kl"`` (eq. 8-9), ``"hti"`` (eq. 10) or ``"pl"`` (eq. 11).
        lengths: (N,) integer tensor of sequence lengths; required with a padded tensor (``mask.sum(-1)``), None
            with a list.
        top_fraction: Share of positions counted as high-entropy for ``"hti"``.
        kl_order: ``"shorter_first"`` (paper: S[i, j] = -KL(softmax(shorter') || softmax(longer))) or ``"given"``
            (authors' code: S[i, j] = -KL(softmax(tau_i') || softmax(tau_j'))). Equal lengths: both give
            -KL(P_i || P_j).
        tile_elements: Bound on the number of (row, column, position) entries of one tile; the temporary memory
            peaks at about 16 bytes per entry for ``"kl"`` in float32 (28 in float64; measured on CPU) and more for
            ``"hti"``, which sorts. Default: 2**21 on CPU (about 32 MiB), 2**26 on accelerators (about 1 GiB).

    Returns:
        [N, N] tensor on the inputs' device, in their floating dtype (at least float32).
    """
    _check_choice("method", method, SIMILARITIES)
    _check_choice("kl_order", kl_order, KL_ORDERS)
    frac = _check_top_fraction(top_fraction)
    _check_tile_elements(tile_elements)
    x, lengths = _as_padded(entropies, lengths)
    if x.shape[0] == 0:
        return x.new_zeros(0, 0)
    return _similarity_matrix(x, lengths, method, kl_order, frac, tile_elements or _default_tile_elements(x.device))


# ---------------------------------------------------------------------------------------------------------------
# Rewards
# ---------------------------------------------------------------------------------------------------------------
def eda_rewards(
    entropies: EntropiesLike,
    is_target: torch.Tensor | Sequence[bool],
    *,
    lengths: torch.Tensor | None = None,
    similarity: str = "kl",
    mode: str = "paper",
    min_length: int | None = None,
    top_fraction: float = 0.2,
    return_stats: bool = False,
    tile_elements: int | None = None,
) -> torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Entropy Dynamics Alignment rewards r_EDA of a batch of trajectories (HEAL §3.2, eq. 2-4).

    ``mode="paper"`` (eq. 2-4): for a target-domain trajectory i, S_intra = max over the OTHER target trajectories
    of s(i, j) (eq. 2), S_inter = max over the general-domain trajectories of s(i, k) (eq. 3), and r = 1 iff
    S_inter > S_intra (eq. 4, strict: ties give 0). An empty set has max -inf: with no other target trajectory
    r = 1 iff some general trajectory exists; with no general trajectory r = 0. General trajectories get 0.
    s is -KL(softmax(shorter') || softmax(longer)) for ``"kl"``.

    ``mode="reference"``: the authors' public code (github.com/XMUDeepLIT/HEAL,
    ``verl/workers/reward_manager/prime_heal.py``, ``compute_single_score``), as read there:

    - every trajectory of the batch is scored against every other one (all pairs, the same prompt's rollouts
      included, self excluded); a general trajectory is scored too;
    - the divergence is KL(softmax(tau_i') || softmax(tau_j')) with i the scored trajectory, whichever of the two
      is stretched (``F.kl_div(softmax(ent_j).log(), softmax(ent_i), reduction="sum")``), i.e. ``kl_order="given"``;
    - a target trajectory gets 1 iff its nearest general trajectory is strictly nearer than its nearest other
      target one (ties 0); a general trajectory gets 1 iff its nearest target trajectory is at least as near as
      its nearest other general one (ties 1); with no neighbour at all (a batch of one non-empty trajectory) the
      code compares inf with inf, which gives 0 to a target and 1 to a general trajectory, and so does this mode;
    - trajectories of length <= min_length (50 in the code) get 0 but stay neighbours of the others.

    Assumed (not in the code): the general domain is the code's ``data_source == "commonsense_qa"``, here
    ``~is_target``; length-0 sequences get 0 and are never neighbours (the code would fail on them); ``"hti"``
    and ``"pl"`` can be used in this mode too (the code has ``"kl"`` only).

    Length rule: a trajectory of length <= min_length gets reward 0. In paper mode it is also no neighbour (it is
    left out of B_tgt and B_gen); in reference mode it stays a neighbour, as in the code. Length-0 trajectories
    (empty completions) are never neighbours and get 0 in both modes.

    Args:
        entropies: A list of N 1-D tensors of token entropies, or a right-padded (N, T) tensor with `lengths`.
        is_target: (N,) bool tensor (or list of bools): True for target-domain trajectories, False for general.
        lengths: (N,) integer tensor of lengths; required with a padded tensor (``mask.sum(-1)``), None with a list.
        similarity: ``"kl"`` (paper default), ``"hti"`` or ``"pl"`` (Appendix A.2).
        mode: ``"paper"`` or ``"reference"``.
        min_length: Trajectories of length <= min_length get 0. None means 0 in paper mode (only empty ones) and
            50 in reference mode (the authors' code).
        top_fraction: Share of positions counted as high-entropy for ``"hti"``.
        return_stats: Also return a dict of per-trajectory statistics.
        tile_elements: Tile size of `pairwise_entropy_similarity`.

    Returns:
        Float32 (N,) tensor of 0/1 rewards on the inputs' device; with `return_stats`, also a dict of (N,) tensors:
        ``"s_intra"`` (max similarity to the other trajectories of the same domain), ``"s_inter"`` (max similarity
        to the other domain's), both NaN where a trajectory is not scored and -inf where the set is empty,
        ``"scored"`` (bool: scored trajectories, i.e. target ones of length > min_length in paper mode, all of length
        > min_length in reference mode) and ``"lengths"``.
    """
    _check_choice("similarity", similarity, SIMILARITIES)
    _check_choice("mode", mode, MODES)
    if min_length is None:
        min_length = 0 if mode == "paper" else REFERENCE_MIN_LENGTH
    if isinstance(min_length, bool) or not isinstance(min_length, int) or min_length < 0:
        raise ValueError(f"min_length must be a non-negative int or None, got {min_length!r}.")
    x, lengths = _as_padded(entropies, lengths)
    n = x.shape[0]
    if isinstance(is_target, torch.Tensor):
        if is_target.dtype != torch.bool:
            raise ValueError(f"is_target must be a bool tensor, got dtype {is_target.dtype}; pass is_target.bool().")
        is_target = is_target.to(x.device)
    else:
        is_target = list(is_target)
        if not all(isinstance(v, bool) for v in is_target):
            raise ValueError("is_target must be a bool tensor or a sequence of Python bools.")
        is_target = torch.tensor(is_target, dtype=torch.bool, device=x.device).reshape(-1)
    if is_target.shape != (n,):
        raise ValueError(f"is_target must have shape ({n},) (one flag per trajectory), got {tuple(is_target.shape)}.")
    _check_tile_elements(tile_elements)
    frac = _check_top_fraction(top_fraction)
    long_enough = lengths > min_length
    neighbour = long_enough if mode == "paper" else lengths > 0
    scored = long_enough & is_target if mode == "paper" else long_enough
    kl_order = "shorter_first" if mode == "paper" else "given"
    # Only pairs with a scored trajectory and a neighbour are computed (paper mode: no general-general pair).
    sim = _similarity_matrix(
        x, lengths, similarity, kl_order, frac, tile_elements or _default_tile_elements(x.device), scored, neighbour
    )
    candidate = neighbour[None, :] & ~torch.eye(n, dtype=torch.bool, device=x.device)
    same = is_target[:, None] == is_target[None, :]
    neg_inf = torch.tensor(-math.inf, dtype=sim.dtype, device=x.device)
    s_same = torch.where(candidate & same, sim, neg_inf).amax(1) if n else sim.new_zeros(0)  # eq. 2 for a target i
    s_other = torch.where(candidate & ~same, sim, neg_inf).amax(1) if n else sim.new_zeros(0)  # eq. 3 for a target i
    if mode == "paper":
        reward = scored & (s_other > s_same)  # eq. 4
    else:
        reward = scored & torch.where(is_target, s_other > s_same, s_other >= s_same)
    rewards = reward.to(torch.float32)
    if not return_stats:
        return rewards
    nan = torch.tensor(math.nan, dtype=sim.dtype, device=x.device)
    stats = {
        "s_intra": torch.where(scored, s_same, nan),
        "s_inter": torch.where(scored, s_other, nan),
        "scored": scored,
        "lengths": lengths,
    }
    return rewards, stats
