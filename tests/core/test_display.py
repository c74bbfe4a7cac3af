"""The one number format of the report and the lab, against strings written by hand."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from rbplab.core.display import column, interval, intervals, number, size
from rbplab.viz.readable import header, readable, table_html, text, text_table


def test_numbers_read_as_people_write_them() -> None:
    assert [number(v) for v in (0.0423, 0.123456, 1.5, 12.345, 4321.9876)] == [
        "0.0423", "0.123", "1.50", "12.3", "4322",
    ]  # fmt: skip
    # whole numbers whole, with thousands separators, whatever their type (a CSV reads k as 1.0)
    assert [number(v) for v in (25472.0, 1.0, np.int64(6), 1_000_000, 0)] == [
        "25,472",
        "1",
        "6",
        "1,000,000",
        "0",
    ]
    # below display precision: a bound, not 3.50e-121
    assert [number(v) for v in (3.5e-121, -2e-9, 1e-6, 2.5e-5)] == [
        "< 1e-6",
        "> −1e-6",
        "1.00e-06",
        "2.50e-05",
    ]
    assert [number(v) for v in (None, float("nan"), np.nan, "prose", True)] == [
        "n/a",
        "n/a",
        "n/a",
        "prose",
        "True",
    ]
    assert number(123456.7) == "1.23e+05" and number(0.09996) == "0.100"


def test_sizes_in_k_m_b() -> None:
    assert [size(v) for v in (25472.0, 85_056_000, 2_700_000, 1.2e9, 774.0, 3e12)] == [
        "25.5K", "85.1M", "2.7M", "1.2B", "774", "3T",
    ]  # fmt: skip


def test_intervals_keep_the_estimates_digits_and_contain_it() -> None:
    assert interval(0.1234, 0.1011, 0.1452) == "0.123 [0.101, 0.145]"
    assert interval(0.02, 0.013, 0.0255) == "0.0200 [0.0130, 0.0255]"
    assert interval(0.0458, 0.03291, 0.05876) == "0.0458 [0.0329, 0.0588]"
    assert interval(1.5, 1.25, 1.75) == "1.50 [1.25, 1.75]"
    assert interval(0.09996, 0.09, 0.11) == "0.100 [0.090, 0.110]"
    assert interval(2.5e-5, 1e-5, 4.25e-5) == "2.50e-05 [1.00e-05, 4.25e-05]"
    assert interval(0.3, None, 0.4) == "0.300" and interval(float("nan"), 0.1, 0.2) == "n/a"
    # 06's E: a fitted value of 3.5e-121 inside [0, 0.0123], and one at the bound of its fit
    assert interval(3.5e-121, 0.0, 0.0123) == "< 1e-6 [0, 0.0123]"
    assert interval(1.29e-17, 9.36e-14, 9.36e-14) == "< 1e-6 (at a bound of its fit: no interval)"


def test_tables_merge_intervals_and_drop_what_says_nothing() -> None:
    fits = pd.DataFrame(
        {
            "family": ["micro", "micro"],
            "corpus": ["prose", "humaneval"],
            "k": [1.0, 10.0],
            "alpha": [0.0423, 0.1156],
            "alpha_low": [0.0301, 0.0822],
            "alpha_high": [0.0544, 0.149],
            "r2": [0.98765, 0.9],
            "S_min": [25472.0, 25472.0],
            "S_max": [2_712_576.0, 2_712_576.0],
            "E": [3.5e-121, 0.5],
            "n_models": [6, 6],
            "note": [None, None],
        },
        index=[7, 9],
    )
    assert text_table(fits).to_dict("records") == [
        {"family": "micro", "corpus": "prose", "k": "1", "alpha": "0.0423 [0.0301, 0.0544]", "r2": "0.988",
         "S_min": "25.5K", "S_max": "2.71M", "E": "< 1e-6", "n_models": "6"},
        {"family": "micro", "corpus": "humaneval", "k": "10", "alpha": "0.116 [0.082, 0.149]", "r2": "0.900",
         "S_min": "25.5K", "S_max": "2.71M", "E": "0.500", "n_models": "6"},
    ]  # fmt: skip
    boot = pd.DataFrame(
        {"alpha": [0.05], "alpha_boot_low": [0.04], "alpha_boot_high": [0.06], "n_boot": [200]}
    )
    assert text_table(boot).to_dict("records") == [{"alpha": "0.0500 [0.0400, 0.0600]", "n_boot": "200"}]
    html = readable(fits)._repr_html_()
    assert "overflow-x: auto" in html and "25472" not in html and "0.0423 [0.0301, 0.0544]" in html
    assert "<th></th>" not in html and ">7<" not in html  # no index column


# An interval's bounds have the estimate's decimals but no more significant digits than it: 3 at
# the larger bound's magnitude. 03's 0.00470 [-0.11662, 0.12602] had five decimals.
@pytest.mark.parametrize(
    ("value", "low", "high", "expected"),
    [
        (0.0047, -0.11662, 0.12602, "0.00470 [-0.117, 0.126]"),
        (0.0047, -0.0099, 0.0999, "0.00470 [-0.0099, 0.0999]"),
        (0.0047, -0.0099, 0.1, "0.00470 [-0.010, 0.100]"),
        (0.0047, -0.0099, 0.00999, "0.00470 [-0.00990, 0.00999]"),
    ],
    ids=["the issue's interval", "bound just under 0.1", "bound at 0.1", "narrow: the estimate's decimals"],
)
def test_an_intervals_bounds_are_no_more_precise_than_its_estimate(
    value: float, low: float, high: float, expected: str
) -> None:
    assert interval(value, low, high) == expected


# A column is in fixed notation when every value lies in [1e-4, 1e5), else all in scientific.
@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([0.5, 1e-4], ["0.500", "0.000100"]),
        ([0.5, 9.99e-5], ["5.00e-01", "9.99e-05"]),
        ([0.5, 99999.4], ["0.500", "99999"]),
        ([0.5, 100000.5], ["5.00e-01", "1.00e+05"]),
        ([0.00233, 6.21e-04], ["0.00233", "0.000621"]),
    ],
    ids=["1e-4 exactly", "just under 1e-4", "just under 1e5", "just over 1e5", "the issue's column"],
)
def test_a_column_is_written_in_one_notation(values: list[float], expected: list[str]) -> None:
    assert column(values) == expected


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([2e-9, -3e-8, 0.0], ["0", "0", "0"]),
        ([9.99e-7, -9.99e-7], ["0", "0"]),
        ([1e-6, -3e-8], ["1.00e-06", "0"]),
        ([0.5, 3.5e-121, -2e-9], ["0.500", "< 1e-6", "0"]),
    ],
    ids=["all noise", "just under 1e-6", "1e-6 exactly is a value", "a tiny estimate among values"],
)
def test_rounding_noise_reads_0(values: list[float], expected: list[str]) -> None:
    """07's residual CE − (EE + SA − Conf) showed "> −1e-6": a column of noise reads 0."""
    assert column(values) == expected


