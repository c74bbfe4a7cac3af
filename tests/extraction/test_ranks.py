"""rank_stats: counts equal to a dense float64 reference, nll within 1e-5 of it; chunking, ties,
padding, errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rbplab.core.errors import RbplabError
from rbplab.extraction.exact import LogitRangeError
from rbplab.extraction.ranks import (
    FloatHead,
    NonFiniteLogitsError,
    block_rows,
    default_chunk_size,
    rank_stats,
)


def dense_reference(hidden, head, targets, vocab_size, softcap=None):
    """Full float64 logits at once from the float32 inputs: counts on the raw logits (random data
    with no near-ties, where float64 decides every comparison), nll on the capped ones."""
    z = nn.functional.linear(
        hidden.float().double(),
        head.weight[:vocab_size].float().double(),
        None if head.bias is None else head.bias[:vocab_size].float().double(),
    )
    z_t = z.gather(1, targets[:, None])
    greater = (z > z_t).sum(1)
    equal = (z == z_t).sum(1)
    if softcap:
        z = torch.tanh(z / softcap) * softcap
        z_t = z.gather(1, targets[:, None])
    nll = torch.logsumexp(z, 1) - z_t[:, 0]
    return greater, equal, nll


def make_head(rows: int, d: int, bias: bool, seed: int = 0, dup: int = 10) -> nn.Linear:
    torch.manual_seed(seed)
    head = nn.Linear(d, rows, bias=bias)
    with torch.no_grad():
        # Exact ties: identical rows give bit-identical logits.
        head.weight[1 : 1 + dup] = head.weight[0]
        if bias:
            head.bias[1 : 1 + dup] = head.bias[0]
    return head


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("chunk_size", [None, 16, 37, 1000])
def test_matches_dense_reference_with_ties(bias, chunk_size):
    V, d, n = 300, 24, 203
    head = make_head(V, d, bias)
    torch.manual_seed(1)
    hidden = torch.randn(n, d)
    targets = torch.randint(0, V, (n,))
    targets[:40] = torch.arange(40) % 12  # many targets inside the duplicated block
    g, e, nll = rank_stats(hidden, head, targets, vocab_size=V, chunk_size=chunk_size)
    rg, re, rnll = dense_reference(hidden, head, targets, V)
    assert g.dtype == torch.int32 and e.dtype == torch.int32 and nll.dtype == torch.float32
    assert torch.equal(g.long(), rg) and torch.equal(e.long(), re)
    assert (e[:40] == 11).sum() >= 30  # the tie block really is tied
    assert torch.allclose(nll.double(), rnll, atol=1e-5, rtol=0)


def test_padded_rows_are_excluded():
    V, rows, d, n = 200, 216, 16, 64
    head = make_head(rows, d, bias=False)
    with torch.no_grad():
        head.weight[V:] = head.weight[:16] * 50  # would outrank everything if ranked
    hidden = torch.randn(n, d)
    targets = torch.randint(0, V, (n,))
    g, e, nll = rank_stats(hidden, head, targets, vocab_size=V)
    rg, re, rnll = dense_reference(hidden, head, targets, V)
    assert torch.equal(g.long(), rg) and torch.equal(e.long(), re)
    assert torch.allclose(nll.double(), rnll, atol=1e-5, rtol=0)
    assert int((g + e).max()) <= V
    g_all, _, _ = rank_stats(hidden, head, targets, vocab_size=rows)
    assert (g_all > g).any()


def test_a_softcap_changes_the_nll_and_no_rank():
    """Large logits saturate the cap: capped float values tie where the raw logits do not. The
    counts are the raw logits' (the cap is strictly increasing), the nll the capped logits'."""
    V, d, n = 150, 16, 50
    head = make_head(V, d, bias=False)
    with torch.no_grad():
        head.weight.mul_(20)
    hidden = torch.randn(n, d)
    targets = torch.randint(0, V, (n,))
    g, e, nll = rank_stats(hidden, head, targets, vocab_size=V, softcap=3.0)
    rg, re, rnll = dense_reference(hidden, head, targets, V, softcap=3.0)
    assert torch.equal(g.long(), rg) and torch.equal(e.long(), re)
    assert torch.allclose(nll.double(), rnll, atol=1e-5, rtol=0)
    capped = (torch.tanh((hidden.double() @ head.weight.double().t()) / 3.0) * 3.0).float()
    capped_ties = (capped == capped.gather(1, targets[:, None])).sum(1)
    assert bool((capped_ties > e).any())  # float32 capped values tie where raw logits do not
    plain = rank_stats(hidden, head, targets, vocab_size=V)
    assert torch.equal(plain[0], g) and torch.equal(plain[1], e) and not torch.equal(plain[2], nll)


def assert_slices_match_whole(V: int, d: int, n: int, bias: bool, slices: list[tuple[int, int]]) -> None:
    """rank_stats on a slice of the rows gives bit-identical results to those rows of one whole call."""
    head = make_head(V, d, bias=bias)
    hidden = torch.randn(n, d)
    targets = torch.randint(0, V, (n,))
    whole = rank_stats(hidden, head, targets, vocab_size=V)
    for lo, hi in slices:
        part = rank_stats(hidden[lo:hi], head, targets[lo:hi], vocab_size=V)
        for a, b in zip(part, whole, strict=True):
            assert torch.equal(a, b[lo:hi])


def test_rows_do_not_depend_on_call_or_chunking():
    """Batch invariance at this level: a row's result is the same in any call and chunk layout."""
    assert_slices_match_whole(V=500, d=32, n=300, bias=True, slices=[(0, 1), (5, 12), (100, 300), (299, 300)])


