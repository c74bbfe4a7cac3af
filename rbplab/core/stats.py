"""Per-token statistics and what is derived from them: the columns of rbplab's tables, `TokenStats`
(the contract between extraction and analysis), the tie rule (`tie_rank`, `tie_share`: the one
place it is written; `RankCounts` counts the tokens within every k by it) and the summaries an
entry keeps of them.

Column names of rbplab's tidy tables, one place for every layer.

Every table that describes runs starts with the run's identity (RUN_COLUMNS); metric tables add
METRIC_COLUMNS. Fits group by FIT_GROUP_COLUMNS: one line per family, corpus, tie convention,
metric and threshold.

An entry's summary: the sufficient statistics every analysis reads, computed once from its tokens.

A cache entry holds one row per scored token (`TokenStats`, ~60 bytes each in memory); every table
and figure of rbplab needs only a few reductions of them. `summarize` computes those reductions
once, where the tokens are (the worker that finalises the entry), and the store keeps them beside
the shards (`rbplab.store.cache.reading`), so a study of a thousand entries opens without reading a
token. Each part is there for an analysis that reads it:

  pairs      the distinct (n_greater, n_equal) pairs with their token count and nll sum. The exact
             rank distribution under every tie convention (pessimistic g + e, optimistic g + 1,
             expected: 1/e on each of g+1..g+e), so RBP_k at every k from 1 to |V|, the k-sweep,
             the lognormal / rank-pmf fits, MRR and the per-rank nll sums of a cross-entropy
             decomposition (`rbplab.analysis.metrics`, `lognormal_theory`). Sparse: one row per
             distinct pair, never a dense |V| array.
  documents  per document (the corpus's dense index, 0..n_docs-1): scored tokens, nll sum,
             target-probability sum and hits at each k of `ks` under each tie convention: the
             document bootstrap (`rbplab.analysis.metrics`), the within-document permutation
             baseline of emergence.
  segments   (document, first position, length) of every run of consecutive scored positions:
             the number of N-token windows for every N, and the token positions of the
             position-matched emergence baseline (`rbplab.analysis.emergence`).
  buckets    scored tokens and hits per position bucket (`position_bucket`) at each k: the
             position-matched baseline's hit rates.
  hit runs   histograms of the lengths of maximal runs of consecutive hits inside segments,
             pooled over documents at each k of `ks`, and per document at `doc_run_ks`: windows of
             N all-hit tokens = sum over runs of max(0, L - N + 1), so every N comes from one
             histogram (emergence's p_{N,k}, pooled for the point estimate, per document for its
             bootstrap).
  totals     n_tokens, sum nll, sum nll^2 (the nll moments: CE and its spread).

Emergence under "expected" ties (a window succeeds with a product of fractional probabilities) does
not reduce to run lengths; it reads the tokens (`rbplab.analysis.emergence` says so).
"""

from __future__ import annotations

import collections
import contextlib
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np
import pandas as pd

from rbplab.core.errors import InvalidArgumentError, NotFoundError

FAMILY = "family"  # a registry family (or "custom" / "synthetic")
MODEL = "model"  # the model's short name; "name@revision" for a checkpoint
CORPUS = "corpus"
SIZE = "S"  # non-embedding parameters
K = "k"  # rank threshold of RBP_k
METRIC = "metric"  # "rbp", "ce" or "mean_p"
VALUE = "value"  # the metric itself (RBP_k, CE in nats, mean target probability)
LOSS = "loss"  # the positive quantity a scaling law fits: -log RBP_k, CE, -log mean p
TIE_COLUMN = "ties"  # the tie convention of the ranks

RUN_COLUMNS = (FAMILY, MODEL, CORPUS, SIZE)
METRIC_COLUMNS = (METRIC, K, VALUE, LOSS)
FIT_GROUP_COLUMNS = (FAMILY, CORPUS, TIE_COLUMN, METRIC, K)


COLUMNS = ("doc", "position", "n_greater", "n_equal", "nll")
# The rank conventions for tied logits (see `TokenStats.rank`); every analysis takes `ties=`.
Ties = Literal["pessimistic", "optimistic", "expected"]
TIES: tuple[str, ...] = get_args(Ties)


