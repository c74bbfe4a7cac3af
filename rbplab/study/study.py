"""A study: the runs of some model families on some corpora, with their RBP curves precomputed
(no I/O), ready for every table, figure and widget. `rbplab.study.loading` fills one from the
cache; `rbplab.study.synthetic` makes one of made-up models.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rbplab.analysis import metrics
from rbplab.analysis.metrics import RBPCurve
from rbplab.core.errors import InvalidArgumentError, NotFoundError
from rbplab.core.runs import TRAINING_FIELDS, Run, model_of_label
from rbplab.core.stats import TokenStats
from rbplab.store.cache.index import IndexedSummary


def as_list(value: object) -> list | None:
    if value is None:
        return None
    # A single name, path or Corpus object is one item, not an iterable of items.
    return [value] if isinstance(value, (str, Path)) or hasattr(value, "documents") else list(value)


def _training_column(runs: Sequence[Run], name: str):
    values = [getattr(r, name) for r in runs]
    if name == "revision":
        return np.array(values, dtype=object)
    if name == "step":  # an optimiser step is a count: integers, <NA> where unknown
        return pd.array(values, dtype="Int64")
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


@dataclass(eq=False)
class Study:
    """Runs (model x corpus, one or more families) with their RBP curves precomputed."""

    runs: list[Run]
    ties: str = "pessimistic"
    level: float = 0.95
    curves: dict[tuple[str, str, str], RBPCurve] = field(default_factory=dict, repr=False)
    _subsets: dict = field(default_factory=dict, repr=False)
    # Tables the question modules compute once per study (lognormal fits, decompositions), by key.
    memo: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.runs = metrics.as_runs(self.runs)
        if not self.runs:
            raise InvalidArgumentError("a Study needs at least one run (model x corpus)")
        missing: dict[tuple[str, str, str], Any] = {}
        indexed: dict[tuple[str, str, str], Any] = {}
        for run in self.runs:
            key = (run.family, run.model, run.corpus)
            if key not in self.curves and key not in missing and key not in indexed:
                # a run read from the cache index answers RBP_k on its grid without its rank pairs
                (indexed if isinstance(run.stats, IndexedSummary) else missing)[key] = run.stats
        # rbp_curves checks self.ties, once, even when every curve was given
        self.curves.update(zip(missing, metrics.rbp_curves(list(missing.values()), self.ties), strict=True))
        self.curves.update({key: metrics.IndexedRBPCurve(stats, self.ties) for key, stats in indexed.items()})

    # ---- what is in the study -------------------------------------------------------------
    @property
    def families(self) -> list[str]:
        return list(dict.fromkeys(r.family for r in self.runs))

    @property
    def family(self) -> str:
        return " + ".join(self.families)

    @property
    def corpora(self) -> list[str]:
        return list(dict.fromkeys(r.corpus for r in self.runs))

    @property
    def vocab_size(self) -> int:
        """The smallest |V| of the runs: the largest k at which every model can be compared."""
        return min(r.vocab_size for r in self.runs)

    @property
    def models(self) -> pd.DataFrame:
        """family, model, S, vocab_size; one row per model, by family then S."""
        rows = [
            {"family": r.family, "model": r.model, "S": r.S, "vocab_size": r.vocab_size} for r in self.runs
        ]
        return (
            pd.DataFrame(rows)
            .drop_duplicates(["family", "model"])
            .sort_values(["family", "S"], ignore_index=True)
        )

    def stats(self, model: str, corpus: str, family: str | None = None) -> TokenStats:
        """The per-token statistics of one run (read from the cache now when the study holds only
        its summary)."""
        for r in self.runs:
            if r.model == model and r.corpus == corpus and (family is None or r.family == family):
                return r.token_stats()
        raise NotFoundError(
            f"no run for model {model!r} on corpus {corpus!r}; models: {list(self.models['model'])}"
        )

    def subset(
        self, families: str | Iterable[str] | None = None, corpora: str | Iterable[str] | None = None
    ) -> Study:
        """The runs of some families / corpora, sharing the precomputed curves (no recomputation)."""
        fams, corps = as_list(families), as_list(corpora)
        for name, chosen, known in (("family", fams, self.families), ("corpus", corps, self.corpora)):
            unknown = sorted(set(chosen or ()) - set(known))
            if unknown:
                raise InvalidArgumentError(f"unknown {name} {unknown}; this study has {known}")
        key = (tuple(fams or ()), tuple(corps or ()))
        if key not in self._subsets:
            runs = [
                r
                for r in self.runs
                if (fams is None or r.family in fams) and (corps is None or r.corpus in corps)
            ]
            self._subsets[key] = Study(runs, self.ties, self.level, curves=self.curves)
        return self._subsets[key]

    def runs_on(self, corpora: Sequence[str] | None) -> list[Run]:
        """The runs on `corpora` (every run when None)."""
        return self.runs if corpora is None else self.subset(corpora=corpora).runs

    def at_step(self, step: int | None = None) -> Study:
        """The runs at one training step, for the size-only analyses (k-sweeps, emergence,
        lognormal) on a study of checkpoints: `step`, or with None each model's last checkpoint
        in the study (a run without a step counts as final)."""
        if step is None:

            def key(r: Run) -> tuple[str, str, str]:
                return (r.family, model_of_label(r.model, r.revision), r.corpus)

            def position(r: Run) -> float:
                return math.inf if r.step is None else r.step

            last: dict[tuple[str, str, str], float] = {}
            for r in self.runs:
                last[key(r)] = max(last.get(key(r), -math.inf), position(r))
            runs = [r for r in self.runs if position(r) == last[key(r)]]
        else:
            runs = [r for r in self.runs if r.step == step]
            if not runs:
                steps = sorted({r.step for r in self.runs if r.step is not None})
                raise InvalidArgumentError(f"no run at step {step}; this study has steps {steps}")
        return Study(runs, self.ties, self.level, curves=self.curves)

    def check_one_step(self, what: str) -> None:
        """Size-only analyses compare models at one training step: refuse a mix of steps (`what`
        names the analysis in the error)."""
        steps = {r.step for r in self.runs}
        if len(steps) > 1:
            shown = ", ".join("final" if s is None else str(s) for s in sorted(steps, key=lambda s: s or 0))
            raise InvalidArgumentError(
                f"{what} compares model sizes at one training step, and this study holds steps {shown}; "
                "take one with study.at_step() (each model's last) or study.at_step(step)"
            )

    @property
    def has_training(self) -> bool:
        """Whether some run is a training checkpoint (has a revision or a D)."""
        return any(r.revision is not None or r.D is not None for r in self.runs)

    # ---- tables ----------------------------------------------------------------------------
    def points(
        self, ks: Iterable[int] | int, corpora: Sequence[str] | None = None, n_boot: int = 0, seed: int = 0
    ) -> pd.DataFrame:
        """RBP_k per run and k from the cached curves: family, corpus, model, S, k, rbp,
        neg_log_rbp, n_tokens (after S also revision, step, D, C when the study holds
        checkpoints, `has_training`); with n_boot > 0 also the document-bootstrap percentile interval
        of -log RBP_k (neg_log_rbp_low, neg_log_rbp_high; `rbplab.analysis.metrics.bootstrap_ci`).

        Examples
        --------
        >>> from rbplab.study import synthetic_study
        >>> study = synthetic_study(n_tokens=2000)
        >>> points = study.points([1, 10])
        >>> list(points.columns)
        ['family', 'corpus', 'model', 'S', 'k', 'rbp', 'neg_log_rbp', 'n_tokens']
        >>> points[["model", "k", "neg_log_rbp"]].head(2).round(4)
                 model   k  neg_log_rbp
        0  synthetic-0   1       2.3645
        1  synthetic-0  10       0.8416
        """
        ks = metrics.as_ks(ks, self.vocab_size)
        runs = self.runs_on(corpora)
        # One frame from stacked arrays: a slider callback calls this, so no per-run concat.
        rbp = np.concatenate([self.curves[(r.family, r.model, r.corpus)].rbp(ks) for r in runs])
        n = len(ks)
        with np.errstate(divide="ignore"):
            neg_log = -np.log(rbp)
        frame = pd.DataFrame(
            {
                "family": np.repeat([r.family for r in runs], n),
                "corpus": np.repeat([r.corpus for r in runs], n),
                "model": np.repeat([r.model for r in runs], n),
                "S": np.repeat([r.S for r in runs], n),
                "k": np.tile(ks, len(runs)),
                "rbp": rbp,
                "neg_log_rbp": neg_log,
                "n_tokens": np.repeat([r.n_tokens for r in runs], n),
            }
        )
        if self.has_training:  # revision, step, D, C after S, only for studies of checkpoints
            for offset, name in enumerate(TRAINING_FIELDS):
                frame.insert(4 + offset, name, _training_column(runs, name).repeat(n))
        if n_boot > 0:
            lo, hi = [], []
            for r in runs:
                ci = metrics.bootstrap_ci(r.stats, ks, self.ties, n_boot, self.level, seed)
                ci = ci[ci["metric"] == "rbp"]
                with np.errstate(divide="ignore"):  # -log is decreasing: the interval flips
                    lo.append(-np.log(ci["estimate_high"].to_numpy()))
                    hi.append(-np.log(ci["estimate_low"].to_numpy()))
            frame["neg_log_rbp_low"], frame["neg_log_rbp_high"] = np.concatenate(lo), np.concatenate(hi)
        return frame

    def run_table(self) -> pd.DataFrame:
        """Per run: family, corpus, model, S, n_tokens, n_docs, ce, mean_p, rbp_1 (after S also
        revision, step, D, C when the study holds checkpoints, `has_training`)."""
        rows = []
        training = self.has_training
        for r in self.runs:
            rows.append(
                {"family": r.family, "corpus": r.corpus, "model": r.model, "S": r.S}
                | (r.training if training else {})
                | {"n_tokens": r.n_tokens, "n_docs": r.n_docs}
                | {"ce": metrics.cross_entropy(r.stats), "mean_p": metrics.mean_target_probability(r.stats)}
                | {"rbp_1": self.curves[(r.family, r.model, r.corpus)].rbp(1)}
            )
        return pd.DataFrame(rows)
