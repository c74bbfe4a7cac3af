"""Document-level (cluster) bootstrap of RBP_k, cross-entropy and mean target probability.

Tokens of one document are correlated (topic, style, copying), so confidence intervals
resample documents, not tokens. Per-document sufficient statistics (`DocStats`) turn each
bootstrap replicate into a weighted sum of rows: a matrix product, never a re-scan of tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rbplab.analysis.metrics import RunData, as_ks, n_tokens, run_metrics
from rbplab.core.errors import InvalidArgumentError
from rbplab.core.stats import TokenStats
from rbplab.core.summary import EntrySummary, document_hits, document_totals

UNITS = ("document", "token")
_CHUNK_ELEMENTS = 1 << 22  # bootstrap weight block size (~32 MB of float64)


@dataclass(frozen=True, eq=False)
class DocStats:
    """Per-document sufficient statistics of one run at thresholds `ks`.

    hits[d, j] = (expected) tokens of document d with rank <= ks[j]; a bootstrap replicate with
    document weights w gives RBP = w @ hits / w @ n_tokens."""

    ks: np.ndarray
    hits: np.ndarray
    n_tokens: np.ndarray
    nll_sum: np.ndarray
    p_sum: np.ndarray
    ties: str
    vocab_size: int

    @property
    def n_docs(self) -> int:
        return len(self.n_tokens)

    def evaluate(self, weights: np.ndarray) -> dict[str, np.ndarray]:
        """Metrics for document weights of shape (n_docs,) or (B, n_docs): rbp (B, n_k), ce, mean_p (B,)."""
        w = np.atleast_2d(weights)
        den = w @ self.n_tokens
        with np.errstate(invalid="ignore", divide="ignore"):
            return {
                "rbp": (w @ self.hits) / den[:, None],
                "ce": (w @ self.nll_sum) / den,
                "mean_p": (w @ self.p_sum) / den,
            }


def expected_hits(stats: TokenStats, ks: np.ndarray, ties: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-token membership in the top k as (j0, tied_index, tied_fraction), for the token bootstrap.

    Untied tokens are in the top ks[j] exactly for j >= j0; "expected" tied tokens
    (rows tied_index) contribute tied_fraction[i, j] = clip((ks[j] - g) / e, 0, 1)."""
    ng, ne = stats.n_greater, stats.n_equal
    rank = ng + ne if ties == "pessimistic" else ng + 1
    j0 = np.searchsorted(ks, rank, side="left")
    if ties != "expected" or len(ne) == 0 or ne.max() == 1:
        return j0, np.zeros(0, dtype=np.int64), np.zeros((0, len(ks)))
    tied = np.flatnonzero(ne > 1)
    j0[tied] = len(ks)  # handled fractionally below
    frac = np.clip((ks[None, :] - ng[tied, None]) / ne[tied, None], 0.0, 1.0)
    return j0, tied, frac


def _padded(values: np.ndarray, n_docs: int) -> np.ndarray:
    out = np.zeros((n_docs, *values.shape[1:]), dtype=np.float64)
    out[: len(values)] = values
    return out


def doc_stats(
    data: RunData, ks: Iterable[int] | None = None, ties: str = "pessimistic", n_docs: int | None = None
) -> DocStats:
    """Per-document sufficient statistics of a run's tokens or of its cached summary (which keeps
    them at its thresholds, `rbplab.core.summary.summary_ks`); `n_docs` pads to a corpus-wide
    document count so several models of one corpus can share bootstrap weights. `ties` is checked
    by the public function that passes it (`bootstrap_ci`, `fit.bootstrap_fits`, a `Study`)."""
    ks = as_ks(ks, data.vocab_size)
    n_docs = data.n_docs if n_docs is None else int(n_docs)
    if n_docs < data.n_docs:
        raise InvalidArgumentError(f"n_docs={n_docs} is smaller than the documents present ({data.n_docs})")
    if isinstance(data, EntrySummary):
        hits = data.doc_hits(ks, ties)
        tokens, nll, p = data.doc_tokens, data.doc_nll, data.doc_p
    else:
        hits = document_hits(data, ks, ties)
        tokens, nll, p = document_totals(data)
    return DocStats(
        ks=ks,
        hits=_padded(hits, n_docs),
        n_tokens=_padded(tokens, n_docs),
        nll_sum=_padded(nll, n_docs),
        p_sum=_padded(p, n_docs),
        ties=ties,
        vocab_size=data.vocab_size,
    )


