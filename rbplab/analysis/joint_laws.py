"""The joint laws L(S, D) of a table of checkpoints, per corpus: -log RBP_k at the smallest and the
largest k and CE, each fitted with one bootstrap (`data_scaling.bootstrap_joint`) that the law
table, the frontier comparison and the iso-loss surface all read.

`joint_laws(table, ks)` takes a checkpoint table (`rbplab.study.training.table` or
`rbplab.study.synthetic.synthetic_training_table`); `rbplab.study.training.joint_laws` passes the
study's paired document replicates too, so every replicate resamples checkpoints and documents
together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rbplab.analysis.data_scaling import (
    JointLawFit,
    bootstrap_joint,
    frontier,
    frontier_rows,
    law_rows,
    law_surface,
)

HEADLINE_COLUMNS = (
    "corpus",
    "quantity",
    "alpha",
    "alpha_low",
    "alpha_high",
    "beta",
    "beta_low",
    "beta_high",
    "E",
    "frontier_exponent",
)
# corpus -> {quantity name: (n_replicates, n_checkpoints)} paired replicates, or None
Replicates = Callable[[str], dict[str, np.ndarray]]


@dataclass(frozen=True)
class CorpusLaws:
    """One corpus: the checkpoints used (D > 0), their losses per quantity, the replicates they
    were resampled with (None: checkpoints only), the fits and their bootstrap draws."""

    S: np.ndarray
    D: np.ndarray
    losses: dict[str, np.ndarray]
    replicates: dict[str, np.ndarray] | None
    fits: dict[str, JointLawFit]
    boots: dict[str, pd.DataFrame]


@dataclass(frozen=True)
class JointLaws:
    """Joint laws of one family's checkpoints, per corpus and quantity (``RBP_<k>``, ``CE``)."""

    family: str
    quantities: dict[str, tuple[str, int]]  # name -> (table column, k)
    corpora: dict[str, CorpusLaws]

    @property
    def rbp_names(self) -> list[str]:
        return [name for name in self.quantities if name != "CE"]

    def table(self) -> pd.DataFrame:
        """One row per corpus and quantity: E, A, B, alpha, beta, the frontier exponent and
        their percentile intervals (`data_scaling.law_rows`), with family and corpus."""
        rows = [
            law_rows(laws.fits, laws.boots, laws.losses, replicates=laws.replicates).assign(
                family=self.family, corpus=corpus
            )
            for corpus, laws in self.corpora.items()
        ]
        return pd.concat(rows, ignore_index=True)

    def headline(self, source: str | None = None) -> pd.DataFrame:
        """The law table's headline columns: corpus, quantity, alpha and beta with their intervals,
        E and the frontier exponent (and `source`, when given)."""
        frame = self.table()[list(HEADLINE_COLUMNS)]
        return frame.assign(source=source) if source is not None else frame

    def frontiers(self, reference: str = "CE", source: str | None = None) -> pd.DataFrame:
        """Each quantity's compute-optimal frontier against `reference`'s on every corpus, paired
        over the same replicates (`data_scaling.frontier_rows`); `source` labels the rows."""
        rows = []
        for corpus, laws in self.corpora.items():
            frame = frontier_rows(laws.fits, laws.boots, laws.S, laws.D, reference=reference).assign(
                corpus=corpus
            )
            rows.append(frame.assign(source=source) if source is not None else frame)
        return pd.concat(rows, ignore_index=True)

    def surface(
        self,
        corpus: str | None = None,
        quantity: str | None = None,
        reference: str = "CE",
        n_compute: int = 40,
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The fitted `quantity` (default: the first RBP_k) over the corpus's (S, D) range
        (`data_scaling.law_surface`), and the frontiers of it and of `reference` over that
        range's compute (`data_scaling.frontier`, a `quantity` column)."""
        corpus = next(iter(self.corpora)) if corpus is None else corpus
        quantity = self.rbp_names[0] if quantity is None else quantity
        laws = self.corpora[corpus]
        surface = law_surface(laws.fits[quantity], laws.S, laws.D)
        C = np.geomspace(surface["C"].min(), surface["C"].max(), n_compute)
        frontiers = pd.concat(
            [frontier(laws.fits[name], C).assign(quantity=name) for name in (quantity, reference)],
            ignore_index=True,
        )
        return surface, frontiers


def joint_laws(
    table: pd.DataFrame,
    ks: Iterable[int],
    n_boot: int = 200,
    replicates: Replicates | None = None,
) -> JointLaws:
    """Fit -log RBP_k at the smallest and largest of `ks`, and CE, jointly in S and D on every
    corpus of a checkpoint table (columns family, corpus, k, S, D, neg_log_rbp, ce; rows with D = 0
    have seen no data and are left out). `replicates(corpus)`: paired document replicates per
    quantity, columns following the corpus's rows at one k."""
    ks = sorted(int(k) for k in ks)
    k_low, k_high = ks[0], ks[-1]
    quantities = {f"RBP_{k_low}": ("neg_log_rbp", k_low), f"RBP_{k_high}": ("neg_log_rbp", k_high)}
    quantities["CE"] = ("ce", k_low)
    corpora = {}
    for corpus in table["corpus"].unique():
        parts = {
            name: table[(table["corpus"] == corpus) & (table["k"] == k)]
            for name, (_, k) in quantities.items()
        }
        first = parts[f"RBP_{k_low}"]
        keep = first["D"].to_numpy() > 0  # step 0 has seen no data: no place on a log axis
        losses = {name: parts[name][column].to_numpy()[keep] for name, (column, _) in quantities.items()}
        reps = None
        if replicates is not None:
            reps = {name: r[:, keep] for name, r in replicates(corpus).items()}
        S, D = first["S"].to_numpy()[keep], first["D"].to_numpy()[keep]
        fits, boots = bootstrap_joint(S, D, losses, n_boot=n_boot, replicates=reps)
        corpora[corpus] = CorpusLaws(S, D, losses, reps, fits, boots)
    return JointLaws(str(table["family"].iloc[0]), quantities, corpora)
