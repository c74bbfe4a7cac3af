"""Scaling with training data D and compute C along checkpoints, and the joint laws in S and D.

The joint laws L(S, D) of a table of checkpoints, per corpus: -log RBP_k at the smallest and the
largest k and CE, each fitted with one bootstrap (`data_scaling.bootstrap_joint`) that the law
table, the frontier comparison and the iso-loss surface all read.

`joint_laws(table, ks)` takes a checkpoint table (`rbplab.study.training.table` or
`rbplab.study.synthetic.synthetic_training_table`); `rbplab.study.training.joint_laws` passes the
study's paired document replicates too, so every replicate resamples checkpoints and documents
together.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy.optimize import minimize, minimize_scalar
from scipy.special import logsumexp

from rbplab.analysis.fit import fit_columns, power_law
from rbplab.core.blas import single_blas_thread
from rbplab.core.errors import InvalidArgumentError
from rbplab.core.runs import FLOPS_PER_PARAMETER_TOKEN, tokens_for_compute, training_compute

HUBER_DELTA = 1e-3  # Hoffmann et al. (2022)
PARAMS = ("E", "A", "B", "alpha", "beta")
# Initialisation grid (Hoffmann et al. used alpha, beta in {0, 0.5, ..., 2}, e in {-1, -0.5, ..., 1.5},
# a, b in {0, 5, ..., 25}); the objective is evaluated on the whole grid at once and L-BFGS starts
# from the best `n_starts` points of it.
GRID = {
    "a": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
    "b": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
    "e": (-1.0, -0.5, 0.0, 0.5, 1.0, 1.5),
    "alpha": (0.0, 0.5, 1.0, 1.5, 2.0),
    "beta": (0.0, 0.5, 1.0, 1.5, 2.0),
}
DEFAULT_BY = ("family", "corpus", "quantity", "metric", "k")
FLOOR_RATIO = 1e-6  # a fitted E below this share of the smallest loss is the boundary E = 0


# ------------------------------------------------------------------------------------ loss vs D
IN_D = {"alpha": "beta", "alpha_low": "beta_low", "alpha_high": "beta_high"}  # a fit's names, in D


def data_fits(
    table: pd.DataFrame, y: str = "loss", by: Iterable[str] | None = None, level: float = 0.95
) -> pd.DataFrame:
    """Per group and size S: loss = prefactor * D^-beta (OLS on logs, t interval for beta).

    Rows with D = 0 (step 0: nothing seen yet) are left out. One row per (group, S) with beta,
    its interval, prefactor, r2 and n (checkpoints used)."""
    by = _groups(table, by, exclude=("S", "D", "model", "revision", "step"))
    rows = []
    for keys, part in table[table["D"] > 0].groupby([*by, "S"], sort=True, dropna=False):
        keys = keys if isinstance(keys, tuple) else (keys,)
        D, loss = part["D"].to_numpy(np.float64), part[y].to_numpy(np.float64)
        fitted = fit_columns(D, loss, level)
        rows.append(
            {
                **dict(zip([*by, "S"], keys, strict=True)),
                **{IN_D.get(name, name): value for name, value in fitted.items()},
                "n": len(part),
                "note": fitted["note"] or "",
            }
        )
    columns = [*by, "S", "beta", "beta_low", "beta_high", "prefactor", "r2", "n", "note"]
    return pd.DataFrame(rows).reindex(columns=columns)


def data_law_curves(fits: pd.DataFrame, points: pd.DataFrame, n: int = 30) -> pd.DataFrame:
    """The laws of `data_fits` evaluated on a log grid of `n` values of D over each fitted size's
    measured D range (D > 0 in `points`): columns S, D, fitted. Sizes without a finite beta are
    left out. What `rbplab.viz.plots.training_dynamics` draws as each size's fit."""
    rows = []
    for _, fit in fits[np.isfinite(fits["beta"].to_numpy(np.float64))].iterrows():
        D = points.loc[(points["S"] == fit["S"]) & (points["D"] > 0), "D"]
        if D.empty:
            continue
        grid = np.geomspace(D.min(), D.max(), n)
        fitted = power_law(float(fit["prefactor"]), float(fit["beta"]), grid)
        rows.append(pd.DataFrame({"S": fit["S"], "D": grid, "fitted": fitted}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=["S", "D", "fitted"])


# ------------------------------------------------------------------------------ the joint law
@dataclass(frozen=True)
class JointLawFit:
    """L(S, D) = E + A S^-alpha + B D^-beta, fitted by Huber loss on log L."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    objective: float  # sum of Huber losses / delta at the optimum
    n: int
    converged: bool

    def predict(self, S: float | np.ndarray, D: float | np.ndarray) -> np.ndarray:
        S, D = np.asarray(S, dtype=np.float64), np.asarray(D, dtype=np.float64)
        return self.E + self.A * S**-self.alpha + self.B * D**-self.beta

    @property
    def frontier_exponent(self) -> float:
        """a in S_opt ~ C^a: beta / (alpha + beta) (D_opt ~ C^(1 - a))."""
        return self.beta / (self.alpha + self.beta)

    def optimal_size(self, C: float | np.ndarray) -> np.ndarray:
        """Closed-form S_opt(C) for C = 6 S D: G (C/6)^(beta/(alpha+beta)),
        G = (alpha A / (beta B))^(1/(alpha+beta))."""
        G = (self.alpha * self.A / (self.beta * self.B)) ** (1 / (self.alpha + self.beta))
        return G * (np.asarray(C, dtype=np.float64) / FLOPS_PER_PARAMETER_TOKEN) ** self.frontier_exponent

    def to_dict(self) -> dict:
        return asdict(self)


def _objective(theta: np.ndarray, x: np.ndarray, y: np.ndarray, log_loss: np.ndarray, delta: float):
    """Sum of Huber losses (scaled by 1/delta) of LSE(a - alpha x, b - beta y, e) - log L, and its
    gradient in (a, b, e, alpha, beta). Plain numpy: scipy's logsumexp costs more than the rest."""
    a, b, e, alpha, beta = theta
    t1, t2 = a - alpha * x, b - beta * y
    top = np.maximum(np.maximum(t1, t2), e)
    w1, w2, w3 = np.exp(t1 - top), np.exp(t2 - top), np.exp(e - top)
    total = w1 + w2 + w3
    r = top + np.log(total) - log_loss
    magnitude = np.abs(r)
    value = np.sum(np.where(magnitude <= delta, 0.5 * r * r, delta * (magnitude - 0.5 * delta))) / delta
    slope = np.clip(r, -delta, delta) / (delta * total)  # d huber / d r, times the softmax denominator
    g1, g2, g3 = w1 * slope, w2 * slope, w3 * slope
    grad = np.array([g1.sum(), g2.sum(), g3.sum(), -(g1 @ x), -(g2 @ y)])
    return value, grad


def _grid_values(
    x: np.ndarray, y: np.ndarray, log_loss: np.ndarray, delta: float
) -> tuple[np.ndarray, np.ndarray]:
    points = np.array(list(itertools.product(*GRID.values())), dtype=np.float64)  # a, b, e, alpha, beta
    a, b, e, alpha, beta = (points[:, i : i + 1] for i in range(5))
    terms = np.stack([a - alpha * x, b - beta * y, np.broadcast_to(e, (len(points), len(x)))])
    r = logsumexp(terms, axis=0) - log_loss
    huber = np.where(np.abs(r) <= delta, 0.5 * r**2, delta * (np.abs(r) - 0.5 * delta)).sum(axis=1)
    return points, huber / delta


# L-BFGS on 5 parameters: a multi-threaded BLAS only slows it down (`rbplab.core.blas`).
@single_blas_thread()
def fit_joint_law(
    S: Sequence[float],
    D: Sequence[float],
    loss: Sequence[float],
    delta: float = HUBER_DELTA,
    n_starts: int = 8,
    starts: Sequence[np.ndarray] = (),
) -> JointLawFit:
    """Fit L(S, D) = E + A S^-alpha + B D^-beta to positive losses (Hoffmann et al. 2022).

    Minimises sum_i Huber_delta(LSE(a - alpha log S_i, b - beta log D_i, e) - log L_i) with L-BFGS
    from the `n_starts` best points of the initialisation grid (`GRID`) and any extra `starts`
    (a, b, e, alpha, beta); the best optimum is returned.
    """
    S, D, loss = (np.asarray(v, dtype=np.float64) for v in (S, D, loss))
    if not (len(S) == len(D) == len(loss)):
        raise InvalidArgumentError("S, D and loss must have the same length")
    if len(S) < 5:
        raise InvalidArgumentError(f"the joint law has 5 parameters; {len(S)} points cannot determine them")
    if not (np.all(S > 0) and np.all(D > 0) and np.all(loss > 0) and np.all(np.isfinite(loss))):
        raise InvalidArgumentError("S, D and loss must be positive and finite (leave out step 0: D = 0)")
    x, y, z = np.log(S), np.log(D), np.log(loss)
    initial = list(starts)
    if n_starts > 0 or not initial:
        points, values = _grid_values(x, y, z, delta)
        initial += list(points[np.argsort(values, kind="stable")[: max(n_starts, 1)]])
    best = None
    for theta0 in initial:
        result = minimize(
            _objective,
            np.asarray(theta0, dtype=np.float64),
            args=(x, y, z, delta),
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": 500, "ftol": 1e-10, "gtol": 1e-6},
        )
        if best is None or result.fun < best.fun:
            best = result
    a, b, e, alpha, beta = best.x
    return JointLawFit(
        E=float(np.exp(e)),
        A=float(np.exp(a)),
        B=float(np.exp(b)),
        alpha=float(alpha),
        beta=float(beta),
        objective=float(best.fun),
        n=len(S),
        converged=bool(best.success),
    )


# A coefficient that underflowed to 0 (E drifts to 0 when the data show no floor) restarts from
# e^-30 instead of log(0) = -inf, from which L-BFGS cannot move: every replicate would return it.
_LOG_FLOOR = -30.0


def _theta(fit: JointLawFit) -> np.ndarray:
    with np.errstate(divide="ignore"):
        logs = np.log([fit.A, fit.B, fit.E])
    return np.array([*np.maximum(logs, _LOG_FLOOR), fit.alpha, fit.beta])


@single_blas_thread()
def bootstrap_joint(
    S: Sequence[float],
    D: Sequence[float],
    losses: dict[str, np.ndarray],
    n_boot: int = 200,
    seed: int = 0,
    replicates: dict[str, np.ndarray] | None = None,
    delta: float = HUBER_DELTA,
    n_starts: int = 8,
    replicate_starts: int = 0,
) -> tuple[dict[str, JointLawFit], dict[str, pd.DataFrame]]:
    """Fits of every quantity in `losses` (name -> loss per point) and their bootstrap replicates.

    Each replicate resamples the points (checkpoints) with replacement, the same rows for every
    quantity, so differences between quantities are paired. With `replicates` (name -> array
    [n_rep, n_points] of losses recomputed on resampled documents, the same documents for every
    point), replicate i also takes its losses from row i mod n_rep: documents and checkpoints are
    resampled together. The full-data fits start from the `n_starts` best grid points; replicate
    fits from the full-data optimum and the `replicate_starts` best grid points of their own.
    Returns (fits, name -> DataFrame of replicate parameters and frontier exponent).
    """
    S, D = np.asarray(S, dtype=np.float64), np.asarray(D, dtype=np.float64)
    fits = {name: fit_joint_law(S, D, loss, delta, n_starts) for name, loss in losses.items()}
    rng = np.random.default_rng(seed)
    rows: dict[str, list[dict]] = {name: [] for name in losses}
    for i in range(n_boot):
        take = rng.integers(0, len(S), len(S))
        if len(np.unique(take)) < 5:
            continue
        for name, loss in losses.items():
            values = np.asarray(loss, dtype=np.float64)
            if replicates is not None and name in replicates:
                values = np.asarray(replicates[name], dtype=np.float64)[i % len(replicates[name])]
            fit = fit_joint_law(
                S[take], D[take], values[take], delta, replicate_starts, starts=[_theta(fits[name])]
            )
            rows[name].append(
                {**{p: getattr(fit, p) for p in PARAMS}, "frontier_exponent": fit.frontier_exponent}
            )
    return fits, {name: pd.DataFrame(r) for name, r in rows.items()}


def _interval(values: pd.Series, level: float) -> tuple[float, float]:
    values = values.to_numpy(np.float64)
    values = values[np.isfinite(values)]
    if len(values) < 2:
        return float("nan"), float("nan")
    tail = (1 - level) / 2
    return float(np.quantile(values, tail)), float(np.quantile(values, 1 - tail))


def joint_law_table(
    S: Sequence[float],
    D: Sequence[float],
    losses: dict[str, np.ndarray],
    n_boot: int = 200,
    seed: int = 0,
    level: float = 0.95,
    replicates: dict[str, np.ndarray] | None = None,
    n_starts: int = 8,
) -> pd.DataFrame:
    """The joint law of each quantity in `losses` (name -> loss per point), one row each
    (`quantity`): E, A, B, alpha, beta, the frontier exponent beta/(alpha+beta), each with a
    percentile bootstrap interval (`_low`, `_high`) over checkpoints and, given `replicates`
    (`bootstrap_joint`), over documents too; n (points), n_boot (replicates that fitted),
    `resampled` ("checkpoints" or "checkpoints and documents") and `note`, set when E went to its
    boundary 0 (the points show no irreducible floor): E is then not identified, and replicates
    that start there stay there, so its interval says nothing."""
    fits, boots = bootstrap_joint(S, D, losses, n_boot, seed, replicates=replicates, n_starts=n_starts)
    return law_rows(fits, boots, losses, level, replicates)


def law_rows(
    fits: dict[str, JointLawFit],
    boots: dict[str, pd.DataFrame],
    losses: dict[str, np.ndarray],
    level: float = 0.95,
    replicates: dict[str, np.ndarray] | None = None,
) -> pd.DataFrame:
    """`joint_law_table`'s rows from a `bootstrap_joint` result (fits, boots) of `losses` (and
    `replicates`, if it was given them): summarise one bootstrap several ways without refitting."""
    rows = []
    for name, fit in fits.items():
        boot = boots[name]
        row: dict = {"quantity": name}
        for param in (*PARAMS, "frontier_exponent"):
            row[param] = getattr(fit, param)
            row[f"{param}_low"], row[f"{param}_high"] = (
                _interval(boot[param], level) if len(boot) else (np.nan, np.nan)
            )
        with_documents = replicates is not None and name in replicates
        row.update(n=fit.n, n_boot=len(boot), converged=fit.converged)
        row["resampled"] = "checkpoints and documents" if with_documents else "checkpoints"
        floorless = fit.E < FLOOR_RATIO * float(np.min(losses[name]))
        row["note"] = "E -> 0: no floor in the data, E not identified" if floorless else None
        rows.append(row)
    return pd.DataFrame(rows)


def joint_fits(
    table: pd.DataFrame,
    y: str = "loss",
    by: Iterable[str] | None = None,
    n_boot: int = 200,
    seed: int = 0,
    level: float = 0.95,
    n_starts: int = 8,
) -> pd.DataFrame:
    """The joint law per group of a tidy table (e.g. per quantity and corpus), one row each:
    `joint_law_table`'s columns with the group's keys in front of them (bootstrap over
    checkpoints; pass document replicates to `joint_law_table` for both)."""
    by = _groups(table, by, exclude=("S", "D", "model", "revision", "step"))
    rows = []
    groups = (
        table[table["D"] > 0].groupby(by, sort=True, dropna=False) if by else [((), table[table["D"] > 0])]
    )
    for keys, part in groups:
        keys = keys if isinstance(keys, tuple) else (keys,)
        row = joint_law_table(
            part["S"], part["D"], {"loss": part[y].to_numpy(np.float64)}, n_boot, seed, level, None, n_starts
        ).drop(columns=["quantity", "resampled", "note"])
        rows.append(row.assign(**dict(zip(by, keys, strict=True)))[[*by, *row.columns]])
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=by)


