"""Interval columns: one spelling (`<q>_low`, `<q>_high`) in every table, plain DataFrames, and
results files written with the former names (format version 1) refused in one line."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from rbplab.analysis import metrics
from rbplab.study import decomposition, distribution, emergence, size
from rbplab.study.results import RESULTS_VERSION, ResultsError, load_results, save_results
from rbplab.study.synthetic import synthetic_study
from rbplab.study.training import open_training

OLD_SPELLING = re.compile(r"(_ci_low|_ci_high|_lo|_hi)$|^(lo|hi|ci_low|ci_high)$")


@pytest.fixture(scope="module")
def study():
    return synthetic_study(sizes=(1e5, 3e5, 1e6, 3e6), n_tokens=3000, n_docs=12)


def test_no_table_spells_an_interval_the_old_way(study) -> None:
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
        "bootstrap_ci": metrics.bootstrap_ci(study.runs[0].stats, [1], n_boot=20),
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
        old = [c for c in table.columns if OLD_SPELLING.search(str(c)) or str(c).startswith("loss_pred_")]
        assert not old, f"{name} still has {old}"
        assert any(str(c).endswith("_low") for c in table.columns), name
        for low in [c for c in table.columns if str(c).endswith("_low")]:
            assert f"{low[: -len('_low')]}_high" in table.columns, f"{name}: {low} without its _high"
        assert type(table) is pd.DataFrame, name  # no subclass: compares equal to a plain frame


def test_results_written_with_the_old_names_are_refused_in_one_line(study, tmp_path) -> None:
    path = save_results(study, tmp_path / "results.json", ks=[1, 10], find_keys=False)
    assert load_results(path).table("fits")["alpha_low"].notna().all()
    # the file as a development build before 0.1.0 wrote it: format 1, intervals under old names
    document = json.loads(path.read_text())
    assert document["version"] == RESULTS_VERSION == 2
    fits = document["tables"]["fits"]
    fits["columns"] = [c.replace("_low", "_ci_low").replace("_high", "_ci_high") for c in fits["columns"]]
    path.write_text(json.dumps({**document, "version": 1}))
    with pytest.raises(ResultsError, match=r"is results format version 1, written by a development") as err:
        load_results(path)
    message = str(err.value)
    assert "write it again with save_results or rbplab report" in message and "\n" not in message
