"""The package layout: public lists, no cycles, no private names across subpackages, stable names."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

import rbplab

PACKAGE = Path(rbplab.__file__).parent
SUBPACKAGES = ["core", "store", "extraction", "analysis", "study", "viz", "cli"]


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out.append((name, path))
    return out


def _subpackage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_every_subpackage_names_its_public_api(name):
    package = importlib.import_module(f"rbplab.{name}")
    assert package.__doc__ and package.__all__, f"rbplab.{name} needs a docstring and __all__"
    for public in package.__all__:
        if not hasattr(package, public):  # viz lists submodules, imported on demand
            importlib.import_module(f"rbplab.{name}.{public}")


def test_no_private_name_is_imported_from_another_module():
    offenders = []
    for module, path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("rbplab"):
                continue
            source = node.module
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                # A package-private module (rbplab.analysis.fit) serves its own package only.
                private_module = any(p.startswith("_") for p in source.split(".")[1:])
                if private or (private_module and _subpackage(source) != _subpackage(module)):
                    offenders.append(f"{module}: from {source} import {alias.name}")
    assert not offenders, "\n".join(offenders)


def test_no_import_cycles_between_modules():
    graph = grimp.build_graph("rbplab")
    modules = sorted(m for m in graph.modules if m.startswith("rbplab."))

    def edges(m: str) -> list[str]:
        # A package imports its own __init__-listed children; that is not a cycle of the code.
        return sorted(
            x for x in graph.find_modules_directly_imported_by(m) if x.startswith("rbplab.") and x != m
        )

    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(m: str, stack: list[str]) -> bool:
        state[m] = 1
        for nxt in edges(m):
            if nxt.startswith(m + "."):  # package -> its own submodule (re-exports)
                continue
            if state.get(nxt) == 1:
                cycle.extend(stack[stack.index(nxt) :] + [nxt] if nxt in stack else [m, nxt])
                return True
            if state.get(nxt) is None and visit(nxt, [*stack, nxt]):
                return True
        state[m] = 2
        return False

    for m in modules:
        if state.get(m) is None and visit(m, [m]):
            break
    assert not cycle, " -> ".join(cycle)


def test_no_module_shares_its_name_with_a_lazy_export():
    submodules = {info.name for info in pkgutil.iter_modules([str(PACKAGE)])}
    assert not submodules & set(rbplab.__all__)


def test_top_level_names_keep_their_type_after_importing_every_module():
    """`rbplab.extract` is the function before and after `import rbplab.<anything>`."""
    names = [m for m, _ in _modules() if m != "rbplab" and not m.endswith("__main__")]
    script = (
        "import importlib, rbplab\n"
        "before = {n: type(getattr(rbplab, n)).__name__ for n in rbplab.__all__}\n"
        f"for m in {names!r}: importlib.import_module(m)\n"
        "after = {n: type(getattr(rbplab, n)).__name__ for n in rbplab.__all__}\n"
        "assert before == after, (before, after)\n"
        "assert callable(rbplab.extract) and type(rbplab.extract).__name__ == 'function'\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
