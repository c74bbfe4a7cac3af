"""Document bootstrap of the cross-entropy decomposition and MRR (`rbplab.analysis.decomposition`).

EE, SA and Conf are not sums over documents: a replicate needs each document's count and nll sum
per RBE value, a sparse (documents x RBE values) table built from the tokens (a cached summary
keeps the pooled rank pairs only, so these functions take `TokenStats`; `rbplab.study.decomposition.bootstrap`
reads them from the cache). A replicate with document weights w then has RBE counts w @ counts and
nll sums w @ nll, and the terms follow exactly as for the full corpus. As in
`rbplab.analysis.fit.bootstrap_fits`, every model of a corpus is evaluated on the same document
resamples (seeded by corpus), so the exponents' bootstrap keeps the models' errors paired.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import sparse, special

from rbplab.analysis.decomposition import DECOMPOSITION_METRICS, reciprocal_rank
from rbplab.analysis.fit import fit_many
from rbplab.analysis.metrics import weight_chunks
from rbplab.core.errors import InvalidArgumentError
from rbplab.core.runs import Run
from rbplab.core.stats import TokenStats, tie_rank

_BLOCK_ELEMENTS = 1 << 22  # replicates x RBE values evaluated at once (~32 MB of float64)


@dataclass(frozen=True, eq=False)
class DocRBE:
    """Per-document (expected) token counts and nll sums at each observed RBE value, sparse."""

    counts: sparse.csr_matrix  # (n_docs, m)
    nll: sparse.csr_matrix  # (n_docs, m)
    reciprocal: np.ndarray  # (n_docs,) sum of 1/rank per document (for MRR)
    tokens: np.ndarray  # (n_docs,)

    def evaluate(self, weights: np.ndarray) -> dict[str, np.ndarray]:
        """ee, ee_mm, sa, conf, mrr for document weights (B, n_docs), each of shape (B,)."""
        w = np.atleast_2d(weights)
        out = {name: np.empty(len(w)) for name in DECOMPOSITION_METRICS}
        m = self.counts.shape[1]
        block = max(1, _BLOCK_ELEMENTS // max(m, 1))
        for start in range(0, len(w), block):
            part = w[start : start + block]
            cnt = np.asarray((self.counts.T @ part.T).T)  # (b, m)
            nls = np.asarray((self.nll.T @ part.T).T)
            seen = cnt > 0
            n = cnt.sum(axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                p = cnt / n[:, None]
                log_p = np.where(seen, np.log(np.where(seen, p, 1.0)), 0.0)
                log_q_raw = np.where(seen, -nls / np.where(seen, cnt, 1.0), -np.inf)
                conf = special.logsumexp(log_q_raw, axis=1)
                ee = -np.sum(p * log_p, axis=1)
                sa = np.sum(np.where(seen, p * (log_p - (log_q_raw - conf[:, None])), 0.0), axis=1)
            sl = slice(start, start + len(part))
            out["ee"][sl], out["sa"][sl], out["conf"][sl] = ee, sa, conf
            out["ee_mm"][sl] = ee + (seen.sum(axis=1) - 1) / (2 * n)
            out["mrr"][sl] = (part @ self.reciprocal) / (part @ self.tokens)
        return out


def doc_rbe(stats: TokenStats, ties: str = "pessimistic", n_docs: int | None = None) -> DocRBE:
    """The per-document RBE table of one run's tokens (`n_docs` pads to a corpus-wide count);
    `ties` is the one `rbplab.study.decomposition.bootstrap` checked."""
    g, e, nll, doc = stats.n_greater, stats.n_equal, stats.nll, stats.doc
    n_docs = stats.n_docs if n_docs is None else int(n_docs)
    if ties == "pessimistic":
        rbe, weight, rows, tok_nll = tie_rank(g, e, ties) - 1, np.ones(len(g)), doc, nll
    elif ties == "optimistic" or not np.any(e > 1):
        rbe, weight, rows, tok_nll = g, np.ones(len(g)), doc, nll
    else:  # a tied token spread over g..g+e-1 with weight 1/e (only tied tokens are expanded)
        reps = e.astype(np.int64)
        offsets = np.arange(reps.sum()) - np.repeat(np.cumsum(reps) - reps, reps)
        rbe = np.repeat(g, reps) + offsets
        weight = np.repeat(1.0 / e, reps)
        rows, tok_nll = np.repeat(doc, reps), np.repeat(nll, reps)
    reciprocal = reciprocal_rank(g, e, ties)
    values, cols = np.unique(rbe, return_inverse=True)
    shape = (n_docs, len(values))
    return DocRBE(
        counts=sparse.csr_matrix((weight, (rows, cols)), shape=shape),
        nll=sparse.csr_matrix((weight * tok_nll, (rows, cols)), shape=shape),
        reciprocal=np.bincount(doc, weights=reciprocal, minlength=n_docs),
        tokens=np.bincount(doc, minlength=n_docs).astype(np.float64),
    )


def _losses(values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = dict(values)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["mrr"] = -np.log(values["mrr"])
    return out


def bootstrap_decomposition_fits(
    runs: Sequence[Run],
    stats: Sequence[TokenStats],
    ties: str = "pessimistic",
    n_boot: int = 200,
    seed: int = 0,
    level: float = 0.95,
) -> pd.DataFrame:
    """Document-bootstrap uncertainty of the exponents of ee, ee_mm, sa, conf and mrr (as -log
    MRR) against S, per family and corpus; `stats[i]` are the tokens of `runs[i]`. Columns:
    family, corpus, ties, metric, n_models, alpha (full data), alpha_boot_se,
    alpha_boot_low/high (percentile), n_boot, n_boot_valid (replicates where every model's term
    was positive: Conf often is not, and then has no exponent)."""
    if len(runs) != len(stats):
        raise InvalidArgumentError(f"{len(runs)} runs but {len(stats)} token tables")
    q = [(1 - level) / 2, (1 + level) / 2]
    rows = []
    for corpus in sorted({r.corpus for r in runs}):
        idx = [i for i, r in enumerate(runs) if r.corpus == corpus]
        n_docs = max(stats[i].n_docs for i in idx)
        tables = [doc_rbe(stats[i], ties, n_docs) for i in idx]
        seq = np.random.SeedSequence([seed, zlib.crc32(corpus.encode())])
        reps: list[list[dict]] = [[] for _ in tables]
        for w in weight_chunks(n_docs, n_boot, seq):
            for part, table in zip(reps, tables, strict=True):
                part.append(table.evaluate(w))
        boot = [
            _losses({k: np.concatenate([r[k] for r in part]) for k in DECOMPOSITION_METRICS}) for part in reps
        ]
        point = [_losses(t.evaluate(np.ones((1, n_docs)))) for t in tables]
        for family in sorted({runs[i].family for i in idx}):
            members = [j for j, i in enumerate(idx) if runs[i].family == family]
            S = np.array([runs[idx[j]].S for j in members])
            if len(np.unique(S)) < 2:
                continue
            for name in DECOMPOSITION_METRICS:
                loss = np.stack([boot[j][name] for j in members])[..., None]  # (models, B, 1)
                alpha, _ = fit_many(S, loss)
                alpha0, _ = fit_many(S, np.stack([point[j][name] for j in members])[..., None])
                a = alpha[:, 0]
                valid = np.isfinite(a)
                low, high = np.quantile(a[valid], q) if valid.sum() >= 2 else (np.nan, np.nan)
                rows.append(
                    {"family": family, "corpus": corpus, "ties": ties, "metric": name, "n_models": len(S)}
                    | {
                        "alpha": float(alpha0[0, 0]),
                        "alpha_boot_se": float(np.std(a[valid], ddof=1)) if valid.sum() >= 2 else np.nan,
                    }
                    | {"alpha_boot_low": float(low), "alpha_boot_high": float(high)}
                    | {"n_boot": n_boot, "n_boot_valid": int(valid.sum())}
                )
    return pd.DataFrame(rows)
