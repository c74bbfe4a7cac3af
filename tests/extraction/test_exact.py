"""Ranks equal to exact arithmetic (`rbplab.extraction.exact`), tested without trusting any backend's
rounding: the bound's formula term by term, the bound against float32 sums in several orders, an
adversarial backend that moves every logit by its whole bound in every chunk, the band's edges, exact
signs against Python's rationals, order-sensitive near-ties, products that underflow and sums that
overflow. The reference is exact: float64 where its own error bound decides, fractions where not."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from torch import nn

from rbplab.extraction import exact, ranks
from rbplab.extraction.exact import LogitRangeError, Tally
from rbplab.extraction.ranks import rank_stats

U = 2.0**-24
TAU = 2.0**-126
FLT_MAX = float(np.finfo(np.float32).max)


def exact_logit_gap(h, w_v, w_t, b_v=0.0, b_t=0.0) -> Fraction:
    """z_v - z_t in rational arithmetic, from the float values themselves."""
    total = Fraction(float(b_v)) - Fraction(float(b_t))
    for hk, a, b in zip(h.tolist(), w_v.tolist(), w_t.tolist(), strict=True):
        total += Fraction(hk) * (Fraction(a) - Fraction(b))
    return total


def exact_counts(hidden, weight, bias, targets):
    """(n_greater, n_equal) of real arithmetic: float64 decides where the gap exceeds its own error
    bound (gamma_{d+2}(2^-53) of the absolute sum, doubled), fractions decide the rest."""
    h, w = hidden.double(), weight.double()
    b = torch.zeros(w.shape[0], dtype=torch.float64) if bias is None else bias.double()
    z = h @ w.T + b
    size = h.abs() @ w.abs().T + b.abs()
    z_t, size_t = z.gather(1, targets[:, None]), size.gather(1, targets[:, None])
    n = h.shape[1] + 2
    doubt = 2 * (n * 2.0**-53 / (1 - n * 2.0**-53)) * (size + size_t)
    sign = torch.sign(z - z_t)
    sign[(z - z_t).abs() <= doubt] = 2  # undecided: settled with fractions below
    for i, v in (sign == 2).nonzero().tolist():
        t = int(targets[i])
        bias_v, bias_t = (0.0, 0.0) if bias is None else (float(bias[v]), float(bias[t]))
        gap = exact_logit_gap(hidden[i].float(), weight[v].float(), weight[t].float(), bias_v, bias_t)
        sign[i, v] = (gap > 0) - (gap < 0)
    return (sign > 0).sum(1), (sign == 0).sum(1)


def linear(weight: torch.Tensor, bias: torch.Tensor | None = None) -> nn.Linear:
    head = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    with torch.no_grad():
        head.weight.copy_(weight)
        if bias is not None:
            head.bias.copy_(bias)
    return head


def _fused(*args, **kwargs):
    pytest.importorskip("triton", reason="Triton (the dev extra, Linux x86_64) runs the fused head")
    from rbplab.extraction import fused_head

    if not fused_head.INTERPRETED:
        pytest.skip("the fused head runs here only under TRITON_INTERPRET=1 (tests/conftest.py sets it)")
    return fused_head.fused_rank_stats(*args, **kwargs)


HEADS = {"fp32": rank_stats, "fused": _fused}


def assert_exact(hidden, weight, bias, targets, head="fp32", **kwargs):
    rank = HEADS[head]
    got = rank(hidden, linear(weight, bias), targets, vocab_size=weight.shape[0], **kwargs)
    want = exact_counts(hidden, weight, bias, targets)
    assert torch.equal(got[0].long(), want[0]) and torch.equal(got[1].long(), want[1])
    return got


# --- the bound's formula ---------------------------------------------------------------------------


def documented_margin(h_norm: float, d: int, w_norm: float, b_max: float, unit: float) -> float:
    """A_i as the module docstring writes it, with Python floats."""
    g = d + 2
    gam = g * unit / (1 - g * unit)
    under = (1 + gam) * TAU * (2 * d + 3 + math.sqrt(d) * (h_norm + w_norm))
    return gam * (h_norm * w_norm + b_max) + under


@pytest.mark.parametrize("unit", [U, 6 * U])
def test_each_term_of_the_margin_is_the_documented_formula(unit):
    """Rows chosen so that each term dominates in one of them: the dot product (a large state), the
    bias (a zero state), the underflow term (a tiny state and head). The margin is the formula
    rounded up to float32: at or above it, and within one float32 step."""
    d = 768
    cases = [(3.0, 3.5, 0.0), (0.0, 3.5, 2.0), (2.0**-120, 2.0**-120, 0.0), (1e-3 * d**0.5, 3.5, 2.0)]
    for h_norm, w_norm, b_max in cases:
        h = torch.zeros(1, d)
        h[0, 0] = h_norm
        margin, _ = exact.row_bounds(h, w_norm, b_max, unit)
        want = documented_margin(h_norm, d, w_norm, b_max, unit)
        got = float(margin[0])
        assert want <= got <= want * (1 + 2.0**-22), (h_norm, w_norm, b_max)


@pytest.mark.parametrize(("z_t", "margin"), [(0.0, 1e-3), (1e6, 1e-9), (-1e6, 1e-9), (3.0, 2e-6)])
def test_the_band_halfwidth_is_the_documented_formula(z_t, margin):
    """W = (2A + 4u |z_t|)(1 + 2^-18), computed here in float64: the margin's term dominates in the
    first case, the rounding term in the next two, both count in the last. float32 may round W by
    half a step, never by a term."""
    got = float(exact.band_halfwidth(torch.tensor([z_t]), torch.tensor([margin])))
    want = (2 * np.float32(margin) + 4 * U * abs(z_t)) * (1 + 2.0**-18)
    assert abs(got - want) <= 2 * U * want


def test_margins_are_rounded_up_to_float32():
    """round_up: never below the float64 value, and one float32 step at most above it."""
    values = torch.tensor(
        [1.0, 1.0 + 2.0**-30, 3e-45, 2.0**-149 * 1.5, 1e30 * (1 + 2.0**-40)], dtype=torch.float64
    )
    got = exact.round_up(values)
    assert bool((got.double() >= values).all())
    below = torch.nextafter(got, torch.full_like(got, -math.inf)).double()
    assert bool((below < values).all())
    assert got[0] == 1.0 and got[1] > 1.0  # exact values stay; others move up, not to nearest


@pytest.mark.parametrize(
    ("capability", "want"), [((7, 0), 3 * U), ((8, 0), 3 * U), ((9, 0), 6 * U), (None, 6 * U)]
)
def test_the_tensor_core_unit_follows_the_block_model(capability, want):
    """u' = 2u (k + 2) / k: k = 4 where measured (V100, T4, A100), k = 1 (6u) anywhere else."""
    assert exact.tensor_core_unit(capability) == pytest.approx(want, rel=1e-15)


