"""Notebook parameters as batch runs pass them (papermill -p text, -y and --params YAML)."""

from __future__ import annotations

import pytest

from rbplab.viz.parameters import (
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
