"""A run (one model on one corpus, with S, D and C) and the training compute C ~= 6 S D.

Training compute: C ~= 6 S D floating-point operations (Kaplan et al. 2020), the one place it
is written. S: non-embedding parameters; D: tokens seen. Works on numbers and numpy arrays.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

import numpy as np
import pandas as pd

from rbplab.core.errors import InvalidArgumentError, InvalidTypeError
from rbplab.core.stats import EntrySummary, TokenStats, summarize

# Forward (2) and backward (4) multiply-adds per parameter and token.
FLOPS_PER_PARAMETER_TOKEN = 6.0

Number = TypeVar("Number")


def training_compute(S: Number, D: Number) -> Number:
    """C = 6 S D."""
    return FLOPS_PER_PARAMETER_TOKEN * S * D  # type: ignore[operator]


def tokens_for_compute(C: Number, S: Number) -> Number:
    """D = C / (6 S): the tokens a model of size S sees for compute C."""
    return C / (FLOPS_PER_PARAMETER_TOKEN * S)  # type: ignore[operator]


def run_label(model: str, revision: str | None) -> str:
    """The name a run is reported under: the model, or ``model@revision`` for a checkpoint."""
    return f"{model}@{revision}" if revision else model


def model_of_label(label: str, revision: str | None) -> str:
    """The model a run label names (`run_label` undone): `label` without its ``@revision``."""
    suffix = f"@{revision}"
    return label[: -len(suffix)] if isinstance(revision, str) and label.endswith(suffix) else label


@dataclass(frozen=True, eq=False)
class Run:
    """One model evaluated on one corpus; S is the non-embedding parameter count.

    `stats` is the run's per-token statistics (`TokenStats`) or, for a run read from the cache,
    only their summary (`EntrySummary`): every analysis reads `entry_summary`, and `token_stats()`
    reads tokens only when asked. A training checkpoint also carries its revision, its step, the
    tokens it had seen D and its compute C ~= 6 S D (from the cache manifest's ``training`` block
    or the checkpoint schedule); None for a final model or where the schedule is unknown."""

    family: str
    model: str
    corpus: str
    S: float
    stats: TokenStats | EntrySummary
    revision: str | None = None
    step: int | None = None
    D: float | None = None
    C: float | None = None

    @cached_property
    def entry_summary(self) -> EntrySummary:
        """The run's sufficient statistics (computed on first use when the run holds tokens)."""
        return self.stats if isinstance(self.stats, EntrySummary) else summarize(self.stats)

    def token_stats(self) -> TokenStats:
        """The per-token statistics: held in memory, or read from the cache now."""
        return self.stats if isinstance(self.stats, TokenStats) else self.stats.token_stats()

    @property
    def vocab_size(self) -> int:
        return self.stats.vocab_size

    @property
    def n_tokens(self) -> int:
        return len(self.stats) if isinstance(self.stats, TokenStats) else self.stats.n_tokens

    @property
    def n_docs(self) -> int:
        return self.stats.n_docs

    @property
    def training(self) -> dict:
        """revision, step, D, C (None where unknown)."""
        return {"revision": self.revision, "step": self.step, "D": self.D, "C": self.C}


TRAINING_FIELDS = ("revision", "step", "D", "C")


RunsLike = Iterable[Run] | pd.DataFrame | Mapping[str, tuple[float, TokenStats]]


def as_runs(runs: RunsLike) -> list[Run]:
    """Accepts Run objects, a DataFrame with columns family, model, corpus, S, stats (and optionally
    revision, step, D, C), or a mapping model -> (S, TokenStats) (family "default", corpus "default")."""
    if isinstance(runs, pd.DataFrame):
        missing = {"family", "model", "corpus", "S", "stats"} - set(runs.columns)
        if missing:
            raise InvalidArgumentError(
                f"runs frame lacks {sorted(missing)}; needs family, model, corpus, S, stats"
            )
        present = [f for f in TRAINING_FIELDS if f in runs.columns]
        out = [
            Run(
                str(r["family"]),
                str(r["model"]),
                str(r["corpus"]),
                float(r["S"]),
                r["stats"],
                **{f: None if pd.isna(r[f]) else r[f] for f in present},
            )
            for r in runs.to_dict("records")
        ]
    elif isinstance(runs, Mapping):
        out = [Run("default", str(m), "default", float(s), st) for m, (s, st) in runs.items()]
    else:
        out = list(runs)
    for run in out:
        if not isinstance(run, Run) or not isinstance(run.stats, (TokenStats, EntrySummary)):
            raise InvalidTypeError(
                f"expected Run(family, model, corpus, S, stats: TokenStats or EntrySummary), got {run!r}"
            )
        if not np.isfinite(run.S) or run.S <= 0:
            raise InvalidArgumentError(f"model {run.model!r}: S must be a positive number, got {run.S}")
    keys = [(r.family, r.model, r.corpus) for r in out]
    if len(set(keys)) != len(keys):
        raise InvalidArgumentError("each (family, model, corpus) must appear once in runs")
    return out