def check_ties(ties: str) -> str:
    """`ties` itself if it names a tie convention; a one-line ValueError otherwise."""
    if ties not in TIES:
        raise InvalidArgumentError(f"ties must be one of {TIES}, got {ties!r}")
    return ties


# The tie rule, written here once. A target with g logits above its own and e level with it (itself
# included) ranks g + e under "pessimistic" ties (the paper's rank), g + 1 under "optimistic" ones,
# and each of g+1..g+e with probability 1/e under "expected" ones (ties broken uniformly at random).
# Every count of hits, curve, histogram and rule of rbplab derives from these two functions.


def tie_rank(greater: np.ndarray, equal: np.ndarray, ties: str) -> np.ndarray:
    """The target's rank: g + e (pessimistic), g + 1 (optimistic), or the mean of the two under
    "expected" ties (the expected rank; a half-integer when e is even). `ties` is checked by the
    public function that passes it."""
    if ties == "pessimistic":
        return greater + equal
    if ties == "optimistic":
        return greater + 1
    return greater + (equal + 1) / 2.0


def tie_share(greater: np.ndarray, equal: np.ndarray, k: float | np.ndarray) -> np.ndarray:
    """Under "expected" ties, the probability that the target ranks within the top k:
    clip((k - g) / e, 0, 1) (0 for k <= g, 1 for k >= g + e), broadcast as numpy does."""
    return np.clip((k - greater) / equal, 0.0, 1.0)


@dataclass(frozen=True, eq=False)
class TokenStats:
    """Statistics of every scored token of one (model, corpus) pair.

    Arrays are aligned and sorted by (doc, position). `doc` is a dense document
    index (0..n_docs-1); `position` is the index of the target token inside its
    document's token sequence, so consecutive scored tokens differ by one.
    """

    doc: np.ndarray  # int64
    position: np.ndarray  # int64
    n_greater: np.ndarray  # int64, #{v : z_v > z_t}
    n_equal: np.ndarray  # int64 >= 1, #{v : z_v == z_t}, t included
    nll: np.ndarray  # float64, logsumexp(z) - z_t in nats
    vocab_size: int  # |V| the ranks were taken over

    def __post_init__(self) -> None:
        n = len(self.n_greater)
        for name in COLUMNS:
            arr = getattr(self, name)
            if arr.ndim != 1 or len(arr) != n:
                raise InvalidArgumentError(
                    f"TokenStats.{name} must be 1-D of length {n}, got shape {arr.shape}"
                )
        if n and (self.n_equal.min() < 1):
            raise InvalidArgumentError("n_equal counts the target itself and must be >= 1")
        if n and (
            self.n_greater.min() < 0
            or tie_rank(self.n_greater, self.n_equal, "pessimistic").max() > self.vocab_size
        ):
            raise InvalidArgumentError(f"ranks must lie in [1, vocab_size={self.vocab_size}]")

    def __len__(self) -> int:
        return len(self.n_greater)

    @property
    def n_docs(self) -> int:
        return int(self.doc.max()) + 1 if len(self) else 0

    def rank(self, ties: Ties = "pessimistic") -> np.ndarray:
        """Rank of each target under `ties` (`tie_rank`): pessimistic is the paper's definition,
        optimistic puts ties in the target's favour, expected is the mean rank under uniform random
        tie-breaking (may be a half-integer)."""
        return tie_rank(self.n_greater, self.n_equal, check_ties(ties))

    def subset(self, mask: np.ndarray) -> TokenStats:
        """Rows where `mask` is true, documents renumbered densely."""
        doc = self.doc[mask]
        _, dense = np.unique(doc, return_inverse=True)
        return TokenStats(
            doc=dense.astype(np.int64),
            position=self.position[mask],
            n_greater=self.n_greater[mask],
            n_equal=self.n_equal[mask],
            nll=self.nll[mask],
            vocab_size=self.vocab_size,
        )

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({name: getattr(self, name) for name in COLUMNS})

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, vocab_size: int, doc_column: str = "doc") -> TokenStats:
        """Build from a frame with columns doc, position, n_greater, n_equal, nll.

        Integer doc values are kept as they are: the cache's doc_index is the corpus's dense
        document index, and every model of a corpus must share it, or a document bootstrap
        would pair different documents across models. Other ids are numbered in sorted order.
        """
        frame = frame.sort_values([doc_column, "position"], kind="stable")
        doc = frame[doc_column].to_numpy()
        if np.issubdtype(doc.dtype, np.integer):
            dense = doc
        else:
            _, dense = np.unique(doc, return_inverse=True)
        return cls(
            doc=np.asarray(dense, dtype=np.int64),
            position=frame["position"].to_numpy(np.int64),
            n_greater=frame["n_greater"].to_numpy(np.int64),
            n_equal=frame["n_equal"].to_numpy(np.int64),
            nll=frame["nll"].to_numpy(np.float64),
            vocab_size=int(vocab_size),
        )

    @classmethod
    def from_ranks(
        cls,
        ranks: np.ndarray,
        vocab_size: int,
        doc: np.ndarray | None = None,
        nll: np.ndarray | None = None,
    ) -> TokenStats:
        """Tie-free statistics from integer ranks (synthetic data, tests). Positions are
        consecutive within each document; nll defaults to NaN when unknown."""
        ranks = np.asarray(ranks, dtype=np.int64)
        n = len(ranks)
        doc = np.zeros(n, dtype=np.int64) if doc is None else np.asarray(doc, dtype=np.int64)
        if n and np.any(np.diff(doc) < 0):
            raise InvalidArgumentError("doc must be sorted (tokens grouped by document)")
        starts = np.r_[0, np.flatnonzero(np.diff(doc)) + 1] if n else np.zeros(0, dtype=np.int64)
        position = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n])) if n else np.zeros(0)
        return cls(
            doc=doc,
            position=position.astype(np.int64),
            n_greater=ranks - 1,
            n_equal=np.ones(n, dtype=np.int64),
            nll=np.full(n, np.nan) if nll is None else np.asarray(nll, dtype=np.float64),
            vocab_size=int(vocab_size),
        )


