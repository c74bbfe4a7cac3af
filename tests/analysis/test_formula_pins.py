"""Formulas pinned by values computed independently in the test (closed forms, numpy and scipy
written out, exact distributions), never by another path through the package: the percentile
levels of the fits', the decomposition's and the lognormal's document bootstraps (and the
lognormal's disjoint rank cells), a two-model fit's undefined scatter, the sigmoid of fitted
sequence success (`emergence.table`'s p_fit), and the prefactor, exponent, `differs` and `extrapolated` of the
compute-optimal frontier."""

import zlib

import numpy as np
import pandas as pd
import pytest
from scipy import special
from scipy import stats as sps
from scipy.optimize import minimize, minimize_scalar

from rbplab.analysis import fit
from rbplab.analysis.data_scaling import JointLawFit, frontier, frontier_rows
from rbplab.analysis.decomposition_bootstrap import bootstrap_decomposition_fits
from rbplab.analysis.lognormal import lognormal_interval
from rbplab.analysis.metrics import bootstrap_weights
from rbplab.core.runs import Run
from rbplab.core.stats import TokenStats, summary_ks
from rbplab.study import emergence
from rbplab.study.synthetic import synthetic_study

# ---- percentile levels of bootstrap_fits --------------------------------------------------------
# Three models share N_DOCS documents of four tokens. The two larger models get the same share of
# top-1 tokens in every document, so their RBP_1 is the same on any resample; the smallest model
# has 3 hits in each of the N_X "X" documents and 1 in the others. A document-bootstrap replicate
# draws N_DOCS documents with replacement, so the number j of X documents drawn is
# Binomial(N_DOCS, N_X / N_DOCS), RBP_1 of the small model is (N_DOCS + 2 j) / (4 N_DOCS), and
# alpha and R^2 of a replicate are known functions of j: their replicate distributions are known
# exactly. The design (N_DOCS, N_X) was chosen so that every quantile asked for below lies at least
# 6 Monte Carlo standard errors (with N_BOOT replicates) away from a jump of the exact CDF, so the
# sample quantile equals the exact one; and so that a quantile level off by a factor of two in
# the tail (1 - level instead of (1 - level) / 2) lands on another atom.
N_DOCS, N_X, N_BOOT = 25, 12, 20_000
SIZES = np.array([1e6, 1e7, 1e8])
HITS_PER_DOC = {0: None, 1: 2, 2: 3}  # model index -> top-1 tokens per document (None: X/Y docs)


def _paired_runs() -> list[Run]:
    doc = np.repeat(np.arange(N_DOCS), 4)
    runs = []
    for i, S in enumerate(SIZES):
        hits = HITS_PER_DOC[i]
        if hits is None:
            per_doc = np.where(np.arange(N_DOCS) < N_X, 3, 1)
        else:
            per_doc = np.full(N_DOCS, hits)
        ranks = np.concatenate([[1] * h + [2] * (4 - h) for h in per_doc])
        stats = TokenStats.from_ranks(ranks, 10, doc=doc, nll=0.1 + np.log(ranks))
        runs.append(Run("fam", f"m{i}", "corpus", float(S), stats))
    return runs


def _alpha_r2(j: int) -> tuple[float, float]:
    """alpha and R^2 of the OLS of log(-log RBP_1) on log S when j X documents are drawn."""
    rbp = np.array([(N_DOCS + 2 * j) / (4 * N_DOCS), 2 / 4, 3 / 4])
    X = np.column_stack([np.ones(3), np.log(SIZES)])
    z = np.log(-np.log(rbp))
    beta, *_ = np.linalg.lstsq(X, z, rcond=None)
    resid = z - X @ beta
    return float(-beta[1]), float(1 - resid @ resid / np.sum((z - z.mean()) ** 2))


def _exact_quantile(values: np.ndarray, pmf: np.ndarray, q: float) -> float:
    """The q-quantile of a discrete distribution (smallest value whose CDF reaches q), after
    checking that q lies well away from every jump of the CDF (see the design note above)."""
    order = np.argsort(values, kind="stable")
    cdf = np.cumsum(pmf[order])
    margin = np.min(np.abs(cdf - q)) / np.sqrt(q * (1 - q) / N_BOOT)
    assert margin > 6, f"design too close to a CDF jump at q={q} ({margin:.1f} Monte Carlo SE)"
    return float(values[order][np.searchsorted(cdf, q)])