@pytest.mark.parametrize(("terms", "unit", "finite"), [(2**22 - 1, U, True), (2**24, U, False)])
def test_gamma_is_infinite_where_the_bound_no_longer_holds(terms, unit, finite):
    """gamma_n needs n u < 1: at n u = 1 the bound says nothing, so it is inf (every logit settles)."""
    value = exact.gamma(terms, unit)
    assert np.isfinite(value) == finite
    if finite:
        assert value == pytest.approx(terms * unit / (1 - terms * unit), rel=1e-12)


def _sums_in_orders(products: np.ndarray) -> list[np.ndarray]:
    """Row sums of float32 products in four orders: forward, backward, pairwise, blocks of 64."""
    forward = np.zeros(products.shape[0], dtype=np.float32)
    for k in range(products.shape[1]):
        forward = (forward + products[:, k]).astype(np.float32)
    backward = np.zeros_like(forward)
    for k in reversed(range(products.shape[1])):
        backward = (backward + products[:, k]).astype(np.float32)
    pairwise = products.sum(1, dtype=np.float32)
    blocks = np.zeros_like(forward)
    for k in range(0, products.shape[1], 64):
        blocks = (blocks + products[:, k : k + 64].sum(1, dtype=np.float32)).astype(np.float32)
    return [forward, backward, pairwise, blocks]


