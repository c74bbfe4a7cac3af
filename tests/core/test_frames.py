"""Interval columns: one spelling (`<q>_low`, `<q>_high`) in every table, and the old names still
answering (with a FutureWarning) for one release."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pandas as pd
import pytest

from rbplab.analysis import bootstrap, fit
from rbplab.core.frames import DEPRECATED_COLUMNS, Table, renamed_columns
from rbplab.study.results import table_frame
from rbplab.study.synthetic import synthetic_study

OLD_SPELLING = re.compile(r"(_ci_low|_ci_high|_lo|_hi)$|^(lo|hi|ci_low|ci_high)$")


@pytest.fixture(scope="module")
def study():
    return synthetic_study(sizes=(1e5, 3e5, 1e6, 3e6), n_tokens=3000, n_docs=12)


def test_no_table_spells_an_interval_the_old_way(study) -> None:
    tables = {
        "points": study.points([1, 10], n_boot=20),
        "fits": study.fits([1, 10]),
        "fit_table": study.fit_table([1, 10]),
        "bands": study.bands([1]),
        "ksweep": study.ksweep(),
        "lognormal_intervals": study.lognormal_intervals(n_boot=10),
        "bootstrap_ci": bootstrap.bootstrap_ci(study.runs[0].stats, [1], n_boot=20),
    }
    for name, table in tables.items():
        old = [c for c in table.columns if OLD_SPELLING.search(str(c))]
        assert not old, f"{name} still has {old}"
        assert any(str(c).endswith("_low") for c in table.columns), name
        assert isinstance(table, Table), name


def test_old_names_return_the_new_columns_with_a_warning(study) -> None:
    fits = study.fits([1, 10])
    with pytest.warns(FutureWarning, match="'alpha_ci_low' is now 'alpha_low'"):
        old = fits["alpha_ci_low"]
    pd.testing.assert_series_equal(old, fits["alpha_low"])
    with pytest.warns(FutureWarning, match="alpha_ci_high"):
        pair = fits[["alpha", "alpha_ci_high"]]
    assert list(pair.columns) == ["alpha", "alpha_high"]
    bands = study.bands([1])
    with pytest.warns(FutureWarning, match="'lo' is now 'fit_low'"):
        np.testing.assert_array_equal(bands["lo"], bands["fit_low"])
    # a selection keeps the alias; the current names never warn
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        subset = fits[fits["k"] == 1]
        subset["alpha_low"]
    with pytest.warns(FutureWarning):
        subset["alpha_ci_low"]
    with pytest.raises(KeyError):
        fits["no_such_column"]


def test_power_law_fit_keeps_the_old_field_names() -> None:
    line = fit.fit_power_law([1e5, 1e6, 1e7], [3.0, 2.0, 1.4])
    with pytest.warns(FutureWarning, match="alpha_low"):
        assert line.alpha_ci_low == line.alpha_low
    with pytest.warns(FutureWarning, match="alpha_high"):
        assert line.alpha_ci_high == line.alpha_high


def test_a_table_saved_by_the_old_release_reads_with_the_new_names() -> None:
    old = pd.DataFrame({"k": [1], "alpha": [0.1], "alpha_ci_low": [0.05], "alpha_ci_high": [0.15]})
    table = renamed_columns(old)
    assert list(table.columns) == ["k", "alpha", "alpha_low", "alpha_high"]
    assert set(DEPRECATED_COLUMNS.values()).isdisjoint(DEPRECATED_COLUMNS)
    read = table_frame({"columns": list(old.columns), "rows": [[1, 0.1, 0.05, 0.15]]})  # load_results' reader
    assert list(read.columns) == ["k", "alpha", "alpha_low", "alpha_high"]
