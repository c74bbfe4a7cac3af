"""Per-token statistics: the contract between rank extraction and analysis.

Extraction writes one row per scored token; every analysis function reads a
`TokenStats`. Keeping both tie counts (rather than one rank) lets analysis report
the paper's pessimistic rank (eq. 3), the optimistic rank (ties broken in the
target's favour, as `(logits > logits[target]).sum() + 1` computes), or the
expectation under random tie-breaking, without re-running a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import pandas as pd

from rbplab.core.errors import InvalidArgumentError

COLUMNS = ("doc", "position", "n_greater", "n_equal", "nll")
# The rank conventions for tied logits (see `TokenStats.rank`); every analysis takes `ties=`.
Ties = Literal["pessimistic", "optimistic", "expected"]
TIES: tuple[str, ...] = get_args(Ties)


def check_ties(ties: str) -> str:
    """`ties` itself if it names a tie convention; a one-line ValueError otherwise."""
    if ties not in TIES:
        raise InvalidArgumentError(f"ties must be one of {TIES}, got {ties!r}")
    return ties


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
        if n and (self.n_greater.min() < 0 or (self.n_greater + self.n_equal).max() > self.vocab_size):
            raise InvalidArgumentError(f"ranks must lie in [1, vocab_size={self.vocab_size}]")

    def __len__(self) -> int:
        return len(self.n_greater)

    @property
    def n_docs(self) -> int:
        return int(self.doc.max()) + 1 if len(self) else 0

    def rank(self, ties: Ties = "pessimistic") -> np.ndarray:
        """Rank of the target: R = n_greater + n_equal (pessimistic, the paper's definition),
        n_greater + 1 (optimistic: ties in the target's favour), or the mean of the two (expected
        rank under uniform random tie-breaking; may be a half-integer)."""
        if ties == "pessimistic":
            return self.n_greater + self.n_equal
        if ties == "optimistic":
            return self.n_greater + 1
        check_ties(ties)
        return self.n_greater + (self.n_equal + 1) / 2.0

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
