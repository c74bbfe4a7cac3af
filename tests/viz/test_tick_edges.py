"""Log ticks and fitted axes at their edges: the 1-2-5, 1-3 and decade steps each taken exactly
where the tick bound lets them and not one tick before, the bound on the tick count, a log axis
fitted to a single value (the limit of "one value" and just past it), and a bar axis that reaches
0. Expected ticks and ranges are written out from the rule, not read from the code."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import pytest

from rbplab.viz import states
from rbplab.viz.labels import MIN_LOG_TICKS, _log_ticks, log_tick_updates
from rbplab.viz.layout import SCREEN


def _steps(mantissas, first: int, last: int) -> list[float]:
    return [float(m * 10.0**e) for e in range(first, last + 1) for m in mantissas]


ONE_TWO_FIVE = [t for t in _steps((1, 2, 5), 0, 3) if t <= 1000]  # 10 ticks
ONE_THREE = [t for t in _steps((1, 3), 0, 3) if t <= 1000]  # 7 ticks
DECADES = [1.0, 10.0, 100.0, 1000.0]


@pytest.mark.parametrize(
    ("most", "expected"),
    [
        (11, ONE_TWO_FIVE),
        (10, ONE_TWO_FIVE),  # 1-2-5 holds exactly `most` ticks: taken
        (9, ONE_THREE),  # one under: the 1-3 step
        (8, ONE_THREE),
        (7, ONE_THREE),  # 1-3 holds exactly `most`
        (6, DECADES),  # one under: decades
        (4, DECADES),
    ],
)
def test_log_ticks_step_from_1_2_5_to_1_3_to_decades_at_the_bound(most, expected):
    assert _log_ticks(1.0, 1000.0, most) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("most", "expected"),
    [
        (7, [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]),
        (6, [1.0, 3.0, 10.0, 30.0, 100.0]),
        (5, [1.0, 3.0, 10.0, 30.0, 100.0]),
        (4, [1.0, 10.0, 100.0]),
        (3, [1.0, 10.0, 100.0]),  # decades give exactly the fewest ticks allowed: taken
    ],
)
def test_two_decades_take_the_densest_step_that_fits(most, expected):
    assert _log_ticks(1.0, 100.0, most) == pytest.approx(expected)


@pytest.mark.parametrize("most", [3, 6, 10])
@pytest.mark.parametrize(
    ("lo", "hi", "one_value"),
    [(100.0, 100.0, True), (100.0, 100.0 * 1.0001, True), (100.0, 100.0 * 1.0002, False)],
)
def test_ticks_of_one_value_span_a_factor_of_two_each_way(lo, hi, one_value, most):
    ticks = _log_ticks(lo, hi, most)
    if one_value:
        assert ticks == pytest.approx([50.0, 100.0, 200.0])  # the 1-2-5 values from lo/2 to hi*2
    else:
        assert all(lo / 1.0001 <= t <= hi * 1.0001 for t in ticks), ticks


@pytest.mark.parametrize(
    ("most", "every"),
    [(22, 1), (21, 1), (20, 2), (11, 2), (10, 3), (7, 3), (6, 4), (5, 5)],
)
def test_too_many_decades_keep_every_nth_within_the_bound(most, every):
    """21 decades (1e-10 to 1e10): every n-th decade, n the least that keeps at most `most`."""
    assert every == math.ceil(21 / most)  # the rule, spelled out
    decades = [10.0**e for e in range(-10, 11)]
    assert _log_ticks(1e-10, 1e10, most) == pytest.approx(decades[::every], rel=1e-12)


@pytest.mark.parametrize("most", range(MIN_LOG_TICKS, 16))
@pytest.mark.parametrize(("lo", "hi"), [(1.0, 1000.0), (0.2, 4.3), (3e-5, 7e6), (1e-10, 1e10), (1.5, 5.5)])
def test_the_tick_count_stays_within_its_bounds(lo, hi, most):
    ticks = _log_ticks(lo, hi, most)
    assert MIN_LOG_TICKS <= len(ticks) <= most, ticks
    assert ticks == sorted(ticks) and len(set(ticks)) == len(ticks)


def _log_figure(values: list[float]) -> tuple[dict, tuple]:
    figure = go.Figure(go.Scatter(x=[1.0, 2.0], y=values))
    figure.update_layout(yaxis_type="log")
    return figure.layout.to_plotly_json(), figure.data


@pytest.mark.parametrize(
    ("values", "one_value"),
    [
        ([0.5, 0.5], True),
        ([100.0, 100.0 * 1.0001], True),  # the limit of one value
        ([100.0, 100.0 * 1.0002], False),  # just past it: plotly's own range
        ([1.0, 10.0], False),
    ],
)
def test_a_log_axis_of_one_value_spans_a_factor_of_two_each_way(values, one_value):
    layout, data = _log_figure(values)
    update = log_tick_updates(layout, data, SCREEN.font_size, (700, 300))["yaxis"]
    lo, hi = min(values), max(values)
    if one_value:
        assert update["range"] == pytest.approx([math.log10(lo / 2), math.log10(hi * 2)])
        assert update["autorange"] is False
        ticks = update["tickvals"]
        assert len(ticks) >= MIN_LOG_TICKS
        assert all(lo / 2 / 1.0001 <= t <= hi * 2 * 1.0001 for t in ticks), ticks
    else:
        assert "range" not in update and "autorange" not in update


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([0.5, 0.5], [math.log10(0.25), math.log10(1.0)]),  # one value: a factor of 2 each way
        ([1.0, 10.0], [0 - 0.05, 1 + 0.05]),  # a decade, padded 5 % each side
    ],
)
def test_fitting_a_log_axis_to_a_single_value(values, expected):
    figure = {"data": [{"type": "scatter", "x": [1, 2], "y": values}], "layout": {"yaxis": {"type": "log"}}}
    states.fit_axes(figure)
    assert figure["layout"]["yaxis"]["range"] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("trace", "axis", "expected"),
    [
        ({"type": "bar", "x": ["a", "b"], "y": [5.0, 7.0]}, "yaxis", [0 - 0.35, 7 + 0.35]),
        ({"type": "bar", "orientation": "h", "y": ["a", "b"], "x": [5.0, 7.0]}, "xaxis", [-0.35, 7.35]),
        ({"type": "bar", "x": ["a", "b"], "y": [-7.0, -5.0]}, "yaxis", [-7.35, 0.35]),
        ({"type": "bar", "x": ["a", "b"], "y": [0.0, 7.0]}, "yaxis", [-0.35, 7.35]),
        ({"type": "scatter", "x": [1.0, 2.0], "y": [5.0, 7.0]}, "yaxis", [4.9, 7.1]),  # no bar: no 0
    ],
)
def test_a_bar_axis_reaches_zero(trace, axis, expected):
    """A bar rises from 0, so its value axis holds 0 (padded 5 % of the span each side)."""
    figure = {"data": [trace], "layout": {}}
    states.fit_axes(figure)
    assert figure["layout"][axis]["range"] == pytest.approx(expected)