@pytest.mark.parametrize("level", [0.95, 0.8])
def test_bootstrap_fit_intervals_are_the_exact_percentiles_of_the_document_resamples(level):
    out = fit.bootstrap_fits(_paired_runs(), ks=[1], n_boot=N_BOOT, seed=3, level=level)
    row = out[out["metric"] == "rbp"].iloc[0]
    j = np.arange(N_DOCS + 1)
    pmf = sps.binom.pmf(j, N_DOCS, N_X / N_DOCS)
    alpha, r2 = np.array([_alpha_r2(v) for v in j]).T
    low, high = (1 - level) / 2, (1 + level) / 2
    assert row["n_boot_valid"] == N_BOOT
    assert row["alpha"] == pytest.approx(_alpha_r2(N_X)[0], rel=1e-12)
    assert row["r2"] == pytest.approx(_alpha_r2(N_X)[1], rel=1e-12)
    assert row["alpha_boot_low"] == pytest.approx(_exact_quantile(alpha, pmf, low), rel=1e-12)
    assert row["alpha_boot_high"] == pytest.approx(_exact_quantile(alpha, pmf, high), rel=1e-12)
    assert row["r2_boot_low"] == pytest.approx(_exact_quantile(r2, pmf, low), rel=1e-12)
    assert row["r2_boot_median"] == pytest.approx(_exact_quantile(r2, pmf, 0.5), rel=1e-12)
    assert row["r2_boot_high"] == pytest.approx(_exact_quantile(r2, pmf, high), rel=1e-12)
    # The standard deviation of the exact replicate distribution (Monte Carlo error ~0.5%).
    mean = pmf @ alpha
    assert row["alpha_boot_se"] == pytest.approx(np.sqrt(pmf @ (alpha - mean) ** 2), rel=0.03)


# ---- fitted sequence success (paper eq. 8) --------------------------------------------------------
def test_study_emergence_p_fit_is_exp_of_minus_c_n_s_to_the_minus_alpha():
    # C and alpha fitted by hand (OLS of log(-log RBP_k) on log S per corpus and k), then eq. 8
    study = synthetic_study(sizes=(1e5, 3e5, 1e6, 3e6), n_tokens=2000, n_docs=10)
    ks, ns = [1, 10], [1, 4, 16]
    points = study.points(ks)
    out = emergence.table(study, ks, ns)
    assert len(out) == len(points) * len(ns)
    for (corpus, k), group in points.groupby(["corpus", "k"]):
        slope, intercept = np.polyfit(np.log(group["S"]), np.log(group["neg_log_rbp"]), 1)
        alpha, C = -slope, np.exp(intercept)
        rows = out[(out["corpus"] == corpus) & (out["k"] == k)]
        assert len(rows) == len(group) * len(ns)
        expected = np.exp(-C * rows["N"] * rows["S"] ** -alpha)
        np.testing.assert_allclose(rows["p_fit"], expected, rtol=1e-9)


# ---- the compute-optimal frontier (Hoffmann et al. 2022, eq. 4) ----------------------------------
# Laws with alpha != beta and alpha A / (beta B) far from 1, so that a wrong exponent of G, a
# swapped ratio, a missing 6 or a swapped frontier exponent each changes S_opt.
LAWS = {
    "chinchilla-like": {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28},
    "data-hungry": {"E": 0.6, "A": 8.0, "B": 2000.0, "alpha": 0.22, "beta": 0.41},
}
COMPUTES = np.array([1e15, 3e17, 1e20])


def _law(p: dict) -> JointLawFit:
    return JointLawFit(**p, objective=0.0, n=0, converged=True)


def _closed_form_s_opt(p: dict, C: np.ndarray) -> np.ndarray:
    G = (p["alpha"] * p["A"] / (p["beta"] * p["B"])) ** (1 / (p["alpha"] + p["beta"]))
    return G * (C / 6) ** (p["beta"] / (p["alpha"] + p["beta"]))


def _loss(p: dict, S, D):
    return p["E"] + p["A"] * np.asarray(S) ** -p["alpha"] + p["B"] * np.asarray(D) ** -p["beta"]


def _brute_force_s_opt(p: dict, c: float) -> float:
    """argmin over S of L(S, C / (6 S)), written out: a dense grid, then a bounded refinement."""
    log_s = np.linspace(0, np.log(c / 6), 20_001)
    best = log_s[np.argmin(_loss(p, np.exp(log_s), c / (6 * np.exp(log_s))))]
    res = minimize_scalar(
        lambda v: float(_loss(p, np.exp(v), c / (6 * np.exp(v)))),
        bounds=(best - 1e-3 * np.log(c), best + 1e-3 * np.log(c)),
        method="bounded",
        options={"xatol": 1e-12},
    )
    return float(np.exp(res.x))


