"""ExtractionSettings: one validated object for every entry point."""

from __future__ import annotations

import pytest

from rbplab.core import ExtractionSettings
from rbplab.core.settings import resolve_settings


def test_defaults_and_overrides():
    base = ExtractionSettings()
    assert base.context_length is None and base.bos == "auto" and base.batch_tokens is None
    changed = resolve_settings(base, max_tokens=2000, context_length=128)
    assert changed.max_tokens == 2000 and changed.context_length == 128 and base.max_tokens is None
    assert resolve_settings({"stride": 16}, context_length=64).stride == 16
    assert changed.to_dict(changed_only=True) == {"context_length": 128, "max_tokens": 2000}
    assert ExtractionSettings.from_mapping(changed.to_dict()) == changed


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"context_length": 1}, "context_length must be at least 2"),
        ({"context_length": "512"}, "context_length must be a positive integer or None"),
        ({"context_length": 64, "stride": 64}, "stride must be smaller than context_length=64"),
        ({"bos": "sometimes"}, "bos must be one of"),
        ({"max_tokens": 0}, "max_tokens must be a positive integer or None"),
        ({"max_tokens": True}, "max_tokens must be a positive integer or None"),
        ({"dtype": "int8"}, "dtype must be one of"),
        ({"batch_tokens": 0}, "batch_tokens must be a positive integer"),
        ({"include_padded_vocab": "yes"}, "include_padded_vocab must be true or false"),
        ({"contex_length": 512}, "unknown extraction setting.*contex_length.*settings are: context_length"),
    ],
)
def test_bad_settings_are_one_line_errors(changes, message):
    with pytest.raises(ValueError, match=message) as err:
        ExtractionSettings().with_changes(**changes)
    assert "\n" not in str(err.value)


def test_settings_are_frozen():
    with pytest.raises(AttributeError):
        ExtractionSettings().max_tokens = 5  # type: ignore[misc]
