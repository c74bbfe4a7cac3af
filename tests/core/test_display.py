"""The one number format of the report and the lab, against strings written by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd

from rbplab.core.display import interval, number, size
from rbplab.viz.readable import readable, text_table


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
