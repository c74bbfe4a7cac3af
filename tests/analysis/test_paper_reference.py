"""The bundled GPT-2 reference table (the paper's own numbers) and rbplab's fit of it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rbplab.analysis import fit
from rbplab.catalog import paper_reference
from rbplab.catalog.registry import paper_reference_meta


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


def test_compare_fits_pairs_each_fit_with_the_reference_fit_of_its_family_and_k():
    """This study's exponents beside the paper's: matched on family and k, the reference's corpus
    and ties carried along, ratio and interval overlap as computed by hand."""
    from rbplab.analysis.fit import compare_fits

    fits = pd.DataFrame(
        {
            "family": ["gpt2", "gpt2", "gpt2", "micro"],
            "corpus": ["wikipedia", "wikipedia", "prose", "prose"],
            "ties": "pessimistic",
            "k": [1, 10, 1, 1],
            "alpha": [0.10, 0.05, 0.20, 0.30],
            "alpha_low": [0.08, 0.04, 0.19, 0.20],
            "alpha_high": [0.12, 0.06, 0.21, 0.40],
            "r2": 0.99,
            "n_models": 4,
        }
    )
    reference = pd.DataFrame(
        {
            "family": ["gpt2", "gpt2", "gpt2"],
            "corpus": "wikipedia",
            "ties": "optimistic",
            "k": [1, 10, 1000],
            "alpha": [0.11, 0.08, 0.01],
            "alpha_low": [0.105, 0.07, 0.0],
            "alpha_high": [0.115, 0.09, 0.02],
            "r2": 0.98,
            "n_models": 4,
        }
    )
    table = compare_fits(fits, reference).set_index(["corpus", "k"])
    assert sorted(table.index) == [("prose", 1), ("wikipedia", 1), ("wikipedia", 10)]  # no micro, no k=1000
    assert table.loc[("wikipedia", 1), "alpha_ratio"] == pytest.approx(0.10 / 0.11)
    assert table.loc[("wikipedia", 10), "alpha_ratio"] == pytest.approx(0.05 / 0.08)
    assert table.loc[("prose", 1), "alpha_ratio"] == pytest.approx(0.20 / 0.11)
    # [0.08, 0.12] meets [0.105, 0.115]; [0.04, 0.06] misses [0.07, 0.09]; [0.19, 0.21] lies above
    assert table["intervals_overlap"].to_dict() == {
        ("wikipedia", 1): True,
        ("wikipedia", 10): False,
        ("prose", 1): False,
    }
    assert (table["paper_ties"] == "optimistic").all() and (table["ties"] == "pessimistic").all()
    assert (table["paper_corpus"] == "wikipedia").all()


def test_the_size_headline_states_the_papers_exponent_beside_the_studys():
    from rbplab.analysis.fit import compare_fits
    from rbplab.viz import headlines

    fits = pd.DataFrame(
        {"family": "gpt2", "corpus": "wikipedia", "k": [1], "alpha": [0.1], "alpha_low": [0.08]}
        | {"alpha_high": [0.12], "r2": [0.99], "n_models": [4]}
    )
    paper = fits.assign(
        corpus="wikipedia-paper", ties="optimistic", alpha=0.2, alpha_low=0.15, alpha_high=0.25
    )
    alone = headlines.size_law(fits, k=1)
    both = headlines.size_law(fits, k=1, paper=compare_fits(fits, paper))
    assert both.startswith(alone)
    assert both.removeprefix(alone) == (
        " Beside the paper's own numbers at k = 1: gpt2 on wikipedia α = 0.100 [0.080, 0.120] "
        "against the paper's 0.200 [0.150, 0.250] (wikipedia-paper, optimistic ties)."
    )
    assert headlines.size_law(fits, k=1, paper=compare_fits(fits, paper.assign(family="opt"))) == alone
