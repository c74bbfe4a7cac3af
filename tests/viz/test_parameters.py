"""Notebook parameters as batch runs pass them (papermill -p text, -y and --params YAML)."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Optional

import pytest

from rbplab.viz.parameters import (
    NotebookParameters,
    ParameterError,
    as_mapping,
    as_names,
    as_numbers,
    check_names,
    read_params_file,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (["prose", "humaneval"], ["prose", "humaneval"]),
        ('["prose","humaneval"]', ["prose", "humaneval"]),  # papermill -p corpora '["prose","humaneval"]'
        ("[prose, humaneval]", ["prose", "humaneval"]),  # YAML flow list
        ("prose,humaneval", ["prose", "humaneval"]),
        ("hub:wikipedia", ["hub:wikipedia"]),
        ("None", None),
    ],
)
def test_names(value, expected):
    assert as_names(value, "corpora") == expected


def test_numbers_and_mappings():
    assert as_numbers("[1, 10, 100]", "ks") == [1, 10, 100]
    assert as_numbers("1,10", "ks") == [1, 10]
    assert as_numbers(5, "ks") == [5]
    assert as_numbers("[0.4, 0.6]", "f", kind=float) == [0.4, 0.6]
    assert as_mapping('{"max_tokens": 2000}', "settings") == {"max_tokens": 2000}
    assert as_mapping("max_tokens: 2000", "settings") == {"max_tokens": 2000}
    assert as_mapping(None, "settings") == {} and as_mapping("", "settings") == {}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: as_names({"a": 1}, "corpora"), "parameter 'corpora' must be a list of names"),
        (lambda: as_names('["prose", ', "corpora"), "parameter 'corpora': cannot read"),
        (lambda: as_numbers("[1, x]", "ks"), "parameter 'ks' must be a list of numbers"),
        (lambda: as_numbers("[1.5]", "ks"), "must hold whole numbers"),
        (lambda: as_numbers([True], "ks"), "must be a list of numbers"),
        (lambda: as_mapping("[1, 2]", "settings"), "parameter 'settings' must be a mapping"),
    ],
)
def test_bad_values_are_one_line_errors(call, message):
    with pytest.raises(ParameterError, match=message.replace("(", r"\(")) as err:
        call()
    assert "\n" not in str(err.value)


def test_params_file_and_names(tmp_path):
    path = tmp_path / "batch.yaml"
    path.write_text("corpora: [prose, humaneval]\nks: [1, 5]\nsettings:\n  max_tokens: 2000\n")
    assert read_params_file(path) == {
        "corpora": ["prose", "humaneval"],
        "ks": [1, 5],
        "settings": {"max_tokens": 2000},
    }
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(ParameterError, match="must hold one mapping"):
        read_params_file(tmp_path / "list.yaml")
    with pytest.raises(ParameterError, match="cannot read parameters file"):
        read_params_file(tmp_path / "missing.yaml")
    check_names(["ks", "corpora"], ["ks", "corpora", "n_boot"])
    with pytest.raises(ParameterError, match=r"parameter 'corpra' \(did you mean 'corpora'\?\) \(nor 'x'\)"):
        check_names(["corpra", "x"], ["ks", "corpora"])


NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def _parameter_cell(notebook: Path) -> tuple[dict, dict]:
    """(values, annotations) of a notebook's parameters cell, executed as the kernel would."""
    text = notebook.read_text()
    start = text.index('# %% tags=["parameters"]')
    cell = text[start : text.index("\n# %%", start + 1)]
    namespace: dict = {"Optional": Optional}
    exec(compile(cell, str(notebook), "exec"), namespace)
    annotations = namespace.pop("__annotations__")
    return {name: namespace[name] for name in annotations}, annotations


def _as_papermill_text(value):
    """A list or table as `papermill -p NAME VALUE` hands it to the kernel: its text."""
    return json.dumps(value) if isinstance(value, (list, dict)) else value


@pytest.mark.parametrize("notebook", sorted(NOTEBOOKS.glob("0*.py")), ids=lambda p: p.stem)
def test_every_list_or_table_parameter_of_a_notebook_is_read_from_text(notebook):
    values, annotations = _parameter_cell(notebook)
    structured = [n for n, a in annotations.items() if "list" in str(a) or "dict" in str(a)]
    readable = {f.name for f in fields(NotebookParameters)}
    assert set(structured) <= readable, f"{notebook.stem}: {sorted(set(structured) - readable)} not read"
    as_declared = NotebookParameters.read(values)
    as_text = NotebookParameters.read({n: _as_papermill_text(v) for n, v in values.items()})
    assert as_text == as_declared
    for name in structured:  # the declared value itself (an empty checkpoints table reads as None)
        expected = (values[name] or None) if name == "checkpoints" else values[name]
        assert getattr(as_text, name) == expected, name


def test_notebook_parameters_from_papermill_text():
    params = NotebookParameters.read(
        {
            "families": '["micro"]',
            "models": "micro-1-25K,micro-2-85K",
            "corpora": "[prose]",
            "settings": "{max_tokens: 2000}",
            "ks": "1, 10",
            "large_fractions": "[0.4, 0.6]",
            "checkpoints": "",
            "output_dir": "out",  # not a field: the notebook reads it itself
            "extract": True,
        }
    )
    assert (params.families, params.models, params.corpora) == (
        ["micro"],
        ["micro-1-25K", "micro-2-85K"],
        ["prose"],
    )
    assert params.settings == {"max_tokens": 2000} and params.ks == [1, 10]
    assert params.large_fractions == [0.4, 0.6] and params.checkpoints is None and params.extract is True
    grid = params.grid()
    assert grid.models == ["micro-1-25K", "micro-2-85K"] and grid.corpora == ("prose",)
    assert grid.settings.max_tokens == 2000


def test_notebook_parameters_route_the_study(tmp_path, monkeypatch):
    seen = {}

    def recorder(grid, **options):
        seen.update(grid=grid, **options)

    def synthetic(**options):
        seen.update(grid=None, synthetic=True, **options)

    monkeypatch.setattr("rbplab.study.load_study", recorder)
    monkeypatch.setattr("rbplab.study.synthetic_study", synthetic)
    study_file = tmp_path / "s.toml"
    study_file.write_text('models = ["micro-1-25K"]\ncorpora = ["prose"]\n')
    NotebookParameters.read(
        {"families": "micro", "study_file": str(study_file), "ties": "expected"}
    ).open_study()
    assert seen["grid"].models == ["micro-1-25K"] and seen["grid"].path == study_file.resolve()
    assert seen["outer"] == "model" and seen["ties"] == "expected"  # runs listed as the file lists them
    NotebookParameters.read({"families": "no-such-family", "synthetic": True}).open_study()
    assert seen["grid"] is None and seen["synthetic"] is True  # made-up models: no registry lookup
    NotebookParameters.read({"families": "micro", "corpora": "prose"}).open_study()
    assert seen["grid"].corpora == ("prose",) and seen["outer"] == "corpus"


def test_notebook_parameters_without_families_or_study_file_are_one_line():
    with pytest.raises(ParameterError, match="parameter 'families' names no family") as err:
        NotebookParameters.read({"families": "None"}).grid()
    assert "\n" not in str(err.value)
