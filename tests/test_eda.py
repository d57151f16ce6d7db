"""HEAL's Entropy Dynamics Alignment (HEAL, arXiv:2604.17928, §3.2 eq. 2-4, Appendix A.2 eq. 8-11) against hand
computations and slow Python-loop references written here from the formulas (float64, lists, math)."""

from __future__ import annotations

import math
import random

import pytest
import torch
import torch.nn.functional as F

from healtrl.functional import eda_rewards, entropy_dynamics_similarity, pairwise_entropy_similarity
from healtrl.functional.eda import _stretch, _stretch_index


# ---------------------------------------------------------------------------------------------------------------
# Slow references (Python lists and math, float64)
# ---------------------------------------------------------------------------------------------------------------
def ref_stretch(values: list[float], size: int) -> list[float]:
    """Nearest stretch with the index map of F.interpolate on a float32 tensor."""
    if len(values) == size:
        return list(values)
    src = torch.arange(len(values), dtype=torch.float32)[None, None]
    index = F.interpolate(src, size=size, mode="nearest")[0, 0].long().tolist()
    return [values[i] for i in index]


def ref_log_softmax(values: list[float]) -> list[float]:
    top = max(values)
    log_z = math.log(sum(math.exp(v - top) for v in values))
    return [(v - top) - log_z for v in values]  # exact for constant sequences: all -log(n)


def ref_kl_sim(a: list[float], b: list[float], order: str = "shorter_first") -> float:
    size = max(len(a), len(b))
    p, q = ref_stretch(a, size), ref_stretch(b, size)
    if order == "shorter_first" and len(b) < len(a):
        p, q = q, p
    lp, lq = ref_log_softmax(p), ref_log_softmax(q)
    return -sum(math.exp(x) * (x - y) for x, y in zip(lp, lq))


def ref_top(values: list[float], k: int) -> set[int]:
    return set(sorted(range(len(values)), key=lambda t: (-values[t], t))[:k])


def ref_hti_sim(a: list[float], b: list[float], fraction: float = 0.2) -> float:
    size = max(len(a), len(b))
    p, q = ref_stretch(a, size), ref_stretch(b, size)
    k = math.ceil(round(fraction * size, 9))
    ta, tb = ref_top(p, k), ref_top(q, k)
    return sum(min(p[t] if t in ta else 0.0, q[t] if t in tb else 0.0) for t in range(size))


def ref_fit(values: list[float]) -> tuple[float, float]:
    n = len(values)
    if n < 2 or max(values) == min(values):
        return 0.0, 0.0  # no linear trend: r = 0 (and the slope of a constant is 0)
    tm, ym = (n - 1) / 2, sum(values) / n
    sty = sum((t - tm) * (y - ym) for t, y in enumerate(values))
    stt = sum((t - tm) ** 2 for t in range(n))
    syy = sum((y - ym) ** 2 for y in values)
    return sty / stt, sty / math.sqrt(stt * syy)


def ref_pl_sim(a: list[float], b: list[float]) -> float:
    (ka, ra), (kb, rb) = ref_fit(a), ref_fit(b)
    return abs(math.cos(math.atan(ka) - math.atan(kb)) * ra * rb)


REF_SIMS = {
    "kl": ref_kl_sim,
    "hti": lambda a, b, order=None: ref_hti_sim(a, b),  # symmetric: no order
    "pl": lambda a, b, order=None: ref_pl_sim(a, b),
}


def ref_paper_rewards(seqs, is_target, min_length=0, method="kl"):
    """eq. 2-4 literally: targets only, max over other targets vs max over generals, strict."""
    out = []
    for i, a in enumerate(seqs):
        if not is_target[i] or len(a) <= min_length:
            out.append(0.0)
            continue
        intra = [REF_SIMS[method](a, b) for j, b in enumerate(seqs) if j != i and is_target[j] and len(b) > min_length]
        inter = [REF_SIMS[method](a, b) for j, b in enumerate(seqs) if not is_target[j] and len(b) > min_length]
        out.append(float(max(inter, default=-math.inf) > max(intra, default=-math.inf)))
    return out