def test_missing_values_of_every_kind_read_n_a_and_blank_columns_go() -> None:
    frame = pd.DataFrame({"k": pd.array([1, None], dtype="Int64"), "note": ["", " "], "x": [None, None]})
    assert text_table(frame).to_dict("records") == [{"k": "1"}, {"k": "n/a"}]


def test_headers_read_as_words_and_keep_the_identifier_at_hand() -> None:
    assert [header(c) for c in ("alpha", "r2", "alpha_jackknife_se", "ee_mm", "n_boot_valid", "S_opt")] == [
        "α", "R²", "α jackknife SE", "EE (Miller-Madow)", "resamples fitted", "S optimal",
    ]  # fmt: skip
    # A header written for readers stays as it is; a k in an identifier reads as one.
    assert header("alpha -log RBP_1 (empirical)") == "alpha -log RBP_1 (empirical)"
    assert [header(c) for c in ("alpha_k1", "alpha_k", "k")] == ["α (k = 1)", "α k", "k"]
    frame = pd.DataFrame({"corpus": ["prose"], "alpha_loo_min": [0.0123], "n_models": [6]})
    page = table_html(frame)
    assert '<th title="alpha_loo_min">α leave-one-out min</th>' in page
    assert '<th title="corpus">corpus</th>' in page and "<th>alpha_loo_min</th>" not in page
    shown = text(frame)
    assert shown.splitlines()[0].split() == ["corpus", "α", "leave-one-out", "min", "models"]
    assert shown.splitlines()[-1] == "columns: α leave-one-out min = alpha_loo_min, models = n_models"
    assert repr(readable(frame)) == shown and text(frame.iloc[:0]) == "(none)"


