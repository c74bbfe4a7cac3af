"""The depth tables (`rbplab.analysis.depth`): RBP_k by depth under every tie rule, the size law at
each depth (the size fits' own code), the first depth at which RBP_k reaches a level."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from rbplab.analysis.depth import DepthRun, depth_fits, depth_table, first_depth, layer_at_depth
from rbplab.analysis.metrics import rbp
from rbplab.core.errors import InvalidArgumentError
from rbplab.core.stats import TIES
from rbplab.study import size, synthetic_study


@pytest.fixture(scope="module")
def study():
    return synthetic_study(corpora=("synthetic-a",), n_tokens=2000)


def test_rbp_by_depth_holds_every_tie_rule(study):
    # the study's runs read as the final layer (index 3 of 4) and as layer 1 of 4
    runs = [DepthRun(run, 3, 4) for run in study.runs] + [DepthRun(run, 1, 4) for run in study.runs]
    table = depth_table(runs, [1, 10])
    assert set(table["ties"]) == set(TIES) and set(table["depth"]) == {0.5, 1.0}
    assert len(table) == len(runs) * len(TIES) * 2
    for row in table.sample(12, random_state=0).itertuples():
        run = next(r for r in study.runs if r.model == row.model)
        assert row.rbp == pytest.approx(float(rbp(run.stats, row.k, row.ties)), abs=0)
        assert row.neg_log_rbp == pytest.approx(-math.log(row.rbp))


def test_the_law_at_the_final_depth_is_the_size_law(study):
    runs = [DepthRun(run, 3, 4) for run in study.runs]
    fits = depth_fits(depth_table(runs, [1, 10], ties="pessimistic"), [1.0])
    expected = size.fits(study, [1, 10])
    assert fits["depth"].tolist() == [1.0, 1.0]
    for column in ("alpha", "alpha_low", "alpha_high", "r2", "n_models"):
        np.testing.assert_allclose(fits[column].to_numpy(float), expected[column].to_numpy(float), rtol=1e-12)


def test_models_of_other_depths_meet_at_a_relative_depth(study):
    """At depth 0.5 a model of 4 layers gives layer 1 and one of 6 layers layer 2; a model whose
    table lacks its layer there is left out (n_models)."""
    runs = study.runs
    read = [
        DepthRun(runs[0], 1, 4),
        DepthRun(runs[1], 2, 6),
        DepthRun(runs[2], 2, 4),
        DepthRun(runs[3], 0, 2),
    ]
    fits = depth_fits(depth_table(read, [1], ties="pessimistic"), [0.5])
    assert fits["n_models"].tolist() == [3]  # runs[2] sits at 0.75: not at depth 0.5
    assert layer_at_depth(0.5, 6) == 2 and layer_at_depth(0.25, 6) == 1 and layer_at_depth(1.0, 6) == 5
    with pytest.raises(InvalidArgumentError, match=r"^a relative depth is in \(0, 1\]"):
        layer_at_depth(0.0, 6)


def test_the_first_depth_reaching_a_level():
    rows = [
        {"family": "f", "model": "m", "corpus": "c", "S": 1.0, "ties": "pessimistic", "k": 1}
        | {"layer": layer, "n_layers": 4, "depth": (layer + 1) / 4, "rbp": value}
        for layer, value in enumerate([0.1, 0.3, 0.29, 0.5])
    ]
    table = pd.DataFrame(rows)
    assert first_depth(table, 0.3)[["layer", "depth", "rbp"]].iloc[0].tolist() == [1, 0.5, 0.3]  # the limit
    assert first_depth(table, 0.31)["depth"].iloc[0] == 1.0  # one over: the final layer
    none = first_depth(table, 0.6)
    assert pd.isna(none["layer"].iloc[0]) and math.isnan(none["depth"].iloc[0])
    with pytest.raises(InvalidArgumentError, match=r"^level is an RBP_k in \(0, 1\]"):
        first_depth(table, 0.0)


def test_a_layer_outside_its_model_is_one_line(study):
    with pytest.raises(InvalidArgumentError, match=r"has 4 layers \(indices 0 to 3\), so it has no layer 4$"):
        DepthRun(study.runs[0], 4, 4)
