"""rbplab.study.theory: the lognormal-theory tables of a study (via the Study methods)."""

from __future__ import annotations

import numpy as np
import pytest

from rbplab.study import Study, distribution, synthetic_study


@pytest.fixture(scope="module")
def synth() -> Study:
    return synthetic_study(n_tokens=4000, corpora=("a", "b"))


def test_lognormal_views(synth: Study) -> None:
    table = distribution.lognormal(synth)
    assert len(table) == len(synth.runs)
    assert distribution.lognormal(synth) is table  # fitted once
    pmf = distribution.rank_pmf(synth, "a")
    assert set(pmf["model"]) == {r.model for r in synth.runs if r.corpus == "a"}
    widths = np.diff(np.r_[pmf[pmf["model"] == "synthetic-0"]["rank"], synth.vocab_size + 1])
    emp = pmf[pmf["model"] == "synthetic-0"]["empirical"].to_numpy()
    assert (emp * widths).sum() == pytest.approx(1.0)
    comp = distribution.ce_comparison(synth, n_grid=5)
    assert set(comp["source"]) == {"empirical", "lognormal"}
    assert set(comp["quantity"]) == {"CE", "-log RBP_1"}
    exps = distribution.ce_exponents(synth)
    assert len(exps) == 2 * 2 * 2  # corpora x sources x quantities
    assert exps["alpha"].notna().all()