# ----------------------------------------------------------------------------------- frontier
def frontier(fit: JointLawFit, C: Sequence[float] | np.ndarray) -> pd.DataFrame:
    """For each compute C (FLOPs, C = 6 S D): the S and D minimising the fitted law, found
    numerically (bounded search over log S), and the loss there. Columns C, S_opt, D_opt, loss_opt."""
    rows = []
    for c in np.asarray(C, dtype=np.float64):
        log_n = np.log(c / FLOPS_PER_PARAMETER_TOKEN)  # log(S D)

        def loss_at(log_s: float, log_n: float = log_n) -> float:
            return float(fit.predict(np.exp(log_s), np.exp(log_n - log_s)))

        result = minimize_scalar(loss_at, bounds=(0.0, log_n), method="bounded", options={"xatol": 1e-10})
        s_opt = float(np.exp(result.x))
        rows.append(
            {"C": c, "S_opt": s_opt, "D_opt": tokens_for_compute(c, s_opt), "loss_opt": float(result.fun)}
        )
    return pd.DataFrame(rows)


def law_surface(fit: JointLawFit, S: Sequence[float], D: Sequence[float], n: int = 40) -> pd.DataFrame:
    """The fitted law on an n x n grid log-spaced over the ranges of `S` and `D` (e.g. the
    checkpoints'): columns S, D, C, loss, for iso-loss contours."""
    S, D = np.asarray(S, dtype=np.float64), np.asarray(D, dtype=np.float64)
    s_grid = np.geomspace(S.min(), S.max(), n)
    d_grid = np.geomspace(D[D > 0].min(), D.max(), n)
    SS, DD = np.meshgrid(s_grid, d_grid, indexing="ij")
    SS, DD = SS.ravel(), DD.ravel()
    return pd.DataFrame({"S": SS, "D": DD, "C": training_compute(SS, DD), "loss": fit.predict(SS, DD)})