def test_half_precision_hidden_states_are_ranked_in_float32():
    V, d = 120, 16
    head = make_head(V, d, bias=False).to(torch.bfloat16)
    hidden = torch.randn(40, d).to(torch.bfloat16)
    targets = torch.randint(0, V, (40,))
    g, e, nll = rank_stats(hidden, head, targets, vocab_size=V)
    rg, re, rnll = dense_reference(hidden, head, targets, V)
    assert torch.equal(g.long(), rg) and torch.equal(e.long(), re)
    assert torch.allclose(nll.double(), rnll, atol=1e-5, rtol=0)


def test_empty_input():
    head = make_head(50, 8, bias=False)
    g, e, nll = rank_stats(torch.zeros(0, 8), head, torch.zeros(0, dtype=torch.long), vocab_size=50)
    assert g.shape == e.shape == nll.shape == (0,)


def test_bad_inputs():
    head = make_head(50, 8, bias=False)
    hidden = torch.randn(4, 8)
    with pytest.raises(ValueError, match="target ids must lie in"):
        rank_stats(hidden, head, torch.tensor([0, 1, 2, 50]), vocab_size=50)
    with pytest.raises(ValueError, match="hidden must be"):
        rank_stats(hidden[None], head, torch.tensor([0, 1, 2, 3]), vocab_size=50)
    with pytest.raises(ValueError, match="targets must be"):
        rank_stats(hidden, head, torch.tensor([0, 1]), vocab_size=50)
    with pytest.raises(ValueError, match="rows"):
        rank_stats(hidden, head, torch.tensor([0, 1, 2, 3]), vocab_size=60)
    with pytest.raises(TypeError, match="linear"):
        rank_stats(hidden, nn.ReLU(), torch.tensor([0, 1, 2, 3]), vocab_size=50)


@pytest.mark.parametrize(("part", "value"), [("weight", float("nan")), ("weight", float("inf")),
                                             ("weight", float("-inf")), ("bias", float("nan")),
                                             ("bias", float("inf"))])  # fmt: skip
def test_a_head_holding_nan_or_inf_is_refused_in_one_line(part, value):
    """NaN or inf in one head row no target uses would reach every scored row's logits: the head is
    refused before anything is ranked (a bias of -inf is a masked token, tested below)."""
    V, d, n = 300, 16, 40
    head = make_head(V, d, bias=True)
    torch.manual_seed(3)
    hidden = torch.randn(n, d)
    targets = torch.randint(0, V - 1, (n,))  # never the poisoned last row
    with torch.no_grad():
        getattr(head, part)[V - 1] = value
    with pytest.raises(LogitRangeError, match=f"the output head's {part} holds NaN") as caught:
        rank_stats(hidden, head, targets, vocab_size=V)
    assert isinstance(caught.value, RbplabError) and "\n" not in str(caught.value)