@pytest.mark.parametrize("signs", ["mixed", "positive"])
def test_the_margin_bounds_float32_logits_summed_in_any_order(signs):
    """|float32 logit - exact logit| <= A_i for sums in four orders; positive products are the worst
    case (every rounding error of a growing sum has one sign) and come within 1/50 of the bound."""
    rng = np.random.default_rng(0)
    n, vocab, d = 64, 40, 1024
    h = rng.standard_normal((n, d)).astype(np.float32)
    w = rng.standard_normal((vocab, d)).astype(np.float32)
    if signs == "positive":
        h, w = np.abs(h) + 1, np.abs(w) + 1
    norm_w = float(np.sqrt((w.astype(np.float64) ** 2).sum(1)).max())
    margin, _ = exact.row_bounds(torch.from_numpy(h), norm_w, 0.0, U)
    margin = margin.numpy().astype(np.float64)
    worst = 0.0
    for v in range(vocab):
        products = (h * w[v]).astype(np.float32)  # float32 products, each rounded once
        exact64 = [math.fsum(row) for row in (h.astype(np.float64) * w[v].astype(np.float64))]
        for total in _sums_in_orders(products):
            error = np.abs(total.astype(np.float64) - np.array(exact64))
            assert (error <= margin).all()
            worst = max(worst, float((error / margin).max()))
    assert worst < 1 and (signs == "mixed" or worst > 0.02)


# --- an adversarial backend ------------------------------------------------------------------------


