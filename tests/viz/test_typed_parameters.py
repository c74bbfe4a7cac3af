"""Flags and numbers of a notebook's parameters cell, typed from what papermill's `-p` hands over
(`-p extract false` is the text 'false', which Python takes as true), or refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from rbplab.viz.parameters import NotebookParameters, ParameterError, as_flag, as_number, typed_parameters

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        *[(text, True) for text in ("true", "TRUE", "True", "yes", "Yes", "1", " yes ")],
        *[(text, False) for text in ("false", "FALSE", "no", "No", "0")],
        (True, True),
        (False, False),
        (1, True),  # papermill -p extract 1 hands over the int 1
        (0, False),
    ],
)
def test_flags(value, expected):
    assert as_flag(value, "extract") is expected


@pytest.mark.parametrize("value", ["maybe", "", "on", 2, -1, 1.0, None, [True]])
def test_a_flag_of_another_kind_is_refused_in_one_line(value):
    with pytest.raises(ParameterError) as caught:
        as_flag(value, "extract")
    message = str(caught.value)
    assert message == f"parameter 'extract' is {value!r}, not a bool (true/false, yes/no or 1/0)"
    assert "\n" not in message


def test_numbers():
    assert as_number("200", "n_boot") == 200 and isinstance(as_number("200", "n_boot"), int)
    assert as_number(" 1e3 ", "n_boot") == 1000 and as_number(20.0, "n_boot") == 20
    assert as_number("0.25", "fraction", float) == 0.25 and isinstance(as_number(3, "fraction", float), float)
    for value, kind in [("abc", int), ("1.5", int), (1.5, int), (True, int), ("nan", float), ("inf", int)]:
        with pytest.raises(ParameterError, match=r"^parameter 'n' is .*, not an? (int|float)"):
            as_number(value, "n", kind)
    with pytest.raises(ParameterError, match=r"^parameter 'n_boot' is 'abc', not an int \(a whole number\)$"):
        as_number("abc", "n_boot")


def test_typed_parameters_types_a_parameter_cell_in_place():
    namespace = {
        "__annotations__": {
            "extract": bool,
            "n_boot": int,
            "fraction": float,
            "limit": int | None,
            "ties": str,
            "ks": list[int],
        },
        "extract": "false",
        "n_boot": "20",
        "fraction": "0.5",
        "limit": "None",
        "ties": "pessimistic",
        "ks": "[1, 10]",
        "unannotated": "false",
    }
    typed_parameters(namespace)
    assert namespace["extract"] is False and namespace["n_boot"] == 20 and namespace["fraction"] == 0.5
    assert namespace["limit"] is None
    assert (namespace["ties"], namespace["ks"], namespace["unannotated"]) == (
        "pessimistic",
        "[1, 10]",
        "false",
    )
    namespace["n_boot"] = "abc"
    with pytest.raises(ParameterError, match=r"^parameter 'n_boot' is 'abc', not an int"):
        typed_parameters(namespace)


def test_notebook_parameters_type_their_flags():
    params = NotebookParameters.read({"extract": "false", "synthetic": "no"})
    assert params.extract is False and params.synthetic is False
    assert NotebookParameters.read({"extract": "YES"}).extract is True
    with pytest.raises(ParameterError, match="parameter 'synthetic' is 'sometimes', not a bool"):
        NotebookParameters.read({"synthetic": "sometimes"})


@pytest.mark.parametrize("notebook", sorted(NOTEBOOKS.glob("0*.py")), ids=lambda p: p.stem)
def test_every_notebook_types_its_parameters_right_after_the_parameters_cell(notebook):
    text = notebook.read_text()
    start = text.index('# %% tags=["parameters"]')
    after = text.index("\n# %%", start + 1)
    following = text[after : text.index("\n# %%", after + 1)]
    assert "\ntyped_parameters(globals())" in following
    assert following.index("typed_parameters(globals())") < following.index(
        "NotebookParameters.read(globals())"
    )
