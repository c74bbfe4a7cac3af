"""rbplab.viz.plots.emergence: emergence figures carry exactly the data of their frames."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rbplab.study import Study, emergence, size, synthetic_study
from rbplab.viz import plots


@pytest.fixture(scope="module")
def study() -> Study:
    return synthetic_study(n_tokens=3000, corpora=("a", "b"))


def test_emergence_grid(study: Study) -> None:
    em = emergence.table(study, [1, 10], [1, 4, 8])
    fig = plots.emergence(em, extrapolate=True)
    titles = [a.text for a in fig.layout.annotations if a.name == "panel title"]
    assert titles == ["a · k=1", "a · k=10", "b · k=1", "b · k=10"]  # corpora x ks
    assert [a.text for a in fig.layout.annotations if a.name is None] == ["measured"] * 4
    data = [t for t in fig.data if t.meta != "key"]
    assert len(data) == 2 * 2 * 3 * 4  # panels x N x (empirical, RBP^N, fitted, extrapolated)
    assert len(fig.data) - len(data) == 4  # legend keys: markers, solid, dashed, faded
    lin = plots.emergence_linearised(em)
    assert all(np.all(np.isfinite(t.y)) for t in lin.data if t.mode == "markers")


def test_fitted_law_is_extrapolated_beyond_the_measured_sizes(study: Study) -> None:
    em = emergence.table(study, [1, 10], [1, 4, 8], corpora=["a"])
    s_max, s_min = em["S"].max(), em["S"].min()
    fig = plots.emergence(em, extrapolate=True)
    extrapolated = [t for t in fig.data if t.meta == "extrapolation"]
    assert len(extrapolated) == 2 * 3  # one per panel and N
    for trace in extrapolated:
        assert trace.line.dash == "dash" and "extrapolated" in trace.name and trace.opacity < 1
        x = np.asarray(trace.x, dtype=float)
        inside = (x > s_min * 1.0001) & (x < s_max / 1.0001)
        assert not inside.any()  # the measured range is drawn by the plain fitted-law trace
        assert np.nanmax(x) > 10 * s_max  # it reaches well beyond the largest model
    # The extrapolated values are the fitted law exp(-C N S^-alpha) with the RBP_k fit's C and alpha.
    fits = size.fits(study, [1], corpora=["a"]).iloc[0]
    k1_n4 = [t for t in extrapolated if t.name.startswith("N=4 ")][0]
    x, y = np.asarray(k1_n4.x, dtype=float), np.asarray(k1_n4.y, dtype=float)
    ok = np.isfinite(x)
    assert np.allclose(y[ok], np.exp(-fits["prefactor"] * 4 * x[ok] ** -fits["alpha"]))
    # The sigmoid: rising towards 1 where the law flattens, shaded measured range, labelled title.
    assert np.nanmax(y) > 0.5
    assert len(fig.layout.shapes) == 2 and fig.layout.shapes[0].x1 == s_max
    subtitle = [a.text for a in fig.layout.annotations if a.name == "subtitle"]
    assert len(subtitle) == 1 and "extrapolated" in subtitle[0]
    plain = plots.emergence(em)  # the default: the S axis spans the measured sizes only
    assert not [t for t in plain.data if t.meta == "extrapolation"] and not plain.layout.shapes
    drawn = np.concatenate([np.asarray(t.x, dtype=float) for t in plain.data if t.meta != "key"])
    assert np.nanmin(drawn) >= s_min and np.nanmax(drawn) <= s_max


@pytest.mark.parametrize("n", [1, 10, 277])
def test_every_line_drawn_lies_inside_its_panels_log_axis(study: Study, n: int) -> None:
    """03 in the lab at N = 277: the independence and fitted lines ran below a y range fitted to
    the markers. The axis still fits the markers (or, none drawn, the lines, down to P_FLOOR),
    and a line's values outside it are not drawn: every point drawn lies inside its axis."""
    fig = plots.emergence(emergence.table(study, [1, 10], [n]), extrapolate=True)
    drawn = 0
    for trace in fig.data:
        if trace.meta == "key":
            continue
        axis = fig.layout[f"yaxis{trace.yaxis[1:]}"]
        assert axis.type == "log" and axis.range is not None, (n, trace.name, axis.type)
        lo, hi = axis.range
        y = np.array([np.nan if v is None else v for v in trace.y], dtype=float)
        y = np.log10(y[np.isfinite(y) & (y > 0)])
        assert np.all((y >= lo) & (y <= hi)), (n, trace.name, y, (lo, hi))
        drawn += len(y)
    assert drawn > 0


def _flat(p: float) -> pd.DataFrame:
    """An emergence table of one panel whose largest model measures and predicts p."""
    s, ps = [1e5, 1e6, 1e7], [0.01, 0.1, p]
    return pd.DataFrame({"model": ["a", "b", "c"], "S": s, "k": 4096, "N": 277, "p_pred": ps, "p_emp": ps})


# The top of the p axis is 1.6 x the largest p drawn, but never past 1: 1/1.6 = 0.625 reaches it.
@pytest.mark.parametrize(
    ("p", "top"),
    [(1.0, 1.0), (0.625, 1.0), (0.624, 0.624 * 1.6), (0.626, 1.0), (1 - 1e-9, 1.0)],
    ids=["p = 1", "1.6 p = 1", "just under", "just over", "p just under 1"],
)
def test_the_probability_axis_never_runs_past_1(p: float, top: float) -> None:
    """03's axis ran to ~5 at k = 4,096 (every p = 1); it ends at 1 at most, and its markers
    at p = 1 are drawn whole on its edge."""
    fig = plots.emergence(_flat(p))
    lo, hi = fig.layout.yaxis.range
    assert 10**hi == pytest.approx(top, rel=1e-12) and 10**hi <= 1.0
    assert 10**lo == pytest.approx(0.01 / 1.6)
    assert fig.layout.yaxis.maxallowed == 0  # log10(1): plotly's zoom and pan stop there too
    assert all(t.cliponaxis is False for t in fig.data if t.meta == "empirical")
