"""Every tie convention over every implementation that counts by the tie rule (as scikit-learn's
test_common runs every invariance over every estimator).

The rule is written once (`rbplab.core.stats.tie_rank`, `tie_share`): a token with g logits above
its target's and e level with it (itself included) ranks g + e under pessimistic ties, g + 1 under
optimistic ones, and each of g+1..g+e with probability 1/e under expected ones. Each
implementation below counts the tokens ranked within k from the tokens, the summary, the cache
index or a summary file, and each is held to a count made here token by token with exact
fractions, at every k from 1 to |V|: the edges of every tied token (k = g, g + 1, g + e - 1,
g + e) are among them. Then the conventions' order, their agreement without ties, and the cache
index row against `RBPCurve`, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rbplab.analysis import decomposition, decomposition_bootstrap, metrics
from rbplab.core.stats import (
    TIES,
    RankCounts,
    RankPairs,
    TokenStats,
    hit_probability,
    summarize,
    tie_rank,
)
from rbplab.store.cache import index as cache_index
from rbplab.store.cache.reading import summary_bytes
from rbplab.store.cache.summary_rules import Summary

VOCAB = 24
KEY = "c" * 64
KS = np.arange(1, VOCAB + 1)


def tokens(tied: bool) -> TokenStats:
    """Every (g, e) with e in {1, 2, 3, 7} (or e = 1 only) and g + e <= |V|, in 5 documents."""
    pairs = [(g, e) for e in ((1, 2, 3, 7) if tied else (1,)) for g in range(VOCAB - e + 1)]
    g, e = (np.array(column, dtype=np.int64) for column in zip(*pairs, strict=True))
    n = len(g)
    doc = np.sort(np.arange(n) % 5)
    position = np.arange(n) - np.searchsorted(doc, doc)
    nll = np.random.default_rng(3).gamma(2.0, 1.0, n)
    return TokenStats(doc=doc, position=position, n_greater=g, n_equal=e, nll=nll, vocab_size=VOCAB)


def reference(stats: TokenStats, ks: np.ndarray, ties: str) -> np.ndarray:
    """Tokens ranked within each k, token by token, in exact fractions."""
    out = []
    for k in ks:
        total = Fraction(0)
        for g, e in zip(stats.n_greater.tolist(), stats.n_equal.tolist(), strict=True):
            ranks = {"pessimistic": [g + e], "optimistic": [g + 1], "expected": range(g + 1, g + e + 1)}[ties]
            total += Fraction(sum(r <= k for r in ranks), len(ranks))
        out.append(float(total))
    return np.array(out)


def _indexed(stats: TokenStats) -> cache_index.IndexedSummary:
    summary = summarize(stats)
    row = cache_index.row_of(KEY, summary, {"sha256": "0" * 64, "bytes": 1})
    return cache_index.IndexedSummary(row, lambda: summary)


def _summary_file(stats: TokenStats) -> Summary:
    data = summary_bytes(summarize(stats).complete(), KEY)
    table = pq.read_table(pa.BufferReader(data))
    return Summary(table, table.schema.metadata, KEY, VOCAB, len(stats))


def _token_bootstrap(stats: TokenStats, ties: str) -> np.ndarray:
    j0, tied, frac = metrics.expected_hits(stats, KS, ties)
    return np.cumsum(np.bincount(j0, minlength=len(KS) + 1))[: len(KS)] + frac.sum(axis=0)


# name -> (the conventions it counts under, the thresholds it answers, its counts at them)
Within = Callable[[TokenStats, str], np.ndarray]
IMPLEMENTATIONS: dict[str, tuple[tuple[str, ...], Callable[[TokenStats], np.ndarray], Within]] = {
    "core hit_probability": (
        TIES,
        lambda s: KS,
        lambda s, t: np.array([hit_probability(s.n_greater, s.n_equal, k, t).sum() for k in KS]),
    ),
    "core TokenStats.rank": (
        ("pessimistic", "optimistic"),
        lambda s: KS,
        lambda s, t: (s.rank(t)[None, :] <= KS[:, None]).sum(axis=1),
    ),
    "core RankCounts": (TIES, lambda s: KS, lambda s, t: RankCounts.of(RankPairs.of(s), t).count_within(KS)),
    "summary doc_hits": (TIES, lambda s: KS, lambda s, t: summarize(s).doc_hits(KS, t).sum(axis=0)),
    "summary bucket_hit_counts": (
        ("pessimistic", "optimistic"),
        lambda s: KS,
        lambda s, t: summarize(s).bucket_hit_counts(KS, t).sum(axis=0),
    ),
    "summary hit runs": (
        ("pessimistic", "optimistic"),
        lambda s: KS[KS < VOCAB],
        lambda s, t: np.array(
            [(lambda r: (r.length * r.count).sum())(summarize(s).hit_runs(t, int(k))) for k in KS[KS < VOCAB]]
        ),
    ),
    "metrics RBPCurve of tokens": (TIES, lambda s: KS, lambda s, t: metrics.rbp_curve(s, t).count_within(KS)),
    "metrics RBPCurve of a summary": (
        TIES,
        lambda s: KS,
        lambda s, t: metrics.rbp_curve(summarize(s), t).count_within(KS),
    ),
    "metrics rbp": (TIES, lambda s: KS, lambda s, t: metrics.rbp(s, KS, t)),
    "metrics rank_histogram": (TIES, lambda s: KS, lambda s, t: np.cumsum(metrics.rank_histogram(s, t))[KS]),
    "metrics doc_stats": (
        TIES,
        lambda s: KS,
        lambda s, t: metrics.doc_stats(summarize(s), KS, t).hits.sum(axis=0),
    ),
    "metrics token bootstrap": (TIES, lambda s: KS, _token_bootstrap),
    "index row": (
        TIES,
        lambda s: summarize(s).ks,
        lambda s, t: _indexed(s).row.within[t],
    ),
    "index IndexedRBPCurve": (
        TIES,
        lambda s: KS,
        lambda s, t: metrics.IndexedRBPCurve(_indexed(s), t).count_within(KS),
    ),
    "summary rules' pair hits": (
        TIES,
        lambda s: summarize(s).ks,
        lambda s, t: _summary_file(s).pair_hits[t],
    ),
}
SHARES = {"metrics rbp"}  # the share of tokens within k, not their count


def expected(stats: TokenStats, name: str, ks: np.ndarray, ties: str) -> np.ndarray:
    counts = reference(stats, ks, ties)
    return counts / len(stats) if name in SHARES else counts


PAIRS = [(name, ties) for name, (conventions, _, _) in IMPLEMENTATIONS.items() for ties in conventions]


@pytest.fixture(scope="module")
def tied() -> TokenStats:
    return tokens(tied=True)


@pytest.mark.parametrize(("name", "ties"), PAIRS)
def test_every_implementation_counts_by_the_tie_rule(tied, name, ties):
    _, ks_of, within = IMPLEMENTATIONS[name]
    ks = ks_of(tied)
    counted = np.asarray(within(tied, ties), dtype=np.float64)
    np.testing.assert_allclose(counted, expected(tied, name, ks, ties), rtol=1e-12, atol=1e-12)
    if ties != "expected":  # whole tokens: exactly
        np.testing.assert_array_equal(counted, expected(tied, name, ks, ties))


@pytest.mark.parametrize("name", IMPLEMENTATIONS)
def test_the_conventions_are_ordered(tied, name):
    """pessimistic <= expected <= optimistic at every k, and strictly somewhere: ties are there."""
    conventions, ks_of, within = IMPLEMENTATIONS[name]
    by = {t: np.asarray(within(tied, t), dtype=np.float64) for t in conventions}
    order = [t for t in ("pessimistic", "expected", "optimistic") if t in conventions]
    for low, high in zip(order, order[1:], strict=False):
        assert np.all(by[low] <= by[high] + 1e-12) and np.any(by[low] < by[high]), (low, high)


@pytest.mark.parametrize("name", IMPLEMENTATIONS)
def test_without_ties_every_convention_counts_the_same(name):
    untied = tokens(tied=False)
    conventions, ks_of, within = IMPLEMENTATIONS[name]
    counts = expected(untied, name, ks_of(untied), "optimistic")
    for ties in conventions:
        np.testing.assert_array_equal(np.asarray(within(untied, ties), dtype=np.float64), counts, ties)


@pytest.mark.parametrize("ties", TIES)
def test_the_index_row_is_rbpcurve_bit_for_bit(tied, ties):
    """The cache index stores the counts `RBPCurve` gives (one function, `RankCounts`), so RBP_k read
    from a row is the very float a curve gives, off the grid's arithmetic too."""
    summary = summarize(tied)
    row = cache_index.row_of(KEY, summary, {"sha256": "0" * 64, "bytes": 1})
    curve = metrics.rbp_curve(summary, ties)
    assert np.array_equal(row.within[ties], curve.count_within(row.ks))
    indexed = metrics.IndexedRBPCurve(cache_index.IndexedSummary(row, lambda: summary), ties)
    assert np.array_equal(indexed.rbp(row.ks), curve.rbp(row.ks))
    assert np.array_equal(indexed.rbp(KS), curve.rbp(KS))


