"""Every warning rbplab raises is an `RbplabWarning`: its call passes the category, so a notebook
shows it by that name (and `filterwarnings(category=rbplab.RbplabWarning)` takes it), and the
command line's one-line display does not depend on where the warning was raised."""

from __future__ import annotations

import ast
from pathlib import Path

import rbplab

PACKAGE = Path(rbplab.__file__).parent


def _warn_calls_without_category() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            call = node if isinstance(node, ast.Call) else None
            func = call.func if call else None
            if not (isinstance(func, ast.Attribute) and func.attr == "warn"):
                continue
            if not (isinstance(func.value, ast.Name) and func.value.id == "warnings"):
                continue
            given = (
                call.args[1]
                if len(call.args) > 1
                else next((k.value for k in call.keywords if k.arg == "category"), None)
            )
            if not (isinstance(given, ast.Name) and given.id == "RbplabWarning"):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{call.lineno}")
    return found


def test_every_warning_of_rbplab_is_an_rbplab_warning():
    assert _warn_calls_without_category() == []
