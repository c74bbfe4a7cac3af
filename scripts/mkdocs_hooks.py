"""mkdocs hooks for the docs site (`mkdocs.yml`: `hooks:`): pages generated at build time, so they
cannot drift from the code. Each marker below is a line of its own.

- `<!-- rbplab-cli -->` becomes `rbplab --help` and the `--help` of every command and subcommand,
  rendered from the parser the `rbplab` command itself builds (`rbplab.cli.app.build_parser`).
- `<!-- notebook-parameters: STEM -->` becomes a table of the notebook's parameters, read from the
  `parameters` cell of `notebooks/STEM.py` (name, type, default, the comment that explains it).
- `<!-- api: PACKAGE -->` becomes the package's docstring and one mkdocstrings entry (`::: path`)
  per name of its `__all__`, each at the module that defines it (the packages import most names
  lazily, which static analysis cannot follow); a module in `__all__` is listed with the names of
  its own `__all__`, or without one, with the public functions and classes it defines. The API
  reference is what the packages export, no more and no less.

A marker naming a notebook that does not exist, or a notebook without a parameters cell, fails the
build.

After the build, MathJax 2.7 (jupyter-server-mathjax's, as the report uses it) is copied into
`site/mathjax/`, where `extra_javascript` loads it: the pages' `$math$` is typeset offline.
"""

from __future__ import annotations

import argparse
import html
import inspect
import os
import re
import shutil
from importlib import import_module
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
# A marker is a line of its own (one quoted in a sentence or a code span stays as it is).
CLI_MARKER = re.compile(r"^<!-- rbplab-cli -->[ \t]*$", re.MULTILINE)
NOTEBOOK_MARKER = re.compile(r"^<!-- notebook-parameters: (?P<stem>[\w-]+) -->[ \t]*$", re.MULTILINE)
API_MARKER = re.compile(r"^<!-- api: (?P<package>[\w.]+) -->[ \t]*$", re.MULTILINE)
# The packages with an API page (docs/api/): a name several of them export is documented on one.
API_PACKAGES = (
    "rbplab", "rbplab.grid", "rbplab.study", "rbplab.analysis", "rbplab.extraction", "rbplab.catalog",
    "rbplab.store", "rbplab.runner", "rbplab.viz", "rbplab.report", "rbplab.core",
)  # fmt: skip
# argparse wraps help to the terminal's width; a fixed width makes the page the same on every machine.
HELP_COLUMNS = "80"
PARAMETER_LINE = re.compile(
    r"^(?P<name>\w+)\s*:\s*(?P<type>[^=]+?)\s*=\s*(?P<default>.*?)\s*(#\s*(?P<doc>.*))?$"
)


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices.items())
    return []


def _help_sections(parser: argparse.ArgumentParser, path: list[str], level: int) -> list[str]:
    """`parser`'s help as a section, then each of its subcommands' below it."""
    name = " ".join(path)
    sections = [f"{'#' * level} `{name}`\n\n```text\n{parser.format_help().rstrip()}\n```\n"]
    for child_name, child in _subcommands(parser):
        sections += _help_sections(child, [*path, child_name], min(level + 1, 4))
    return sections


def cli_reference() -> str:
    """Every command's `--help`, from the parser `rbplab` builds."""
    from rbplab.cli.app import build_parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        parser = build_parser()
        parser.prog = "rbplab"
        sections = [f"```text\n{parser.format_help().rstrip()}\n```\n"]
        for name, child in _subcommands(parser):
            sections += _help_sections(child, ["rbplab", name], 2)
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous
    return "\n".join(sections)


def notebook_parameters(stem: str) -> list[tuple[str, str, str, str]]:
    """(name, type, default, explanation) of each line of the `parameters` cell of notebooks/STEM.py."""
    path = NOTEBOOKS / f"{stem}.py"
    if not path.is_file():
        raise ValueError(f"notebook-parameters: no notebook {path.relative_to(ROOT)}")
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(
        (i for i, line in enumerate(lines) if line.startswith("# %%") and "parameters" in line), None
    )
    if start is None:
        raise ValueError(f"notebook-parameters: {path.relative_to(ROOT)} has no parameters cell")
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("# %%"):
            break
        match = PARAMETER_LINE.match(line)
        if match:
            rows.append((match["name"], match["type"], match["default"], match["doc"] or ""))
    if not rows:
        raise ValueError(f"notebook-parameters: no parameters read from {path.relative_to(ROOT)}")
    return rows