@pytest.mark.parametrize("name", list(LAWS))
def test_closed_form_frontier_prefactor_and_exponent(name):
    p = LAWS[name]
    law = _law(p)
    expected = _closed_form_s_opt(p, COMPUTES)
    # the closed form itself is the minimiser of the law at fixed compute
    np.testing.assert_allclose(expected, [_brute_force_s_opt(p, c) for c in COMPUTES], rtol=1e-5)
    assert law.frontier_exponent == pytest.approx(p["beta"] / (p["alpha"] + p["beta"]), rel=1e-14)
    np.testing.assert_allclose(law.optimal_size(COMPUTES), expected, rtol=1e-12)
    table = frontier(law, COMPUTES)
    np.testing.assert_allclose(table["S_opt"], expected, rtol=1e-5)
    np.testing.assert_allclose(table["D_opt"], COMPUTES / (6 * expected), rtol=1e-5)
    np.testing.assert_allclose(table["loss_opt"], _loss(p, expected, COMPUTES / (6 * expected)), rtol=1e-9)


def test_frontier_comparison_sizes_and_intervals_from_the_closed_form():
    rng = np.random.default_rng(11)
    ref, other = LAWS["chinchilla-like"], LAWS["data-hungry"]
    n_boot, level = 400, 0.9
    # Paired replicates: log-normal jitter of every parameter, a frontier exponent to match.
    boots = {}
    for name, p in (("ce", ref), ("rbp", other)):
        frame = pd.DataFrame({key: value * np.exp(rng.normal(0, 0.05, n_boot)) for key, value in p.items()})
        boots[name] = frame.assign(frontier_exponent=frame["beta"] / (frame["alpha"] + frame["beta"]))
    fits = {"ce": _law(ref), "rbp": _law(other)}
    S = np.array([1e6, 1e7, 1e8, 1e9])
    D = np.array([1e9, 1e10, 1e11, 3e11])
    out = frontier_rows(fits, boots, S, D, reference="ce", level=level).iloc[0]

    C = float(np.exp(np.mean(np.log(6 * S * D))))
    assert out["C"] == pytest.approx(C, rel=1e-12)
    s_opt, ref_s_opt = _closed_form_s_opt(other, np.array(C))[()], _closed_form_s_opt(ref, np.array(C))[()]
    assert out["S_opt"] == pytest.approx(s_opt, rel=1e-12)
    assert out["reference_S_opt"] == pytest.approx(ref_s_opt, rel=1e-12)
    assert out["log10_size_ratio"] == pytest.approx(np.log10(s_opt / ref_s_opt), rel=1e-12)
    a, a_ref = (p["beta"] / (p["alpha"] + p["beta"]) for p in (other, ref))
    assert (out["exponent"], out["reference_exponent"]) == pytest.approx((a, a_ref), rel=1e-12)
    assert out["difference"] == pytest.approx(a - a_ref, rel=1e-12)

    tails = [(1 - level) / 2, (1 + level) / 2]
    diff = boots["rbp"]["frontier_exponent"] - boots["ce"]["frontier_exponent"]
    diff_q = np.quantile(diff, tails)
    assert (out["difference_low"], out["difference_high"]) == pytest.approx(tuple(diff_q), rel=1e-12)

    def replicate_s_opt(frame: pd.DataFrame) -> np.ndarray:
        p = {key: frame[key].to_numpy() for key in ("A", "B", "alpha", "beta")}
        return _closed_form_s_opt(p, np.array(C))

    ratio = np.log10(replicate_s_opt(boots["rbp"])) - np.log10(replicate_s_opt(boots["ce"]))
    ratio_q = np.quantile(ratio, tails)
    low, high = out["log10_size_ratio_low"], out["log10_size_ratio_high"]
    assert (low, high) == pytest.approx(tuple(ratio_q), rel=1e-12)
    assert out["differs"] == bool(not diff_q[0] <= 0 <= diff_q[1] or not ratio_q[0] <= 0 <= ratio_q[1])
    inside = [S.min() <= s <= S.max() and D.min() <= C / (6 * s) <= D.max() for s in (s_opt, ref_s_opt)]
    assert out["extrapolated"] == (not all(inside))


