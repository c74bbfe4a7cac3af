"""`size.bands` and `emergence.table` pinned by values computed independently in the test: OLS on
an explicit design matrix, the t quantile from scipy, and sequence success counted window by
window; never another path through the package."""

import numpy as np
import pytest
from scipy import stats as sps

from rbplab.core.runs import Run
from rbplab.core.stats import TokenStats
from rbplab.study import Study, emergence, size

# Five models, one corpus of 8 documents x 50 tokens. Model i has TOP1[i] tokens of rank 1,
# TOP3[i] of ranks 2-3 and the rest of rank 7, placed by a fixed permutation so that hits cluster
# differently in each document. -log RBP_k falls with S, with scatter around a power law (so the
# residual SD, and every band, is not 0).
SIZES = np.array([1e5, 4e5, 2e6, 9e6, 5e7])
TOP1 = np.array([110, 150, 170, 230, 260])
TOP3 = np.array([60, 70, 95, 80, 90])
N_DOCS, DOC_LEN = 8, 50
N_TOKENS = N_DOCS * DOC_LEN


def _ranks(i: int) -> np.ndarray:
    ranks = np.full(N_TOKENS, 7)
    ranks[: TOP1[i]] = 1
    ranks[TOP1[i] : TOP1[i] + TOP3[i]] = np.tile([2, 3], TOP3[i])[: TOP3[i]]
    return np.random.default_rng(i).permutation(ranks)


def _study() -> Study:
    doc = np.repeat(np.arange(N_DOCS), DOC_LEN)
    stats = [TokenStats.from_ranks(_ranks(i), 50, doc=doc, nll=np.log(_ranks(i))) for i in range(len(SIZES))]
    return Study(
        [
            Run("fam", f"m{i}", "corpus", float(S), s)
            for i, (S, s) in enumerate(zip(SIZES, stats, strict=True))
        ]
    )


def _rbp(k: int) -> np.ndarray:
    """RBP_k per model (k = 1 or 3) from the construction: counts, not ranks."""
    assert k in (1, 3)
    return (TOP1 + (TOP3 if k == 3 else 0)) / N_TOKENS


def _ols(k: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Coefficients (log A, -alpha) of log(-log RBP_k) on log S, (X'X)^-1 and s^2."""
    X = np.column_stack([np.ones(len(SIZES)), np.log(SIZES)])
    z = np.log(-np.log(_rbp(k)))
    beta, *_ = np.linalg.lstsq(X, z, rcond=None)
    resid = z - X @ beta
    return beta, np.linalg.inv(X.T @ X), float(resid @ resid / (len(z) - 2))


@pytest.mark.parametrize("kind", ["confidence", "prediction"])
@pytest.mark.parametrize("level", [0.95, 0.8])
def test_band_is_the_t_interval_of_the_ols_line_in_log_space(kind, level):
    study = Study(_study().runs, level=level)
    bands = size.bands(study, [1, 3], kind=kind)
    assert set(bands["k"]) == {1, 3}
    t = sps.t.ppf((1 + level) / 2, len(SIZES) - 2)
    for k in (1, 3):
        part = bands[bands["k"] == k]
        assert part["S"].min() == pytest.approx(SIZES.min()) and part["S"].max() == pytest.approx(SIZES.max())
        beta, inv, s2 = _ols(k)
        x0 = np.column_stack([np.ones(len(part)), np.log(part["S"].to_numpy())])
        centre = x0 @ beta
        var_mean = s2 * np.einsum("ij,jk,ik->i", x0, inv, x0)  # Var of the fitted mean at x0
        se = np.sqrt(var_mean + (s2 if kind == "prediction" else 0.0))
        np.testing.assert_allclose(part["fit"], np.exp(centre), rtol=1e-10)
        np.testing.assert_allclose(part["fit_low"], np.exp(centre - t * se), rtol=1e-10)
        np.testing.assert_allclose(part["fit_high"], np.exp(centre + t * se), rtol=1e-10)


def _windows_all_in_top_k(ranks: np.ndarray, k: int, n: int) -> tuple[int, int]:
    """(windows, successes) of n consecutive tokens inside one document, counted one by one."""
    windows = successes = 0
    for d in range(N_DOCS):
        doc = ranks[d * DOC_LEN : (d + 1) * DOC_LEN]
        for start in range(DOC_LEN - n + 1):
            windows += 1
            successes += bool(np.all(doc[start : start + n] <= k))
    return windows, successes


def test_emergence_fitted_curve_and_sequence_success_by_hand():
    ns = [1, 3, 6]
    table = emergence.table(_study(), [1, 3], ns)
    assert len(table) == len(SIZES) * 2 * len(ns)
    for k in (1, 3):
        beta, _, _ = _ols(k)
        C, alpha = np.exp(beta[0]), -beta[1]
        for r in table[table["k"] == k].itertuples():
            i = int(np.flatnonzero(SIZES == r.S)[0])
            assert r.alpha == pytest.approx(alpha, rel=1e-10)
            assert r.prefactor == pytest.approx(C, rel=1e-10)
            assert r.p_fit == pytest.approx(np.exp(-C * r.N * r.S**-alpha), rel=1e-10)
            assert r.x == pytest.approx(r.N * r.S**-alpha, rel=1e-10)
            assert r.p_pred == pytest.approx(_rbp(k)[i] ** r.N, rel=1e-12)
            assert r.neg_log_p_pred == pytest.approx(-r.N * np.log(_rbp(k)[i]), rel=1e-12)
            windows, successes = _windows_all_in_top_k(_ranks(i), k, r.N)
            assert r.p_emp == pytest.approx(successes / windows, rel=1e-12)
            if successes:
                assert r.neg_log_p_emp == pytest.approx(-np.log(successes / windows), rel=1e-12)
