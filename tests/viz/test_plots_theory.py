"""rbplab.viz.plots.distribution: lognormal-theory figures carry exactly the data of their frames."""

from __future__ import annotations

import numpy as np
import pytest

from rbplab.study import Study, distribution, synthetic_study
from rbplab.viz import plots


@pytest.fixture(scope="module")
def study() -> Study:
    return synthetic_study(n_tokens=3000, corpora=("a", "b"))


def test_rank_distribution_drops_empty_bins(study: Study) -> None:
    pmf = distribution.rank_pmf(study, "a")
    pmf.loc[pmf.index[2], "empirical"] = 0.0  # rank 3 of synthetic-0
    fig = plots.rank_distribution(pmf)
    n_models = pmf["model"].nunique()
    assert len(fig.data) == 2 * n_models
    first = pmf[pmf["model"] == "synthetic-0"]
    assert 3 not in fig.data[0].x and 4 in fig.data[0].x  # the emptied bin (rank 4) is gone
    assert len(fig.data[0].x) == (first["empirical"] > 0).sum()
    assert len(fig.data[1].x) == len(first)  # the fitted curve keeps every bin


def test_lognormal_and_ce_figures(study: Study) -> None:
    ln = distribution.lognormal(study)
    fig = plots.lognormal_params(ln)
    assert len(fig.data) == 3 * 2
    assert [fig.layout[f"yaxis{i}"].title.text for i in ("", "2", "3")] == ["μ", "σ", "μ/σ"]
    with_ci = ln.assign(mu_low=ln["mu"] - 0.1, mu_high=ln["mu"] + 0.3)
    mu = [t for t in plots.lognormal_params(with_ci).data if t.meta == "mu"]
    assert all(np.allclose(t.error_y.array, 0.3) and np.allclose(t.error_y.arrayminus, 0.1) for t in mu)
    ce = plots.ce_vs_rbp(distribution.ce_comparison(study, n_grid=6))
    assert {t.xaxis for t in ce.data} == {"x", "x2"}
    right = [t for t in ce.data if t.xaxis == "x2"]
    assert all(len(t.x) == 6 for t in right)