def compare_frontiers(
    S: Sequence[float],
    D: Sequence[float],
    losses: dict[str, np.ndarray],
    reference: str,
    C: float | None = None,
    n_boot: int = 200,
    seed: int = 0,
    level: float = 0.95,
    replicates: dict[str, np.ndarray] | None = None,
) -> pd.DataFrame:
    """Does the compute-optimal frontier of each quantity differ from `reference`'s (e.g. CE)?

    One row per other quantity: its frontier exponent a = beta/(alpha+beta) (S_opt ~ C^a) and the
    reference's, the paired difference with its bootstrap interval, log10 of the ratio of optimal
    sizes at compute C (default: the geometric mean of 6 S D over the points) with its interval,
    the two optimal sizes there (S_opt, reference_S_opt), `extrapolated`: whether either optimum
    lies outside the (S, D) range of the points (then the size ratio is an extrapolation of the
    fitted laws, not a measurement), and `differs`: whether either interval excludes 0.
    """
    if reference not in losses or len(losses) < 2:
        raise InvalidArgumentError(f"losses must hold {reference!r} and at least one other quantity")
    fits, boots = bootstrap_joint(S, D, losses, n_boot=n_boot, seed=seed, replicates=replicates)
    return frontier_rows(fits, boots, S, D, reference, C, level)


