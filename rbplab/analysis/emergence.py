"""Sequence success p_{N,k} and emergence (paper section 5.1).

A task succeeds when N consecutive target tokens all rank within the top k. Under
independence and stationarity p_{N,k} = RBP_k^N (eq. 6), and with the scaling law
-log RBP_k = C S^-alpha this becomes p_{N,k} = exp(-C N S^-alpha) (eq. 8): a sigmoid in
log S that sharpens with N. The empirical p_{N,k} is the fraction of windows of N consecutive
scored tokens within a document that are all in the top k.

Three baselines, three ratios (empirical / baseline); each isolates something different:

  ratio           vs RBP_k^N: independent tokens with ONE hit rate. > 1 mixes dependence
                  between neighbouring tokens with difficulty that varies by document and by
                  position (hard openings, easy boilerplate): even fully independent tokens give
                  a ratio > 1 when some documents or positions are easier than others.
  ratio_position  vs the position-matched expectation: independent tokens whose hit rate is
                  that of their position bucket (`position_bucket`, pooled over documents), the
                  product over the window's positions. Removes position-dependent difficulty;
                  what remains is dependence plus document-level difficulty.
  ratio_doc       vs within-document permutation: the expected success if each document's
                  scored tokens were shuffled (hits stay in their document, order is lost):
                  prod_{j<N} (h_d - j)/(n_d - j) per window of document d with h_d hits out of
                  n_d tokens. Removes document-level difficulty; what remains is the ordering
                  within documents: local clustering of hits (and position trends inside them).

A ratio near 1 against a baseline means the clustering is explained by what that baseline
keeps. Windows overlap (every start position counts), which keeps the estimator unbiased for a
stationary sequence; their correlation is handled by the document bootstrap, which resamples
documents and recomputes every ratio on the resample (the position bucket rates are held at
their full-data values, an approximation that matters only with few documents). Positions
must be consecutive (TokenStats.position differs by one), so gaps in scoring break windows.
Under "expected" ties a window succeeds with the product of its tokens' shares within k
(`rbplab.core.stats.tie_share`), and h_d is the sum of these per-token probabilities.

Under the 0/1 conventions everything comes from a run's summary (`rbplab.core.stats`): window
counts from its segments, successes from its hit-run histograms (pooled for the estimate, per
document at `DOC_RUN_KS` for the bootstrap), the permutation baseline from per-document hits and
the position baseline from per-bucket hit rates and the segments' positions. The products of
fractional probabilities under "expected" ties do not reduce to run lengths: that convention reads
the run's tokens (from the cache when the run holds only its summary).
"""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from rbplab.analysis.fit import fit_power_law
from rbplab.analysis.metrics import DocStats, as_ks, doc_stats, weight_chunks
from rbplab.core.errors import InvalidArgumentError
from rbplab.core.runs import RunsLike, as_runs
from rbplab.core.stats import (
    RUN_COLUMNS,
    TIE_COLUMN,
    EntrySummary,
    TokenStats,
    check_ties,
    hit_probability,
    position_bucket,
)

DEFAULT_NS = (1, 2, 4, 8, 16, 32)
DEFAULT_KS = (1, 10, 100)


def top_k_probability(stats: TokenStats, k: int, ties: str = "pessimistic") -> np.ndarray:
    """Per-token probability of ranking within the top k (0/1 except for expected ties)."""
    return hit_probability(stats.n_greater, stats.n_equal, k, ties)


def _run_remaining(stats: TokenStats) -> np.ndarray:
    """rem[i] = length of the run of consecutive scored positions of i's document from i on."""
    n = len(stats)
    brk = np.ones(n, dtype=bool)
    brk[1:] = (stats.doc[1:] != stats.doc[:-1]) | (stats.position[1:] != stats.position[:-1] + 1)
    first = np.flatnonzero(brk)
    ends = np.r_[first[1:], n]
    return np.repeat(ends, ends - first) - np.arange(n)