def ref_authors_rewards(seqs, is_target, min_length=50):
    """The authors' compute_single_score, re-expressed: min KL(P_i' || P_j') to each domain; inf when none."""
    out = []
    for i, a in enumerate(seqs):
        if len(a) <= min_length:
            out.append(0.0)
            continue
        min_gen = min_tgt = math.inf
        for j, b in enumerate(seqs):
            if j == i or len(b) == 0:
                continue
            kl = -ref_kl_sim(a, b, order="given")
            if is_target[j]:
                min_tgt = min(min_tgt, kl)
            else:
                min_gen = min(min_gen, kl)
        if is_target[i]:
            out.append(1.0 if min_tgt > min_gen else 0.0)
        else:
            out.append(0.0 if min_tgt > min_gen else 1.0)
    return out


def rand_seqs(rng: random.Random, lengths, high=5.0):
    return [[rng.uniform(0.0, high) for _ in range(n)] for n in lengths]


def tensors(seqs, dtype=torch.float64):
    return [torch.tensor(s, dtype=dtype) for s in seqs]


def padded(seqs, dtype=torch.float64, fill=7.0):
    """Right-padded tensor with garbage in the padding (must be ignored) and the lengths."""
    width = max([len(s) for s in seqs] + [1])
    x = torch.full((len(seqs), width), fill, dtype=dtype)
    for i, s in enumerate(seqs):
        x[i, : len(s)] = torch.tensor(s, dtype=dtype)
    return x, torch.tensor([len(s) for s in seqs])


AWKWARD = [1, 2, 3, 17, 64, 5, 64, 33, 100, 7, 2, 1, 46, 14, 0, 63]


# ---------------------------------------------------------------------------------------------------------------
# One pair, by hand
# ---------------------------------------------------------------------------------------------------------------
def test_kl_equal_lengths_by_hand():
    a = torch.tensor([0.0, 0.0], dtype=torch.float64)
    b = torch.tensor([0.0, math.log(3.0)], dtype=torch.float64)
    # P_a = (1/2, 1/2), P_b = (1/4, 3/4): KL(P_a || P_b) = 1/2 ln 2 + 1/2 ln(2/3) = 1/2 ln(4/3)
    assert entropy_dynamics_similarity(a, b).item() == pytest.approx(-0.5 * math.log(4 / 3), abs=1e-15)
    # equal lengths: s(b, a) = -KL(P_b || P_a) = -(1/4 ln(1/2) + 3/4 ln(3/2))
    expected = -(0.25 * math.log(0.5) + 0.75 * math.log(1.5))
    assert entropy_dynamics_similarity(b, a).item() == pytest.approx(expected, abs=1e-15)
    assert entropy_dynamics_similarity(a, a).item() == 0.0
    assert entropy_dynamics_similarity(a, b).dim() == 0


def test_kl_unequal_lengths_by_hand():
    a = torch.tensor([0.0, math.log(3.0)], dtype=torch.float64)  # stretched to 4: (0, 0, ln 3, ln 3)
    b = torch.zeros(4, dtype=torch.float64)
    # softmax(a') = (1, 1, 3, 3) / 8, softmax(b) = 1/4: KL(a' || b) = 1/4 ln(1/2) + 3/4 ln(3/2)
    kl_ab = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)
    assert entropy_dynamics_similarity(a, b).item() == pytest.approx(-kl_ab, abs=1e-15)
    assert entropy_dynamics_similarity(b, a).item() == pytest.approx(-kl_ab, abs=1e-15)  # shorter first
    # the authors' order: s(b, a) = -KL(P_b || P_a') = -(1/2 ln 2 + 1/2 ln(2/3))
    kl_ba = 0.5 * math.log(2.0) + 0.5 * math.log(2 / 3)
    assert entropy_dynamics_similarity(b, a, kl_order="given").item() == pytest.approx(-kl_ba, abs=1e-15)
    assert entropy_dynamics_similarity(a, b, kl_order="given").item() == pytest.approx(-kl_ab, abs=1e-15)