def _cell(text: str) -> str:
    """Table-cell text: code spans would let `|` split the cell, so escape it in HTML."""
    return html.escape(text).replace("|", "&#124;")


def parameters_table(stem: str) -> str:
    rows = ["| parameter | type | default | meaning |", "|---|---|---|---|"]
    for name, kind, default, doc in notebook_parameters(stem):
        rows.append(
            f"| <code>{_cell(name)}</code> | <code>{_cell(kind)}</code> | <code>{_cell(default)}</code> "
            f"| {_cell(doc)} |"
        )
    return "\n".join(rows) + "\n"


def _defined_at(package: ModuleType, name: str) -> str:
    """The dotted path mkdocstrings should render for `package.name`: where it is defined."""
    lazy = getattr(package, "_LAZY", {})
    obj = getattr(package, name)
    if inspect.ismodule(obj):
        return obj.__name__
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if module and qualname and module.startswith("rbplab") and "<" not in qualname:
        owner: object = import_module(module)
        for part in qualname.split("."):
            owner = getattr(owner, part, None)
        if owner is obj:
            return f"{module}.{qualname}"
    if name in lazy:
        return f"{lazy[name]}.{name}"
    return f"{package.__name__}.{name}"


def _exports(package: ModuleType) -> list[str]:
    names = getattr(package, "__all__", None)
    if names is None:
        raise ValueError(f"api: {package.__name__} has no __all__ to document")
    return list(names)


def module_names(module: ModuleType) -> list[str]:
    """What an exported module exports: its `__all__`, or without one the public functions and
    classes it defines itself (not those it imports)."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return [
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and (inspect.isfunction(obj) or inspect.isclass(obj))
        and getattr(obj, "__module__", None) == module.__name__
    ]


def _owner(path: str) -> str:
    """The API page that documents `path` in full: of the packages that export it, the one closest
    to where it is defined (`rbplab.core.errors.RbplabError`: rbplab.core, not the top level)."""
    exporters = [
        name for name in API_PACKAGES
        if path in {_defined_at(import_module(name), n) for n in _exports(import_module(name))}
    ]  # fmt: skip
    return max(exporters, key=lambda name: (path.startswith(name + "."), len(name)))


def api_reference(package_name: str) -> str:
    """The package's docstring, then each exported name where it is defined (a name another API
    page documents, as a link to it; one already shown on this page, once: every object has one
    entry in the whole reference)."""
    package = import_module(package_name)
    blocks = [f"::: {package_name}\n    options:\n      members: false\n      show_root_heading: false\n"]
    shown: set[str] = set()
    for name in _exports(package):
        path = _defined_at(package, name)
        obj = getattr(package, name)
        owner = _owner(path) if package_name in API_PACKAGES else package_name
        if path in shown:
            continue
        if owner != package_name:
            blocks.append(f"## `{name}`\n\n[`{path}`][{path}], documented under [`{owner}`][{owner}].\n")
            continue
        shown.add(path)
        if inspect.ismodule(obj):
            options = "members: false", "heading_level: 2", "show_root_full_path: true"
            blocks.append(f"::: {path}\n    options:\n" + "".join(f"      {o}\n" for o in options))
            for member in module_names(obj):
                member_path = _defined_at(obj, member)
                if member_path not in shown:
                    shown.add(member_path)
                    blocks.append(f"::: {member_path}\n    options:\n      heading_level: 3\n")
        else:
            blocks.append(f"::: {path}\n")
    return "\n".join(blocks)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (mkdocs' signature)
    if CLI_MARKER.search(markdown):
        markdown = CLI_MARKER.sub(lambda _: cli_reference(), markdown)
    markdown = API_MARKER.sub(lambda match: api_reference(match["package"]), markdown)
    return NOTEBOOK_MARKER.sub(lambda match: parameters_table(match["stem"]), markdown)


# The speech-rule engine and its maps serve only MathJax's accessibility explorer, off by default
# (the report leaves them out too: rbplab.report.pages).
_MATHJAX_SKIP = shutil.ignore_patterns("mathmaps", "mathjax-sre.js")


def on_post_build(config) -> None:
    """MathJax next to the pages, where mkdocs.yml's extra_javascript points."""
    from rbplab.report.pages import mathjax_source

    shutil.copytree(
        mathjax_source(), Path(config["site_dir"]) / "mathjax", dirs_exist_ok=True, ignore=_MATHJAX_SKIP
    )