def _prefix_of(q: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Cumulative misses (q = 0) and, for fractional q, cumulative log q, both with a leading 0."""
    zero = np.zeros(len(q) + 1, dtype=np.int64 if len(q) >= 2**31 else np.int32)
    np.cumsum(q == 0, out=zero[1:])
    frac = (q > 0) & (q < 1)
    if not frac.any():
        return zero, None
    logq = np.where(frac, np.log(np.where(frac, q, 1.0)), 0.0)
    return zero, np.concatenate([[0.0], np.cumsum(logq)])


def _all_windows(prefix: tuple[np.ndarray, np.ndarray | None], n: int, m: int) -> tuple:
    """For every start i < m: whether tokens i..i+n-1 are all hits, and the product of the
    fractional probabilities (None when there are none). Contiguous slices, no gathers."""
    zero, logq = prefix
    hit = zero[n : n + m] == zero[:m]
    return hit, None if logq is None else np.exp(logq[n : n + m] - logq[:m])


def _permutation_draws(per_doc: np.ndarray, h: np.ndarray, n_d: np.ndarray, n: int) -> np.ndarray:
    """Expected all-hit windows per document if its tokens were shuffled: per_doc windows times
    prod_{j<n} (h_d - j) / (n_d - j)."""
    j = np.arange(n)[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        draw = np.where(n_d > j, np.clip(h - j, 0, None) / (n_d - j), 0.0)
    return per_doc * np.prod(draw, axis=0)


def _position_windows(prefix, doc: np.ndarray, valid: np.ndarray, n: int, m: int, n_docs: int) -> np.ndarray:
    """Per-document sum over valid windows of the product of their position-bucket hit rates."""
    hit_p, frac_p = _all_windows(prefix, n, m)
    ok_p = valid & hit_p
    w_p = None if frac_p is None else frac_p[ok_p]
    return np.bincount(doc[ok_p], weights=w_p, minlength=n_docs).astype(np.float64)


def _segment_tokens(summary: EntrySummary) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Document, position and remaining run length of every scored token, from the segments (the
    positions only: no rank or nll is needed or kept)."""
    length = summary.seg_length
    first = np.r_[0, np.cumsum(length)[:-1]]
    offset = np.arange(int(length.sum())) - np.repeat(first, length)
    return (
        np.repeat(summary.seg_doc, length),
        np.repeat(summary.seg_start, length) + offset,
        np.repeat(length, length) - offset,
    )


def _summary_window_sums(
    summary: EntrySummary, docs: DocStats, ns: Sequence[int], ties: str, per_document: bool
):
    """`_window_doc_sums` from a summary under a 0/1 convention, with its per-document hits and
    tokens at `docs.ks` from `docs` (`doc_stats` of the same summary). With per_document False the
    successes are pooled (hit runs at any k of the summary's grid) and every array has one row,
    their sum over documents; with True they are per document (k in `DOC_RUN_KS`)."""
    ks, n_docs, n_d, h_all = docs.ks, docs.n_docs, docs.n_tokens, docs.hits
    doc, position, rem = _segment_tokens(summary)
    bucket = position_bucket(position)
    b_count = summary.bucket_tokens.astype(np.float64)
    b_hits = summary.bucket_hit_counts(ks, ties)
    pos_prefixes = []
    for j in range(len(ks)):
        with np.errstate(invalid="ignore"):
            rate = b_hits[:, j] / b_count
        pos_prefixes.append(_prefix_of(np.nan_to_num(rate)[bucket]))
    counts, succ, perm, posm = [], [], [], []
    for n in (int(v) for v in ns):
        m = max(len(doc) - n + 1, 0)
        valid = rem[:m] >= n
        windows = np.clip(summary.seg_length - n + 1, 0, None)
        per_doc = np.bincount(summary.seg_doc, weights=windows, minlength=n_docs).astype(np.float64)
        for j, k in enumerate(ks):
            runs = summary.hit_runs(ties, int(k), per_document=per_document)
            counts.append(per_doc)
            succ.append(runs.doc_windows(n, n_docs) if per_document else np.array([runs.windows(n)]))
            perm.append(_permutation_draws(per_doc, h_all[:, j], n_d, n))
            posm.append(_position_windows(pos_prefixes[j], doc[:m], valid, n, m, n_docs))
    arrays = tuple(np.column_stack(a) for a in (counts, succ, perm, posm))
    if per_document:
        return arrays
    return tuple(a if a.shape[0] == 1 else a.sum(axis=0, keepdims=True) for a in arrays)


def _window_doc_sums(stats: TokenStats, ns: Sequence[int], ks: np.ndarray, ties: str, n_docs: int):
    """Per-document window counts, successes and the two baselines' expected successes
    (within-document permutation, position-matched), each (n_docs, len(ns) * len(ks)),
    N-major, from the tokens (any tie convention). Run lengths are found once, prefix sums once
    per k, and each (N, k) costs a few passes."""
    rem = _run_remaining(stats)
    qs = [top_k_probability(stats, int(k), ties) for k in ks]
    prefixes = [_prefix_of(q) for q in qs]
    n_d = np.bincount(stats.doc, minlength=n_docs).astype(np.float64)
    h_d = [np.bincount(stats.doc, weights=q, minlength=n_docs) for q in qs]
    bucket = position_bucket(stats.position)
    b_count = np.bincount(bucket).astype(np.float64)
    pos_prefixes = []
    for q in qs:
        with np.errstate(invalid="ignore"):
            rate = np.bincount(bucket, weights=q, minlength=len(b_count)) / b_count
        pos_prefixes.append(_prefix_of(np.nan_to_num(rate)[bucket]))
    counts, succ, perm, posm = [], [], [], []
    for n in (int(v) for v in ns):
        m = max(len(stats) - n + 1, 0)
        valid = rem[:m] >= n
        doc = stats.doc[:m]
        per_doc = np.bincount(doc[valid], minlength=n_docs).astype(np.float64)
        for prefix, pos_prefix, h in zip(prefixes, pos_prefixes, h_d, strict=True):
            hit, frac = _all_windows(prefix, n, m)
            ok = valid & hit
            weights = None if frac is None else frac[ok]
            counts.append(per_doc)
            succ.append(np.bincount(doc[ok], weights=weights, minlength=n_docs).astype(np.float64))
            perm.append(_permutation_draws(per_doc, h, n_d, n))
            posm.append(_position_windows(pos_prefix, doc, valid, n, m, n_docs))
    return tuple(np.column_stack(a) for a in (counts, succ, perm, posm))


def _sequence_metrics(w, succ, counts, perm, posm, docs, k_idx, n_col) -> tuple[np.ndarray, ...]:
    """p_empirical, rbp, ratio, ratio_doc and ratio_position for document weights w (B, n_docs):
    weighted sums only."""
    w = np.atleast_2d(w)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = w @ succ
        p_emp = s / (w @ counts)
        rbp = docs.evaluate(w)["rbp"][:, k_idx]
        return p_emp, rbp, p_emp / rbp**n_col, s / (w @ perm), s / (w @ posm)


def _pooled(docs):
    """DocStats of one pseudo-document holding every document's sums (point estimates only)."""
    return replace(
        docs,
        hits=docs.hits.sum(axis=0, keepdims=True),
        n_tokens=docs.n_tokens.sum(keepdims=True),
        nll_sum=docs.nll_sum.sum(keepdims=True),
        p_sum=docs.p_sum.sum(keepdims=True),
    )


def _as_ns(ns: Iterable[int]) -> np.ndarray:
    arr = np.unique(np.asarray(list(ns), dtype=np.int64))
    if arr.size == 0 or arr[0] < 1:
        raise InvalidArgumentError(f"Ns must be positive integers, got {ns!r}")
    return arr


def sequence_success(
    stats: TokenStats,
    ns: Iterable[int] = DEFAULT_NS,
    ks: Iterable[int] = DEFAULT_KS,
    ties: str = "pessimistic",
) -> pd.DataFrame:
    """Empirical versus independence-predicted p_{N,k} for one run: columns N, k, n_windows,
    p_empirical, rbp (RBP_k over all tokens), p_predicted = rbp^N, ratio, log_ratio and the
    matched baselines p_doc_permuted, ratio_doc, p_position, ratio_position (module docstring)."""
    return sequence_table({"model": (1.0, stats)}, ns, ks, ties).drop(
        columns=["family", "model", "corpus", "S"]
    )


def sequence_table(
    runs: RunsLike,
    ns: Iterable[int] = DEFAULT_NS,
    ks: Iterable[int] = DEFAULT_KS,
    ties: str = "pessimistic",
    n_boot: int = 0,
    seed: int = 0,
    level: float = 0.95,
) -> pd.DataFrame:
    """`sequence_success` for every run, plus (n_boot > 0) document-bootstrap percentile
    intervals *_low/high of p_empirical and of the three ratios. Columns: family, model,
    corpus, S, ties, N, k, n_windows, p_empirical, rbp, p_predicted = rbp^N, ratio (vs
    rbp^N), log_ratio, p_doc_permuted and ratio_doc (vs within-document permutation),
    p_position and ratio_position (vs the position-matched expectation) [, bootstrap columns].
    See the module docstring for what each ratio isolates."""
    ns = _as_ns(ns)
    q = [(1 - level) / 2, (1 + level) / 2]
    frames = []
    check_ties(ties)
    for run in as_runs(runs):
        k_arr = as_ks(ks, run.vocab_size)
        n_docs = run.n_docs
        if ties == "expected":  # products of fractional probabilities: read the tokens
            st = run.token_stats()
            docs = doc_stats(st, k_arr, ties, n_docs)
            counts, succ, perm, posm = _window_doc_sums(st, ns, k_arr, ties, n_docs)
        else:
            with run.entry_summary.documents():  # the per-document tables, read once for this run
                docs = doc_stats(run.entry_summary, k_arr, ties, n_docs)
                counts, succ, perm, posm = _summary_window_sums(
                    run.entry_summary, docs, ns, ties, per_document=n_boot > 0
                )
        n_col = np.repeat(ns, len(k_arr))
        k_idx = np.tile(np.arange(len(k_arr)), len(ns))
        sums = (succ, counts, perm, posm, docs, k_idx, n_col)
        if counts.shape[0] == 1:  # pooled over documents: the documents' hits summed too
            docs = _pooled(docs)
            sums = (succ, counts, perm, posm, docs, k_idx, n_col)
        ones = np.ones(counts.shape[0])
        p_emp, rbp, ratio, ratio_doc, ratio_pos = (a[0] for a in _sequence_metrics(ones, *sums))
        n_win = counts.sum(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            frame = pd.DataFrame(
                {"N": n_col, "k": k_arr[k_idx], "n_windows": n_win.astype(np.int64)}
                | {"p_empirical": p_emp, "rbp": rbp, "p_predicted": rbp**n_col, "ratio": ratio}
                | {"log_ratio": np.log(ratio), "p_doc_permuted": perm.sum(axis=0) / n_win}
                | {"ratio_doc": ratio_doc, "p_position": posm.sum(axis=0) / n_win}
                | {"ratio_position": ratio_pos}
            )
        if n_boot > 0:
            seq = np.random.SeedSequence([seed, zlib.crc32(run.corpus.encode())])
            reps = [_sequence_metrics(w, *sums) for w in weight_chunks(n_docs, n_boot, seq)]
            names = {0: "p_empirical", 2: "ratio", 3: "ratio_doc", 4: "ratio_position"}
            for i, name in names.items():
                boot = np.concatenate([r[i] for r in reps])
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns -> NaN
                    frame[f"{name}_low"], frame[f"{name}_high"] = np.nanquantile(boot, q, axis=0)
        frames.append(frame.assign(family=run.family, model=run.model, corpus=run.corpus, S=run.S, ties=ties))
    table = pd.concat(frames, ignore_index=True)
    front = [*RUN_COLUMNS, TIE_COLUMN]
    return table[front + [c for c in table.columns if c not in front]]


def sequence_law(prefactor: Any, alpha: Any, N: Any, S: Any) -> Any:
    """-log p_{N,k} = C N S^-alpha (eq. 8), C the prefactor of the RBP_k power law: the one place
    the sigmoid's exponent is computed (numbers, arrays or table columns).

    Examples
    --------
    >>> import numpy as np
    >>> round(float(sequence_law(2.0, 0.1, 10, 1e8)), 4)  # -log p for N = 10 at S = 1e8
    3.1698
    >>> round(float(np.exp(-sequence_law(2.0, 0.1, 10, 1e8))), 4)
    0.042
    """
    return prefactor * N * S**-alpha


EXTRAPOLATION_DECADES = 12.0  # how far beyond the measured sizes the fitted law is drawn, at most
P_LOW, P_HIGH = 0.01, 0.95  # the extrapolation runs until the fitted p_{N,k} reaches these


def sequence_law_range(
    s_min: float,
    s_max: float,
    alpha: float,
    prefactor: float,
    ns: Sequence[float],
    *,
    decades: float = EXTRAPOLATION_DECADES,
    p_low: float = P_LOW,
    p_high: float = P_HIGH,
) -> tuple[float, float]:
    """The sizes over which p = exp(-C N S^-alpha) shows its sigmoid: down to where the largest N
    falls to p_low and up to where the smallest N reaches p_high (the law inverted), but never
    inside the measured range [s_min, s_max] and at most `decades` beyond it. Returns (s_min,
    s_max) unchanged when the law does not rise with S (alpha <= 0, C <= 0 or not finite)."""
    if not (np.isfinite(alpha) and np.isfinite(prefactor) and alpha > 0 and prefactor > 0 and len(ns)):
        return s_min, s_max
    low = (prefactor * max(ns) / -np.log(p_low)) ** (1 / alpha)
    high = (prefactor * min(ns) / -np.log(p_high)) ** (1 / alpha)
    span = 10.0**decades
    return float(np.clip(low, s_min / span, s_min)), float(np.clip(high, s_max, s_max * span))


def sequence_fits(table: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """Fits of -log p_{N,k} (empirical) against S per (family, corpus, ties, k, N): alpha, C =
    prefactor / N, r2; alpha_token from -log RBP_k on the same models; and the joint law
    -log p = C N S^-alpha with one alpha and C over all N (alpha_joint, C_joint, r2_joint,
    R^2 on the log(-log p) scale). Under eq. 7, alpha ~ alpha_token and C is flat in N."""
    by = [c for c in ("family", "corpus", "ties", "k") if c in table.columns]
    rows = []
    for key, frame in table.groupby(by, dropna=False):
        key = dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True))
        with np.errstate(divide="ignore"):
            frame = frame.assign(neg_log=-np.log(frame["p_empirical"]))
        ok = frame[np.isfinite(frame["neg_log"]) & (frame["neg_log"] > 0)]
        tok = frame.drop_duplicates("model")
        alpha_token = _try_alpha(tok["S"], -np.log(tok["rbp"]), level)
        joint = {}
        if ok["S"].nunique() >= 2:
            jf = fit_power_law(ok["S"], ok["neg_log"] / ok["N"], level)
            z = np.log(ok["neg_log"].to_numpy())
            pred = np.log(jf.prefactor * ok["N"].to_numpy() * ok["S"].to_numpy() ** -jf.alpha)
            tss = np.sum((z - z.mean()) ** 2)
            joint = {
                "alpha_joint": jf.alpha,
                "C_joint": jf.prefactor,
                "r2_joint": 1 - np.sum((z - pred) ** 2) / tss,
            }
        for n, part in ok.groupby("N"):
            row = key | {"N": n, "n_models": part["S"].nunique(), "alpha_token": alpha_token} | joint
            if part["S"].nunique() >= 2 and len(part) == part["S"].nunique():
                f = fit_power_law(part["S"], part["neg_log"], level)
                row |= {"alpha": f.alpha, "C": f.prefactor / n, "r2": f.r2}
                row |= {"alpha_low": f.alpha_low, "alpha_high": f.alpha_high}
            rows.append(row)
    cols = ["N", "n_models", "alpha", "alpha_low", "alpha_high", "C", "r2", "alpha_token"]
    return pd.DataFrame(rows).reindex(columns=by + cols + ["alpha_joint", "C_joint", "r2_joint"])


def _try_alpha(S: pd.Series, y: pd.Series, level: float) -> float:
    try:
        return fit_power_law(S, y, level).alpha
    except ValueError:
        return float("nan")
