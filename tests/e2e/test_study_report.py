"""A study file drives the report: the grid that was run is the grid the notebooks analyse."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers.studies import write_study

from rbplab.runner import read_study_file, run_study
from rbplab.viz import report


@pytest.mark.slow  # executes a notebook
def test_report_of_a_study_file(tmp_path, gpt2_dir, neox_dir, llama_dir):
    study = write_study(tmp_path, gpt2_dir, neox_dir, llama_dir)
    cache = tmp_path / "cache"
    assert run_study(study, cache_dir=cache, progress=False).ok
    table = report.run_report(
        study_file=study,
        notebooks=["01_rbp_vs_size"],
        output_dir=tmp_path / "out",
        cache_dir=cache,
        parameters={"n_boot": 10, "ks": [1, 10]},
        progress=None,
    )
    assert table["ok"].all(), table["error"].tolist()
    runs = pd.read_csv(tmp_path / "out" / "01_rbp_vs_size" / "runs.csv")
    members = read_study_file(study).members
    assert sorted(runs["model"].unique()) == sorted(m.model for m in members)
    assert sorted(runs["corpus"].unique()) == ["first", "second"] and len(runs) == 6
    assert (runs["family"] == "custom").all()
