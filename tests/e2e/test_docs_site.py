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
