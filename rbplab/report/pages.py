"""HTML pages of executed notebooks that open offline.

The pages and the index share one plotly.min.js (from the installed plotly) and one MathJax (from
jupyter-server-mathjax), both written once next to index.html (`write_assets`) and referenced by
relative paths: nothing is loaded from a CDN. A page shows results first: code cells are hidden
behind a "show code" toggle (papermill's injected parameters included) and the page is titled by
its notebook's first heading.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from rbplab.core.errors import MissingDependencyError

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
PLOTLY_MIME = "application/vnd.plotly.v1+json"
PLOTLY_JS = "plotly.min.js"  # written once next to the pages, referenced by each of them
MATHJAX_DIR = "mathjax"  # MathJax 2.7 copied from jupyter-server-mathjax, next to the pages
MATHJAX_URL = f"{MATHJAX_DIR}/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"


def notebook_title(path: str | Path) -> str | None:
    """The text of a notebook's first Markdown heading ("1 · RBP_k versus model size ...")."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        if cell.get("cell_type") == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip() or None
    return None


def figure_div(fig) -> str:
    """A plotly figure as an HTML div drawn by the page's shared plotly.min.js."""
    import plotly.io as pio

    return pio.to_html(
        fig,
        include_plotlyjs=False,
        full_html=False,
        validate=False,
        config={"responsive": True},
        auto_play=False,  # an explorer's frames are states to pick, not an animation to play on load
    )


def _html_outputs(nb) -> None:
    """Make an executed notebook's outputs exportable: plotly figures become HTML divs (the
    page loads the shared plotly.js), and widget views, which have no state after papermill, go."""
    nb.metadata.pop("widgets", None)  # no widget state: the page must not fetch a widget renderer
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        kept = []
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_MIME in data:
                continue
            if PLOTLY_MIME in data:
                data["text/html"] = figure_div(data.pop(PLOTLY_MIME))
                data.pop("text/plain", None)
            kept.append(output)
        cell["outputs"] = kept


def mathjax_source() -> Path:
    """The MathJax 2.7 tree that jupyter-server-mathjax ships (the `notebooks` extra installs it)."""
    try:
        import jupyter_server_mathjax
    except ImportError as err:
        raise MissingDependencyError(
            "the report's equations need a local MathJax: pip install 'rbplab[notebooks]' "
            "(or jupyter-server-mathjax)"
        ) from err
    return Path(jupyter_server_mathjax.__file__).parent / "static"


# The speech-rule engine and its maps (3.5 of MathJax's 9.6 MB) serve only the accessibility
# explorer, which is off unless a reader turns it on in MathJax's menu (it then finds them
# missing); typesetting never loads them (the browser test checks no local file is missing).
_MATHJAX_SKIP = shutil.ignore_patterns("mathmaps", "mathjax-sre.js")


def write_assets(folder: str | Path, *, mathjax: bool = True) -> dict[str, Path]:
    """Write plotly.min.js and (with mathjax) the MathJax folder into `folder` unless they are
    already there (same plotly.js, same MathJax.js), so a report holds one copy of each for all
    its pages. Returns the paths written or found."""
    from plotly.offline import get_plotlyjs

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    plotly_js = folder / PLOTLY_JS
    script = get_plotlyjs().encode("utf-8")
    if not plotly_js.is_file() or plotly_js.stat().st_size != len(script):
        plotly_js.write_bytes(script)
    if not mathjax:
        return {"plotly": plotly_js}
    source = mathjax_source()
    mathjax = folder / MATHJAX_DIR
    entry = mathjax / "MathJax.js"
    if not entry.is_file() or entry.read_bytes() != (source / "MathJax.js").read_bytes():
        shutil.copytree(source, mathjax, dirs_exist_ok=True, ignore=_MATHJAX_SKIP)
    return {"plotly": plotly_js, "mathjax": mathjax}