# ---- a two-model fit: no residual degrees of freedom ----------------------------------------------
def test_two_model_fit_has_its_exact_line_and_nan_where_df_is_zero():
    S, loss = np.array([3e6, 4e8]), np.array([1.7, 0.9])
    table = pd.DataFrame({"model": ["a", "b"], "S": S, "loss": loss})
    row = fit.scaling_fits(table).iloc[0]
    slope = (np.log(loss[1]) - np.log(loss[0])) / (np.log(S[1]) - np.log(S[0]))  # through both points
    assert row["alpha"] == pytest.approx(-slope, rel=1e-12)
    assert row["prefactor"] == pytest.approx(loss[0] / S[0] ** slope, rel=1e-12)
    assert row["n_models"] == 2 and row["note"] == fit.TWO_MODELS_NOTE
    # the docstring's promise: undefined, not a perfect fit with zero scatter
    for name in ("r2", "alpha_se", "alpha_low", "alpha_high", "residual_sd"):
        assert np.isnan(row[name]), name


# ---- percentile levels of the decomposition's and the lognormal's document bootstraps -------------
# Each document is of one of two kinds, so a replicate's statistics depend only on which documents
# it draws; the test recomputes them from the resampling counts (`bootstrap_weights`, the documented
# draw that both functions use) with numpy and scipy written out, and takes the percentiles at
# (1 - level) / 2 and (1 + level) / 2. The design checks that quantiles at the wrong levels
# (1 - level, level) would differ, so such an error cannot pass.
def _two_kinds(kind_x: list[int], kind_y: list[int], n_docs: int, n_x: int, vocab: int) -> TokenStats:
    ranks, doc = [], []
    for d in range(n_docs):
        part = kind_x if d < n_x else kind_y
        ranks += part
        doc += [d] * len(part)
    ranks = np.array(ranks)
    return TokenStats.from_ranks(ranks, vocab, doc=np.array(doc), nll=0.2 + np.log(ranks))


def _percentiles(values: np.ndarray, level: float) -> np.ndarray:
    return np.quantile(values, [(1 - level) / 2, (1 + level) / 2])


def _wrong_percentiles(values: np.ndarray, level: float) -> np.ndarray:
    return np.quantile(values, [1 - level, level])


@pytest.mark.parametrize("level", [0.95, 0.8])
def test_decomposition_intervals_are_the_percentiles_of_the_document_resamples(level):
    # Three models score the same 30 documents; each replicate draws documents with replacement
    # (one draw per corpus, shared by its models), recomputes every model's EE and MRR by hand, and
    # fits their exponents against S by least squares in log-log.
    n_docs, per_doc, vocab, n_boot, seed, corpus = 30, 20, 50, 400, 5, "c"
    sizes = np.array([1e6, 1e7, 1e8])
    rng = np.random.default_rng(17)
    doc = np.arange(n_docs).repeat(per_doc)
    hardness = rng.uniform(0.2, 0.5, n_docs).repeat(per_doc)
    ranks = [np.minimum(rng.geometric(np.minimum(hardness * (1 + 0.4 * i), 0.95)), vocab) for i in range(3)]
    stats = [TokenStats.from_ranks(r, vocab, doc=doc, nll=0.2 + np.log(r)) for r in ranks]
    runs = [Run("f", f"m{i}", corpus, float(S), s) for i, (S, s) in enumerate(zip(sizes, stats, strict=True))]
    out = bootstrap_decomposition_fits(runs, stats, "pessimistic", n_boot=n_boot, seed=seed, level=level)
    out = out.set_index("metric")
    w = bootstrap_weights(n_docs, n_boot, np.random.SeedSequence([seed, zlib.crc32(corpus.encode())]))
    loss = {"mrr": [], "ee": []}
    full = {"mrr": [], "ee": []}
    for r in ranks:
        # Per document: tokens at each RBE value (pessimistic RBE = rank - 1) and sum of 1/rank.
        counts = np.zeros((n_docs, vocab))
        np.add.at(counts, (doc, r - 1), 1.0)
        reciprocal = np.bincount(doc, weights=1.0 / r, minlength=n_docs)
        for target, weights in ((loss, w), (full, np.ones((1, n_docs)))):
            target["mrr"].append(-np.log((weights @ reciprocal) / (weights.sum(axis=1) * per_doc)))
            p = (weights @ counts) / (weights @ counts).sum(axis=1, keepdims=True)
            target["ee"].append(-np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=1))
    for name in ("mrr", "ee"):
        alphas = -np.polyfit(np.log(sizes), np.log(np.array(loss[name])), 1)[0]
        expected = _percentiles(alphas, level)
        assert not np.allclose(expected, _wrong_percentiles(alphas, level))  # the design can tell
        got = out.loc[name, ["alpha_boot_low", "alpha_boot_high"]].to_numpy(float)
        np.testing.assert_allclose(got, expected, rtol=1e-9)
        alpha = -np.polyfit(np.log(sizes), np.log(np.array(full[name])[:, 0]), 1)[0]
        assert out.loc[name, "alpha"] == pytest.approx(alpha, rel=1e-9)
        assert out.loc[name, "n_boot_valid"] == n_boot


