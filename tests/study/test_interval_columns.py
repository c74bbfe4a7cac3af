"""Interval columns: one spelling (`<q>_low`, `<q>_high`) in every table, plain DataFrames, and
results files written with the former names read back under today's."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from rbplab.analysis import alternatives, bootstrap
from rbplab.study import decomposition, distribution, emergence, size
from rbplab.study.results import RENAMED_COLUMNS, load_results, save_results, table_frame, with_current_names
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
    # the tables whose interval columns were renamed
    renamed = {
        "points": study.points([1, 10], n_boot=20),
        "fits": size.fits(study, [1, 10]),
        "fit_table": size.fit_table(study, [1, 10]),
        "bands": size.bands(study, [1]),
        "ksweep": size.ksweep(study),
        "emergence_fits": emergence.fits(study),
        "ce_exponents": distribution.ce_exponents(study),
        "extrapolation": size.extrapolation(study, [1, 10]),
        "lognormal_intervals": distribution.lognormal_intervals(study, n_boot=10),
        "bootstrap_ci": bootstrap.bootstrap_ci(study.runs[0].stats, [1], n_boot=20),
        "pooled_fits": alternatives.pooled_fits(
            points.assign(loss=points["neg_log_rbp"]), by=["corpus", "k"]
        ),
        "data_fits": training.data_fits(),
    }
    # tables that always spelled their intervals <q>_low/<q>_high
    others = {
        "emergence": emergence.table(study, [10], [1, 10], n_boot=10),
        "bootstrap_fits": size.bootstrap(study, [1], n_boot=10),
        "prediction_audit": decomposition.prediction_audit(study, [1, 10]),
        "joint_laws": joint.table(),
        "joint_headline": joint.headline(),
        "decomposition_bootstrap": decomposition.bootstrap(study, n_boot=10),
    }
    for name, table in {**renamed, **others}.items():
        old = [c for c in table.columns if OLD_SPELLING.search(str(c)) or c in RENAMED_COLUMNS]
        assert not old, f"{name} still has {old}"
        assert any(str(c).endswith("_low") for c in table.columns), name
        for low in [c for c in table.columns if str(c).endswith("_low")]:
            assert f"{low[: -len('_low')]}_high" in table.columns, f"{name}: {low} without its _high"
        assert type(table) is pd.DataFrame, name  # no subclass: compares equal to a plain frame


def test_a_table_saved_by_the_old_release_reads_with_the_new_names() -> None:
    old = pd.DataFrame({"k": [1], "alpha": [0.1], "alpha_ci_low": [0.05], "alpha_ci_high": [0.15]})
    table = with_current_names(old)
    assert list(table.columns) == ["k", "alpha", "alpha_low", "alpha_high"]
    assert set(RENAMED_COLUMNS.values()).isdisjoint(RENAMED_COLUMNS)
    read = table_frame({"columns": list(old.columns), "rows": [[1, 0.1, 0.05, 0.15]]})  # load_results' reader
    assert list(read.columns) == ["k", "alpha", "alpha_low", "alpha_high"]


def test_results_saved_with_the_old_names_load_with_the_new_ones(study, tmp_path) -> None:
    own = pd.DataFrame({"lo": [1.0], "hi": [2.0]})
    tables = {"bands": size.bands(study, [1]), "own": own}
    path = save_results(study, tmp_path / "results.json", ks=[1, 10], find_keys=False, tables=tables)
    # the file as the last release wrote it: its interval columns under their old names
    document = json.loads(path.read_text())
    previous = {new: old for old, new in RENAMED_COLUMNS.items()}
    for table in document["tables"].values():
        table["columns"] = [previous.get(c, c) for c in table["columns"]]
    assert "alpha_ci_low" in document["tables"]["fits"]["columns"]
    assert "lo" in document["tables"]["bands"]["columns"]
    path.write_text(json.dumps(document))
    results = load_results(path)
    fits = size.fit_table(study, [1, 10])
    back = results.table("fits")
    assert list(back.columns) == list(fits.columns) and type(back) is pd.DataFrame
    np.testing.assert_array_equal(back["alpha_low"], fits["alpha_low"])
    assert list(results.table("bands").columns) == list(size.bands(study, [1]).columns)
    # a table of a report's own whose columns happen to be called lo/hi bounds no `fit`: kept
    assert list(results.table("own").columns) == ["lo", "hi"]