# jupyter-server-mathjax ships the STIX-Web fonts only (as the classic notebook configured them),
# so MathJax is told so before it loads; otherwise it asks for the TeX fonts that are not there.
# Its font test measures text in "MathJax_Blank", a font it declares at url('about:blank'): a
# page opened from disk (origin null) may not load a font from there, and the browser logs a
# CORS error on every page with an equation. Declared as a local font that no system has, it
# is just as missing (what the test needs) and asks for nothing.
_MATHJAX_CONFIG = (
    "<script>window.MathJax = {"
    '"HTML-CSS": {availableFonts: [], preferredFont: null, webFont: "STIX-Web", imageFont: null, '
    'styles: {"@font-face": {"font-family": "MathJax_Blank", src: "local(\'MathJax_Blank\')"}}}, '
    'SVG: {font: "STIX-Web"}};</script>\n'
)

# nbconvert's lab template loads require.js (and would load mermaid) from a CDN. The pages need
# neither, and with require.js present plotly.min.js registers as an AMD module instead of
# window.Plotly, so the tag goes.
_EMPTY_SCRIPT = re.compile(r'<script src="">\s*</script>\s*')


# Results first: code cells (their input, and cells with no output at all, such as the parameters
# papermill injected) are hidden until the reader asks for them.
_CODE_TOGGLE = """<style>
body.rbplab-hide-code .jp-CodeCell .jp-Cell-inputWrapper { display: none; }
body.rbplab-hide-code .jp-CodeCell.jp-mod-noOutputs { display: none; }
/* A table wider than the page scrolls sideways in its output rather than run past the edge. */
.jp-OutputArea-output { overflow-x: auto; }
#rbplab-code-toggle { position: fixed; top: 0.6em; right: 0.8em; z-index: 10; padding: 0.3em 0.8em;
  font: 13px system-ui, sans-serif; background: #fff; border: 1px solid #999; border-radius: 4px;
  cursor: pointer; }
</style>
<script>
function rbplabToggleCode() {
  var hidden = document.body.classList.toggle("rbplab-hide-code");
  document.getElementById("rbplab-code-toggle").textContent = hidden ? "show code" : "hide code";
}
</script>
"""
_TOGGLE_BUTTON = '<button id="rbplab-code-toggle" onclick="rbplabToggleCode()">show code</button>'


def export_html(executed: str | Path, target: str | Path, title: str | None = None) -> Path:
    """An HTML page of an executed notebook that opens offline: figures are plotly divs drawn by
    the shared plotly.min.js and equations are typeset by the shared MathJax, both written next
    to `target` (`write_assets`) and referenced by relative paths; nothing comes from a CDN.
    The page is titled `title` (default: the notebook's first heading) and shows its code cells
    only when the reader presses "show code"."""
    import nbformat
    from nbconvert import HTMLExporter

    target = Path(target)
    write_assets(target.parent)
    nb = nbformat.read(str(executed), as_version=4)
    title = title or notebook_title(executed) or Path(executed).stem
    nb.metadata["title"] = f"{title} · rbplab report"
    _html_outputs(nb)
    exporter = HTMLExporter(
        template_name="lab",
        mathjax_url=MATHJAX_URL,
        require_js_url="",
        mermaid_js_url="",
        mermaid_layout_elk_js_url="",
    )
    body, _ = exporter.from_notebook_node(nb)
    body = _EMPTY_SCRIPT.sub("", body)
    body = body.replace("<!-- Load mathjax -->", _MATHJAX_CONFIG + "<!-- Load mathjax -->", 1)
    script = f'<script type="text/javascript" src="{PLOTLY_JS}"></script>\n' + _CODE_TOGGLE
    body = body.replace("</head>", script + "\n</head>", 1) if "</head>" in body else script + body
    body, found = re.subn(r"<body([^>]*)>", _hide_code_body, body, count=1)
    if not found:
        body = f'<body class="rbplab-hide-code">{_TOGGLE_BUTTON}' + body
    target.write_text(body, encoding="utf-8")
    return target


def _hide_code_body(match: re.Match) -> str:
    attributes = match.group(1)
    if 'class="' in attributes:
        attributes = attributes.replace('class="', 'class="rbplab-hide-code ', 1)
    else:
        attributes += ' class="rbplab-hide-code"'
    return f"<body{attributes}>\n{_TOGGLE_BUTTON}"