def _binned_lognormal_mle(first, last, counts, vocab):
    """MLE of the lognormal discretised to cells [first, last] of ranks and truncated to
    [1/2, |V| + 1/2), written with scipy's normal CDF and fitted by Nelder-Mead."""

    def mean_nll(theta):
        mu, sigma = theta
        if sigma <= 0:
            return np.inf
        cdf = special.ndtr
        cells = cdf((np.log(last + 0.5) - mu) / sigma) - cdf((np.log(first - 0.5) - mu) / sigma)
        total = cdf((np.log(vocab + 0.5) - mu) / sigma) - cdf((np.log(0.5) - mu) / sigma)
        return -(counts @ np.log(np.maximum(cells, 1e-300)) - counts.sum() * np.log(total)) / counts.sum()

    options = {"xatol": 1e-10, "fatol": 1e-14, "maxiter": 4000}
    return minimize(mean_nll, [1.0, 1.5], method="Nelder-Mead", options=options).x


@pytest.mark.parametrize("level", [0.95, 0.8])
def test_lognormal_intervals_are_percentiles_of_fits_on_disjoint_rank_cells(level):
    vocab, n_docs, n_x, n_boot, seed = 1000, 10, 4, 150, 2
    # Two kinds of document, with ranks at the quantiles of two lognormals.
    z = sps.norm.ppf((np.arange(40) + 0.5) / 40)
    x = np.maximum(np.round(np.exp(1.0 + 1.3 * z)), 1).astype(int).tolist()
    y = np.maximum(np.round(np.exp(2.0 + 1.1 * z)), 1).astype(int).tolist()
    stats = _two_kinds(x, y, n_docs, n_x, vocab)
    # The summary grid's cells, disjoint and covering 1..|V|: [1, k_1], [k_1 + 1, k_2], ..., [k_m + 1, |V|]
    last = np.r_[summary_ks(vocab), vocab]
    first = np.r_[1, last[:-1] + 1]

    def cell_counts(ranks: list[int]) -> np.ndarray:
        return np.bincount(np.searchsorted(last, ranks), minlength=len(last)).astype(float)

    cx, cy = cell_counts(x), cell_counts(y)
    fits = {
        j: _binned_lognormal_mle(first, last, j * cx + (n_docs - j) * cy, vocab) for j in range(n_docs + 1)
    }
    j = bootstrap_weights(n_docs, n_boot, seed)[:, :n_x].sum(axis=1).astype(int)
    mu_b, sigma_b = np.array([fits[v] for v in j]).T
    mu_all, sigma_all = fits[n_x]  # the binned fit on all documents
    shifts = {
        "mu": mu_b - mu_all,
        "sigma": sigma_b - sigma_all,
        "mu_over_sigma": mu_b / sigma_b - mu_all / sigma_all,
    }
    out = lognormal_interval(stats, "pessimistic", level=level, n_boot=n_boot, seed=seed)
    for name, shift in shifts.items():
        expected = _percentiles(shift, level)
        assert np.max(np.abs(expected - _wrong_percentiles(shift, level))) > 1e-2, name  # the design can tell
        got = np.array([out[f"{name}_low"], out[f"{name}_high"]]) - out[name]
        np.testing.assert_allclose(got, expected, atol=1e-4, err_msg=name)


# ---- which frontier comparisons `differs` and which are `extrapolated` -----------------------------
def _jittered(p: dict, n_boot: int, rng: np.random.Generator) -> pd.DataFrame:
    """Bootstrap-like replicates of a law: every parameter log-normally jittered by 5 %."""
    frame = pd.DataFrame({key: value * np.exp(rng.normal(0, 0.05, n_boot)) for key, value in p.items()})
    return frame.assign(frontier_exponent=frame["beta"] / (frame["alpha"] + frame["beta"]))


