"""The bundled GPT-2 reference table (the paper's own numbers) and rbplab's fit of it."""

from __future__ import annotations

import numpy as np
import pytest

from rbplab.analysis import fit
from rbplab.catalog import paper_reference, paper_reference_meta


def test_reference_table_is_complete_and_sourced():
    table = paper_reference()
    assert sorted(table["model"].unique()) == ["gpt2", "gpt2-large", "gpt2-medium", "gpt2-xl"]
    assert sorted(table["k"].unique()) == [1, 10, 100, 1000, 10000]
    assert len(table) == 20 and (table["ties"] == "optimistic").all()
    # RBP_k grows with k within a model; CE is one number per model
    for _, part in table.groupby("model"):
        assert part.sort_values("k")["rbp"].is_monotonic_increasing
        assert part["ce"].nunique() == 1
    meta = paper_reference_meta()
    assert meta["repository"].endswith("ybq22/relative-based-scaling-law")
    assert len(meta["commit"]) == 40 and meta["produced_by"] == "scripts/build_reference.py"


def test_rbplab_fit_of_the_reference_gives_the_papers_exponents():
    table = paper_reference().assign(loss=lambda t: t["neg_log_rbp"], metric="rbp")
    fits = fit.scaling_fits(table, by=["family", "corpus", "k"]).set_index("k")
    # the values the issue measured with an independent OLS
    assert fits.loc[1, "alpha"] == pytest.approx(0.056, abs=5e-4)
    assert fits.loc[1, "r2"] == pytest.approx(0.983, abs=5e-4)
    assert fits.loc[10, "alpha"] == pytest.approx(0.093, abs=5e-4)
    assert fits.loc[100, "alpha"] == pytest.approx(0.126, abs=5e-4)
    # and numpy's own least squares on the same numbers, to rounding
    for k in (1, 10, 100, 1000):
        part = table[table["k"] == k]
        slope = np.polyfit(np.log(part["S"]), np.log(-np.log(part["rbp"])), 1)[0]
        assert fits.loc[k, "alpha"] == pytest.approx(-slope, rel=1e-10)