@pytest.mark.parametrize("ties", TIES)
def test_every_rank_statistic_follows_the_tie_rule(tied, ties):
    """The mean rank (`TokenStats.rank`), the mean reciprocal rank (decomposition's MRR, pooled and
    per document) and the rank-based error (RBE = rank - 1) against the rule, token by token."""
    g, e = tied.n_greater.tolist(), tied.n_equal.tolist()
    ranks = {
        "pessimistic": [[a + b] for a, b in zip(g, e, strict=True)],
        "optimistic": [[a + 1] for a in g],
        "expected": [list(range(a + 1, a + b + 1)) for a, b in zip(g, e, strict=True)],
    }[ties]
    mean_rank = [sum(Fraction(r) for r in rs) / len(rs) for rs in ranks]
    np.testing.assert_array_equal(tied.rank(ties), np.array([float(m) for m in mean_rank]))
    np.testing.assert_array_equal(tie_rank(tied.n_greater, tied.n_equal, ties), tied.rank(ties))
    reciprocal = [sum(Fraction(1, r) for r in rs) / len(rs) for rs in ranks]
    mrr = float(sum(reciprocal) / len(reciprocal))
    rows = decomposition.decomposition_metrics(tied, ties)
    assert rows.loc[rows["metric"] == "mrr", "value"].item() == pytest.approx(mrr, rel=1e-12)
    per_doc = [Fraction(0)] * tied.n_docs
    for d, r in zip(tied.doc.tolist(), reciprocal, strict=True):
        per_doc[d] += r
    np.testing.assert_allclose(
        decomposition_bootstrap.doc_rbe(tied, ties).reciprocal, [float(r) for r in per_doc], rtol=1e-12
    )
    table = decomposition.rbe_table(tied, ties)
    rbe_mean = float(sum(m - 1 for m in mean_rank) / len(mean_rank))
    assert float(table.rbe @ table.count / table.count.sum()) == pytest.approx(rbe_mean, rel=1e-12)
