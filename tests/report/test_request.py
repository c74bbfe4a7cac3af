"""The report's request: one Grid, handed to the notebooks as their parameters, nothing else
naming it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from rbplab.catalog import registry
from rbplab.catalog.corpora import list_corpora
from rbplab.core.errors import InvalidArgumentError, RbplabError
from rbplab.grid import Grid
from rbplab.report import ReportOptions, run_report
from rbplab.report.request import check_parameters, notebook_parameters


def _members() -> list[str]:
    try:
        return registry.family_models("micro")["model"].tolist()
    except registry.UnknownFamilyError:
        pytest.skip("no micro family in the registry")


def test_a_family_grid_is_handed_over_as_families_corpora_and_settings() -> None:
    _members()
    params = notebook_parameters(Grid.from_names("micro", max_tokens=2000))
    bundled = list_corpora().query("origin == 'bundled'")["name"].tolist()
    assert params == {
        "families": ["micro"],
        "models": None,  # every member: the notebooks' own default
        "corpora": bundled,  # not None: the corpora analysed, named
        "settings": {"max_tokens": 2000},
        "study_file": None,
    }


def test_a_subset_of_models_is_handed_over_by_name() -> None:
    members = _members()
    params = notebook_parameters(Grid.from_names("micro", ["prose"], models=members[1:3]))
    assert params["families"] == ["micro"] and params["models"] == members[1:3]
    assert params["corpora"] == ["prose"] and params["settings"] == {}


def test_a_study_file_is_handed_over_as_its_path(tmp_path: Path) -> None:
    _members()
    study = tmp_path / "study.toml"
    study.write_text('families = ["micro"]\ncorpora = ["prose"]\n[settings]\nmax_tokens = 300\n')
    assert notebook_parameters(Grid.read(study)) == {"study_file": str(study.resolve())}
    changed = replace(Grid.read(study), corpora=("humaneval",))  # the notebooks would read the file
    with pytest.raises(InvalidArgumentError, match="differs from its study file") as caught:
        notebook_parameters(changed)
    assert "\n" not in str(caught.value)


def test_revisions_are_refused_outside_a_study_file() -> None:
    _members()
    with pytest.raises(InvalidArgumentError, match=r"checkpoints \(revisions\) from a study file"):
        notebook_parameters(Grid.from_names("micro", ["prose"], revisions="log:2"))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("corpora", "'corpora' is part of the report's grid"),
        ("study_file", "'study_file' is part of the report's grid"),
        ("extract", r"'extract' is run_report's own: pass run_report\(extract=...\)"),
        ("cache_dir", "'cache_dir' is run_report's own"),
    ],
)
def test_parameters_naming_the_request_are_refused(name: str, message: str) -> None:
    check_parameters({"n_boot": 10})  # the notebooks' other parameters pass
    with pytest.raises(InvalidArgumentError, match=message):
        check_parameters({"n_boot": 10, name: ["prose"]})


def test_run_report_refuses_them_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="'corpora' is part of the report's grid"):
        run_report(
            Grid.from_names("micro"),
            tmp_path / "out",
            parameters={"corpora": "[prose]"},
            options=ReportOptions(),
        )
    assert not (tmp_path / "out").exists()


def test_options_check_figures_before_any_notebook() -> None:
    assert ReportOptions(figures=("png", " SVG")).figures == ("png", "svg")
    assert ReportOptions(notebooks="01").notebooks == ("01",)
    with pytest.raises(RbplabError, match="unknown figure format 'gif'"):
        ReportOptions(figures=("gif",))
