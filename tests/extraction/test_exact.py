"""Ranks certified against float64 (`rbplab.extraction.exact`), tested without trusting any backend's
rounding: the error bound against float32 sums in several orders, an adversarial backend that moves
every logit anywhere within its bound, constructed near-ties below the float32 bound, and softcapped
logits near zero. The reference is always a dense float64 computation from the same inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from rbplab.extraction import exact, ranks
from rbplab.extraction.exact import Tally
from rbplab.extraction.ranks import rank_stats

U = 2.0**-24


def float64_counts(hidden, weight, bias, targets, softcap=None):
    z = hidden.double() @ weight.double().T
    if bias is not None:
        z = z + bias.double()
    if softcap:
        z = torch.tanh(z / softcap) * softcap
    z_t = z.gather(1, targets[:, None])
    return (z > z_t).sum(1), (z == z_t).sum(1), torch.logsumexp(z, 1) - z_t[:, 0]


def linear(weight: torch.Tensor, bias: torch.Tensor | None = None) -> nn.Linear:
    head = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    with torch.no_grad():
        head.weight.copy_(weight)
        if bias is not None:
            head.bias.copy_(bias)
    return head


def near_tie_head(vocab: int, d: int, targets: torch.Tensor, gaps: np.ndarray, seed: int = 0):
    """A head whose rows vocab-len(gaps)..vocab-1 sit next to row targets[0] at the given relative
    distances: their logits differ from the target's by about gaps * |z_t|, below float32's bound."""
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(vocab, d, generator=g) / d**0.5
    base = weight[int(targets[0])]
    for j, gap in enumerate(gaps):
        weight[vocab - len(gaps) + j] = base * (1 + float(gap))
    return weight


# --- the bound itself ------------------------------------------------------------------------------


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
    """|float32 logit - float64 logit| <= A_i, for sums in four orders; positive products are the
    worst case (every rounding error of a growing sum has one sign)."""
    rng = np.random.default_rng(0)
    n, vocab, d = 64, 40, 1024
    h = rng.standard_normal((n, d)).astype(np.float32)
    w = rng.standard_normal((vocab, d)).astype(np.float32)
    if signs == "positive":
        h, w = np.abs(h) + 1, np.abs(w) + 1
    norm_w = float(np.sqrt((w.astype(np.float64) ** 2).sum(1)).max())
    margin = exact.row_margins(torch.from_numpy(h), d, norm_w, 0.0, exact.UNIT).numpy().astype(np.float64)
    z64 = h.astype(np.float64) @ w.astype(np.float64).T
    worst = 0.0
    for v in range(vocab):
        products = (h * w[v]).astype(np.float32)  # float32 products, each rounded once
        for total in _sums_in_orders(products):
            error = np.abs(total.astype(np.float64) - z64[:, v])
            assert (error <= margin).all()
            worst = max(worst, float((error / margin).max()))
    # The bound is a worst case: it is not reached, but positive sums come within 1/50 of it.
    assert worst < 1 and (signs == "mixed" or worst > 0.02)


def test_the_margin_is_the_documented_formula():
    """A_i = (gamma_{d+2}(u) + 1.01 (d+2) 2^-53) max||w|| ||h_i|| + 2u max|b|, rounded up, computed
    here with Python floats from the docstring rather than the module's tensors."""
    d, w_norm, b_max = 768, 3.5, 2.0
    h = torch.tensor([[3.0] + [0.0] * (d - 1), [0.0] * d, [1e-3] * d])
    got = exact.row_margins(h, d, w_norm, b_max, exact.UNIT).double().numpy()
    n = d + 2
    for row, norm in enumerate([3.0, 0.0, 1e-3 * d**0.5]):
        want = ((n * U / (1 - n * U)) + 1.01 * n * 2.0**-53) * w_norm * norm + 2 * U * b_max
        assert want <= got[row] <= want * (1 + 2.0**-17)


@pytest.mark.parametrize(("terms", "unit", "finite"), [(2**22 - 1, U, True), (2**24, U, False)])
def test_gamma_is_infinite_where_the_bound_no_longer_holds(terms, unit, finite):
    """gamma_n needs n u < 1: at n u = 1 the bound says nothing, so it is inf (every logit settles)."""
    value = exact.gamma(terms, unit)
    assert np.isfinite(value) == finite
    if finite:
        assert value == pytest.approx(terms * unit / (1 - terms * unit), rel=1e-12)


# --- an adversarial backend ------------------------------------------------------------------------