def weight_chunks(n_units: int, n_boot: int, seed: int | np.random.SeedSequence) -> Iterator[np.ndarray]:
    """Bootstrap weights (resampling counts) in blocks of replicates, shape (b, n_units).

    Deterministic in (n_units, n_boot, seed): two calls yield identical weights, which is how
    several models of one corpus are evaluated on the same document resamples."""
    rng = np.random.default_rng(seed)
    block = max(1, min(n_boot, _CHUNK_ELEMENTS // max(n_units, 1)))
    for start in range(0, n_boot, block):
        b = min(block, n_boot - start)
        idx = rng.integers(0, n_units, size=(b, n_units)) + (np.arange(b) * n_units)[:, None]
        yield np.bincount(idx.ravel(), minlength=b * n_units).reshape(b, n_units).astype(np.float64)


def bootstrap_weights(n_units: int, n_boot: int, seed: int = 0) -> np.ndarray:
    """All bootstrap weights at once, shape (n_boot, n_units): row b counts how often each
    document is drawn in replicate b (rows sum to n_units)."""
    return np.concatenate(list(weight_chunks(n_units, n_boot, seed)), axis=0)


def replicate_arrays(
    docstats: list[DocStats], n_boot: int, seed: int | np.random.SeedSequence = 0
) -> list[dict[str, np.ndarray]]:
    """Replicate metrics for several runs of one corpus on the SAME document resamples.
    Returns one dict per run: rbp (n_boot, n_k), ce (n_boot,), mean_p (n_boot,)."""
    if not docstats:
        return []
    n_docs = {d.n_docs for d in docstats}
    if len(n_docs) != 1:
        raise InvalidArgumentError(
            f"shared resampling needs one document count, got {sorted(n_docs)}; pass n_docs="
        )
    parts: list[list[dict[str, np.ndarray]]] = [[] for _ in docstats]
    for w in weight_chunks(n_docs.pop(), n_boot, seed):
        for part, d in zip(parts, docstats, strict=True):
            part.append(d.evaluate(w))
    return [{key: np.concatenate([p[key] for p in part]) for key in part[0]} for part in parts]


def _token_replicates(stats: TokenStats, ks: np.ndarray, ties: str, n_boot: int, seed: int) -> dict:
    """Naive token bootstrap (each token its own cluster), O(n_tokens) per replicate; kept to
    show how much it understates uncertainty next to the document bootstrap."""
    n, n_k = len(stats), len(ks)
    j0, tied, frac = expected_hits(stats, ks, ties)
    p = np.exp(-stats.nll)
    out = {"rbp": np.empty((n_boot, n_k)), "ce": np.empty(n_boot), "mean_p": np.empty(n_boot)}
    rng = np.random.default_rng(seed)
    for b in range(n_boot):
        w = np.bincount(rng.integers(0, n, n), minlength=n).astype(np.float64)
        hits = np.cumsum(np.bincount(j0, weights=w, minlength=n_k + 1))[:n_k] + w[tied] @ frac
        out["rbp"][b] = hits / n
        out["ce"][b] = np.einsum("i,i->", w, stats.nll) / n  # einsum: no BLAS threads on 1-D sums
        out["mean_p"][b] = np.einsum("i,i->", w, p) / n
    return out


def _replicates(data: RunData, ks: np.ndarray, ties: str, n_boot: int, seed: int, unit: str) -> dict:
    if unit not in UNITS:
        raise InvalidArgumentError(f"unit must be one of {UNITS}, got {unit!r}")
    if n_boot < 2 or n_tokens(data) == 0:
        raise InvalidArgumentError(
            f"need n_boot >= 2 and at least one token (n_boot={n_boot}, tokens={n_tokens(data)})"
        )
    if unit == "document":
        return replicate_arrays([doc_stats(data, ks, ties)], n_boot, seed)[0]
    if not isinstance(data, TokenStats):
        raise InvalidArgumentError(
            "the token bootstrap resamples tokens: give the run's TokenStats (study.stats(...))"
        )
    return _token_replicates(data, ks, ties, n_boot, seed)


def _columns(arrays: dict[str, np.ndarray], ks: np.ndarray) -> tuple[list[str], list, np.ndarray]:
    """Flatten replicate arrays to (metric, k, value matrix (B, n_k + 2)) in the long layout."""
    values = np.column_stack([arrays["rbp"], arrays["ce"], arrays["mean_p"]])
    return ["rbp"] * len(ks) + ["ce", "mean_p"], list(ks) + [None, None], values


def bootstrap_ci(
    stats: RunData,
    ks: Iterable[int] | None = (1, 10, 100),
    ties: str = "pessimistic",
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    unit: str = "document",
) -> pd.DataFrame:
    """Point estimate, bootstrap standard error and percentile interval per metric and k:
    columns metric, k, estimate, se, estimate_low, estimate_high, n_boot, unit. Intervals for the loss
    follow by the monotone map loss = -log(value) (CE: loss = value)."""
    if not 0 < level < 1:
        raise InvalidArgumentError(f"level must lie in (0, 1), got {level}")
    ks = as_ks(ks, stats.vocab_size)
    point = run_metrics(stats, ks, ties)  # checks `ties` before any resampling
    metric, k, values = _columns(_replicates(stats, ks, ties, n_boot, seed, unit), ks)
    low, high = np.nanquantile(values, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return pd.DataFrame(
        {
            "metric": metric,
            "k": pd.array(k, dtype="Int64"),
            "estimate": point["value"].to_numpy(),
            "se": np.nanstd(values, axis=0, ddof=1),
            "estimate_low": low,
            "estimate_high": high,
            "n_boot": n_boot,
            "unit": unit,
        }
    )