def test_one_non_finite_row_is_named_with_its_count_and_dtype_hint():
    V, d, n = 120, 16, 50
    head = make_head(V, d, bias=False).to(torch.float16)
    torch.manual_seed(4)
    hidden = torch.randn(n, d).to(torch.float16)
    hidden[37, 5] = float("inf")  # overflow in one position's hidden state
    targets = torch.randint(0, V, (n,))
    z = hidden[37:38].float() @ head.weight.float().t()  # independent count of that row's values
    expected = int((~torch.isfinite(z)).sum())
    with pytest.raises(
        NonFiniteLogitsError, match="float16 overflows above 65504: .*--dtype bfloat16"
    ) as caught:
        rank_stats(hidden, head, targets, vocab_size=V)
    assert (caught.value.row, caught.value.rows, caught.value.values) == (37, 1, expected)
    assert expected == V  # an inf component reaches every logit of the row
    err = caught.value
    assert isinstance(err, FloatingPointError) and isinstance(err, RbplabError) and "\n" not in str(err)
    located = err.located("shard 2", "document 7, token 30")
    assert str(located).startswith(f"shard 2, document 7, token 30: {V} of the {V} logits are not finite")


def test_a_non_finite_target_logit_is_an_error_and_minus_inf_elsewhere_is_probability_zero():
    V, d, n = 80, 8, 20
    head = make_head(V, d, bias=True)
    torch.manual_seed(5)
    hidden = torch.randn(n, d)
    targets = torch.randint(0, V - 1, (n,))
    with torch.no_grad():
        head.bias[V - 1] = float("-inf")  # a logit that is -inf in every row, never a target
    g, e, nll = rank_stats(hidden, head, targets, vocab_size=V)
    z = hidden.double() @ head.weight.double().t() + head.bias.double()
    z_t = z.gather(1, targets[:, None])
    assert torch.equal(g.long(), (z > z_t).sum(1)) and torch.equal(e.long(), (z == z_t).sum(1))
    assert torch.allclose(nll.double(), torch.logsumexp(z, 1) - z_t[:, 0], atol=1e-5, rtol=0)
    targets[3] = V - 1  # now a target logit is -inf: its nll would be inf
    with pytest.raises(NonFiniteLogitsError) as caught:
        rank_stats(hidden, head, targets, vocab_size=V)
    assert (caught.value.row, caught.value.rows, caught.value.values) == (3, 1, 1)


def test_chunk_sizes_bound_memory():
    # Qwen2.5's vocabulary: the per-call buffers stay a fixed size whatever the number of positions.
    rows = default_chunk_size(151_936, "cpu")
    block = block_rows(151_936, "cpu")
    assert rows % block == 0 and 16 <= block <= rows <= 1024
    assert rows * 151_936 * 4 < 400 * 2**20  # logits buffer well under the ~1.2 GB of one 2048-token sequence
    # A small vocabulary (the micro suite's 4096) gets cache-sized blocks of many rows.
    assert block_rows(4096, "cpu") * 4096 <= 2**20 and block_rows(4096, "cpu") >= 128


def test_float_head_keeps_float32_views():
    head = make_head(64, 8, bias=True)
    fhead = FloatHead.from_module(head, 60)
    assert fhead.weight.shape == (60, 8) and fhead.bias.shape == (60,)
    assert FloatHead.from_module(fhead, 60) is fhead
    assert torch.equal(fhead(torch.ones(2, 8)), head(torch.ones(2, 8))[:, :60])


def test_rows_do_not_depend_on_product_row_count():
    # Large vocabulary: blocks of 16 rows, so calls of different sizes run products with
    # different row counts (16, 32, 48, ..., chunk); each row must come out bit-identical.
    assert block_rows(40_000, "cpu") == 16
    assert_slices_match_whole(
        V=40_000, d=16, n=600, bias=False, slices=[(0, 1), (3, 20), (100, 140), (50, 600)]
    )
