"""The docs site builds with `mkdocs build --strict` and works offline.

Strict: any warning fails the build (a broken link or anchor, a page outside the nav, a docstring
target mkdocstrings cannot find, a missing snippet). Offline: no page or stylesheet loads anything
from another host: no `<script src>`, `<link href>`, `@import` or `@font-face` `url()` pointing at
http(s) or a protocol-relative `//host`. Generated pages hold what they are generated from: every
`rbplab` command's help, every notebook parameter, every exported name.

`make test` builds the site once (`make docs`) and hands it here as RBPLAB_DOCS_SITE; run alone,
the tests build it into a temporary folder (so they are `slow`: `make test-fast` skips them).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers.browser import chromium, needs_chromium, offline_context, record_errors

import rbplab

ROOT = Path(rbplab.__file__).resolve().parents[1]
EXTERNAL = re.compile(r"^\s*(https?:)?//", re.IGNORECASE)
CSS_URL = re.compile(r"url\(\s*['\"]?(?P<url>[^'\")]+)", re.IGNORECASE)
CSS_IMPORT = re.compile(r"@import\s+(?:url\()?\s*['\"]?(?P<url>[^'\")\s;]+)", re.IGNORECASE)
FONT_FACE = re.compile(r"@font-face\s*{[^}]*}", re.IGNORECASE)


class _References(HTMLParser):
    """What a page loads: script sources, link targets, inline styles."""

    def __init__(self) -> None:
        super().__init__()
        self.loads: list[str] = []
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "script" and values.get("src"):
            self.loads.append(f"<script src={values['src']}>")
        if tag == "link" and values.get("href"):
            self.loads.append(f"<link href={values['href']}>")
        if tag == "style":
            self._in_style = True
        if values.get("style"):
            self.styles.append(values["style"] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.styles.append(data)


def external_css(css: str) -> list[str]:
    """@import and @font-face urls of a stylesheet that point at another host."""
    found = [m["url"] for m in CSS_IMPORT.finditer(css) if EXTERNAL.match(m["url"])]
    for face in FONT_FACE.finditer(css):
        found += [m["url"] for m in CSS_URL.finditer(face.group()) if EXTERNAL.match(m["url"])]
    return found


def external_references(site: Path) -> list[str]:
    """'file: reference' for everything under `site` that would be fetched from another host."""
    problems = []
    for page in sorted(site.rglob("*.html")):
        parser = _References()
        parser.feed(page.read_text(encoding="utf-8"))
        name = page.relative_to(site)
        problems += [f"{name}: {load}" for load in parser.loads if EXTERNAL.match(load.split("=", 1)[1])]
        problems += [f"{name}: {url}" for style in parser.styles for url in external_css(style)]
    for sheet in sorted(site.rglob("*.css")):
        problems += [
            f"{sheet.relative_to(site)}: {url}" for url in external_css(sheet.read_text(encoding="utf-8"))
        ]
    return problems


def test_the_checker_finds_external_references(tmp_path: Path) -> None:
    (tmp_path / "page.html").write_text(
        '<html><head><script src="https://cdn.example/x.js"></script>'
        '<link rel="stylesheet" href="//fonts.example/css"><link rel="icon" href="assets/i.png">'
        "<style>@font-face { font-family: F; src: url(https://fonts.example/f.woff2) }</style>"
        '</head><body><a href="https://arxiv.org/abs/2510.20387">paper</a></body></html>'
    )
    (tmp_path / "a.css").write_text('@import url("https://fonts.example/css2"); @font-face{src:url(f.woff2)}')
    found = external_references(tmp_path)
    assert len(found) == 4, found
    assert all("example" in problem for problem in found)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = os.environ.get("RBPLAB_DOCS_SITE")
    if built:
        path = Path(built) if Path(built).is_absolute() else ROOT / built
        assert (path / "index.html").is_file(), f"RBPLAB_DOCS_SITE={built}: no built site there (make docs)"
        return path
    out = tmp_path_factory.mktemp("docs") / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert done.returncode == 0, (
        f"mkdocs build --strict failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    )
    return out


@pytest.mark.slow  # builds the site (~40 s) unless make test built it
def test_site_builds_strict_and_loads_nothing_from_other_hosts(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert list(site.rglob("*.css")), "no stylesheet: the theme's assets are missing"
    assert external_references(site) == []


@pytest.mark.slow  # builds the site (~40 s) unless make test built it
def test_cli_page_holds_every_commands_help(site: Path) -> None:
    from rbplab.cli.app import COMMANDS

    page = (site / "cli.html").read_text(encoding="utf-8")
    for name in COMMANDS:
        assert f"rbplab {name}" in page, name
        assert f"usage: rbplab {name}" in page, name
    assert "usage: rbplab cache ls" in page  # subcommands too


def _hooks():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import mkdocs_hooks
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return mkdocs_hooks


@pytest.mark.slow  # builds the site (~40 s) unless make test built it
def test_notebooks_page_lists_every_parameter(site: Path) -> None:
    page = (site / "notebooks.html").read_text(encoding="utf-8")
    stems = sorted(p.stem for p in (ROOT / "notebooks").glob("0*.py"))
    assert len(stems) >= 7
    for stem in stems:
        assert f"notebook-parameters: {stem}" in (ROOT / "docs" / "notebooks.md").read_text(), stem
        for name, *_ in _hooks().notebook_parameters(stem):
            assert f"<code>{name}</code>" in page, (stem, name)


@pytest.mark.slow  # builds the site (~40 s) unless make test built it
def test_api_pages_document_every_exported_name(site: Path) -> None:
    """Each API page names each name its package exports, and each is documented in full (an
    element with its dotted path as id) on one page."""
    from importlib import import_module

    hooks = _hooks()
    pages = {p.stem: p.read_text(encoding="utf-8") for p in (site / "api").glob("*.html")}
    documented = {m for text in pages.values() for m in re.findall(r'id="(rbplab[\w.]*)"', text)}
    for package_name in hooks.API_PACKAGES:
        stem = "rbplab" if package_name == "rbplab" else package_name.split(".", 1)[1]
        package = import_module(package_name)
        for name in package.__all__:
            assert name in pages[stem], (package_name, name)
            assert hooks._defined_at(package, name) in documented, (package_name, name)


@pytest.mark.slow  # builds the site (~40 s) unless make test built it
def test_every_notebook_with_a_headline_figure_has_its_static_figure(site: Path) -> None:
    """scripts/docs_figures.py draws one PNG per notebook that saves a "headline" figure."""
    script = (ROOT / "scripts" / "docs_figures.py").read_text(encoding="utf-8")
    page = (site / "notebooks.html").read_text(encoding="utf-8")
    drawn = 0
    for notebook in sorted((ROOT / "notebooks").glob("0*.py")):
        if not re.search(r"save_figure\([^\n]*\"headline\"", notebook.read_text(encoding="utf-8")):
            continue
        assert f'"{notebook.stem}"' in script, notebook.stem
        assert (ROOT / "docs" / "figures" / f"{notebook.stem}.png").is_file(), notebook.stem
        assert (site / "figures" / f"{notebook.stem}.png").is_file(), notebook.stem
        assert f'src="figures/{notebook.stem}.png"' in page, notebook.stem
        drawn += 1
    assert drawn >= 6


# Pages with math: each must show MathJax's typeset output and no TeX source.
MATH_PAGES = ("index.html", "concepts.html", "notebooks.html", "training.html", "cache.html")


@pytest.mark.slow  # builds the site (~40 s) unless make test built it
@pytest.mark.browser
@needs_chromium
def test_site_works_from_file_urls(site: Path) -> None:
    """The README says to open site/index.html: from file://, with every other request refused,
    search finds `load_study`'s API page, math is typeset by the site's own MathJax, a notebook's
    name in the notebooks table is not broken mid-word, and no page logs a console error (search
    used to log two per page: search/search_index.js)."""
    remote: list[str] = []
    errors: list[str] = []
    with chromium() as browser:
        page = offline_context(browser, {"width": 1200, "height": 900}, remote).new_page()
        record_errors(page, errors)
        for name in MATH_PAGES:
            page.goto((site / name).as_uri())
            page.wait_for_function(
                "window.MathJax && MathJax.Hub && MathJax.Hub.queue && MathJax.Hub.queue.pending === 0"
                " && document.querySelectorAll('.MathJax, .MathJax_Display').length > 0",
                timeout=60_000,
            )
            body = page.inner_text("article")
            assert "_{" not in body and "\\mathrm" not in body and "^{" not in body, name
            assert page.locator(".MathJax_Error").count() == 0, name
        page.goto((site / "notebooks.html").as_uri())
        cell = page.locator("table td:first-child code", has_text="01_rbp_vs_size").first
        assert cell.evaluate("e => e.getClientRects().length") == 1  # one line box: not wrapped

        page.goto((site / "index.html").as_uri())
        page.locator("input.md-search__input").click()
        page.keyboard.type("load_study")  # keystrokes, as the search box listens for them
        page.locator(".md-search-result__item a").first.wait_for(state="attached", timeout=30_000)
        links = page.locator(".md-search-result__item a").evaluate_all("xs => xs.map(x => x.href)")
        assert any("api/study.html" in link for link in links), links
    assert remote == [], f"the site asked for remote URLs: {remote}"
    assert errors == [], f"the pages logged errors: {errors}"


PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _user_code() -> dict[str, str]:
    """{where: source} of the Python a user reads and runs: the README's and the docs pages'
    python blocks, and every notebook (its jupytext .py and its .ipynb's code cells)."""
    import json

    code = {}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for i, block in enumerate(PYTHON_BLOCK.findall(page.read_text(encoding="utf-8"))):
            code[f"{page.relative_to(ROOT)} block {i + 1}"] = block
    for notebook in sorted((ROOT / "notebooks").glob("0*.py")):
        code[str(notebook.relative_to(ROOT))] = notebook.read_text(encoding="utf-8")
        cells = json.loads(notebook.with_suffix(".ipynb").read_text(encoding="utf-8"))["cells"]
        sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        # IPython magics (%xmode) are not Python
        code[f"{notebook.stem}.ipynb"] = "\n".join(
            "\n".join(line for line in source.splitlines() if not line.startswith("%")) for source in sources
        )
    return code


def rbplab_names(source: str) -> set[str]:
    """Every dotted rbplab name `source` imports or reaches through an imported name
    (`from rbplab.study import size` then `size.fits(...)`: rbplab.study.size.fits)."""
    import ast

    tree = ast.parse(source)
    bound: dict[str, str] = {}  # local name -> the dotted rbplab name it is
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "rbplab":
                    names.add(alias.name)
                    bound[alias.asname or "rbplab"] = alias.name if alias.asname else "rbplab"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "rbplab":
            for alias in node.names:
                names.add(f"{node.module}.{alias.name}")
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        chain, value = [], node
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if chain and isinstance(value, ast.Name) and value.id in bound:
            path = bound[value.id]
            for attr in reversed(chain):
                path += f".{attr}"
                names.add(path)
    return names


def defined_at(dotted: str) -> str:
    """Where the object a dotted rbplab name reaches is defined: a module's name, a class's or
    function's module.qualname (a re-export or a submodule's function as it is documented)."""
    import inspect
    from importlib import import_module

    parts = dotted.split(".")
    obj = import_module(parts[0])
    for i, part in enumerate(parts[1:], start=2):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            obj = import_module(".".join(parts[:i]))
    if inspect.ismodule(obj):
        return obj.__name__
    return f"{obj.__module__}.{obj.__qualname__}"


def test_the_name_collector_follows_imports_and_attributes() -> None:
    source = "import rbplab\nfrom rbplab.study import size as s\nrbplab.Grid.from_names(); s.fits(x).points"
    assert rbplab_names(source) == {  # a call's result is a value, not a name
        "rbplab", "rbplab.Grid", "rbplab.Grid.from_names", "rbplab.study.size", "rbplab.study.size.fits",
    }  # fmt: skip
    assert defined_at("rbplab.Grid.from_names") == "rbplab.grid.Grid.from_names"
    assert defined_at("rbplab.viz.plots.emergence") == "rbplab.viz.plots.emergence.emergence"


@pytest.mark.slow  # builds the site (~40 s) unless make test built it
def test_api_reference_covers_every_name_users_import(site: Path) -> None:
    """Every rbplab name the README, the docs' examples and the notebooks import (or call through
    an imported module) has an entry in the API reference: the hook renders exactly the packages'
    `__all__`, so a name left out of them has no page (study.size.fits, viz.headlines,
    viz.parameters.NotebookParameters, viz.readable.readable, report.run.cached_checkpoints were)."""
    pages = [p.read_text(encoding="utf-8") for p in (site / "api").glob("*.html")]
    documented = {m for text in pages for m in re.findall(r'id="(rbplab[\w.]*)"', text)}
    used: dict[str, set[str]] = {}
    for where, source in _user_code().items():
        for name in rbplab_names(source):
            used.setdefault(name, set()).add(where)
    assert {"rbplab.study.size.fits", "rbplab.viz.readable.readable"} <= set(used)  # the collector reads them
    missing = []
    for name, where in sorted(used.items()):
        path = defined_at(name)  # a name the package lacks fails here (docs or notebook out of date)
        if path not in documented:
            missing.append(f"{name} ({path}), used in {', '.join(sorted(where))}")
    assert missing == [], "names users import that the API reference lacks:\n" + "\n".join(missing)