def test_kl_three_to_seven_uses_interpolate_indexing():
    a = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    b = torch.zeros(7, dtype=torch.float64)
    # floor(t * 3 / 7) for t = 0..6: 0 0 0 1 1 2 2
    stretched = [0.0, 0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
    assert _stretch(a, 7).tolist() == stretched
    weights = [math.exp(v) for v in stretched]
    total = sum(weights)
    kl = sum(w / total * math.log((w / total) / (1 / 7)) for w in weights)
    assert entropy_dynamics_similarity(a, b).item() == pytest.approx(-kl, abs=1e-14)


def test_stretch_index_equals_interpolate_float32():
    sizes = [(s, m) for s in range(1, 130) for m in range(s, 130)]
    rng = random.Random(0)
    sizes += [(rng.randint(1, 4096), 0) for _ in range(150)]
    sizes = [(s, m if m else rng.randint(s, 8192)) for s, m in sizes]
    for s, m in sizes:
        x = torch.arange(s, dtype=torch.float32)
        ref = F.interpolate(x[None, None], size=m, mode="nearest")[0, 0].long()
        got = _stretch_index(torch.tensor([s]), torch.tensor([m]), m)[0, 0].long()
        assert torch.equal(got, ref), (s, m)
        assert torch.equal(_stretch(x.double(), m), ref.double()), (s, m)


def test_stretch_rule_is_float32_also_for_float64():
    # F.interpolate on a float64 CPU tensor computes the index in float64: at L = 14 -> 46 it reads source 7 at
    # t = 23 (exact product 7), float32 reads 6. We use the float32 rule (torch's for float32, and on CUDA).
    x = torch.arange(14, dtype=torch.float64)
    f32 = F.interpolate(x.float()[None, None], size=46, mode="nearest")[0, 0]
    f64 = F.interpolate(x[None, None], size=46, mode="nearest")[0, 0]
    assert f32[23].item() == 6.0 and f64[23].item() == 7.0
    assert torch.equal(_stretch(x, 46), f32.double())


def test_hti_by_hand():
    a = torch.tensor([1.0, 5.0, 2.0, 4.0, 3.0], dtype=torch.float64)  # N = 5: one top position (ceil(1.0))
    assert entropy_dynamics_similarity(a, torch.tensor([5.0, 1, 1, 1, 1]), "hti").item() == 0.0  # disjoint tops
    assert entropy_dynamics_similarity(a, torch.tensor([1.0, 4, 1, 1, 1]), "hti").item() == 4.0  # min(5, 4)
    # stretched short sequence: (1, 3) -> (1,1,1,1,1,3,3,3,3,3), k = 2: positions 5, 6 (ties: earlier first)
    short = torch.tensor([1.0, 3.0], dtype=torch.float64)
    long = torch.tensor([0.0, 0, 0, 0, 0, 0, 4, 0, 0, 0], dtype=torch.float64)  # top: 6, then 0 (tie, earlier)
    assert entropy_dynamics_similarity(short, long, "hti").item() == 3.0  # min(3, 4) at t = 6
    # ties in a constant sequence: top is the first position; N = 6 -> k = ceil(1.2) = 2
    flat = torch.full((6,), 2.0, dtype=torch.float64)
    assert entropy_dynamics_similarity(flat, torch.tensor([0.0, 0, 3, 0, 0, 0]), "hti").item() == 0.0
    assert entropy_dynamics_similarity(flat, torch.tensor([3.0, 0, 0, 0, 0, 0]), "hti").item() == 2.0
    # N = 15: k = ceil(0.2 * 15) = 3 exactly (0.2 * 15 is 3.0000000000000004 in floats)
    seq = torch.arange(15, dtype=torch.float64)
    assert entropy_dynamics_similarity(seq, seq, "hti").item() == 14 + 13 + 12
    assert entropy_dynamics_similarity(seq, seq, "hti", top_fraction=0.5).item() == sum(range(7, 15))


def test_pl_by_hand():
    up = torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64)
    assert entropy_dynamics_similarity(up, up, "pl").item() == pytest.approx(1.0)
    assert entropy_dynamics_similarity(up, up.flip(0), "pl").item() == pytest.approx(0.0, abs=1e-15)  # 45 vs -45 deg
    expected = math.cos(math.atan(1.0) - math.atan(2.0))  # r = 1 for both lines
    assert entropy_dynamics_similarity(up, 2 * up + 1, "pl").item() == pytest.approx(expected, abs=1e-15)
    # degenerate: length 1, length 0, constant -> r = 0 -> s = 0
    for degenerate in (torch.tensor([3.0]), torch.zeros(0), torch.full((9,), 1.7)):
        assert entropy_dynamics_similarity(up, degenerate.double(), "pl").item() == 0.0
    # noisy sequences against numpy's least squares and correlation
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0, 5, 37), rng.uniform(0, 5, 80) + np.linspace(0, 2, 80)
    ka, kb = np.polyfit(np.arange(37), a, 1)[0], np.polyfit(np.arange(80), b, 1)[0]
    ra, rb = np.corrcoef(np.arange(37), a)[0, 1], np.corrcoef(np.arange(80), b)[0, 1]
    expected = abs(math.cos(math.atan(ka) - math.atan(kb)) * ra * rb)
    got = entropy_dynamics_similarity(torch.from_numpy(a), torch.from_numpy(b), "pl").item()
    assert got == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("method", ["kl", "hti", "pl"])