def adversary_bound(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """E_iv of the docstring for every row and column, [n, V] float64, computed here: each logit's
    own bound (||h_i|| ||w_v|| for its sum of |h_k w_vk|), the most a backend may move it."""
    d = h.shape[1]
    w_norm = weight.double().norm(dim=1)[None, :]
    b = 0.0 if bias is None else bias.double().abs()[None, :]
    h_norm = h.double().norm(dim=1)[:, None]
    g = (d + 2) * U / (1 - (d + 2) * U)
    return g * (h_norm * w_norm + b) + (1 + g) * TAU * (2 * d + 3 + math.sqrt(d) * (h_norm + w_norm))


def adversarial_product(scale: float = 1.0):
    """A replacement of ranks' head product: exact logits (float64 of float32 inputs, exact where it
    matters here) moved toward the row's target logit by `scale` times the row's whole bound, the
    target moved the other way: the worst any backend within the bound could do, in every chunk."""

    def product(h, w_t, bias, out, targets):
        z = h.double() @ w_t.double() + (0 if bias is None else bias.double())
        z_t = z.gather(1, targets[:, None])
        shift = scale * adversary_bound(h, w_t.t(), bias)
        moved = z - torch.sign(z - z_t) * shift
        shift_t = shift.gather(1, targets[:, None])
        moved.scatter_(1, targets[:, None], z_t + shift_t * torch.sign(torch.randn_like(z_t)))
        # Rounded to float32 toward the exact value, so every logit stays within its bound.
        low, high = moved.float(), moved.float()
        low = torch.where(low.double() > moved, torch.nextafter(low, torch.full_like(low, -math.inf)), low)
        high = torch.where(
            high.double() < moved, torch.nextafter(high, torch.full_like(high, math.inf)), high
        )
        out.copy_(torch.where(z > moved, high, low))

    return product


def near_tie_case(seed: int = 3, scales: tuple[float, ...] = (1.0,)):
    """Rows of several norms (one scale per block of rows) ranking tokens with near-tied neighbours:
    head rows at relative distances 1e-8 to 3e-5 from row targets[0]'s, both signs. That row has
    the head's largest norm, so its logits' own bounds are the row's whole margin A_i."""
    n, vocab, d = 96, 700, 64
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(vocab, d, generator=g) / d**0.5
    targets = torch.randint(0, 600, (n,), generator=g)
    targets[: n // 2] = targets[0]
    weight[int(targets[0])] *= 2 / float(weight[int(targets[0])].norm())
    gaps = np.geomspace(1e-8, 3e-5, 100) * np.resize([1, -1], 100)
    for j, gap in enumerate(gaps):
        weight[600 + j] = weight[int(targets[0])] * (1 + float(gap))
    hidden = torch.randn(n, d, generator=g) * 4
    per = -(-n // len(scales))
    for i, s in enumerate(scales):
        hidden[i * per : (i + 1) * per] *= s
    return hidden, weight, targets


def test_ranks_are_exact_when_every_logit_moves_by_its_whole_bound_in_every_chunk(monkeypatch):
    """Chunks of 16 rows whose norms differ by 10^3 from chunk to chunk: the counts stay exact. The
    same adversary breaks the band when it is halved, when W is A (the lower edge at A), or when
    every chunk is given the first chunk's margins: each is a change the test must catch. (W's
    rounding terms guard float32's z_t +- W, pinned by the formula test below.)"""
    hidden, weight, targets = near_tie_case(scales=(1.0, 1e3, 1e-3, 1e2, 1e-2, 1.0))
    want = exact_counts(hidden, weight, None, targets)
    monkeypatch.setattr(ranks, "_head_product", adversarial_product(1.0))

    def run():
        got = rank_stats(hidden, linear(weight), targets, vocab_size=700, chunk_size=16)
        return torch.equal(got[0].long(), want[0]) and torch.equal(got[1].long(), want[1])

    assert run()
    whole = exact.band_halfwidth
    for narrowed in (
        lambda z_t, a: whole(z_t, a) / 2,
        lambda z_t, a: a + 0 * z_t,  # W = A: the lower edge at A
    ):
        monkeypatch.setattr(ranks, "band_halfwidth", narrowed)
        assert not run()
    monkeypatch.setattr(ranks, "band_halfwidth", whole)
    bounds = exact.row_bounds

    def first_chunks_margins(states, *args):
        margin, reach = bounds(states, *args)
        return margin[:16].repeat(-(-len(margin) // 16))[: len(margin)], reach

    monkeypatch.setattr(ranks, "row_bounds", first_chunks_margins)
    assert not run()


def test_naive_counting_of_the_adversarial_logits_is_wrong():
    """The control: counting the adversary's logits directly (no band) misranks rows, so the test
    above passes because of the band, not because the adversary is harmless."""
    hidden, weight, targets = near_tie_case()
    want = exact_counts(hidden, weight, None, targets)
    out = torch.empty(96, 700)
    adversarial_product(1.0)(hidden, weight.t(), None, out, targets)
    z_t = out.gather(1, targets[:, None])
    assert ((out > z_t).sum(1) != want[0]).sum() > 10


def _edge_product(offsets):
    """Logits placed at the band's edges around a target logit of 1: column j holds z_t + offsets[j]
    computed from W as `band_halfwidth` gives it, one float32 step inside or outside."""

    def product(h, w_t, bias, out, targets):
        margin, _ = exact.row_bounds(h, float(w_t.t().double().norm(dim=1).max()), 0.0, U)
        z_t = torch.ones(h.shape[0], 1)
        width = exact.band_halfwidth(z_t, margin[:, None])
        up, down = z_t + width, z_t - width
        inf = torch.full_like(up, math.inf)
        cols = {
            "top": up, "over top": torch.nextafter(up, inf),
            "bottom": down, "under bottom": torch.nextafter(down, -inf),
        }  # fmt: skip
        out.fill_(-10.0)
        out.scatter_(1, targets[:, None], z_t)
        for j, name in enumerate(offsets):
            out[:, j : j + 1] = cols[name]

    return product


@pytest.mark.parametrize(
    ("place", "inside", "above"),
    [("top", True, 1), ("over top", False, 1), ("bottom", True, 0), ("under bottom", False, 0)],
)
def test_the_band_edges_are_inclusive_and_one_step_outside_is_not(place, inside, above, monkeypatch):
    """One logit at z_t + W or z_t - W is a candidate (its row is settled); one float32 step above
    the top is counted as greater unsettled, one step below the bottom ignored: > and >= at each
    edge. A settled edge logit lies W from z_t, beyond its own bound: decided by its gap."""
    g = torch.Generator().manual_seed(2)
    weight, hidden = torch.randn(50, 8, generator=g), torch.randn(12, 8, generator=g)
    targets = torch.full((12,), 49)
    monkeypatch.setattr(ranks, "_head_product", _edge_product([place]))
    tally = Tally()
    greater, equal, _ = rank_stats(hidden, linear(weight), targets, vocab_size=50, tally=tally)
    assert tally.settled == (12 if inside else 0)
    assert greater.tolist() == [above] * 12 and equal.tolist() == [1] * 12


# --- exact signs -----------------------------------------------------------------------------------


def test_exact_sign_equals_rational_arithmetic_over_any_magnitudes():
    """Random float64 terms spanning 2^-300..2^300 with planted cancellations: the sign of each row
    equals the sign of its sum in fractions."""
    rng = np.random.default_rng(4)
    rows = []
    for _ in range(200):
        m = int(rng.integers(1, 12))
        mant = rng.standard_normal(m)
        expo = rng.integers(-300, 300, m)
        terms = list(np.ldexp(mant, expo))
        if rng.random() < 0.5:  # a planted cancellation: a big term and its negation, a tiny rest
            big = float(np.ldexp(rng.standard_normal(), int(rng.integers(100, 300))))
            terms += [big, -big, float(np.ldexp(rng.choice([-1, 1]), int(rng.integers(-300, -200))))]
        if rng.random() < 0.2:  # an exact zero
            terms = terms + [-t for t in terms]
        rows.append(terms)
    width = max(len(r) for r in rows)
    table = torch.tensor([r + [0.0] * (width - len(r)) for r in rows], dtype=torch.float64)
    got = exact.exact_sign(table).tolist()
    want = [(s > 0) - (s < 0) for s in (sum(map(Fraction, r), Fraction(0)) for r in rows)]
    assert got == want and 0 in want and 1 in want and -1 in want


@pytest.mark.parametrize("head", HEADS)
def test_an_order_sensitive_near_tie_ranks_as_exact_arithmetic(head):
    """Hidden magnitudes 2^30, 1, 2^30 whose products 2^54, 0.5, -2^54 cancel: z_v = 0.5 > z_t = 0.25
    exactly, while a float64 sum in the dimensions' order gives z_v = 0 (below z_t). Swapping the two
    large dimensions changes no count."""
    hidden = torch.tensor([[2.0**30, 1.0, 2.0**30]] * 16)
    weight = torch.tensor([[2.0**24, 0.5, -(2.0**24)], [0.0, 0.25, 0.0]] + [[0.0, -1.0, 0.0]] * 14)
    targets = torch.full((16,), 1)
    naive = 0.0
    for hk, wk in zip(hidden[0].tolist(), weight[0].tolist(), strict=True):
        naive += hk * wk
    assert naive <= 0.25 < 0.5 == float(exact_logit_gap(hidden[0], weight[0], weight[1]) + Fraction(1, 4))
    greater, equal, _ = assert_exact(hidden, weight, None, targets, head)
    assert bool((greater == 1).all()) and bool((equal == 1).all())
    swapped = assert_exact(hidden[:, [2, 1, 0]], weight[:, [2, 1, 0]], None, targets, head)
    assert torch.equal(swapped[0], greater)


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize(("count", "relation"), [(4095, "below"), (4096, "tie"), (4097, "above")])
def test_products_that_underflow_rank_as_exact_arithmetic(count, relation, head):
    """`count` products of 2^-151 each (float32 rounds every one to 0) against a target logit of
    2^-139 = 4096 x 2^-151 (exact in float32): one under, at and one over the target in exact
    arithmetic, all computed as 0. The underflow term puts them in the band; without it they would
    all be counted below the target."""
    d = 4100
    hidden = torch.zeros(8, d)
    hidden[:, :count] = 2.0**-75
    hidden[:, d - 1] = 2.0**-64
    weight = torch.zeros(3, d)
    weight[0, :count] = 2.0**-76
    weight[1, d - 1] = 2.0**-75  # the target: 2^-64 x 2^-75 = 2^-139
    targets = torch.full((8,), 1)
    greater, equal, _ = assert_exact(hidden, weight, None, targets, head)
    assert greater.tolist() == [int(relation == "above")] * 8
    assert equal.tolist() == [1 + (relation == "tie")] * 8


def _overflow_case(factor: float):
    """One row whose Z_i (the docstring's reach) is `factor` times the largest float32: partial sums
    of 2^127-sized products whose exact logit is finite."""
    d = 3
    w = torch.tensor([[-1.0, -1.0, 1.0], [0.5, 0.0, 0.0], [0.0, 0.0, 0.0]])
    w_norm = float(w.double().norm(dim=1).max())
    g = (d + 2) * U / (1 - (d + 2) * U)
    # Z = (1 + g) ||h|| w_norm for h = s (1, 1, 1): solve for s (the underflow term is negligible).
    s = factor * FLT_MAX / ((1 + g) * w_norm * math.sqrt(d))
    return torch.full((4, d), s, dtype=torch.float32), w, torch.full((4,), 1)


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize(("factor", "refused"), [(1 - 2.0**-16, False), (1 + 2.0**-16, True), (2.0, True)])
def test_a_row_whose_sums_could_overflow_is_refused_in_one_line(factor, refused, head):
    """Just under the limit the row is ranked exactly; just over it (and far over, where float32's
    partial sums do reach -inf for a finite exact logit) it is refused, in one line naming the row."""
    hidden, weight, targets = _overflow_case(factor)
    if not refused:
        _, _, nll = assert_exact(hidden, weight, None, targets)
        assert bool(torch.isfinite(nll).all())
        return
    with pytest.raises(
        LogitRangeError, match=r"^row 0 of the call: its float32 logits could overflow"
    ) as err:
        rank_stats(hidden, linear(weight), targets, vocab_size=3)
    assert "\n" not in str(err.value)


# --- settling ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("softcap", [None, 30.0])
def test_constructed_near_ties_rank_as_exact_arithmetic(softcap, head):
    """Rows whose logits differ from the target's by 1e-8 to 3e-5 relative (inside float32's bound):
    settled, and exact on every row, capped or not (the cap changes only the nll)."""
    hidden, weight, targets = near_tie_case(seed=5)
    bias = torch.randn(700, generator=torch.Generator().manual_seed(6))
    bias[600:] = bias[targets[0]]
    tally = Tally()
    _, _, nll = assert_exact(hidden, weight, bias, targets, head, softcap=softcap, tally=tally)
    z = hidden.double() @ weight.double().T + bias.double()
    if softcap:
        z = torch.tanh(z / softcap) * softcap
    want_nll = torch.logsumexp(z, 1) - z.gather(1, targets[:, None])[:, 0]
    assert float((nll.double() - want_nll).abs().max()) < 1e-5
    assert 48 <= tally.settled <= 96 and tally.rows == 96


@pytest.mark.parametrize("head", HEADS)
def test_a_duplicated_row_ties_its_target_after_settling(head):
    """An exact tie (two identical head rows) sits inside the band and settles as a tie."""
    g = torch.Generator().manual_seed(8)
    weight = torch.randn(300, 48, generator=g)
    weight[7] = weight[3]
    hidden = torch.randn(40, 48, generator=g)
    greater, equal, _ = assert_exact(hidden, weight, None, torch.full((40,), 3), head)
    assert bool((equal == 2).all())


def test_settle_pairs_counts_only_the_pairs_it_is_given():
    """exact.settle_pairs adds, per row, the listed columns above or equal to the row's target."""
    hidden = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    weight = torch.tensor([[1.0, 0.0], [2.0, 0.0], [1.0, 5.0], [0.0, 1.0]])
    targets = torch.tensor([0, 3])
    rows = torch.tensor([0, 0, 1, 1])
    cols = torch.tensor([1, 2, 0, 2])  # row 0: 2 > 1, 1 == 1; row 1: 0 < 1, 5 > 1
    greater, equal = exact.settle_pairs(hidden, weight, None, targets, rows, cols, n=2)
    assert greater.tolist() == [1, 1] and equal.tolist() == [1, 0]


@pytest.mark.parametrize(("factor", "passes"), [(0.99, True), (1.01, False)])
def test_target_logit_ratios_measure_against_the_per_logit_bound(factor, passes):
    """A computed z_t off its exact value by 0.99 or 1.01 of its bound E (the docstring's, computed
    here): the ratio is at most 1 or above it."""
    g = torch.Generator().manual_seed(9)
    d = 64
    hidden, weight = torch.randn(20, d, generator=g), torch.randn(30, d, generator=g)
    targets = torch.randint(0, 30, (20,), generator=g)
    products = hidden.double() * weight[targets].double()
    exact64 = torch.tensor([math.fsum(row) for row in products.tolist()], dtype=torch.float64)
    gam = (d + 2) * U / (1 - (d + 2) * U)
    ones = hidden.double().abs().sum(1) + weight[targets].double().abs().sum(1)
    bound = gam * products.abs().sum(1) + (1 + gam) * TAU * (2 * d + 3 + ones)
    computed = exact64 + factor * bound  # float64: the test's own error is far below 1%
    ratios = exact.target_logit_ratios(hidden, weight, None, targets, computed, U)
    assert bool((ratios <= 1).all()) == passes


@pytest.mark.parametrize("head", HEADS)
def test_a_softcap_whose_capped_values_tie_ranks_the_raw_logits(head):
    """Logits of 40 to 90 under a cap of 3: float32's capped values are all 3.0 (ties), the raw
    logits are distinct. The counts are the raw logits' exact counts; the nll is the capped one."""
    g = torch.Generator().manual_seed(10)
    weight = torch.randn(64, 16, generator=g)
    weight = weight / weight.norm(dim=1, keepdim=True) * torch.linspace(40, 90, 64)[:, None]
    hidden = weight[5:6].repeat(24, 1) / weight[5].norm()  # logits from ~-90 to the row's own norm
    targets = torch.randint(0, 64, (24,), generator=g)
    capped = (torch.tanh(hidden.double() @ weight.double().T / 3.0) * 3.0).float()
    assert bool(((capped == capped.gather(1, targets[:, None])).sum(1) > 1).any())
    _, equal, nll = assert_exact(hidden, weight, None, targets, head, softcap=3.0)
    assert bool((equal == 1).all())
    z = torch.tanh(hidden.double() @ weight.double().T / 3.0) * 3.0
    assert torch.allclose(
        nll.double(), torch.logsumexp(z, 1) - z.gather(1, targets[:, None])[:, 0], atol=1e-5
    )
