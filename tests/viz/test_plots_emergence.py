"""rbplab.viz.plots_emergence: emergence figures carry exactly the data of their frames."""

from __future__ import annotations

import numpy as np
import pytest

from rbplab.study import Study, synthetic_study
from rbplab.viz import plots


@pytest.fixture(scope="module")
def study() -> Study:
    return synthetic_study(n_tokens=3000, corpora=("a", "b"))


def test_emergence_grid(study: Study) -> None:
    em = study.emergence([1, 10], [1, 4, 8])
    fig = plots.emergence(em)
    assert len(fig.layout.annotations) == 2 * 2  # corpora x ks
    assert len(fig.data) == 2 * 2 * 3 * 3  # panels x N x (empirical, RBP^N, fitted)
    lin = plots.emergence_linearised(em)
    assert all(np.all(np.isfinite(t.y)) for t in lin.data if t.mode == "markers")