def test_a_column_of_intervals_is_written_in_one_notation() -> None:
    """The estimates of an interval column share a notation, as a plain column's values do:
    0.000621 stays fixed beside 0.00233 (both in [1e-4, 1e5)); 9.99e-05 makes the column
    scientific."""
    frame = pd.DataFrame(
        {"alpha": [0.00233, 0.000621], "alpha_low": [0.0015, 0.0005], "alpha_high": [0.003, 0.0007]}
    )
    assert text_table(frame)["alpha"].tolist() == [
        "0.00233 [0.00150, 0.00300]",
        "0.000621 [0.000500, 0.000700]",
    ]
    frame.loc[1, ["alpha", "alpha_low", "alpha_high"]] = [9.99e-5, 9e-5, 1.1e-4]
    assert text_table(frame)["alpha"].tolist() == [
        "2.33e-03 [1.50e-03, 3.00e-03]",
        "9.99e-05 [9.00e-05, 1.10e-04]",
    ]


def _shown_width(text: str) -> float:
    low, high = text.split(" [")[1].rstrip("]").split(", ")
    return float(high) - float(low)


def test_a_table_of_intervals_shows_every_intervals_width() -> None:
    """Whole, zero and negative estimates, in one table column: every interval keeps the
    decimals that show its width (the printed bounds' width is within half the true one) and no
    bound reads -0. Intervals whose width the estimate's decimals already show print as they did."""
    rows = [  # (estimate, low, high, as printed)
        (2.0, 1.5, 2.5, "2 [1.5, 2.5]"),  # read "2 [2, 2]"
        (3.0, 2.96, 3.04, "3 [2.96, 3.04]"),  # read "3 [3, 3]"
        (10.0, 9.0, 11.0, "10 [9, 11]"),  # its width shown already: as before
        (0.0, -0.05, 0.05, "0 [-0.05, 0.05]"),  # read "0 [-0, 0]"
        (0.0, -0.5, 0.5, "0 [-0.5, 0.5]"),  # read "0 [-0, 0]"
        (0.0, -0.0004, 0.05, "0 [0.00, 0.05]"),  # the lower bound rounds to zero: no sign
        (-2.0, -2.5, -1.5, "-2 [-2.5, -1.5]"),  # read "-2 [-2, -2]"
        (-0.3, -0.35, -0.25, "-0.300 [-0.350, -0.250]"),  # as before
        (-1.25, -1.26, -1.24, "-1.25 [-1.26, -1.24]"),  # as before: one unit each side
    ]
    values, lows, highs, expected = (list(column_) for column_ in zip(*rows, strict=True))
    shown = intervals(values, lows, highs)
    assert shown == expected
    for text_, low, high in zip(shown, lows, highs, strict=True):
        assert abs(_shown_width(text_) - (high - low)) <= (high - low) / 2, text_
        assert re.search(r"(?<![\d.])-0(\.0*)?(?![\d.])", text_) is None, text_


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        # "1 [1, 2]" shows a width of 1: within half of a width w for w >= 2/3 (the limit, no float)
        (1.0, 1.67, "1 [1, 2]"),  # just above the limit: off by 0.33 of 0.67
        (1.0, 1.66, "1 [1.0, 1.7]"),  # just below it: 1 would be off by 0.34 of 0.66
        (0.5, 1.5, "1 [0.5, 1.5]"),  # "1 [0, 2]" would show twice its width
        (1.0, 1.0, "1 [1, 1]"),  # no width: nothing to show
        (1.0 - 1e-12, 1.0 + 1e-12, "1 [1, 1]"),  # float rounding, not a width
        (float("-inf"), 3.0, "1 [-inf, 3]"),
    ],
)
def test_an_interval_keeps_the_digits_of_its_width_at_its_edges(
    low: float, high: float, expected: str
) -> None:
    """A whole estimate's bounds get decimals only when its digits would show the interval's width
    off by more than half of it."""
    assert intervals([1.0], [low], [high]) == [expected]