def test_single_pair_matches_loop_reference(method):
    rng = random.Random(1)
    seqs = rand_seqs(rng, [1, 2, 3, 17, 64, 5, 33, 46, 14])
    for order in ("shorter_first", "given"):
        for a in seqs:
            for b in seqs:
                ta, tb = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
                got = entropy_dynamics_similarity(ta, tb, method, kl_order=order).item()
                assert got == pytest.approx(REF_SIMS[method](a, b, order=order), abs=1e-12)


def test_single_pair_rejects_empty_for_kl_and_hti():
    for method in ("kl", "hti"):
        with pytest.raises(ValueError, match="non-empty"):
            entropy_dynamics_similarity(torch.zeros(0), torch.ones(3), method)


# ---------------------------------------------------------------------------------------------------------------
# All pairs
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["kl", "hti", "pl"])
@pytest.mark.parametrize("order", ["shorter_first", "given"])
def test_pairwise_matches_loop(method, order):
    rng = random.Random(2)
    seqs = rand_seqs(rng, AWKWARD)
    expected = torch.full((len(seqs), len(seqs)), math.nan, dtype=torch.float64)
    for i, a in enumerate(seqs):
        for j, b in enumerate(seqs):
            if method == "pl" or (a and b):
                expected[i, j] = REF_SIMS[method](a, b, order=order)
    for tile in (1, 300, 5000, None):  # one pair per tile, small tiles, one tile
        got = pairwise_entropy_similarity(tensors(seqs), method, kl_order=order, tile_elements=tile)
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12, equal_nan=True)
    x, lengths = padded(seqs)
    got = pairwise_entropy_similarity(x, method, lengths=lengths, kl_order=order, tile_elements=700)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12, equal_nan=True)


def test_pairwise_list_equals_padded_and_float32():
    rng = random.Random(3)
    seqs = rand_seqs(rng, [rng.randint(1, 90) for _ in range(23)])
    for method in ("kl", "hti", "pl"):
        from_list = pairwise_entropy_similarity(tensors(seqs, torch.float32), method)
        x, lengths = padded(seqs, torch.float32, fill=float("nan"))  # NaN padding must not leak
        from_padded = pairwise_entropy_similarity(x, method, lengths=lengths)
        assert from_list.dtype == torch.float32
        torch.testing.assert_close(from_padded, from_list, rtol=0, atol=0)
        from_f64 = pairwise_entropy_similarity(tensors(seqs), method)
        torch.testing.assert_close(from_list.double(), from_f64, rtol=0, atol=2e-5)


def test_pairwise_empty_and_single():
    assert pairwise_entropy_similarity([]).shape == (0, 0)
    one = pairwise_entropy_similarity([torch.tensor([1.0, 2.0])])
    assert one.shape == (1, 1) and abs(one.item()) < 1e-6
    empties = pairwise_entropy_similarity([torch.zeros(0), torch.zeros(0)])
    assert empties.isnan().all()
    assert (pairwise_entropy_similarity([torch.zeros(0), torch.ones(3)], "pl") == 0).all()


