"""Document-bootstrap uncertainty of power-law scaling fits (alpha and R^2).

Each replicate resamples a corpus's documents once and re-evaluates every model of that
corpus on the same resample, so the models' errors stay paired; the OLS fit in log-log
space is the one of `rbplab.analysis.fit`, vectorised over replicates and thresholds.
"""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Iterable

import numpy as np
import pandas as pd

from rbplab.analysis.bootstrap import doc_stats, replicate_arrays
from rbplab.analysis.fit import _ols, _r2
from rbplab.analysis.metrics import RunsLike, as_ks, as_runs, standard_ks


def _fit_many(S: np.ndarray, loss: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """alpha and R^2 of log(loss) on log S for every replicate and threshold: loss (n_models,
    B, m) -> two (B, m) arrays, NaN where some loss is not positive and finite."""
    n, b, m = loss.shape
    valid = np.all(np.isfinite(loss) & (loss > 0), axis=0).ravel()
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.log(np.where(np.isfinite(loss) & (loss > 0), loss, 1.0)).reshape(n, b * m)
    slope, _, rss, tss, _ = _ols(np.log(S), z)
    alpha = np.where(valid, -slope, np.nan).reshape(b, m)
    return alpha, np.where(valid, _r2(rss, tss), np.nan).reshape(b, m)


def _losses(reps: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Stack per-model replicate metrics into losses (n_models, B, m) per metric."""
    with np.errstate(divide="ignore"):
        return {
            "rbp": -np.log(np.stack([r["rbp"] for r in reps])),
            "ce": np.stack([r["ce"] for r in reps])[..., None],
            "mean_p": -np.log(np.stack([r["mean_p"] for r in reps]))[..., None],
        }


def bootstrap_fits(
    runs: RunsLike,
    ks: Iterable[int] | None = None,
    ties: str = "pessimistic",
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    share_documents: bool = True,
) -> pd.DataFrame:
    """Document-bootstrap uncertainty of alpha and R^2 for every (family, corpus, metric, k).

    Each replicate resamples the corpus's documents once and re-evaluates every model of that
    corpus on that same resample (models saw the same documents, so their errors are paired;
    `share_documents=False` resamples independently per model, for comparison). Documents are
    identified by TokenStats.doc, which must index the same documents in every run of a corpus.
    ks default to `standard_ks` of the smallest vocabulary in the family; given ks above that
    vocabulary are dropped for that family.

    Columns: family, corpus, ties, metric, k, n_models, alpha, r2 (full-data fit),
    alpha_boot_se, alpha_boot_low/high (percentile), r2_boot_median, r2_boot_low/high,
    n_boot, n_boot_valid (replicates where every model's loss was positive and finite)."""
    runs = as_runs(runs)
    if n_boot < 2:
        raise ValueError(f"n_boot must be >= 2, got {n_boot}")
    ks_all = None if ks is None else as_ks(ks, np.iinfo(np.int64).max)
    fam_ks = {}
    for fam in {r.family for r in runs}:
        v_min = min(r.stats.vocab_size for r in runs if r.family == fam)
        fam_ks[fam] = standard_ks(v_min) if ks_all is None else ks_all[ks_all <= v_min]
        if not len(fam_ks[fam]):
            raise ValueError(f"no k in {list(ks_all)} fits family {fam!r} (smallest vocabulary {v_min})")
    q = [(1 - level) / 2, 0.5, (1 + level) / 2]
    rows = []
    for corpus in sorted({r.corpus for r in runs}):
        c_runs = [r for r in runs if r.corpus == corpus]
        n_docs = max(r.stats.n_docs for r in c_runs)
        docs = [doc_stats(r.stats, fam_ks[r.family], ties, n_docs) for r in c_runs]
        seq = np.random.SeedSequence([seed, zlib.crc32(corpus.encode())])
        if share_documents:
            reps = replicate_arrays(docs, n_boot, seq)
        else:
            children = seq.spawn(len(docs))
            reps = [replicate_arrays([d], n_boot, c)[0] for d, c in zip(docs, children, strict=True)]
        for fam in sorted({r.family for r in c_runs}):
            idx = [i for i, r in enumerate(c_runs) if r.family == fam]
            S = np.array([c_runs[i].S for i in idx])
            if len(np.unique(S)) < 2:
                continue
            boot = _losses([reps[i] for i in idx])
            point = _losses([docs[i].evaluate(np.ones(n_docs)) for i in idx])
            for metric, loss in boot.items():
                alpha, r2 = _fit_many(S, loss)
                alpha0, r20 = _fit_many(S, point[metric])
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns -> NaN summaries
                    a_q, r_q = np.nanquantile(alpha, q, axis=0), np.nanquantile(r2, q, axis=0)
                    a_se = np.nanstd(alpha, axis=0, ddof=1)
                k_values = list(fam_ks[fam]) if metric == "rbp" else [None]
                for j, k in enumerate(k_values):
                    rows.append(
                        {"family": fam, "corpus": corpus, "ties": ties, "metric": metric, "k": k}
                        | {"n_models": len(idx), "alpha": alpha0[0, j], "r2": r20[0, j]}
                        | {
                            "alpha_boot_se": a_se[j],
                            "alpha_boot_low": a_q[0, j],
                            "alpha_boot_high": a_q[2, j],
                        }
                        | {"r2_boot_median": r_q[1, j], "r2_boot_low": r_q[0, j], "r2_boot_high": r_q[2, j]}
                        | {"n_boot": n_boot, "n_boot_valid": int(np.sum(np.isfinite(alpha[:, j])))}
                    )
    out = pd.DataFrame(rows)
    if len(out):
        out["k"] = pd.array(out["k"], dtype="Int64")
    return out