def _tails(values: np.ndarray, level: float) -> np.ndarray:
    return np.quantile(values, [(1 - level) / 2, (1 + level) / 2])


def test_differs_when_only_the_exponent_interval_excludes_zero():
    """A law whose frontier crosses the reference's at C: its exponent differs, its optimal size at
    C does not. Either interval excluding 0 is a difference."""
    C, level, n_boot = 1e20, 0.95, 400
    ref = LAWS["chinchilla-like"]
    other = {"E": 0.6, "A": 8.0, "alpha": 0.22, "beta": 0.41}
    a = other["beta"] / (other["alpha"] + other["beta"])
    G = _closed_form_s_opt(ref, np.array(C))[()] / (C / 6) ** a  # the same S_opt at C
    other["B"] = other["alpha"] * other["A"] / (other["beta"] * G ** (other["alpha"] + other["beta"]))
    rng = np.random.default_rng(4)
    boots = {"ce": _jittered(ref, n_boot, rng), "rbp": _jittered(other, n_boot, rng)}

    def replicate_s_opt(frame: pd.DataFrame) -> np.ndarray:
        return _closed_form_s_opt(
            {key: frame[key].to_numpy() for key in ("A", "B", "alpha", "beta")}, np.array(C)
        )

    diff = _tails(boots["rbp"]["frontier_exponent"] - boots["ce"]["frontier_exponent"], level)
    ratio = _tails(np.log10(replicate_s_opt(boots["rbp"]) / replicate_s_opt(boots["ce"])), level)
    assert diff[0] > 0 and ratio[0] < 0 < ratio[1]  # the design: exactly one interval excludes 0
    S, D = np.array([1e8, 1e9, 1e10]), np.array([1e9, 1e10, 1e11])
    out = frontier_rows({"ce": _law(ref), "rbp": _law(other)}, boots, S, D, reference="ce", C=C, level=level)
    row = out.iloc[0]
    assert (row["difference_low"], row["difference_high"]) == pytest.approx(tuple(diff), rel=1e-12)
    assert (row["log10_size_ratio_low"], row["log10_size_ratio_high"]) == pytest.approx(
        tuple(ratio), rel=1e-9
    )
    assert row["log10_size_ratio"] == pytest.approx(0.0, abs=1e-9)
    assert bool(row["differs"]) is True
    # Neither interval excluding 0: the same law on both sides, replicates paired
    same = frontier_rows(
        {"ce": _law(ref), "rbp": _law(ref)},
        {"ce": boots["ce"], "rbp": boots["ce"].copy()},
        S,
        D,
        "ce",
        C,
        level,
    )
    assert bool(same.iloc[0]["differs"]) is False


def test_extrapolated_when_the_optimal_size_is_measured_but_its_data_are_not():
    """Both optimal sizes at C lie inside the measured S range, their D_opt = C / (6 S_opt) beyond
    the measured D range: the comparison extrapolates the laws in D."""
    C, level = 1e20, 0.9
    ref, other = LAWS["chinchilla-like"], LAWS["data-hungry"]
    s_opt = np.array([_closed_form_s_opt(p, np.array(C))[()] for p in (ref, other)])
    d_opt = C / (6 * s_opt)
    S = np.geomspace(s_opt.min() / 3, s_opt.max() * 3, 4)
    rng = np.random.default_rng(8)
    boots = {"ce": _jittered(ref, 50, rng), "rbp": _jittered(other, 50, rng)}
    fits = {"ce": _law(ref), "rbp": _law(other)}
    for D, expected in (
        (np.geomspace(d_opt.min() / 3, d_opt.max() * 3, 4), False),
        (np.geomspace(d_opt.max() * 10, d_opt.max() * 1000, 4), True),
    ):
        inside = [
            S.min() <= s <= S.max() and D.min() <= d <= D.max() for s, d in zip(s_opt, d_opt, strict=True)
        ]
        assert all(S.min() <= s <= S.max() for s in s_opt) and (not all(inside)) == expected  # the design
        row = frontier_rows(fits, boots, S, D, reference="ce", C=C, level=level).iloc[0]
        np.testing.assert_allclose([row["S_opt"], row["reference_S_opt"]], s_opt[::-1], rtol=1e-12)
        assert bool(row["extrapolated"]) is expected