# ---------------------------------------------------------------------------------------------------------------
# Rewards
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["kl", "hti", "pl"])
def test_paper_rewards_match_loop(method):
    rng = random.Random(4)
    for trial in range(12):
        n = rng.randint(1, 14)
        seqs = rand_seqs(rng, [rng.choice([0, 1, 2, rng.randint(1, 40)]) for _ in range(n)])
        is_target = [rng.random() < 0.4 for _ in range(n)]
        for min_length in (0, 5):
            expected = ref_paper_rewards(seqs, is_target, min_length, method)
            got = eda_rewards(
                tensors(seqs), torch.tensor(is_target), similarity=method, min_length=min_length,
                tile_elements=rng.choice([1, 200, None]),
            )  # fmt: skip
            assert got.dtype == torch.float32 and got.tolist() == expected, (trial, min_length)
            x, lengths = padded(seqs)
            assert eda_rewards(x, is_target, lengths=lengths, similarity=method, min_length=min_length).tolist() == (
                expected
            )


def test_reference_rewards_match_authors_loop():
    rng = random.Random(5)
    for trial in range(12):
        n = rng.randint(1, 12)
        seqs = rand_seqs(rng, [rng.choice([0, 1, rng.randint(1, 30), rng.randint(1, 80)]) for _ in range(n)])
        is_target = [rng.random() < 0.5 for _ in range(n)]
        for min_length in (None, 0, 10):
            expected = ref_authors_rewards(seqs, is_target, 50 if min_length is None else min_length)
            got = eda_rewards(tensors(seqs), is_target, mode="reference", min_length=min_length, tile_elements=300)
            assert got.tolist() == expected, (trial, min_length)


def test_stats_match_loop():
    rng = random.Random(6)
    seqs = rand_seqs(rng, [12, 30, 7, 0, 25, 3, 40, 18])
    is_target = [True, True, False, True, False, True, False, False]
    rewards, stats = eda_rewards(tensors(seqs), is_target, min_length=3, return_stats=True)
    for i, a in enumerate(seqs):
        if not is_target[i] or len(a) <= 3:
            assert math.isnan(stats["s_intra"][i]) and math.isnan(stats["s_inter"][i]) and not stats["scored"][i]
            continue
        intra = max(ref_kl_sim(a, b) for j, b in enumerate(seqs) if j != i and is_target[j] and len(b) > 3)
        inter = max(ref_kl_sim(a, b) for j, b in enumerate(seqs) if not is_target[j] and len(b) > 3)
        assert stats["s_intra"][i].item() == pytest.approx(intra, abs=1e-12)
        assert stats["s_inter"][i].item() == pytest.approx(inter, abs=1e-12)
        assert rewards[i].item() == float(inter > intra)
    assert stats["lengths"].tolist() == [len(s) for s in seqs]
    # reference mode: every long-enough trajectory is scored; -KL(P_i' || P_j'), the scored one first
    _, stats = eda_rewards(tensors(seqs), is_target, mode="reference", min_length=0, return_stats=True)
    assert stats["scored"].tolist() == [len(s) > 0 for s in seqs]
    i = 2  # a general trajectory: s_intra is over the other general ones, s_inter over the targets
    same = max(ref_kl_sim(seqs[i], b, "given") for j, b in enumerate(seqs) if j != i and not is_target[j] and b)
    other = max(ref_kl_sim(seqs[i], b, "given") for j, b in enumerate(seqs) if is_target[j] and b)
    assert stats["s_intra"][i].item() == pytest.approx(same, abs=1e-12)
    assert stats["s_inter"][i].item() == pytest.approx(other, abs=1e-12)


def test_edge_cases_paper():
    rng = random.Random(7)
    s = tensors(rand_seqs(rng, [10, 12, 9, 15]))
    # no general trajectory: all 0
    assert eda_rewards(s, [True] * 4).tolist() == [0.0] * 4
    # no target trajectory / all general: all 0
    assert eda_rewards(s, [False] * 4).tolist() == [0.0] * 4
    # a single target: S_intra = -inf, so 1 as soon as a general trajectory exists
    rewards, stats = eda_rewards(s, [True, False, False, False], return_stats=True)
    assert rewards.tolist() == [1.0, 0.0, 0.0, 0.0] and stats["s_intra"][0].item() == -math.inf
    # a single target alone
    assert eda_rewards(s[:1], [True]).tolist() == [0.0]
    # no trajectory at all
    assert eda_rewards([], []).shape == (0,)
    # empty sequences: reward 0, never a neighbour (the target's only general neighbour is empty)
    empty = torch.zeros(0, dtype=torch.float64)
    assert eda_rewards([s[0], s[1], empty], [True, True, False]).tolist() == [0.0, 0.0, 0.0]
    assert eda_rewards([empty, s[1]], [True, False]).tolist() == [0.0, 0.0]
    # min_length in paper mode: a short general trajectory is no neighbour
    assert eda_rewards([s[0], s[2]], [True, False], min_length=9).tolist() == [0.0, 0.0]
    assert eda_rewards([s[0], s[2]], [True, False], min_length=8).tolist() == [1.0, 0.0]
    # rewards never NaN
    r = eda_rewards([empty, empty], [True, False])
    assert r.tolist() == [0.0, 0.0]


