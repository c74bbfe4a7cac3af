"""The rules of a cache index row (`INDEX_RULES`, scope `IndexRowCheck`), for
`rbplab.store.cache.index`: a row is derived data, never trusted. A read takes a row only for the
summary the entry's verified manifest records, and only when every relation its numbers must hold
is there; otherwise it reads the summary itself.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from rbplab.core.stats import RUN_TIES, TIES, summary_ks
from rbplab.store.cache.rule import Rule


@dataclass(frozen=True)
class IndexRowCheck:
    """An index row (`rbplab.store.cache.index.IndexRow`) against the entry it would stand for:
    the entry's checked manifest, its |V|, and the lstat of its summary file (None when absent)."""

    row: Any
    manifest: dict
    vocab_size: int
    summary_info: os.stat_result | None


def _index_row_summary(c: IndexRowCheck) -> Iterator[str]:
    listed = c.manifest.get("summary")
    if not isinstance(listed, dict) or listed.get("sha256") != c.row.summary_sha256:
        yield "its index row is stale: it was derived from another summary than the manifest records"
    elif listed.get("bytes") != c.row.summary_bytes:
        yield "its index row gives another size for the summary than the manifest records"


def _index_row_summary_file(c: IndexRowCheck) -> Iterator[str]:
    info = c.summary_info
    if info is None or not stat.S_ISREG(info.st_mode) or info.st_size != c.row.summary_bytes:
        yield "its summary file is not the regular file of the size its index row records"


def _index_row_counts(c: IndexRowCheck) -> Iterator[str]:
    if c.row.n_tokens != c.manifest.get("n_tokens") or c.row.vocab_size != c.vocab_size:
        yield "its index row does not hold the entry's tokens and |V|"


@functools.lru_cache(maxsize=64)
def _summary_grid(vocab_size: int) -> np.ndarray:
    grid = summary_ks(vocab_size)
    grid.flags.writeable = False  # shared by every row of that |V|
    return grid


def _index_row_grid(c: IndexRowCheck) -> Iterator[str]:
    if not np.array_equal(c.row.ks, _summary_grid(c.vocab_size)):
        yield "its index row's thresholds are not the grid of its |V|"
        return
    for ties in TIES:
        if c.row.within[ties].shape != c.row.ks.shape:
            yield f"its index row's {ties} counts are not one per threshold"
            return


def _index_row_within(c: IndexRowCheck) -> Iterator[str]:
    n = c.row.n_tokens
    w = np.stack([c.row.within[ties] for ties in TIES])  # one pass for the three conventions
    for ties, counts, finite in zip(TIES, w, np.isfinite(w).all(axis=1), strict=True):
        if not finite or (len(counts) and (counts.min() < 0 or counts.max() > n)):
            yield f"its index row's {ties} counts lie outside 0..{n}"
            return
    falls = (np.diff(w, axis=1) < 0).any(axis=1)
    if falls.any():
        yield f"its index row's {TIES[int(np.argmax(falls))]} counts fall as k grows"
        return
    for ties in RUN_TIES:  # hits are whole tokens under the 0/1 conventions
        if np.any(c.row.within[ties] != np.round(c.row.within[ties])):
            yield f"its index row's {ties} counts are not whole tokens"
            return


def _index_row_conventions(c: IndexRowCheck) -> Iterator[str]:
    w = c.row.within
    # Within rounding of the expected shares: a tied token counts 0..1 of a hit.
    slack = 1e-9 * max(c.row.n_tokens, 1)
    ordered = np.all(w["pessimistic"] <= w["expected"] + slack) and np.all(
        w["expected"] <= w["optimistic"] + slack
    )
    if not ordered:
        yield "its index row's counts break pessimistic <= expected <= optimistic"
    elif not c.row.has_ties and not (
        np.array_equal(w["pessimistic"], w["optimistic"]) and np.allclose(w["expected"], w["optimistic"])
    ):
        yield "its index row records no tied token, but its tie conventions differ"


def _index_row_totals(c: IndexRowCheck) -> Iterator[str]:
    r, n = c.row, c.row.n_tokens
    sums = np.array([r.nll_sum, r.nll_sq_sum, r.p_sum], dtype=np.float64)
    if not np.all(np.isfinite(sums)) or sums.min() < 0 or r.p_sum > n * (1 + 1e-12) or r.n_docs < 0:
        yield "its index row's totals are impossible (nll, nll², probability or document counts)"
    elif n and r.nll_sq_sum < r.nll_sum**2 / n * (1 - 1e-9):  # Cauchy-Schwarz: sum x² >= (sum x)² / n
        yield "its index row's nll moments are impossible (sum nll² < (sum nll)² / n)"


INDEX_RULES: tuple[Rule, ...] = (
    Rule("index row names the manifest's summary", IndexRowCheck, _index_row_summary, final=True),
    Rule("index row's summary file is in place", IndexRowCheck, _index_row_summary_file, final=True),
    Rule("index row holds the entry's tokens and |V|", IndexRowCheck, _index_row_counts, final=True),
    Rule("index row's grid is that of |V|", IndexRowCheck, _index_row_grid, final=True),
    Rule(
        "index row's counts lie in range and never fall with k", IndexRowCheck, _index_row_within, final=True
    ),
    Rule("index row's counts follow the tie conventions", IndexRowCheck, _index_row_conventions, final=True),
    Rule("index row's totals are possible", IndexRowCheck, _index_row_totals, final=True),
)
