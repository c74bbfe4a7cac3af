"""Every error rbplab raises for something a user can fix is an RbplabError, and keeps its
conventional base so `except ValueError` (or OSError, RuntimeError) still catches it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import rbplab
from rbplab import RbplabError


def rbplab_error_classes() -> list[type]:
    found = []
    for info in pkgutil.walk_packages(rbplab.__path__, "rbplab."):
        if info.name.startswith(("rbplab.notebooks", "rbplab.__main__")):
            continue
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if obj.__module__ == info.name and issubclass(obj, Exception) and obj.__name__.endswith("Error"):
                found.append(obj)
    return found


def test_every_error_class_is_an_rbplab_error():
    classes = rbplab_error_classes()
    assert len(classes) >= 15
    assert [c.__name__ for c in classes if not issubclass(c, RbplabError)] == []


@pytest.mark.parametrize(
    ("call", "base"),
    [
        (lambda: rbplab.Grid.from_names(["no-such-family-or-model"], ["prose"]), ValueError),
        (
            lambda: rbplab.load_study(
                rbplab.Grid.from_names("micro", ["prose"]), cache_dir="/nonexistent/rbplab-cache"
            ),
            ValueError,
        ),
    ],
)
def test_user_errors_are_caught_as_rbplab_errors_and_as_their_base(call, base):
    with pytest.raises(RbplabError) as err:
        call()
    assert isinstance(err.value, base) and "\n" not in str(err.value)