def test_ties_give_zero_in_paper_and_one_to_general_in_reference():
    rng = random.Random(8)
    a, b = tensors(rand_seqs(rng, [20, 20]))
    # target 0's nearest target (1) and nearest general (2) are identical sequences: S_inter == S_intra
    seqs, is_target = [a, b, b.clone()], [True, True, False]
    rewards, stats = eda_rewards(seqs, is_target, return_stats=True)
    assert stats["s_inter"][0] == stats["s_intra"][0] and rewards[0].item() == 0.0
    ref = eda_rewards(seqs, is_target, mode="reference", min_length=0).tolist()
    assert ref[0] == 0.0  # target: strict
    assert ref == ref_authors_rewards([x.tolist() for x in seqs], is_target, 0)
    # a general trajectory equidistant from a target and a general one gets 1 in reference mode (ties -> 1)
    seqs, is_target = [a, b, b.clone()], [False, True, False]
    assert eda_rewards(seqs, is_target, mode="reference", min_length=0)[0].item() == 1.0
    # reference mode: a batch of one non-empty trajectory (inf vs inf in the authors' code)
    one = [a]
    assert eda_rewards(one, [True], mode="reference", min_length=0).tolist() == [0.0]
    assert eda_rewards(one, [False], mode="reference", min_length=0).tolist() == [1.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_degenerate_sequences_are_exact_ties(dtype):
    # A length-1 or constant sequence has a uniform softmax at any length, whatever its value: the KL from or to
    # it is the same for all of them, so these are ties (reward 0), not decided by rounding.
    gen = torch.Generator().manual_seed(12)
    target = torch.rand(37, generator=gen, dtype=torch.float64).to(dtype) * 5
    for other_target, general in [
        (torch.tensor([3.1]), torch.tensor([0.2])),
        (torch.full((5,), 1.3), torch.full((9,), 4.7)),
        (torch.full((37,), 0.7), torch.full((37,), 2.9)),
        (target.clone(), target.clone()),  # identical copies
    ]:
        seqs = [target, other_target.to(dtype), general.to(dtype)]
        for mode in ("paper", "reference"):
            rewards, stats = eda_rewards(seqs, [True, True, False], mode=mode, min_length=0, return_stats=True)
            assert stats["s_inter"][0] == stats["s_intra"][0], (mode, other_target)
            assert rewards[0].item() == 0.0
    assert pairwise_entropy_similarity([target, target.clone()]).eq(0).all()


def test_reference_min_length_default_and_short_neighbours():
    rng = random.Random(9)
    target, other_target = tensors(rand_seqs(rng, [60, 60]))
    short_general = target[::2].clone()  # 30 tokens: similar shape, below the 50-token threshold
    far_general = tensors(rand_seqs(rng, [70], high=0.5))[0]
    seqs, is_target = [target, other_target, short_general, far_general], [True, True, False, False]
    expected = ref_authors_rewards([s.tolist() for s in seqs], is_target, 50)
    got = eda_rewards(seqs, is_target, mode="reference")  # default min_length = 50
    assert got.tolist() == expected
    assert got[2].item() == 0.0  # too short to be rewarded ...
    assert got[0].item() == 1.0  # ... but it is the target's nearest neighbour
    # paper mode with the same threshold drops it as a neighbour; paper default min_length is 0
    assert eda_rewards(seqs, is_target, min_length=50)[0].item() == float(
        ref_paper_rewards([s.tolist() for s in seqs], is_target, 50)[0]
    )
    assert eda_rewards(seqs, is_target).tolist() == ref_paper_rewards([s.tolist() for s in seqs], is_target, 0)


def test_float32_matches_float64_except_near_ties():
    gen = torch.Generator().manual_seed(10)
    n = 96
    lengths = torch.randint(20, 400, (n,), generator=gen)
    # realistic token entropies: mostly low with spikes, in [0, 5] nats
    seqs = [(torch.rand(int(m), generator=gen, dtype=torch.float64) ** 4 * 5.0) for m in lengths]
    is_target = torch.rand(n, generator=gen) < 0.3
    for mode in ("paper", "reference"):
        r64, st64 = eda_rewards(seqs, is_target, mode=mode, min_length=0, return_stats=True)
        r32 = eda_rewards([s.float() for s in seqs], is_target, mode=mode, min_length=0)
        margin = (st64["s_inter"] - st64["s_intra"]).abs()
        clear = st64["scored"] & (margin > 1e-4)
        assert int(clear.sum()) >= int(st64["scored"].sum()) - 2  # near-ties are rare
        assert torch.equal(r32[clear], r64[clear])
        assert r32.sum() > 0


def test_invalid_arguments():
    s = [torch.rand(5), torch.rand(7)]
    with pytest.raises(ValueError, match="similarity must be one of"):
        eda_rewards(s, [True, False], similarity="cosine")
    with pytest.raises(ValueError, match="mode must be one of"):
        eda_rewards(s, [True, False], mode="verl")
    with pytest.raises(ValueError, match="method must be one of"):
        pairwise_entropy_similarity(s, "cosine")
    with pytest.raises(ValueError, match="method must be one of"):
        entropy_dynamics_similarity(s[0], s[1], "cosine")
    with pytest.raises(ValueError, match="kl_order must be one of"):
        pairwise_entropy_similarity(s, kl_order="longer_first")
    with pytest.raises(ValueError, match=r"is_target must have shape \(2,\)"):
        eda_rewards(s, [True, False, True])
    with pytest.raises(ValueError, match="is_target must be a bool tensor"):
        eda_rewards(s, torch.tensor([1, 0]))
    with pytest.raises(ValueError, match="min_length"):
        eda_rewards(s, [True, False], min_length=-1)
    with pytest.raises(ValueError, match="top_fraction"):
        pairwise_entropy_similarity(s, "hti", top_fraction=0.0)
    with pytest.raises(ValueError, match="tile_elements"):
        pairwise_entropy_similarity(s, tile_elements=0)
    x = torch.rand(2, 7)
    with pytest.raises(ValueError, match="lengths is required"):
        pairwise_entropy_similarity(x)
    with pytest.raises(ValueError, match=r"lengths must be an integer tensor of shape \(2,\)"):
        eda_rewards(x, [True, False], lengths=torch.tensor([3, 4, 5]))
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, 7\]"):
        pairwise_entropy_similarity(x, lengths=torch.tensor([3, 8]))
    with pytest.raises(ValueError, match="lengths must be None"):
        pairwise_entropy_similarity(s, lengths=torch.tensor([5, 7]))
    with pytest.raises(ValueError, match="1-D tensor"):
        pairwise_entropy_similarity([torch.rand(2, 2)])
    with pytest.raises(ValueError, match="floating-point"):
        pairwise_entropy_similarity([torch.arange(3)])
    with pytest.raises(ValueError, match="NaN or infinite"):
        pairwise_entropy_similarity([torch.tensor([0.1, float("nan")])])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    rng = random.Random(11)
    seqs = rand_seqs(rng, [rng.randint(1, 300) for _ in range(40)])
    is_target = torch.tensor([rng.random() < 0.3 for _ in range(40)])
    for method in ("kl", "hti", "pl"):
        cpu = pairwise_entropy_similarity(tensors(seqs), method)
        gpu = pairwise_entropy_similarity([t.cuda() for t in tensors(seqs)], method)
        torch.testing.assert_close(gpu.cpu(), cpu, rtol=0, atol=1e-10, equal_nan=True)
        assert torch.equal(
            eda_rewards([t.cuda() for t in tensors(seqs)], is_target.cuda(), similarity=method).cpu(),
            eda_rewards(tensors(seqs), is_target, similarity=method),
        )
