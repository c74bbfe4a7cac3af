"""A study: families x corpora of cached rank statistics, ready for analysis and widgets.

`load_study` reads one summary per (model, corpus) from the cache (`rbplab.core.summary`: a few
hundred kilobytes whatever the number of tokens; a cache hit runs no model and reads no token) and
`Study` precomputes each run's RBP curve, so RBP_k at any k is an O(1) lookup and a slider callback
only refits a handful of points. Tokens are read only when asked for (`Study.stats`). All tables
come out tidy, in the column conventions of `rbplab.viz.plots`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rbplab.analysis import (
    bootstrap,
    decomposition,
    decomposition_bootstrap,
    fit,
    joint_laws,
    ksweep,
    lognormal,
    lognormal_bootstrap,
    lognormal_theory,
    metrics,
)
from rbplab.analysis import emergence as _emergence
from rbplab.analysis.metrics import RBPCurve
from rbplab.core.errors import InvalidArgumentError, NotFoundError
from rbplab.core.runs import TRAINING_FIELDS, Run, model_of_label
from rbplab.core.stats import TokenStats, check_ties

BAND_POINTS = 40
# Metrics `Study.prediction_audit` and `Study.decomposition_fits` know besides "rbp" (per k).
RUN_METRICS = ("ce", *decomposition.DECOMPOSITION_METRICS)


def as_list(value: object) -> list | None:
    if value is None:
        return None
    # A single name, path or Corpus object is one item, not an iterable of items.
    return [value] if isinstance(value, (str, Path)) or hasattr(value, "documents") else list(value)


def _size_law_groups(points: pd.DataFrame) -> list[str]:
    """Groups of one size law: a study of checkpoints has one per training step."""
    return ["family", "corpus", "k", *(["step"] if "step" in points.columns else [])]


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
    _cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.runs = metrics.as_runs(self.runs)
        if not self.runs:
            raise InvalidArgumentError("a Study needs at least one run (model x corpus)")
        missing: dict[tuple[str, str, str], Any] = {}
        for run in self.runs:
            key = (run.family, run.model, run.corpus)
            if key not in self.curves and key not in missing:
                missing[key] = run.stats
        # rbp_curves checks self.ties, once, even when every curve was given
        self.curves.update(zip(missing, metrics.rbp_curves(list(missing.values()), self.ties), strict=True))

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

    def _runs(self, corpora: Sequence[str] | None) -> list[Run]:
        return self.runs if corpora is None else self.subset(corpora=corpora).runs

    # ---- tables ----------------------------------------------------------------------------
    def points(
        self, ks: Iterable[int] | int, corpora: Sequence[str] | None = None, n_boot: int = 0, seed: int = 0
    ) -> pd.DataFrame:
        """RBP_k per run and k from the cached curves: family, corpus, model, S, k, rbp,
        neg_log_rbp, n_tokens (after S also revision, step, D, C when the study holds
        checkpoints, `has_training`); with n_boot > 0 also the document-bootstrap percentile interval
        of -log RBP_k (neg_log_rbp_low, neg_log_rbp_high; `rbplab.analysis.bootstrap.bootstrap_ci`).

        Examples
        --------
        >>> from rbplab.study.synthetic import synthetic_study
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
        runs = self._runs(corpora)
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
                ci = bootstrap.bootstrap_ci(r.stats, ks, self.ties, n_boot, self.level, seed)
                ci = ci[ci["metric"] == "rbp"]
                with np.errstate(divide="ignore"):  # -log is decreasing: the interval flips
                    lo.append(-np.log(ci["estimate_high"].to_numpy()))
                    hi.append(-np.log(ci["estimate_low"].to_numpy()))
            frame["neg_log_rbp_low"], frame["neg_log_rbp_high"] = np.concatenate(lo), np.concatenate(hi)
        return frame

    def fits(
        self,
        ks: Iterable[int] | int,
        corpora: Sequence[str] | None = None,
        points: pd.DataFrame | None = None,
    ) -> pd.DataFrame:
        """Power law -log RBP_k = A S^-alpha per family, corpus and k (`rbplab.analysis.fit.scaling_fits`):
        alpha, prefactor, r2, alpha_se, alpha_low/high, leave-one-out range, n_models, note.
        In a study of checkpoints the law is fitted per training step (a `step` column), never
        across them. `points` (from `points(ks, corpora)`) saves recomputing them.

        Examples
        --------
        >>> from rbplab.study.synthetic import synthetic_study
        >>> study = synthetic_study(n_tokens=2000)
        >>> fits = study.fits([1, 10])
        >>> fits[["corpus", "k", "alpha", "alpha_low", "alpha_high", "r2"]].round(3)
                corpus   k  alpha  alpha_low  alpha_high     r2
        0  synthetic-a   1  0.080      0.068       0.091  0.989
        1  synthetic-a  10  0.136      0.122       0.151  0.994
        2  synthetic-b   1  0.069      0.061       0.077  0.993
        3  synthetic-b  10  0.128      0.108       0.149  0.987
        """
        points = self.points(ks, corpora) if points is None else points
        table = points.assign(loss=points["neg_log_rbp"])
        return fit.scaling_fits(table, y="loss", by=_size_law_groups(points), level=self.level)

    def bands(
        self,
        ks: Iterable[int] | int,
        corpora: Sequence[str] | None = None,
        points: pd.DataFrame | None = None,
        kind: str = "confidence",
    ) -> pd.DataFrame:
        """The fitted line and its band on a grid of S spanning each family: family, corpus,
        k, S, fit, fit_low, fit_high on the -log RBP_k scale. kind="confidence": where the law's line
        lies (t interval of the OLS mean in log space); kind="prediction": where a new
        model of size S would fall (adds the scatter of models around the line). Per training
        step (a `step` column) in a study of checkpoints, like `fits`.

        Examples
        --------
        >>> from rbplab.study.synthetic import synthetic_study
        >>> study = synthetic_study(n_tokens=2000)
        >>> bands = study.bands(1)
        >>> list(bands.columns)
        ['family', 'corpus', 'k', 'S', 'fit', 'fit_low', 'fit_high']
        >>> bool((bands["fit_low"] <= bands["fit"]).all() and (bands["fit"] <= bands["fit_high"]).all())
        True
        """
        if kind not in ("confidence", "prediction"):
            raise InvalidArgumentError(f"kind must be 'confidence' or 'prediction', got {kind!r}")
        points = self.points(ks, corpora) if points is None else points
        rows = []
        by = _size_law_groups(points)
        for key, frame in points.groupby(by, sort=False, dropna=False):
            S, y = frame["S"].to_numpy(np.float64), frame["neg_log_rbp"].to_numpy(np.float64)
            try:
                pl = fit.fit_power_law(S, y, self.level)
            except ValueError:
                continue  # too few sizes or RBP_k = 1: no line to draw (fits() says why)
            grid = np.geomspace(S.min(), S.max(), BAND_POINTS)
            lo, hi = pl.prediction_interval(grid) if kind == "prediction" else pl.confidence_interval(grid)
            labels = dict(zip(by, key, strict=True))
            rows.append(
                pd.DataFrame({**labels, "S": grid, "fit": pl.predict(grid), "fit_low": lo, "fit_high": hi})
            )
        cols = [*by, "S", "fit", "fit_low", "fit_high"]
        return pd.concat(rows, ignore_index=True)[cols] if rows else pd.DataFrame(columns=cols)

    def fit_table(
        self, ks: Iterable[int] | int = (1, 10, 100), corpora: Sequence[str] | None = None
    ) -> pd.DataFrame:
        """The headline table: one row per family, corpus and k with alpha (and CI), R²."""
        cols = ["family", "corpus", "k", "alpha", "alpha_low", "alpha_high", "r2", "n_models", "note"]
        return self.fits(ks, corpora)[cols]

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

    # ---- sharing ------------------------------------------------------------------------------
    def to_markdown(
        self, ks: Iterable[int] | int = (1, 10, 100), table: pd.DataFrame | None = None, digits: int = 3
    ) -> str:
        """The fit table at `ks` (or any `table` of this study's) as Markdown, each estimate with
        its interval in one cell ("0.036 ± 0.006"; a bootstrap interval as "0.036 [0.030, 0.043]").

        Examples
        --------
        >>> from rbplab.study.synthetic import synthetic_study
        >>> study = synthetic_study(n_tokens=2000)
        >>> print(study.to_markdown([1]))
        | family | corpus | k | α | R² | models |
        |---|---|---:|---:|---:|---:|
        | synthetic | synthetic-a | 1 | 0.080 ± 0.012 | 0.989 | 6 |
        | synthetic | synthetic-b | 1 | 0.069 ± 0.008 | 0.993 | 6 |
        <BLANKLINE>
        """
        from rbplab.study.tables import to_markdown

        return to_markdown(self.fit_table(ks) if table is None else table, digits)

    def to_latex(
        self,
        ks: Iterable[int] | int = (1, 10, 100),
        table: pd.DataFrame | None = None,
        digits: int = 3,
        *,
        caption: str | None = None,
        label: str | None = None,
    ) -> str:
        """The fit table at `ks` (or any `table`) as a booktabs LaTeX table with $\\pm$ intervals."""
        from rbplab.study.tables import to_latex

        return to_latex(self.fit_table(ks) if table is None else table, digits, caption=caption, label=label)

    def save(self, path: str | Path, ks: Iterable[int] | int = (1, 10, 100), **options: Any) -> Path:
        """Write this study's results file (grid, settings, package versions, runs with their cache
        keys, the fits at `ks`; `rbplab.study.results.save_results` takes the `options`), which
        `rbplab.load_results` reads back."""
        from rbplab.study.results import save_results

        return save_results(self, path, ks=[int(k) for k in np.atleast_1d(ks)], **options)

    def training_table(self, ks: Iterable[int] | int = (1, 10, 100)) -> pd.DataFrame:
        """The checkpoints of the study, tidy for `rbplab.analysis.data_scaling`: one row per run
        with a known D and per k: family, corpus, model (without its ``@revision``), S, revision,
        step, D, C, k, neg_log_rbp, ce. E.g. ``data_scaling.data_fits(t, y="neg_log_rbp")`` or
        ``joint_fits(t, y="ce", by=["family", "corpus", "k"])``. Empty (same columns) when no
        run has a D."""
        columns = [
            "family", "corpus", "model", "S", "revision", "step", "D", "C", "k", "neg_log_rbp", "ce"
        ]  # fmt: skip
        runs = [r for r in self.runs if r.D is not None]
        if not runs:
            return pd.DataFrame(columns=columns)
        ks = metrics.as_ks(ks, self.vocab_size)
        sub = Study(runs, self.ties, self.level, curves=self.curves)
        frame = sub.points(ks)
        ce = {(r.family, r.model, r.corpus): metrics.cross_entropy(r.stats) for r in runs}
        frame["ce"] = [ce[key] for key in zip(frame["family"], frame["model"], frame["corpus"], strict=True)]
        frame["model"] = [
            model_of_label(m, rev) for m, rev in zip(frame["model"], frame["revision"], strict=True)
        ]
        return frame[columns]

    def training_replicates(
        self, corpus: str, ks: Iterable[int] | int, n_rep: int = 200, seed: int = 0
    ) -> dict[object, np.ndarray]:
        """Paired document-bootstrap replicates of the checkpoints' losses on one corpus, for
        `data_scaling.bootstrap_joint` / `joint_law_table` / `compare_frontiers` (``replicates``):
        {k: -log RBP_k, "ce": CE}, each an array (n_rep, n_checkpoints) whose columns follow the
        rows of `training_table` for that corpus at one k. Every checkpoint is re-evaluated on the
        same document resample, so the errors of sizes and steps stay paired."""
        runs = [r for r in self.runs if r.D is not None and r.corpus == corpus]
        if not runs:
            raise InvalidArgumentError(
                f"no checkpoint with a known D on corpus {corpus!r}; corpora: {self.corpora}"
            )
        ks = metrics.as_ks(ks, self.vocab_size)
        n_docs = max(r.n_docs for r in runs)
        docs = [bootstrap.doc_stats(r.stats, ks, self.ties, n_docs) for r in runs]
        reps = bootstrap.replicate_arrays(docs, n_rep, seed)
        out: dict[object, np.ndarray] = {}
        with np.errstate(divide="ignore"):
            for j, k in enumerate(ks):
                out[int(k)] = -np.log(np.stack([r["rbp"][:, j] for r in reps], axis=1))
        out["ce"] = np.stack([r["ce"] for r in reps], axis=1)
        return out

    def joint_laws(self, ks: Iterable[int] = (1, 10, 100), n_boot: int = 200) -> joint_laws.JointLaws:
        """The joint laws L(S, D) of this study's checkpoints (`rbplab.analysis.joint_laws`):
        -log RBP_k at the smallest and largest of `ks` and CE per corpus, each bootstrap
        resampling the checkpoints and, paired across all of them, the corpus's documents.
        `.table()`, `.frontiers(reference="CE")` and `.surface(corpus)` read the same fits."""
        ks = sorted(int(k) for k in ks)
        k_low, k_high = ks[0], ks[-1]

        def replicates(corpus: str) -> dict[str, np.ndarray]:
            reps = self.training_replicates(corpus, [k_low, k_high], n_rep=n_boot)
            return {f"RBP_{k_low}": reps[k_low], f"RBP_{k_high}": reps[k_high], "CE": reps["ce"]}

        return joint_laws.joint_laws(self.training_table(ks), ks, n_boot=n_boot, replicates=replicates)

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

    def _one_step(self, what: str) -> None:
        """Size-only analyses compare models at one training step: refuse a mix of steps."""
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

    def curve_frame(
        self, ks: Iterable[int] | None = None, corpora: Sequence[str] | None = None
    ) -> pd.DataFrame:
        """RBP_k against k for every run (for `plots.rbp_curves`); ks default log-spaced to |V|."""
        ks = metrics.log_spaced_ks(self.vocab_size, 60) if ks is None else ks
        return self.points(ks, corpora)

    def ksweep(self, ks: Iterable[int] | None = None, n_boot: int = 0, seed: int = 0) -> pd.DataFrame:
        """alpha(k), R²(k) over k (`rbplab.analysis.ksweep.k_sweep`), regimes labelled.

        Examples
        --------
        >>> from rbplab.study.synthetic import synthetic_study
        >>> sweep = synthetic_study(n_tokens=2000).ksweep()
        >>> sweep[["corpus", "k", "regime", "alpha", "r2"]].head(3).round(3)
                corpus  k    regime  alpha     r2
        0  synthetic-a  1       k=1  0.080  0.989
        1  synthetic-a  2  moderate  0.088  0.989
        2  synthetic-a  3  moderate  0.100  0.995
        """
        self._one_step("the k-sweep")
        return ksweep.k_sweep(self.runs, ks=ks, ties=self.ties, level=self.level, n_boot=n_boot, seed=seed)

    def bootstrap(self, ks: Iterable[int] = (1, 10, 100), n_boot: int = 200, seed: int = 0) -> pd.DataFrame:
        """Document-bootstrap uncertainty of alpha and R² (`rbplab.analysis.fit.bootstrap_fits`)."""
        self._one_step("the bootstrap of the size law")
        return fit.bootstrap_fits(
            self.runs, ks=ks, ties=self.ties, n_boot=n_boot, seed=seed, level=self.level
        )

    def extrapolation(self, ks: Iterable[int] = (1, 10, 100), n_holdout: int = 1) -> pd.DataFrame:
        """Fit all but the largest model(s), predict them (`rbplab.analysis.fit.extrapolation_check`)."""
        self._one_step("extrapolation")
        table = self.points(ks).assign(loss=lambda f: f["neg_log_rbp"], metric="rbp")
        return fit.extrapolation_check(
            table, n_holdout=n_holdout, by=["family", "corpus", "k"], level=self.level
        )

    # ---- cross-entropy decomposition and prediction audit --------------------------------------
    def decomposition(self, ties: str | None = None) -> pd.DataFrame:
        """Per run: CE = EE + SA - Conf (`rbplab.analysis.decomposition`) and MRR: family, corpus,
        model, S (and revision, step, D, C for checkpoints), ties, n_tokens, n_rbe (RBE values
        observed: SA and Conf grow with them, so compare those at equal n_tokens), ce, ee,
        ee_mm (Miller-Madow), sa, conf, mrr, residual (ce - (ee + sa - conf), ~1e-15). `ties`
        defaults to the study's convention. Computed once per convention, then cached."""
        ties = check_ties(self.ties if ties is None else ties)
        key = ("decomposition", ties)
        if key not in self._cache:
            training = self.has_training
            rows = []
            for r in self.runs:
                d = decomposition.decomposition_row(r.entry_summary, ties)
                rows.append(
                    {"family": r.family, "corpus": r.corpus, "model": r.model, "S": r.S}
                    | (r.training if training else {})
                    | {"ties": ties, "n_tokens": d["n_tokens"], "n_rbe": d["n_rbe"], "ce": d["ce"]}
                    | {m: d[m] for m in ("ee", "ee_mm", "sa", "conf", "mrr")}
                    | {"residual": d["ce"] - (d["ee"] + d["sa"] - d["conf"])}
                )
            self._cache[key] = pd.DataFrame(rows)
        return self._cache[key].copy()

    def metric_table(
        self, ks: Iterable[int] | int = (1, 10, 100), metrics: Iterable[str] = ("rbp", "ce", "ee")
    ) -> pd.DataFrame:
        """Long table of per-run losses for the fits: family, corpus, model, S (and revision,
        step, D, C for checkpoints), metric, k (<NA> except for rbp), value, loss (-log RBP_k,
        CE, EE, EE_MM, SA, Conf, or -log MRR), n_tokens.

        Examples
        --------
        >>> from rbplab.study.synthetic import synthetic_study
        >>> study = synthetic_study(n_tokens=2000)
        >>> table = study.metric_table([1])
        >>> sorted(table["metric"].unique()), len(table)
        (['ce', 'ee', 'rbp'], 36)
        """
        metrics = list(metrics)
        unknown = sorted(set(metrics) - {"rbp", *RUN_METRICS})
        if unknown:
            raise InvalidArgumentError(f"unknown metrics {unknown}; choose from {['rbp', *RUN_METRICS]}")
        ident = ["family", "corpus", "model", "S", *(TRAINING_FIELDS if self.has_training else ())]
        frames = []
        if "rbp" in metrics:
            pts = self.points(ks)
            frames.append(
                pts[[*ident, "k", "n_tokens"]].assign(metric="rbp", value=pts["rbp"], loss=pts["neg_log_rbp"])
            )
        others = [m for m in metrics if m != "rbp"]
        if others:
            dec = self.decomposition()
            long = dec.melt(id_vars=[*ident, "n_tokens"], value_vars=others, var_name="metric")
            long["loss"] = np.where(long["metric"] == "mrr", -np.log(long["value"]), long["value"])
            frames.append(long.assign(k=pd.array([pd.NA] * len(long), dtype="Int64")))
        out = pd.concat(frames, ignore_index=True)
        out["k"] = out["k"].astype("Int64")
        return out[[*ident, "metric", "k", "value", "loss", "n_tokens"]]

    def decomposition_fits(self, metrics: Iterable[str] = RUN_METRICS) -> pd.DataFrame:
        """Power laws of CE, EE, SA, Conf (and MRR as -log MRR) against S per family and corpus
        (per training step for checkpoints), by `rbplab.analysis.fit.scaling_fits`. A term that
        is not positive for every model (Conf can be) has no exponent, and `note` says why."""
        table = self.metric_table(metrics=[m for m in metrics if m != "rbp"])
        by = ["family", "corpus", "metric", *(["step"] if "step" in table.columns else [])]
        return fit.scaling_fits(table.drop(columns="k"), y="loss", by=by, level=self.level)

    def decomposition_bootstrap(self, n_boot: int = 200, seed: int = 0) -> pd.DataFrame:
        """Document-bootstrap intervals of the exponents of EE, EE_MM, SA, Conf and -log MRR
        against S per family and corpus, every model of a corpus on the same resamples
        (`rbplab.analysis.decomposition_bootstrap.bootstrap_decomposition_fits`). Needs each
        run's tokens: a study read from the cache reads them now (one pass per run)."""
        self._one_step("the bootstrap of the decomposition")
        stats = [r.token_stats() for r in self.runs]
        return decomposition_bootstrap.bootstrap_decomposition_fits(
            self.runs, stats, ties=self.ties, n_boot=n_boot, seed=seed, level=self.level
        )

    def prediction_audit(
        self,
        ks: Iterable[int] | int = (1, 10, 100),
        n_holdouts: Iterable[int] = (1, 2),
        metrics: Iterable[str] = ("rbp", "ce", "ee"),
        along: str = "S",
    ) -> pd.DataFrame:
        """Does the law predict the next model (`rbplab.analysis.fit.prediction_audit`)? Per family,
        corpus, metric and k: fit on all but the n largest sizes (each n of `n_holdouts`) and
        predict the held-out -log RBP_k, CE, EE... with a prediction interval at the study's
        level; per training step in a study of checkpoints. along="D": per model of a checkpoint
        study, fit against the tokens seen D on the earliest checkpoints and predict the latest.
        Columns: the group (family, corpus, metric, k [, step]; along D: family, model, corpus,
        metric, k), n_holdout, held_out (the model, or along D the checkpoint's revision), S or D,
        n_fit, alpha_fit, r2_fit, loss_observed, loss_predicted(_low/_high), log_error =
        log(observed / predicted), interval_units (the error in half-widths of the interval),
        covered."""
        if along not in ("S", "D"):
            raise InvalidArgumentError(f"along must be 'S' or 'D', got {along!r}")
        table = self.metric_table(ks, metrics)
        if along == "S":
            by = ["family", "corpus", "metric", "k", *(["step"] if "step" in table.columns else [])]
            label = "model"
        else:
            if "D" not in table.columns or table["D"].isna().all():
                raise InvalidArgumentError(
                    "along='D' needs checkpoints with a known D (a study of training revisions)"
                )
            table = table[table["D"].notna()].copy()
            # One law per model along its checkpoints; a held-out row names the checkpoint's revision.
            revisions = table["revision"].astype(str)
            table["model"] = [model_of_label(m, r) for m, r in zip(table["model"], revisions, strict=True)]
            table["revision"] = revisions
            by, label = ["family", "model", "corpus", "metric", "k"], "revision"
        audit = fit.prediction_audit(
            table, n_holdouts, y="loss", x=along, by=by, level=self.level, label=label
        )
        return audit.rename(columns={"x": along})

    def emergence(
        self,
        ks: Iterable[int] | int,
        ns: Iterable[int] | int,
        corpora: Sequence[str] | None = None,
        n_boot: int = 0,
    ) -> pd.DataFrame:
        """Sequence success per run, k and N (`rbplab.analysis.emergence.sequence_table`) with the
        columns `rbplab.viz.plots` draws: p_emp (fraction of N-token windows all in the top k),
        p_pred = RBP_k^N, p_fit = exp(-C N S^-alpha) from the RBP_k power law (its alpha and
        prefactor C, so the law can be drawn beyond the measured sizes), and the
        linearised coordinates x = N S^-alpha, neg_log_p_emp, neg_log_p_pred; the ratios
        against RBP_k^N and the two matched baselines (ratio, ratio_position, ratio_doc), with
        document-bootstrap intervals when n_boot > 0 (p_emp_low/high, ratio*_low/high).

        Examples
        --------
        >>> from rbplab.study.synthetic import synthetic_study
        >>> study = synthetic_study(n_tokens=2000)
        >>> em = study.emergence([10], [1, 10])
        >>> em[["model", "corpus", "N", "p_emp", "p_pred"]].head(2).round(4)
                 model       corpus   N  p_emp  p_pred
        0  synthetic-0  synthetic-a   1  0.431  0.4310
        1  synthetic-0  synthetic-a  10  0.000  0.0002
        """
        self._one_step("emergence")
        ks = metrics.as_ks(ks, self.vocab_size)
        ns = np.atleast_1d(np.asarray(ns, dtype=np.int64))
        runs = self._runs(corpora)
        table = _emergence.sequence_table(runs, ns=ns, ks=ks, ties=self.ties, n_boot=n_boot, level=self.level)
        table = table.rename(
            columns={
                "p_empirical": "p_emp",
                "p_predicted": "p_pred",
                "p_empirical_low": "p_emp_low",
                "p_empirical_high": "p_emp_high",
            }
        )
        fits = self.fits(ks, corpora)
        fits = fits[["family", "corpus", "k", "alpha", "prefactor"]]
        table = table.merge(fits, on=["family", "corpus", "k"], how="left")
        with np.errstate(divide="ignore", invalid="ignore"):
            table["p_fit"] = np.exp(
                -_emergence.sequence_law(table["prefactor"], table["alpha"], table["N"], table["S"])
            )
            table["x"] = table["N"] * table["S"] ** -table["alpha"]
            table["neg_log_p_emp"] = -np.log(table["p_emp"])
            table["neg_log_p_pred"] = -np.log(table["p_pred"])
        return table

    def emergence_fits(
        self, ks: Iterable[int] = _emergence.DEFAULT_KS, ns: Iterable[int] = _emergence.DEFAULT_NS
    ) -> pd.DataFrame:
        """Fits of -log p_{N,k} against S per N, and the joint law C N S^-alpha
        (`rbplab.analysis.emergence.sequence_fits`)."""
        self._one_step("emergence")
        table = _emergence.sequence_table(
            self.runs, ns=ns, ks=metrics.as_ks(ks, self.vocab_size), ties=self.ties
        )
        return _emergence.sequence_fits(table, level=self.level)

    # ---- lognormal theory (paper section 5.2, appendix B) ------------------------------------------
    def lognormal(self) -> pd.DataFrame:
        """Per run: fitted mu, sigma, mu/sigma, likelihood ratios against the power law and
        log-logistic, measured CE and -log RBP_1, appendix-B predictions
        (`rbplab.analysis.lognormal_theory.lognormal_table`). Computed once, then cached.

        Examples
        --------
        >>> from rbplab.study.synthetic import synthetic_study
        >>> study = synthetic_study(n_tokens=2000)
        >>> study.lognormal()[["model", "corpus", "mu", "sigma"]].head(2).round(3)
                 model       corpus     mu  sigma
        0  synthetic-0  synthetic-a  2.548  1.979
        1  synthetic-1  synthetic-a  2.272  1.938
        """
        if "lognormal" not in self._cache:
            self._cache["lognormal"] = lognormal_theory.lognormal_table(self.runs, ties=self.ties)
        return self._cache["lognormal"]

    def lognormal_intervals(self, n_boot: int = 200, seed: int = 0) -> pd.DataFrame:
        """Per run: mu, sigma and mu/sigma of the fitted lognormal with document-bootstrap intervals
        at the study's level (`rbplab.analysis.lognormal_bootstrap`: replicates fitted on the
        summary's k grid, their spread added to the exact fit's estimate)."""
        key = ("lognormal_intervals", n_boot, seed)
        if key not in self._cache:
            self._cache[key] = lognormal_bootstrap.lognormal_intervals(
                self.runs, self.ties, self.level, n_boot, seed
            )
        return self._cache[key]

    def lognormal_scaling(self) -> pd.DataFrame:
        """How mu, sigma and mu/sigma scale with S (`rbplab.analysis.lognormal_theory.parameter_scaling`)."""
        self._one_step("lognormal scaling")
        return lognormal_theory.parameter_scaling(self.lognormal())

    def rank_pmf(self, corpus: str, n_bins: int = 70) -> pd.DataFrame:
        """Empirical rank frequencies and the fitted lognormal's, per model of `corpus`, in
        log-spaced rank bins (exact for small ranks) divided by the bin width, so the curve is
        a per-rank frequency that a log-log plot of |V| ranks can draw cheaply."""
        # The full table's fit when it exists; otherwise only the lognormal fit of each run of this
        # corpus (the same fit, without the table's comparisons: a dropdown change stays quick).
        table = self._cache.get("lognormal")
        frames = []
        for r in self.subset(corpora=corpus).runs:
            if table is not None:
                row = table[
                    (table["family"] == r.family) & (table["model"] == r.model) & (table["corpus"] == corpus)
                ]
                mu, sigma = float(row["mu"].iloc[0]), float(row["sigma"].iloc[0])
            else:
                key = ("lognormal_fit", r.family, r.model, r.corpus)
                if key not in self._cache:
                    params = lognormal.fit_lognormal(metrics.rank_histogram(r.stats, self.ties)).params
                    self._cache[key] = (params["mu"], params["sigma"])
                mu, sigma = self._cache[key]
            curve = self.curves[(r.family, r.model, r.corpus)]
            vocab = curve.vocab_size
            edges = np.unique(np.round(np.geomspace(1, vocab + 1, n_bins)).astype(np.int64))
            cum_emp = curve.cumulative / curve.n_tokens  # cum_emp[j] = Pr(R <= j)
            pmf = lognormal.lognormal_pmf(mu, sigma, vocab)
            cum_fit = np.r_[0.0, np.cumsum(pmf)]
            width = np.diff(edges)
            lo, hi = edges[:-1] - 1, edges[1:] - 1  # bin [edges_i, edges_i+1) in rank
            frames.append(
                pd.DataFrame(
                    {
                        "family": r.family,
                        "corpus": corpus,
                        "model": r.model,
                        "S": r.S,
                        "rank": edges[:-1],
                        "empirical": (cum_emp[hi] - cum_emp[lo]) / width,
                        "fitted": (cum_fit[hi] - cum_fit[lo]) / width,
                    }
                )
            )
        return pd.concat(frames, ignore_index=True)

    def ce_comparison(self, n_grid: int = 30) -> pd.DataFrame:
        """Cross-entropy and -log RBP_1 against S: measured per model (source "empirical")
        and as the lognormal theory predicts them from the fitted (mu, sigma) trends (for CE:
        the rank entropy of the discretised model, the appendix-B reading of CE)
        (`rbplab.analysis.lognormal_theory.simulate_scaling`, source "lognormal"). Columns family, corpus,
        S, quantity, value, source."""
        self._one_step("the CE comparison")
        table = self.lognormal()
        frames = [
            table.melt(
                id_vars=["family", "corpus", "model", "S"],
                value_vars=["ce", "neg_log_rbp1"],
                var_name="quantity",
                value_name="value",
            ).assign(source="empirical")
        ]
        for (family, corpus), part in table.groupby(["family", "corpus"], sort=False):
            if part["S"].nunique() < 2:
                continue
            vocab = int(part["vocab_size"].min())
            try:
                sim = lognormal_theory.simulate_scaling(part, n_grid=n_grid, vocab_size=vocab)
            except ValueError:
                # sigma's linear trend turns negative within the S range (a noisy family):
                # hypothesis 2 only needs mu/sigma to scale, so hold sigma at its mean.
                sim = lognormal_theory.simulate_scaling(
                    part, n_grid=n_grid, vocab_size=vocab, sigma_mode="constant"
                )
            frames.append(
                sim.rename(columns={"rank_entropy_discrete": "ce", "neg_log_p1_discrete": "neg_log_rbp1"})
                .melt(
                    id_vars=["S"], value_vars=["ce", "neg_log_rbp1"], var_name="quantity", value_name="value"
                )
                .assign(family=family, corpus=corpus, model=None, source="lognormal")
            )
        out = pd.concat(frames, ignore_index=True)
        out["quantity"] = out["quantity"].map({"ce": "CE", "neg_log_rbp1": "-log RBP_1"})
        return out[["family", "corpus", "model", "S", "quantity", "value", "source"]]

    def ce_exponents(self) -> pd.DataFrame:
        """Power-law exponents of CE and -log RBP_1 against S, measured and lognormal-predicted,
        per family and corpus: the paper's observation that the two are nearly equal (Fig. 8a/b).
        The theory's "CE" is the rank entropy (`rbplab.analysis.lognormal_theory`). Its curves
        are deterministic functions of the fitted trends, so their alpha has no t-interval
        (alpha_low/high are NaN for source "lognormal")."""
        self._one_step("the CE exponents")
        # Without the model column: the theory's curve is a grid of S values, not models.
        comp = self.ce_comparison().drop(columns="model")
        fits = fit.scaling_fits(
            comp, y="value", by=["family", "corpus", "source", "quantity"], level=self.level
        )
        fits.loc[fits["source"] == "lognormal", ["alpha_low", "alpha_high"]] = np.nan
        return fits[["family", "corpus", "source", "quantity", "alpha", "alpha_low", "alpha_high", "r2"]]