SUMMARY_VERSION = 1
# The paper's thresholds (sections 4.1-4.3), part of every grid so its figures can be reproduced.
PAPER_KS = (1, 10, 50, 100, 20_000, 30_000)
# Per-document hit runs (the emergence bootstrap) are kept at these thresholds only: they are the
# largest part of a summary, and the 1-2-5 steps to 1,000 cover the k of sequence-level tasks.
DOC_RUN_KS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
RUN_TIES = ("pessimistic", "optimistic")  # the conventions whose hits are 0/1, so runs exist


def summary_ks(vocab_size: int) -> np.ndarray:
    """The thresholds at which a summary keeps per-document and per-bucket hits: 8 log-spaced per
    decade, the 1-2-5 steps and the paper's thresholds, below |V| (RBP_|V| = 1 is known)."""
    decades = np.arange(0, 7 + 1e-9, 1 / 8)
    grid = np.round(10**decades).astype(np.int64)
    steps = (np.array([1, 2, 5])[None, :] * 10 ** np.arange(7)[:, None]).ravel()
    ks = np.union1d(np.union1d(grid, steps), PAPER_KS).astype(np.int64)
    ks = ks[ks < vocab_size]
    return ks if len(ks) else np.array([1], dtype=np.int64)


def position_bucket(position: np.ndarray) -> np.ndarray:
    """Bucket of each token position for the position-matched baseline: positions 0..15 on
    their own, then four buckets per doubling (16-19, 20-22, 23-26, 27-31, 32-38, ...)."""
    pos = np.asarray(position, dtype=np.float64)
    with np.errstate(divide="ignore"):
        late = 16 + np.floor(4 * np.log2(np.maximum(pos, 16) / 16)).astype(np.int64)
    return np.where(pos < 16, pos.astype(np.int64), late)


def hit_probability(n_greater: np.ndarray, n_equal: np.ndarray, k: float, ties: str) -> np.ndarray:
    """Per-token probability of ranking within the top k (0/1 except for expected ties); `ties` is
    checked by the public function that passes it (as in every helper below)."""
    if ties == "expected":
        return tie_share(n_greater, n_equal, k)
    return (tie_rank(n_greater, n_equal, ties) <= k).astype(np.float64)


