"""Formulas pinned by values computed independently in the test (closed forms, numpy and scipy
written out, exact distributions), never by another path through the package: the percentile
levels of the fits' document bootstrap, the sigmoid of fitted sequence success, and the
prefactor and exponent of the compute-optimal frontier."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from scipy.optimize import minimize_scalar

from rbplab.analysis import emergence, fit
from rbplab.analysis.data_scaling import JointLawFit, frontier, frontier_rows
from rbplab.core.runs import Run
from rbplab.core.stats import TokenStats

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
def test_fitted_sequence_success_is_exp_of_minus_c_n_s_to_the_minus_alpha():
    fits = pd.DataFrame(
        {
            "family": ["f", "f", "f", "f"],
            "corpus": ["c", "c", "c", "c"],
            "metric": ["rbp", "rbp", "ce", "rbp"],
            "k": [1, 10, None, 100],
            "alpha": [0.31, 0.18, 0.5, np.nan],  # the CE row and the row without a fit are dropped
            "prefactor": [42.0, 7.5, 3.0, 2.0],
        }
    )
    ns, S = [1, 4, 16], [1e5, 2e6, 3e7]
    out = emergence.fitted_sequence_success(fits, ns, S)
    assert len(out) == 2 * len(ns) * len(S)
    for k, alpha, C in ((1, 0.31, 42.0), (10, 0.18, 7.5)):
        part = out[out["k"] == k]
        expected = {(n, s): C * n * s**-alpha for n in ns for s in S}
        assert len(part) == len(expected)
        for r in part.itertuples():
            assert r.neg_log_p == pytest.approx(expected[(r.N, r.S)], rel=1e-12)
            assert r.p_fitted == pytest.approx(np.exp(-expected[(r.N, r.S)]), rel=1e-12)


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