def frontier_rows(
    fits: dict[str, JointLawFit],
    boots: dict[str, pd.DataFrame],
    S: Sequence[float],
    D: Sequence[float],
    reference: str,
    C: float | None = None,
    level: float = 0.95,
) -> pd.DataFrame:
    """`compare_frontiers`'s rows from a `bootstrap_joint` result (fits, boots) of points (S, D):
    summarise one bootstrap several ways without refitting."""
    if reference not in fits or len(fits) < 2:
        raise InvalidArgumentError(f"fits must hold {reference!r} and at least one other quantity")
    S, D = np.asarray(S, dtype=np.float64), np.asarray(D, dtype=np.float64)
    C = float(np.exp(np.mean(np.log(training_compute(S, D))))) if C is None else float(C)
    rows = []
    ref_fit, ref_boot = fits[reference], boots[reference]

    def outside(s_opt: float) -> bool:
        return not (S.min() <= s_opt <= S.max() and D.min() <= tokens_for_compute(C, s_opt) <= D.max())

    ref_s_opt = float(ref_fit.optimal_size(C))
    for name, fit in fits.items():
        if name == reference:
            continue
        s_opt = float(fit.optimal_size(C))
        boot = boots[name]
        diff = boot["frontier_exponent"] - ref_boot["frontier_exponent"]
        ratio = np.log10(_optimal_sizes(boot, C)) - np.log10(_optimal_sizes(ref_boot, C))
        diff_low, diff_high = _interval(diff, level)
        ratio_low, ratio_high = _interval(pd.Series(ratio), level)
        rows.append(
            {
                "quantity": name,
                "reference": reference,
                "exponent": fit.frontier_exponent,
                "reference_exponent": ref_fit.frontier_exponent,
                "difference": fit.frontier_exponent - ref_fit.frontier_exponent,
                "difference_low": diff_low,
                "difference_high": diff_high,
                "C": C,
                "log10_size_ratio": float(np.log10(s_opt / ref_s_opt)),
                "log10_size_ratio_low": ratio_low,
                "log10_size_ratio_high": ratio_high,
                "S_opt": s_opt,
                "reference_S_opt": ref_s_opt,
                "extrapolated": outside(s_opt) or outside(ref_s_opt),
                "differs": bool(not diff_low <= 0 <= diff_high or not ratio_low <= 0 <= ratio_high),
                "n_boot": int(min(len(boot), len(ref_boot))),
            }
        )
    return pd.DataFrame(rows)