def documented_margin(h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """A_i as the module docstring states it (float32 sums in any order, no bias), computed here:
    gamma_{d+2}(u) ||h_i|| max_v ||w_v||."""
    n = h.shape[1] + 2
    gamma = n * U / (1 - n * U)
    return gamma * h.double().norm(dim=1) * weight.double().norm(dim=1).max()


def _adversarial_product(scale: float):
    """A replacement of ranks' head product that returns, instead of the float32 logits, float64's
    moved toward the row's target logit by `scale` times the documented bound: the worst any
    backend within the bound could do to a near-tie (the target itself moves the other way)."""

    def product(h, w_t, bias, out, targets):
        z = h.double() @ w_t.double()
        if bias is not None:
            z = z + bias.double()
        z_t = z.gather(1, targets[:, None])
        shift = scale * documented_margin(h, w_t.t())[:, None]
        moved = z - torch.sign(z - z_t) * shift
        moved.scatter_(1, targets[:, None], z_t + shift * torch.sign(torch.randn_like(z_t)))
        out.copy_(moved.float())

    return product


def _near_tie_case(seed: int = 3):
    n, vocab, d = 96, 700, 64
    g = torch.Generator().manual_seed(seed)
    targets = torch.randint(0, 600, (n,), generator=g)
    targets[: n // 2] = targets[0]  # half the rows rank the token that has near-tied neighbours
    gaps = np.geomspace(1e-8, 3e-5, 100) * np.resize([1, -1], 100)
    weight = near_tie_head(vocab, d, targets, gaps, seed)
    hidden = torch.randn(n, d, generator=g) * 4
    return hidden, weight, targets


def test_ranks_equal_float64_when_every_logit_moves_anywhere_within_its_bound(monkeypatch):
    """The adversary moves every logit by its whole margin toward z_t (the limit of the bound): the
    counts stay float64's on every row. With the band narrowed to half, the same adversary breaks
    them (the one-over case: the test fails if the band is narrower than the bound)."""
    hidden, weight, targets = _near_tie_case()
    want = float64_counts(hidden, weight, None, targets)
    monkeypatch.setattr(ranks, "_head_product", _adversarial_product(1.0))
    tally = Tally()
    greater, equal, _ = rank_stats(hidden, linear(weight), targets, vocab_size=700, tally=tally)
    assert torch.equal(greater.long(), want[0]) and torch.equal(equal.long(), want[1])
    assert tally.settled >= 48  # every row of the near-tied token was settled

    narrow = exact.band_halfwidth
    monkeypatch.setattr(ranks, "band_halfwidth", lambda z, a, r: narrow(z, a, r) / 2)
    greater, equal, _ = rank_stats(hidden, linear(weight), targets, vocab_size=700)
    assert not (torch.equal(greater.long(), want[0]) and torch.equal(equal.long(), want[1]))


def test_naive_counting_of_the_adversarial_logits_is_wrong():
    """The control: counting the adversary's logits directly (no band) misranks rows, so the test
    above passes because of the band, not because the adversary is harmless."""
    hidden, weight, targets = _near_tie_case()
    want = float64_counts(hidden, weight, None, targets)
    out = torch.empty(96, 700)
    _adversarial_product(1.0)(hidden, weight.t(), None, out, targets)
    z_t = out.gather(1, targets[:, None])
    assert ((out > z_t).sum(1) != want[0]).sum() > 10


# --- near-ties and the softcap, with real arithmetic -----------------------------------------------


@pytest.mark.parametrize("softcap", [None, 30.0])
def test_constructed_near_ties_rank_as_float64(softcap):
    """Rows whose logits differ from the target's by 1e-8 to 3e-5 relative (inside float32's bound):
    settled, and equal to float64 on every row, capped or not."""
    hidden, weight, targets = _near_tie_case(seed=5)
    bias = torch.randn(700, generator=torch.Generator().manual_seed(6))
    bias[600:] = bias[targets[0]]  # the near-tied rows keep their target's bias
    want = float64_counts(hidden, weight, bias, targets, softcap)
    tally = Tally()
    greater, equal, nll = rank_stats(
        hidden, linear(weight, bias), targets, vocab_size=700, softcap=softcap, tally=tally
    )
    assert torch.equal(greater.long(), want[0]) and torch.equal(equal.long(), want[1])
    assert float((nll.double() - want[2]).abs().max()) < 1e-5
    assert 48 <= tally.settled <= 96 and tally.rows == 96


def test_softcapped_logits_near_zero_rank_as_float64():
    """Capped logits near 0 (cap 30), 1e-6 of the cap apart or closer: where tanh computed as
    (1 - e) / (1 + e) would put them on a grid; the counts equal float64's."""
    n, vocab, d = 64, 512, 16
    g = torch.Generator().manual_seed(7)
    weight = torch.zeros(vocab, d)
    weight[:, 0] = torch.linspace(-3e-5, 3e-5, vocab)
    weight[:, 1:] = torch.randn(vocab, d - 1, generator=g) * 1e-7
    hidden = torch.ones(n, d) + torch.rand(n, d, generator=g)
    targets = torch.randint(0, vocab, (n,), generator=g)
    want = float64_counts(hidden, weight, None, targets, 30.0)
    greater, equal, _ = rank_stats(hidden, linear(weight), targets, vocab_size=vocab, softcap=30.0)
    assert torch.equal(greater.long(), want[0]) and torch.equal(equal.long(), want[1])


def test_a_duplicated_row_ties_its_target_after_settling():
    """An exact tie (two identical head rows) sits inside the band: settling computes both in
    float64 by one reduction, so they stay tied (n_equal 2) instead of splitting by rounding."""
    g = torch.Generator().manual_seed(8)
    weight = torch.randn(300, 48, generator=g)
    weight[7] = weight[3]
    hidden = torch.randn(40, 48, generator=g)
    targets = torch.full((40,), 3)
    greater, equal, _ = rank_stats(hidden, linear(weight), targets, vocab_size=300)
    want = float64_counts(hidden, weight, None, targets)
    assert torch.equal(greater.long(), want[0]) and bool((equal == 2).all())


def test_settle_counts_only_the_pairs_it_is_given():
    """exact.settle adds, per row, the listed columns above or equal to the row's float64 target."""
    hidden = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    weight = torch.tensor([[1.0, 0.0], [2.0, 0.0], [1.0, 5.0], [0.0, 1.0]])
    targets = torch.tensor([0, 3])
    rows = torch.tensor([0, 0, 1, 1])
    cols = torch.tensor([1, 2, 0, 2])  # row 0: 2 > 1, 1 == 1; row 1: 0 < 1, 5 > 1
    greater, equal = exact.settle(hidden, weight, None, targets, rows, cols, softcap=None, n=2)
    assert greater.tolist() == [1, 1] and equal.tolist() == [1, 0]