@dataclass(frozen=True, eq=False)
class RankPairs:
    """The distinct (n_greater, n_equal) pairs of an entry, sorted, with count and nll sum."""

    greater: np.ndarray  # int64
    equal: np.ndarray  # int64 >= 1
    count: np.ndarray  # int64 >= 1
    nll_sum: np.ndarray  # float64

    @classmethod
    def of(cls, stats: TokenStats) -> RankPairs:
        g, e, nll = stats.n_greater, stats.n_equal, stats.nll
        size = stats.vocab_size + 1
        # Untied tokens (nearly all) by bincount, O(n + |V|); the few tied ones by sorting.
        untied = e == 1
        count = np.bincount(g[untied], minlength=size)
        sums = np.bincount(g[untied], weights=nll[untied], minlength=size)
        g1 = np.flatnonzero(count)
        greater, equal, counts, nll_sums = [g1], [np.ones(len(g1), np.int64)], [count[g1]], [sums[g1]]
        if not untied.all():
            key = g[~untied] * size + e[~untied]
            uniq, inverse, tied_count = np.unique(key, return_inverse=True, return_counts=True)
            greater.append(uniq // size)
            equal.append(uniq % size)
            counts.append(tied_count)
            nll_sums.append(np.bincount(inverse, weights=nll[~untied], minlength=len(uniq)))
        greater, equal = np.concatenate(greater), np.concatenate(equal)
        order = np.lexsort((equal, greater))
        return cls(
            greater[order].astype(np.int64),
            equal[order].astype(np.int64),
            np.concatenate(counts)[order].astype(np.int64),
            np.concatenate(nll_sums)[order].astype(np.float64),
        )


@dataclass(frozen=True, eq=False)
class RankCounts:
    """How many tokens rank within k, for any integer k, under one tie convention: a step function
    over the distinct ranks `ranks` (`counts` tokens at each), plus under "expected" ties each tied
    pair's share count * tie_share(g, k) (`tied_greater`, `tied_equal`, `tied_count`). Sparse: no
    |V|-long array. `rbplab.analysis.metrics.RBPCurve` answers RBP_k from it and the cache index
    stores its counts at a summary's thresholds, so the two give the same floats by construction."""

    ranks: np.ndarray  # int64, sorted, distinct
    counts: np.ndarray  # float64
    tied_greater: np.ndarray  # int64
    tied_equal: np.ndarray  # int64 >= 2
    tied_count: np.ndarray  # float64

    def __post_init__(self) -> None:
        # _steps[i]: tokens at the first i distinct ranks (a leading 0 for k below every rank)
        object.__setattr__(self, "_steps", np.r_[0.0, np.cumsum(self.counts, dtype=np.float64)])

    @classmethod
    def of(cls, pairs: RankPairs, ties: str) -> RankCounts:
        """From the rank pairs; `ties` is checked by the public function that passes it."""
        g, e, count = pairs.greater, pairs.equal, pairs.count
        tied = (e > 1) if ties == "expected" else np.zeros(len(g), dtype=bool)
        # An untied token ranks g + 1 = g + e under every convention.
        rank = tie_rank(g[~tied], e[~tied], "optimistic" if ties == "optimistic" else "pessimistic")
        ranks, inverse = np.unique(rank, return_inverse=True)
        counts = np.bincount(inverse, weights=count[~tied], minlength=len(ranks))
        return cls(ranks.astype(np.int64), counts, g[tied], e[tied], count[tied].astype(np.float64))

    def count_within(self, k: np.ndarray) -> np.ndarray:
        """(Expected) number of tokens with rank <= k, for integer k of any shape."""
        k = np.asarray(k, dtype=np.int64)
        out = self._steps[np.searchsorted(self.ranks, k, side="right")]
        if len(self.tied_count):
            out = out + tie_share(self.tied_greater, self.tied_equal, k[..., None]) @ self.tied_count
        return out

    def histogram(self, vocab_size: int) -> np.ndarray:
        """(Expected) number of tokens at each rank r = 0..vocab_size, as float64 (h[0] = 0): a tied
        pair puts count / e on each of its ranks g+1..g+e under "expected" ties."""
        size = vocab_size + 1
        # bincount of empty weights returns integers: every result is cast to float64
        hist = np.bincount(self.ranks, weights=self.counts, minlength=size).astype(np.float64)
        if len(self.tied_count):
            g, e, w = self.tied_greater, self.tied_equal, self.tied_count / self.tied_equal
            # Difference array: +count/e at the first rank, -count/e after the last; its cumsum is the pmf.
            diff = np.bincount(tie_rank(g, e, "optimistic"), weights=w, minlength=size + 1)
            diff -= np.bincount(tie_rank(g, e, "pessimistic") + 1, weights=w, minlength=size + 1)
            hist += np.cumsum(diff)[:size]
        return hist


@dataclass(frozen=True, eq=False)
class HitRuns:
    """Lengths of maximal runs of consecutive hits and how many runs have each length; `doc` is
    the document of each row for per-document histograms, None when pooled over documents."""

    length: np.ndarray  # int64 >= 1
    count: np.ndarray  # int64 >= 1
    doc: np.ndarray | None = None

    def windows(self, n: int) -> float:
        """Windows of n consecutive hits: sum over runs of max(0, L - n + 1)."""
        return float(np.sum(self.count * np.clip(self.length - n + 1, 0, None)))

    def doc_windows(self, n: int, n_docs: int) -> np.ndarray:
        """Windows of n consecutive hits per document (needs `doc`)."""
        if self.doc is None:
            raise ValueError("these hit runs are pooled over documents")
        weights = self.count * np.clip(self.length - n + 1, 0, None)
        return np.bincount(self.doc, weights=weights, minlength=n_docs).astype(np.float64)


# The per-document tables of the last few summaries read stay in memory: an interactive view
# asks for the same runs' tables at every slider step, while a grid of thousands of entries
# still holds only this many.
RECENT_DOCUMENT_TABLES = 8


class LastFew:
    """A value kept in attribute `name` of the last `limit` objects given one (`keep`): each newer
    keep drops the oldest object's value, unless that object was given one again since. Objects
    are held by weak reference, so a value never outlives its object."""

    def __init__(self, limit: int, name: str):
        self.limit, self.name = limit, name
        self._order: collections.deque = collections.deque()

    def keep(self, owner: object, value: object) -> None:
        owner.__dict__[self.name] = value
        self._order.append(weakref.ref(owner))
        while len(self._order) > self.limit:
            older = self._order.popleft()()
            if older is not None and not any(ref() is older for ref in self._order):
                older.__dict__.pop(self.name, None)


_RECENT_TABLES = LastFew(RECENT_DOCUMENT_TABLES, "_recent")


@dataclass(frozen=True, eq=False)
class EntrySummary:
    """The sufficient statistics of one cache entry (module docstring); no per-token array.

    Built by `summarize` from tokens, or read back by `rbplab.store.cache.reading`. `hits` maps each
    tie convention to an (n_docs, len(ks)) array of per-document hits; `bucket_hits` does the same
    per position bucket for the 0/1 conventions; `runs` maps (ties, k) to pooled `HitRuns` for
    every k of `ks` and `doc_runs` to per-document ones at `doc_run_ks`."""

    vocab_size: int
    n_tokens: int
    nll_sq_sum: float
    pairs: RankPairs
    ks: np.ndarray
    doc_tokens: np.ndarray  # int64 (n_docs,)
    doc_nll: np.ndarray  # float64 (n_docs,)
    doc_p: np.ndarray  # float64 (n_docs,)
    hits: dict[str, np.ndarray]
    seg_doc: np.ndarray
    seg_start: np.ndarray
    seg_length: np.ndarray
    bucket_tokens: np.ndarray
    bucket_hits: dict[str, np.ndarray]
    runs: dict[tuple[str, int], HitRuns]
    doc_runs: dict[tuple[str, int], HitRuns]
    # The tokens, when the summary was computed from tokens held in memory: parts and thresholds
    # not computed yet are then computed on first use (synthetic studies, tests, own pipelines).
    stats: TokenStats | None = field(default=None, repr=False)
    # Where a summary read from the cache finds its tokens when a user asks for them
    # (`token_stats`); never called behind the user's back.
    load_tokens: Callable[[], TokenStats] | None = field(default=None, repr=False)
    # A summary read from the cache holds only its pooled parts: the per-document tables (`hits`,
    # `doc_runs`; the document bootstrap and the emergence bootstrap read them) are read from its
    # file and checked when asked for, so a study's memory grows with its entries, not documents.
    load_documents: Callable[[], tuple[dict, dict]] | None = field(default=None, repr=False)

    def _document_tables(self) -> tuple[dict, dict]:
        if self.hits or self.load_documents is None:  # in memory (or nothing to read)
            return self.hits, self.doc_runs
        held = self.__dict__.get("_held") or self.__dict__.get("_recent")
        if held is None:
            held = self.load_documents()
            _RECENT_TABLES.keep(self, held)
        return held

    @contextlib.contextmanager
    def documents(self) -> Iterator[None]:
        """Hold the per-document tables (read from the cache once) for a block of queries."""
        if self.hits or self.load_documents is None or "_held" in self.__dict__:
            yield
            return
        self.__dict__["_held"] = self._document_tables()
        try:
            yield
        finally:
            del self.__dict__["_held"]

    def token_stats(self) -> TokenStats:
        """The entry's per-token statistics: in memory, or read from the cache now."""
        if self.stats is not None:
            return self.stats
        if self.load_tokens is None:
            raise InvalidArgumentError(
                "this summary has no tokens attached (it was read without its cache entry)"
            )
        return self.load_tokens()

    def complete(self) -> EntrySummary:
        """Every hit-run histogram of the grid computed (what the store writes)."""
        for ties in RUN_TIES:
            self._compute_runs(ties, [int(k) for k in self.ks])
        return self

    def _compute_runs(self, ties: str, ks: list[int], only_per_document: bool = False) -> None:
        """Pooled hit runs at `ks` (and per document where k is in `DOC_RUN_KS`) from the tokens
        in memory; the ranks and segment breaks are computed once for all of them."""
        if only_per_document:
            wanted = [k for k in ks if (ties, k) not in self.doc_runs]
        else:
            wanted = [k for k in ks if (ties, k) not in self.runs]
            wanted += [
                k for k in ks if k in DOC_RUN_KS and (ties, k) not in self.doc_runs and k not in wanted
            ]
        if not wanted or self.stats is None:
            return
        if ties == "pessimistic" and not self.has_ties:  # the same hits as optimistic
            self._compute_runs("optimistic", wanted, only_per_document)
            for table in (self.runs, self.doc_runs):
                for k in wanted:
                    if ("optimistic", k) in table:
                        table[(ties, k)] = table[("optimistic", k)]
            return
        st = self.stats
        rank = tie_rank(st.n_greater, st.n_equal, ties)
        breaks = segment_breaks(st.doc, st.position)
        for k in wanted:
            hit = rank <= k
            if not only_per_document:
                self.runs[(ties, k)] = _hit_runs(hit, breaks, None)
            if k in DOC_RUN_KS or only_per_document:
                self.doc_runs[(ties, k)] = _hit_runs(hit, breaks, st.doc)

    @property
    def n_docs(self) -> int:
        return len(self.doc_tokens)

    @property
    def doc_run_ks(self) -> np.ndarray:
        """Thresholds of the per-document hit runs: `DOC_RUN_KS` within the grid."""
        return np.array([k for k in DOC_RUN_KS if k in set(self.ks.tolist())], dtype=np.int64)

    @property
    def has_ties(self) -> bool:
        return bool(np.any(self.pairs.equal > 1))

    @property
    def nll_sum(self) -> float:
        return float(self.pairs.nll_sum.sum())

    def doc_hits(self, ks: Iterable[int], ties: str) -> np.ndarray:
        """Per-document (expected) hits at each of `ks`, shape (n_docs, len(ks)); every k must be
        one of the summary's thresholds or at least |V| (all tokens are hits)."""
        return self._at_ks(ks, ties, per_document=True)

    def bucket_hit_counts(self, ks: Iterable[int], ties: str) -> np.ndarray:
        """Hits per position bucket at each of `ks` (0/1 conventions), shape (n_buckets, len(ks))."""
        if ties not in RUN_TIES:
            raise InvalidArgumentError(f"position-bucket hits are kept for {RUN_TIES}, not {ties!r}")
        return self._at_ks(ks, ties, per_document=False)

    def _at_ks(self, ks: Iterable[int], ties: str, per_document: bool) -> np.ndarray:
        table = self._document_tables()[0][ties] if per_document else self.bucket_hits[ties]
        total = self.doc_tokens if per_document else self.bucket_tokens
        ks = np.asarray(list(ks), dtype=np.int64)
        index = np.searchsorted(self.ks, ks)
        found = (index < len(self.ks)) & (self.ks[np.minimum(index, len(self.ks) - 1)] == ks)
        full = ks >= self.vocab_size
        missing = ks[~found & ~full]
        if len(missing) and self.stats is not None:  # tokens in memory: compute what the grid lacks
            groups = self.stats.doc if per_document else position_bucket(self.stats.position)
            return _cumulative_hits(groups, len(total), self.stats, ks, ties).astype(np.float64)
        if len(missing):
            what = "per-document hits" if per_document else "position-bucket hits"
            raise NotFoundError(
                f"{what} are kept at k in {_grid_text(self.ks)} (and k >= |V| = {self.vocab_size}); "
                f"k = {', '.join(map(str, missing[:5]))} is not one of them"
            )
        out = np.empty((table.shape[0], len(ks)), dtype=np.float64)
        out[:, found] = table[:, index[found]]
        out[:, full & ~found] = np.asarray(total, dtype=np.float64)[:, None]  # every token is a hit
        return out

    def hit_runs(self, ties: str, k: int, per_document: bool = False) -> HitRuns:
        """Pooled (or per-document) hit-run histogram at threshold k under a 0/1 convention."""
        if ties not in RUN_TIES:
            raise InvalidArgumentError(f"hit runs exist for {RUN_TIES} ties, not {ties!r}")
        table, grid = (self._document_tables()[1], self.doc_run_ks) if per_document else (self.runs, self.ks)
        found = table.get((ties, int(k)))
        if found is None and self.stats is not None:  # tokens in memory: compute on first use
            self._compute_runs(ties, [int(k)], only_per_document=per_document)
            found = table.get((ties, int(k)))
        if found is None:
            what = "per-document hit runs (the emergence bootstrap)" if per_document else "hit runs"
            raise NotFoundError(f"{what} are kept at k in {_grid_text(grid)}; k = {k} is not one of them")
        return found


def _grid_text(ks: np.ndarray) -> str:
    shown = ", ".join(f"{k:,}" for k in ks[:40])
    return "{" + shown + (", ..." if len(ks) > 40 else "") + "}"


def _threshold_index(stats: TokenStats, ks: np.ndarray, ties: str) -> np.ndarray:
    """j0 per token: the token ranks within ks[j] exactly for j >= j0 (0/1 conventions)."""
    return np.searchsorted(ks, tie_rank(stats.n_greater, stats.n_equal, ties), side="left")


def _cumulative_hits(groups: np.ndarray, n_groups: int, stats: TokenStats, ks: np.ndarray, ties: str):
    """(n_groups, len(ks)) hits per group (document or bucket); fractional under expected ties."""
    n_k = len(ks)
    if ties == "expected":
        tied = np.flatnonzero(stats.n_equal > 1)
        j0 = _threshold_index(stats, ks, "pessimistic")
        j0[tied] = n_k  # handled fractionally below
    else:
        tied = np.zeros(0, dtype=np.int64)
        j0 = _threshold_index(stats, ks, ties)
    counts = np.bincount(groups * (n_k + 1) + j0, minlength=n_groups * (n_k + 1)).reshape(n_groups, n_k + 1)
    hits = np.cumsum(counts, axis=1)[:, :n_k]
    if ties != "expected":
        return hits.astype(np.int64)
    hits = hits.astype(np.float64)
    if len(tied):
        g, e = stats.n_greater[tied], stats.n_equal[tied]
        frac = tie_share(g[:, None], e[:, None], ks[None, :])
        for j in range(n_k):
            hits[:, j] += np.bincount(groups[tied], weights=frac[:, j], minlength=n_groups)
    return hits


def document_hits(stats: TokenStats, ks: np.ndarray, ties: str, n_docs: int | None = None) -> np.ndarray:
    """(n_docs, len(ks)) hits per document at thresholds `ks` (sorted), as float64."""
    n_docs = stats.n_docs if n_docs is None else n_docs
    return _cumulative_hits(stats.doc, n_docs, stats, np.asarray(ks, np.int64), ties).astype(np.float64)


def document_totals(stats: TokenStats, n_docs: int | None = None) -> tuple[np.ndarray, ...]:
    """Per document: scored tokens (int64), nll sum and target-probability sum (float64)."""
    n_docs = stats.n_docs if n_docs is None else n_docs
    doc, nll = stats.doc, stats.nll
    return (
        np.bincount(doc, minlength=n_docs).astype(np.int64),
        np.bincount(doc, weights=nll, minlength=n_docs),
        np.bincount(doc, weights=np.exp(-nll), minlength=n_docs),
    )


def segment_breaks(doc: np.ndarray, position: np.ndarray) -> np.ndarray:
    """True where a token starts a new run of consecutive scored positions of one document."""
    brk = np.ones(len(doc), dtype=bool)
    brk[1:] = (doc[1:] != doc[:-1]) | (position[1:] != position[:-1] + 1)
    return brk


def _hit_runs(hit: np.ndarray, brk: np.ndarray, doc: np.ndarray | None) -> HitRuns:
    """Maximal runs of True in `hit` that do not cross a segment break: the gaps between
    consecutive stoppers (a miss or the first token of a segment), plus the stopper itself when it
    is a hit that opens a segment. Three passes over the tokens, whatever the number of runs."""
    n = len(hit)
    stoppers = np.flatnonzero(~hit | brk)
    if not len(stoppers):
        empty = np.zeros(0, dtype=np.int64)
        return HitRuns(empty, empty, None if doc is None else empty)
    length = np.diff(np.r_[stoppers, n]) - 1 + hit[stoppers]
    keep = length > 0
    length, first = length[keep], stoppers[keep]
    width = int(length.max(initial=0)) + 1
    rows = 1 if doc is None else int(doc[-1]) + 1
    key = length if doc is None else doc[first] * width + length
    if rows * width <= 4 * n + 1024:  # a histogram by bincount is cheaper than sorting
        counts = np.bincount(key, minlength=rows * width)
        values = np.flatnonzero(counts)
        counts = counts[values]
    else:
        values, counts = np.unique(key, return_counts=True)
    values, counts = values.astype(np.int64), counts.astype(np.int64)
    if doc is None:
        return HitRuns(values, counts)
    return HitRuns(values % width, counts, values // width)


def summarize(stats: TokenStats, ks: Iterable[int] | None = None) -> EntrySummary:
    """The summary of one entry's tokens (module docstring). `ks` adds thresholds to the grid
    (`summary_ks`), e.g. for an analysis of tokens held in memory at a k the grid lacks."""
    vocab = stats.vocab_size
    grid = summary_ks(vocab)
    if ks is not None:
        extra = np.asarray(list(ks), dtype=np.int64)
        grid = np.union1d(grid, extra[(extra >= 1) & (extra < vocab)]).astype(np.int64)
    n_docs = stats.n_docs
    doc, position = stats.doc, stats.position
    brk = segment_breaks(doc, position)
    first = np.flatnonzero(brk)
    bucket = position_bucket(position)
    n_buckets = int(bucket.max()) + 1 if len(bucket) else 0
    hits = {t: _cumulative_hits(doc, n_docs, stats, grid, t) for t in TIES}
    bucket_hits = {t: _cumulative_hits(bucket, n_buckets, stats, grid, t) for t in RUN_TIES}
    nll = stats.nll
    doc_tokens, doc_nll, doc_p = document_totals(stats, n_docs)
    return EntrySummary(
        vocab_size=vocab,
        n_tokens=len(stats),
        nll_sq_sum=float(np.dot(nll, nll)) if len(nll) else 0.0,
        pairs=RankPairs.of(stats),
        ks=grid,
        doc_tokens=doc_tokens,
        doc_nll=doc_nll,
        doc_p=doc_p,
        hits=hits,
        seg_doc=doc[first].astype(np.int64),
        seg_start=position[first].astype(np.int64),
        seg_length=np.diff(np.r_[first, len(doc)]).astype(np.int64),
        bucket_tokens=np.bincount(bucket, minlength=n_buckets).astype(np.int64),
        bucket_hits=bucket_hits,
        runs={},  # hit runs are computed on first use (`complete` computes them all)
        doc_runs={},
        stats=stats,
    )
