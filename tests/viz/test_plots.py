"""rbplab.viz.plots: figures carry exactly the data of the frames they are built from."""

from __future__ import annotations

import numpy as np
import pytest

from rbplab.study import Study, size, synthetic_study
from rbplab.viz import plots


@pytest.fixture(scope="module")
def study() -> Study:
    return synthetic_study(n_tokens=3000, corpora=("a", "b"))


def _markers(fig):
    return [t for t in fig.data if t.mode == "markers" and t.meta != "key"]


def _panel_titles(fig):
    return [a.text for a in fig.layout.annotations if a.name == "panel title"]


def test_rbp_vs_size_one_panel_per_k_and_corpus(study: Study) -> None:
    ks = [1, 10]
    points, fits, bands = study.points(ks), size.fits(study, ks), size.bands(study, ks)
    fig = plots.rbp_vs_size(points, fits, bands)
    assert _panel_titles(fig) == ["a · k=1", "b · k=1", "a · k=10", "b · k=10"]
    markers = _markers(fig)
    assert len(markers) == 4
    sel = points[(points["corpus"] == "b") & (points["k"] == 10)].sort_values("S")
    panel = next(t for t in markers if (t.xaxis, t.yaxis) == ("x4", "y4"))  # row 2 (k=10), column 2 (b)
    assert np.allclose(panel.y, sel["neg_log_rbp"]) and list(panel.text) == list(sel["model"])
    row = fits[(fits["corpus"] == "b") & (fits["k"] == 10)].iloc[0]
    # The fitted line's legend entry names its panel, with alpha, its interval and R².
    (line,) = [t for t in fig.data if t.meta == "fit" and (t.xaxis, t.yaxis) == ("x4", "y4")]
    interval = f"{row['alpha']:.3f} [{row['alpha_low']:.3f}, {row['alpha_high']:.3f}]"
    assert line.name == f"b, k=10: α = {interval}, R² = {row['r2']:.3f}"
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"


def test_rbp_vs_size_without_fits_shows_points_in_legend(study: Study) -> None:
    fig = plots.rbp_vs_size(study.points(1))
    assert len(fig.data) == 2 and [t.showlegend for t in fig.data] == [True, False]  # one entry per family


def test_error_bars_from_intervals(study: Study) -> None:
    points = study.points(1).assign(neg_log_rbp_low=lambda f: f["neg_log_rbp"] * 0.9)
    points["neg_log_rbp_high"] = points["neg_log_rbp"] * 1.2
    fig = plots.rbp_vs_size(points)
    assert np.allclose(fig.data[0].error_y.array, fig.data[0].y * 0.2)


def test_missing_columns_are_named(study: Study) -> None:
    with pytest.raises(ValueError, match=r"lacks columns \['neg_log_rbp'\]"):
        plots.rbp_vs_size(study.points(1).drop(columns="neg_log_rbp"))
    with pytest.raises(ValueError, match="ksweep frame lacks"):
        plots.ksweep(study.points(1))


def test_ksweep_two_panels_and_regimes(study: Study) -> None:
    sweep = size.ksweep(study, ks=[1, 3, 10, 100, 1000])
    fig = plots.ksweep(sweep, vocab_size=study.vocab_size)
    assert len(fig.data) == 3 * 2  # (R², α, α's interval) x corpora
    part = sweep[sweep["corpus"] == "a"].sort_values("k")
    r2 = next(t for t in fig.data if t.xaxis == "x" and t.name == "a")
    assert np.allclose(r2.y, part["r2"])
    alpha = next(t for t in fig.data if t.xaxis == "x2" and t.name == "a")
    assert np.allclose(alpha.y, part["alpha"]) and alpha.error_y.array is None
    # The OLS intervals as a band (error bars of four curves over 30 ks overprinted): up the
    # upper ends, back down the lower ones.
    band = next(t for t in fig.data if t.meta == "alpha interval" and t.name == "a interval")
    n = len(part)
    assert band.xaxis == "x2" and band.fill == "toself" and len(band.x) == 2 * n
    assert np.allclose(band.y[:n], part["alpha_high"]) and np.allclose(band.y[n:], part["alpha_low"][::-1])
    assert len(fig.layout.shapes) == 2 * 3  # two shaded regimes and |V| in each panel


def test_ksweep_marker_moves_to_the_chosen_k(study: Study) -> None:
    sweep = size.ksweep(study, ks=[1, 3, 10, 100, 1000])
    fig = plots.ksweep(sweep, vocab_size=study.vocab_size, marker_k=12)  # nearest on the log scale: 10
    marks = [t for t in fig.data if t.meta == "marker"]
    assert len(marks) == 2 * 2  # one per curve
    at = sweep[sweep["k"] == 10].set_index("corpus")
    for trace in marks:
        corpus, column = trace.name.split(" at ")[0], "r2" if trace.xaxis == "x" else "alpha"
        assert list(trace.x) == [10] and trace.y[0] == pytest.approx(at.loc[corpus, column])
    row = at.loc["a"]
    interval = f"{row['alpha']:.3f} [{row['alpha_low']:.3f}, {row['alpha_high']:.3f}]"
    (entry,) = [t for t in fig.data if t.meta == "r2" and t.name.startswith("a ")]
    assert entry.name == f"a at k=10: α = {interval}, R² = {row['r2']:.3f}"  # the legend states them


def test_rbp_curves_is_a_cdf(study: Study) -> None:
    fig = plots.rbp_curves(size.curve_frame(study, corpora=["a"]), marker_k=10)
    for trace in fig.data:
        assert np.all(np.diff(trace.y) >= 0) and trace.y[-1] <= 1


def test_probability_axes_end_at_1(study: Study) -> None:
    """RBP_k reaches 1 at k = |V| and a rank's frequency may near it: their axes end at 1 for
    plotly's autorange and for the explorer's ranges (`maxallowed`, in range units: log10 on a
    log axis), and a range fitted to the curves stops at 1 exactly."""
    from rbplab.study import distribution
    from rbplab.viz import states

    curves = plots.rbp_curves(size.curve_frame(study))
    assert {axis.maxallowed for axis in curves.select_yaxes()} == {1.0}
    fitted = states.fit_axes(curves.to_plotly_json())
    assert fitted["layout"]["yaxis"]["range"][1] == 1.0  # RBP_|V| = 1 is drawn: no pad past it
    ranks = plots.rank_distribution(distribution.rank_pmf(study, study.corpora[0]))
    assert ranks.layout.yaxis.maxallowed == 0.0 and ranks.layout.yaxis.type == "log"
