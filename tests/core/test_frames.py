"""Interval columns: one spelling (`<q>_low`, `<q>_high`) in every table, and the old names still
answering (with a FutureWarning) for one release."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pandas as pd
import pytest

from rbplab.analysis import alternatives, bootstrap, decomposition_bootstrap, fit
from rbplab.core.frames import DEPRECATED_COLUMNS, Table, renamed_columns
from rbplab.study.results import load_results, save_results, table_frame
from rbplab.study.synthetic import synthetic_study
from rbplab.study.training import open_training

OLD_SPELLING = re.compile(r"(_ci_low|_ci_high|_lo|_hi)$|^(lo|hi|ci_low|ci_high)$")


@pytest.fixture(scope="module")
def study():
    return synthetic_study(sizes=(1e5, 3e5, 1e6, 3e6), n_tokens=3000, n_docs=12)


def test_no_table_spells_an_interval_the_old_way(study) -> None:
    points = study.points([1, 10])
    training = open_training(None, ks=(1, 10), synthetic=True)
    joint = training.joint_laws(n_boot=8)
    # the tables whose interval columns were renamed: Tables, so the old names still answer
    renamed = {
        "points": study.points([1, 10], n_boot=20),
        "fits": study.fits([1, 10]),
        "fit_table": study.fit_table([1, 10]),
        "bands": study.bands([1]),
        "ksweep": study.ksweep(),
        "emergence_fits": study.emergence_fits(),
        "ce_exponents": study.ce_exponents(),
        "extrapolation": study.extrapolation([1, 10]),
        "lognormal_intervals": study.lognormal_intervals(n_boot=10),
        "bootstrap_ci": bootstrap.bootstrap_ci(study.runs[0].stats, [1], n_boot=20),
        "decomposition_ci": decomposition_bootstrap.decomposition_ci(study.runs[0].stats, n_boot=10),
        "pooled_fits": alternatives.pooled_fits(
            points.assign(loss=points["neg_log_rbp"]), by=["corpus", "k"]
        ),
        "data_fits": training.data_fits(),
    }
    # tables that always spelled their intervals <q>_low/<q>_high
    others = {
        "emergence": study.emergence([10], [1, 10], n_boot=10),
        "bootstrap_fits": study.bootstrap([1], n_boot=10),
        "prediction_audit": study.prediction_audit([1, 10]),
        "joint_laws": joint.table(),
        "joint_headline": joint.headline(),
    }
    for name, table in {**renamed, **others}.items():
        old = [c for c in table.columns if OLD_SPELLING.search(str(c)) or c in DEPRECATED_COLUMNS]
        assert not old, f"{name} still has {old}"
        assert any(str(c).endswith("_low") for c in table.columns), name
        for low in [c for c in table.columns if str(c).endswith("_low")]:
            assert f"{low[: -len('_low')]}_high" in table.columns, f"{name}: {low} without its _high"
    for name, table in renamed.items():
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


def test_old_names_of_the_other_renamed_tables_still_answer(study) -> None:
    points = study.points([1], n_boot=10)
    with pytest.warns(FutureWarning, match="'neg_log_rbp_hi' is now 'neg_log_rbp_high'"):
        pd.testing.assert_series_equal(points["neg_log_rbp_hi"], points["neg_log_rbp_high"])
    ci = bootstrap.bootstrap_ci(study.runs[0].stats, [1], n_boot=10)
    with pytest.warns(FutureWarning, match="'ci_low' is now 'estimate_low'"):
        pd.testing.assert_frame_equal(ci[["ci_low", "estimate"]], ci[["estimate_low", "estimate"]])
    held = study.extrapolation([1, 10])
    with pytest.warns(FutureWarning, match="'loss_pred_low' is now 'loss_predicted_low'"):
        pd.testing.assert_series_equal(held["loss_pred_low"], held["loss_predicted_low"])
    intervals = study.lognormal_intervals(n_boot=5)
    with pytest.warns(FutureWarning, match="'mu_over_sigma_ci_high' is now 'mu_over_sigma_high'"):
        pd.testing.assert_series_equal(intervals["mu_over_sigma_ci_high"], intervals["mu_over_sigma_high"])


def test_a_table_compares_equal_to_the_same_plain_frame(study) -> None:
    fits = study.fits([1, 10])
    plain = pd.DataFrame(fits)
    assert type(plain) is pd.DataFrame
    pd.testing.assert_frame_equal(fits, plain)  # a Table is a DataFrame
    with pytest.raises(AssertionError):  # the plain frame is not a Table: what the README says
        pd.testing.assert_frame_equal(plain, fits)
    pd.testing.assert_frame_equal(plain, fits, check_frame_type=False)


def test_results_saved_with_the_old_names_load_with_the_new_ones(study, tmp_path) -> None:
    own = pd.DataFrame({"lo": [1.0], "hi": [2.0]})
    tables = {"bands": study.bands([1]), "own": own}
    path = save_results(study, tmp_path / "results.json", ks=[1, 10], find_keys=False, tables=tables)
    # the file as the last release wrote it: its interval columns under their old names
    document = json.loads(path.read_text())
    previous = {new: old for old, new in DEPRECATED_COLUMNS.items()}
    for table in document["tables"].values():
        table["columns"] = [previous.get(c, c) for c in table["columns"]]
    assert "alpha_ci_low" in document["tables"]["fits"]["columns"]
    assert "lo" in document["tables"]["bands"]["columns"]
    path.write_text(json.dumps(document))
    results = load_results(path)
    fits = study.fit_table([1, 10])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing reads an old name here
        back = results.table("fits")
        assert list(back.columns) == list(fits.columns) and isinstance(back, Table)
        np.testing.assert_array_equal(back["alpha_low"], fits["alpha_low"])
        assert list(results.table("bands").columns) == list(study.bands([1]).columns)
    # a table of a report's own whose columns happen to be called lo/hi bounds no `fit`: kept
    assert list(results.table("own").columns) == ["lo", "hi"]
