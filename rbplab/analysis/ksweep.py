"""R^2(k) and alpha(k) of the relative-based scaling law over k = 1..|V| (paper Figure 6).

Regimes follow the paper's sections 4.1-4.3, with "near |V|" made explicit:
  "k=1"           k = 1 (greedy decoding);
  "moderate"      1 < k <= 100 (top-k sampling);
  "large"         k >= large_fraction * |V| (default |V|/5: the paper's 20,000-30,000 of ~50,000);
  "intermediate"  everything in between.
"large" is tested before "moderate", which only matters for vocabularies under 500 tokens.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from rbplab.analysis.fit import TWO_MODELS_NOTE, bootstrap_fits, scaling_fits
from rbplab.analysis.metrics import metrics_table
from rbplab.core.errors import InvalidArgumentError
from rbplab.core.runs import RunsLike, as_runs

REGIMES = ("k=1", "moderate", "intermediate", "large")
MODERATE_K_MAX = 100
LARGE_FRACTION = 0.2


def regime(
    k: int | Iterable[int], vocab_size: int | Iterable[int], large_fraction: float = LARGE_FRACTION
) -> str | np.ndarray:
    """Regime label(s) of threshold(s) k for vocabulary size(s) |V| (see module docstring)."""
    if not 0 < large_fraction <= 1:
        raise InvalidArgumentError(f"large_fraction must lie in (0, 1], got {large_fraction}")
    k_arr, v_arr = np.broadcast_arrays(
        np.asarray(k, dtype=np.float64), np.asarray(vocab_size, dtype=np.float64)
    )
    if np.any(k_arr < 1) or np.any(k_arr > v_arr):
        raise InvalidArgumentError("k must lie in [1, vocab_size]")
    labels = np.select(
        [k_arr == 1, k_arr >= large_fraction * v_arr, k_arr <= MODERATE_K_MAX],
        ["k=1", "large", "moderate"],
        default="intermediate",
    )
    return str(labels) if labels.ndim == 0 else labels.astype(object)


def k_sweep(
    data: pd.DataFrame | RunsLike,
    ks: Iterable[int] | None = None,
    ties: str = "pessimistic",
    level: float = 0.95,
    n_boot: int = 0,
    seed: int = 0,
    large_fraction: float = LARGE_FRACTION,
) -> pd.DataFrame:
    """alpha(k), R^2(k) with OLS CIs for each (family, corpus[, ties]) and k, regimes labelled.

    `data` is either a `metrics_table` (rows with metric == "rbp" are used; ks, ties and
    n_boot are then ignored) or runs (see `rbplab.core.runs.as_runs`), from which the table is
    built at `ks` (default `standard_ks`). With runs and n_boot > 0 the document-bootstrap
    columns of `rbplab.analysis.fit.bootstrap_fits` are added. Thresholds above the smallest
    vocabulary of a group are dropped so every fit uses every model.

    Columns: family, corpus, ties, k, regime, vocab_size, alpha, r2, alpha_se, alpha_low,
    alpha_high, n_models, note [, alpha_boot_*, r2_boot_*]."""
    runs = None
    if isinstance(data, pd.DataFrame) and "stats" not in data.columns:
        table = data
    else:
        runs = as_runs(data)
        if ks is None:
            table = metrics_table(runs, None, ties)
        else:  # each run gets the thresholds its vocabulary allows
            ks = np.unique(np.asarray(list(ks), dtype=np.int64))
            table = pd.concat([metrics_table([r], ks[ks <= r.vocab_size], ties) for r in runs])
    for col in ("metric", "k", "vocab_size"):
        if col not in table.columns:
            raise InvalidArgumentError(f"k_sweep needs a metrics_table with column {col!r}")
    table = table[table["metric"] == "rbp"]
    by = [c for c in ("family", "corpus", "ties") if c in table.columns]
    v_min = table.groupby(by, dropna=False)["vocab_size"].transform("min")
    table = table[table["k"].to_numpy(dtype=np.float64) <= v_min.to_numpy()]
    fits = scaling_fits(table, by=by + ["k"], level=level)
    vocab = table.groupby(by, dropna=False)["vocab_size"].min().rename("vocab_size").reset_index()
    fits = fits.merge(vocab, on=by)
    fits["regime"] = regime(fits["k"].to_numpy(dtype=np.int64), fits["vocab_size"].to_numpy(), large_fraction)
    cols = by + ["k", "regime", "vocab_size", "alpha", "r2", "alpha_se", "alpha_low", "alpha_high"]
    fits = fits[cols + ["n_models", "note"]]
    if runs is not None and n_boot > 0:
        boot = bootstrap_fits(
            runs, ks=sorted(set(fits["k"].astype(int))), ties=ties, n_boot=n_boot, seed=seed
        )
        boot = boot[boot["metric"] == "rbp"].drop(columns=["metric", "n_models", "alpha", "r2"])
        fits = fits.merge(boot, on=by + ["k"], how="left")
    return fits.sort_values(by + ["k"], ignore_index=True)


def _leading(ok: np.ndarray) -> int:
    """How many of the first k of the sweep (sorted) all satisfy `ok`."""
    return int(np.argmin(ok)) if not ok.all() else len(ok)


def _k_max(frame: pd.DataFrame, n_ok: int) -> object:
    return frame["k"].iloc[n_ok - 1] if n_ok > 0 else pd.NA


def sweep_summary(sweep: pd.DataFrame, r2_threshold: float = 0.9) -> pd.DataFrame:
    """Per (family, corpus[, ties]) of a `k_sweep`: how far in k the law holds, and alpha there.

    The law holds at k when its fit says the loss falls with size, and says so precisely:
    R^2 >= r2_threshold, alpha > 0 and the lower end of alpha's interval (alpha_low) > 0. R^2
    alone does not do: near |V|, -log RBP_k can rise with size along a clean line (the paper's
    GPT-2 at k = 10,000: R^2 = 0.92, alpha = -0.090 [-0.173, -0.007]), an inverted law.

    Columns: k_max_law = the largest k up to which the law holds at every k of the sweep (the
    law's range of validity; <NA> when it fails at the smallest k), k_max_r2 = the same for
    R^2 >= r2_threshold alone (how far a high R^2 would have claimed it), alpha at k = 1, 10 and
    100 when present, alpha_mean_<regime> and r2_mean_<regime> for each regime of `REGIMES`,
    averaged over the k of the law's range only (NaN for a regime outside it), and note. Where
    R^2 is undefined at every k (two models: a line through two points) no range is claimed and
    `note` says why."""
    missing = [c for c in ("k", "regime", "alpha", "alpha_low", "r2") if c not in sweep.columns]
    if missing:
        raise InvalidArgumentError(f"sweep_summary needs a k_sweep table; this one lacks {missing}")
    by = [c for c in ("family", "corpus", "ties") if c in sweep.columns]
    rows = []
    for key, frame in sweep.sort_values("k").groupby(by, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        r2_ok = (frame["r2"] >= r2_threshold).to_numpy()
        # NaN compares False: a k without a fit or an interval ends the range.
        law_ok = r2_ok & (frame["alpha"] > 0).to_numpy() & (frame["alpha_low"] > 0).to_numpy()
        row = dict(zip(by, key, strict=True))
        n_law = _leading(law_ok)
        row["k_max_law"] = _k_max(frame, n_law)
        row["k_max_r2"] = _k_max(frame, _leading(r2_ok))
        row["note"] = None
        if frame["r2"].isna().all():
            n_models = frame["n_models"].max() if "n_models" in frame else np.nan
            row["note"] = (
                TWO_MODELS_NOTE if n_models <= 2 else "R^2 undefined at every k: no range of validity"
            )
        for k in (1, 10, 100):
            hit = frame.loc[frame["k"] == k, "alpha"]
            row[f"alpha_k{k}"] = float(hit.iloc[0]) if len(hit) else np.nan
        in_range = frame.iloc[:n_law]
        for name in REGIMES:
            part = in_range[in_range["regime"] == name]
            row[f"alpha_mean_{name}"] = part["alpha"].mean() if len(part) else np.nan
            row[f"r2_mean_{name}"] = part["r2"].mean() if len(part) else np.nan
        rows.append(row)
    return pd.DataFrame(rows)