def _optimal_sizes(boot: pd.DataFrame, C: float) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        G = (boot["alpha"] * boot["A"] / (boot["beta"] * boot["B"])) ** (1 / (boot["alpha"] + boot["beta"]))
        return (G * (C / FLOPS_PER_PARAMETER_TOKEN) ** boot["frontier_exponent"]).to_numpy(np.float64)


def _groups(table: pd.DataFrame, by: Iterable[str] | None, exclude: Sequence[str]) -> list[str]:
    missing = [c for c in ("S", "D") if c not in table.columns]
    if missing:
        raise InvalidArgumentError(f"table lacks columns {missing}; it needs S, D and the loss")
    if by is not None:
        return list(by)
    return [c for c in DEFAULT_BY if c in table.columns and c not in exclude]


def synthetic_law_table(
    E: float = 1.7,
    A: float = 300.0,
    B: float = 900.0,
    alpha: float = 0.34,
    beta: float = 0.28,
    sizes: Sequence[float] = (2e4, 8e4, 2e5, 6e5, 1.2e6, 2.7e6),
    steps: Sequence[int] = (25, 50, 100, 200, 400, 800, 1562),
    tokens_per_step: int = 2048,
    noise: float = 0.01,
    seed: int = 0,
) -> pd.DataFrame:
    """Points drawn from a known L(S, D) with multiplicative log-normal noise (sd `noise`): one row
    per (size, checkpoint) with model, S, step, D, C = 6 S D and loss. For tests and for notebooks
    when no checkpoints have been scored."""
    rng = np.random.default_rng(seed)
    S, step = np.meshgrid(
        np.asarray(sizes, dtype=np.float64), np.asarray(steps, dtype=np.int64), indexing="ij"
    )
    S, step = S.ravel(), step.ravel()
    D = step.astype(np.float64) * tokens_per_step
    loss = (E + A * S**-alpha + B * D**-beta) * np.exp(rng.normal(0, noise, len(S)))
    return pd.DataFrame(
        {
            "model": [f"size-{i}" for i in np.repeat(np.arange(len(sizes)), len(steps))],
            "S": S,
            "step": step,
            "D": D,
            "C": training_compute(S, D),
            "loss": loss,
        }
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
