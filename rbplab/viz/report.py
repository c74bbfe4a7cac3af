"""Run every notebook with papermill and publish them as a browsable report.

`run_report` executes each notebook of notebooks/ for the chosen family and corpora,
writes the executed notebook and an HTML page into the output directory, and an index.html
with each notebook's headline figure and table. A notebook that fails is reported with the
cell and the error; the others still run.

The report opens offline and loads nothing from a CDN: the pages and the index share one
plotly.min.js (from the installed plotly) and one MathJax (from jupyter-server-mathjax), both
written once next to index.html (`write_assets`), and reference them by relative paths.

Notebooks hand results to the report through `save_table`, `save_figure`, `headline` and
`banner`: each table lands as CSV and each figure as plotly JSON in the notebook's own output
folder; the table and the figure named "headline" are shown on the index, with the notebook's
headline sentence (its result, with intervals) and, loudly, its banner (e.g. "synthetic data").

The pages show results first: code cells are hidden behind a "show code" toggle (papermill's
injected parameters included), each page is titled by its notebook's heading, and the index states
the resolved grid (families with their models and sizes, corpora, every extraction setting), the
law, one sentence per notebook and a results.json (`rbplab.load_results`) with all of it. With
`figures=("png", "svg", "pdf")` every saved figure is also exported for papers.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from rbplab.core.errors import InvalidArgumentError, MissingDependencyError, MissingFileError, RbplabError
from rbplab.core.settings import ExtractionSettings, resolve_settings
from rbplab.store.paths import notebooks_dir

HEADLINE = "headline"
SENTENCE_FILE = "headline.txt"  # the notebook's result in one sentence (`headline`)
BANNER_FILE = "banner.txt"  # a warning the index shows loudly (`banner`)
RESULTS_FILE = "results.json"
FIGURES_DIR = "figures"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
PLOTLY_MIME = "application/vnd.plotly.v1+json"
FIGURE_SUFFIX = ".plotly.json"
PLOTLY_JS = "plotly.min.js"  # written once next to the pages, referenced by each of them
MATHJAX_DIR = "mathjax"  # MathJax 2.7 copied from jupyter-server-mathjax, next to the pages
MATHJAX_URL = f"{MATHJAX_DIR}/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"
KERNEL_ARGUMENTS = ["--IPKernelApp.log_level=ERROR"]


def list_notebooks(directory: str | Path | None = None) -> list[Path]:
    """Every .ipynb of the notebooks folder, in name order (01_..., 02_..., ...)."""
    folder = Path(directory) if directory is not None else notebooks_dir()
    found = sorted(p for p in folder.glob("*.ipynb") if not p.name.startswith("."))
    if not found:
        raise MissingFileError(f"no notebooks (*.ipynb) in {folder}")
    return found


def save_table(frame: pd.DataFrame, name: str, output_dir: str | Path | None) -> pd.DataFrame:
    """Write `frame` as <output_dir>/<name>.csv (nothing when output_dir is None) and return it,
    so a notebook cell can both record and display a table."""
    if output_dir is not None:
        folder = Path(output_dir)
        folder.mkdir(parents=True, exist_ok=True)
        frame.to_csv(folder / f"{name}.csv", index=False)
    return frame


def save_figure(fig, name: str, output_dir: str | Path | None):
    """Write a plotly figure as <output_dir>/<name>.plotly.json (nothing when output_dir is None)
    and return it unchanged, so a notebook cell can record and show it: the figure named
    "headline" is drawn on the report's index. A FigureWidget is saved in its current state."""
    if output_dir is not None:
        import plotly.graph_objects as go

        folder = Path(output_dir)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}{FIGURE_SUFFIX}").write_text(go.Figure(fig).to_json(), encoding="utf-8")
    return fig


def headline_text(frame: pd.DataFrame) -> str:
    """One line from a headline table: the identifying text columns, then name=value pairs (whole
    numbers as integers, others to 3 significant digits: `rbplab.viz.headlines.number`)."""
    from rbplab.viz.headlines import number

    parts = []
    for row in frame.to_dict("records"):
        labels = [str(v) for k, v in row.items() if isinstance(v, str)]
        values = [
            f"{k}={number(v)}" if isinstance(v, (int, float)) and not isinstance(v, bool) else f"{k}={v}"
            for k, v in row.items()
            if not isinstance(v, str)
        ]
        parts.append(f"{'/'.join(labels)}: {', '.join(values)}" if labels else ", ".join(values))
    return "; ".join(parts)


def headline(sentence: str, output_dir: str | Path | None) -> None:
    """State the notebook's result in one sentence (with its intervals): shown at this point of
    the notebook, and saved as <output_dir>/headline.txt for the report's index and results file."""
    _show_block(sentence, "rbplab-headline", "background:#eef6ee;border-left:6px solid #2e7d32;")
    if output_dir is not None:
        folder = Path(output_dir)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / SENTENCE_FILE).write_text(sentence.strip() + "\n", encoding="utf-8")


def banner(text: str, output_dir: str | Path | None) -> None:
    """A loud warning about the whole notebook (e.g. that it analyses synthetic data): a red box
    here, and on the report's index above the notebook's row and section."""
    _show_block(text, "rbplab-banner", "background:#fdecea;border:3px solid #c62828;font-weight:600;")
    if output_dir is not None:
        folder = Path(output_dir)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / BANNER_FILE).write_text(text.strip() + "\n", encoding="utf-8")


def _show_block(text: str, css_class: str, style: str) -> None:
    from IPython.display import HTML, display

    from rbplab.viz.layout import html_label

    body = html_label(html.escape(text))
    display(HTML(f'<div class="{css_class}" style="padding:0.6em 1em;margin:0.5em 0;{style}">{body}</div>'))


@dataclass
class NotebookResult:
    notebook: str
    ok: bool
    seconds: float
    executed: str | None  # path of the executed .ipynb
    html: str | None
    summary: str  # the notebook's headline sentence, else its headline table as name=value text
    error: str | None = None  # "cell 7: ValueError: ..." when the run failed
    table: str | None = None  # the headline table (CSV) the notebook saved, if any
    figure: str | None = None  # the headline figure (plotly JSON) the notebook saved, if any
    title: str | None = None  # the notebook's first heading
    banner: str | None = None  # the notebook's warning, if it raised one
    exports: list[str] = field(default_factory=list)  # figure files written for `figures`


@contextmanager
def _static_figures() -> Iterator[None]:
    # The kernel inherits our environment: tell rbplab.viz.widgets nobody renders widgets there.
    from rbplab.viz.widgets import STATIC_ENV

    old = os.environ.get(STATIC_ENV)
    os.environ[STATIC_ENV] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(STATIC_ENV, None)
        else:
            os.environ[STATIC_ENV] = old


def _describe_failure(err: BaseException) -> str:
    from papermill.exceptions import PapermillExecutionError

    if isinstance(err, PapermillExecutionError):
        # Numbered as in the executed notebook (which includes papermill's injected-parameters cell).
        first = next((line.strip() for line in err.source.splitlines() if line.strip()), "")
        first = first if len(first) <= 60 else first[:57] + "..."
        return f"cell {err.cell_index + 1} (In [{err.exec_count}]: {first}): {err.ename}: {err.evalue}"
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


def _papermill(
    path: Path,
    executed: Path,
    params: Mapping[str, object],
    *,
    kernel_name: str | None,
    timeout: float | None,
) -> None:
    """What `papermill.execute_notebook` does (parameters injected after the `parameters` cell, the
    nbclient engine, the executed notebook written with papermill's marker above a failed cell,
    `PapermillExecutionError` raised), without papermill's file layer: that layer `os.chdir`s the
    whole process around every read and write of a notebook (nteract/papermill#473), under every
    other notebook thread, and two threads restoring each other's folder left the process in the
    wrong one. Paths here are absolute, read and written by nbformat."""
    import nbformat
    from papermill.engines import papermill_engines
    from papermill.execute import (
        ERROR_ANCHOR_MSG,
        ERROR_MARKER_TAG,
        ERROR_MESSAGE_TEMPLATE,
        prepare_notebook_metadata,
        remove_error_markers,
    )
    from papermill.parameterize import parameterize_notebook
    from papermill.version import version as papermill_version

    nb = nbformat.v4.upgrade(nbformat.read(path, as_version=4))
    empty = {"default_parameters": {}, "parameters": {}, "environment_variables": {}}
    nb.metadata.setdefault("papermill", {**empty, "version": papermill_version})
    for cell in nb.cells:  # the engine records each cell's timing and status here
        cell.metadata.setdefault("tags", [])
        cell.metadata.setdefault("papermill", {})
    if params:
        nb = parameterize_notebook(nb, dict(params), kernel_name=kernel_name)
    nb = remove_error_markers(prepare_notebook_metadata(nb, str(path), str(executed)))
    try:
        nb = papermill_engines.execute_notebook_with_engine(
            None,
            nb,
            kernel_name=papermill_engines.nb_kernel_name(None, nb, kernel_name),
            input_path=str(path),
            output_path=None,  # no saving after each cell: that goes through the file layer
            progress_bar=False,
            log_output=False,
            # papermill's `cwd` would chdir the process too; the kernel alone starts there instead.
            resources={"metadata": {"path": str(path.parent)}},
            execution_timeout=timeout,
            # The plotly FigureWidget's state carries plotly.js (~5 MB); the static figure
            # next to each widget already shows its content.
            store_widget_state=False,
            # The kernel's own log (its "running over TCP without encryption" warning at every
            # start: the kernel listens on localhost only) is noise here; errors still show.
            extra_arguments=KERNEL_ARGUMENTS,
        )
    finally:
        failed = _first_failure(nb)
        if failed is not None:
            index = failed.cell_index
            anchor = nbformat.v4.new_markdown_cell(ERROR_ANCHOR_MSG, metadata={"tags": [ERROR_MARKER_TAG]})
            message = ERROR_MESSAGE_TEMPLATE % str(failed.exec_count)
            top = nbformat.v4.new_markdown_cell(message, metadata={"tags": [ERROR_MARKER_TAG]})
            nb.cells[index:index] = [anchor]
            nb.cells[0:0] = [top]
        nbformat.write(nb, executed)
    if failed is not None:
        raise failed


def _first_failure(nb) -> Exception | None:
    """The first cell that failed, as papermill reports it: an error output (a clean `SystemExit`
    is no failure), else a cell the engine marked failed without one."""
    from papermill.exceptions import PapermillExecutionError

    for index, cell in enumerate(nb.cells):
        errors = [
            out
            for out in cell.get("outputs", [])
            if out.output_type == "error" and not (out.ename == "SystemExit" and out.evalue in ("", "0"))
        ]
        marked = cell.get("metadata", {}).get("papermill", {}).get("exception") is True
        if errors or marked:
            first = errors[0] if errors else None
            ename, evalue, trace = (
                (first.ename, first.evalue, first.traceback) if first else ("CellExecutionError", "", [])
            )
            return PapermillExecutionError(
                cell_index=index,
                exec_count=cell.execution_count,
                source=cell.source,
                ename=ename,
                evalue=evalue,
                traceback=trace,
            )
    return None


def execute_notebook(
    path: str | Path,
    output_dir: str | Path,
    parameters: Mapping[str, object] | None = None,
    *,
    html_export: bool = True,
    kernel_name: str | None = None,
    timeout: float | None = None,
) -> NotebookResult:
    """Execute one notebook headless with papermill, its kernel in the notebook's folder (the
    process's working directory is left alone, so notebooks can run in threads). Only parameters
    the notebook declares in its `parameters` cell are passed; `output_dir` (the notebook's table
    folder) is added."""
    path = Path(path).expanduser().resolve()
    out = Path(output_dir).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    executed = out / path.name
    tables = out / path.stem
    declared = declared_parameters([path])  # the names run_report checked its parameters against
    params = {k: v for k, v in dict(parameters or {}).items() if k in declared}
    if "output_dir" in declared:
        params["output_dir"] = str(tables)
    start = time.perf_counter()
    error = None
    try:
        with _static_figures():
            _papermill(path, executed, params, kernel_name=kernel_name, timeout=timeout)
    except Exception as err:  # noqa: BLE001 - one failed notebook must not stop the report
        error = _describe_failure(err)
    seconds = time.perf_counter() - start
    page = None
    if html_export and executed.is_file():
        page = str(export_html(executed, out / f"{path.stem}.html"))
    summary = ""
    table = tables / f"{HEADLINE}.csv"
    figure = tables / f"{HEADLINE}{FIGURE_SUFFIX}"
    sentence, warning = tables / SENTENCE_FILE, tables / BANNER_FILE
    ok = error is None
    if ok and sentence.is_file():
        summary = sentence.read_text(encoding="utf-8").strip()
    elif ok and table.is_file():
        summary = headline_text(pd.read_csv(table))
    return NotebookResult(
        notebook=path.stem,
        ok=ok,
        seconds=seconds,
        executed=str(executed) if executed.is_file() else None,
        html=page,
        summary=summary,
        error=error,
        table=str(table) if ok and table.is_file() else None,
        figure=str(figure) if ok and figure.is_file() else None,
        title=notebook_title(path),
        banner=warning.read_text(encoding="utf-8").strip() if warning.is_file() else None,
    )


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


def _figure_div(fig) -> str:
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
                data["text/html"] = _figure_div(data.pop(PLOTLY_MIME))
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
_MATHJAX_CONFIG = (
    "<script>window.MathJax = {"
    '"HTML-CSS": {availableFonts: [], preferredFont: null, webFont: "STIX-Web", imageFont: null}, '
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


def _headline_table_html(path: str | Path) -> str:
    """The headline table: whole numbers as integers, others to 3 significant digits; an interval
    (X_low, X_high) that does not contain its estimate X is not shown but noted under the table
    (a fit at a bound of its range, e.g. E = 0, whose resamples all land inside it)."""
    from rbplab.viz.headlines import number

    frame = pd.read_csv(path)
    notes = []
    shown = frame.astype(object)
    for column in frame.columns:
        low, high = f"{column}_low", f"{column}_high"
        if low not in frame.columns or high not in frame.columns:
            continue
        values = pd.to_numeric(frame[column], errors="coerce")
        lo, hi = pd.to_numeric(frame[low], errors="coerce"), pd.to_numeric(frame[high], errors="coerce")
        outside = values.notna() & lo.notna() & hi.notna() & ~((lo <= values) & (values <= hi))
        if outside.any():
            shown.loc[outside, [low, high]] = "—"
            notes.append(
                f"{column}: {int(outside.sum())} estimate(s) at a bound of the fit, outside every resample's "
                "range: no interval shown"
            )
    table = shown.to_html(
        index=False,
        border=0,
        classes="headline",
        na_rep="n/a",
        formatters={
            c: (lambda v: v if isinstance(v, str) else number(v))
            for c in frame.columns
            if pd.api.types.is_numeric_dtype(frame[c])
        },
    )
    return table + "".join(f'<p class="missing">{html.escape(n)}</p>' for n in notes)


def _headline_figure_html(path: str | Path) -> str:
    try:
        return _figure_div(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError) as err:
        name = html.escape(Path(path).name)
        return f'<p class="missing">figure {name} unreadable: {html.escape(str(err))}</p>'


def _grid_html(grid: Mapping[str, object]) -> str:
    """The resolved grid as a definition list: study file, families with their models and sizes,
    corpora, settings that differ from the defaults (and a note that the rest are defaults)."""
    from rbplab.viz.plots import si

    items = []
    if grid.get("study_file"):
        items.append(("study file", html.escape(str(grid["study_file"]))))
    models = list(grid.get("models") or [])
    for family in grid.get("families") or []:
        members = [m for m in models if m.get("family") == family]
        sizes = ", ".join(
            f"{html.escape(str(m['model']))} (S = {si(m['S'])})"
            if m.get("S")
            else html.escape(str(m["model"]))
            for m in members
        )
        items.append((f"family {html.escape(str(family))}", f"{len(members)} models: {sizes}"))
    revisions = sorted({r for m in models for r in (m.get("revisions") or [])})
    if revisions:
        items.append(("revisions", html.escape(", ".join(revisions))))
    items.append(("corpora", html.escape(", ".join(map(str, grid.get("corpora") or [])))))
    changed = dict(grid.get("settings_changed") or {})
    shown = ", ".join(f"{k} = {json.dumps(v)}" for k, v in changed.items())
    items.append(
        (
            "extraction settings",
            html.escape(shown + ("; the rest at their defaults" if shown else "all at their defaults"))
            + ' <a href="results.json">(every field in results.json)</a>',
        )
    )
    checkpoints = grid.get("checkpoints")
    if isinstance(checkpoints, Mapping) and checkpoints.get("revisions"):
        revisions = checkpoints["revisions"]
        named = ", ".join(revisions) if isinstance(revisions, list) else str(revisions)
        where = ", ".join(map(str, checkpoints.get("corpora") or [])) or "the grid's corpora"
        caps = ", ".join(f"{k} = {json.dumps(v)}" for k, v in (checkpoints.get("settings") or {}).items())
        items.append(
            (
                "checkpoints (training notebook)",
                html.escape(f"{named} on {where}" + (f" ({caps})" if caps else "")),
            )
        )
    for key in ("ties", "extract"):
        if key in grid:
            items.append((key, html.escape(json.dumps(grid[key]))))
    return '<dl class="grid">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"


def _sentence_html(text: str) -> str:
    from rbplab.viz.layout import html_label

    return html_label(html.escape(text))


def write_index(
    results: list[NotebookResult],
    output_dir: str | Path,
    context: Mapping[str, object],
    grid: Mapping[str, object] | None = None,
) -> Path:
    """index.html: the law, the resolved `grid` (else the raw `context` parameters), one row per
    notebook (status, time, its result in one sentence, links) with its banner in red, then one
    section per notebook with its headline figure (drawn by the shared plotly.min.js), its
    headline table and its exported figures."""
    from rbplab.viz.headlines import LAW

    out = Path(output_dir)
    write_assets(out, mathjax=False)
    rows = []
    sections = []
    for r in results:
        links = []
        if r.html:
            links.append(f'<a href="{html.escape(Path(r.html).name)}">HTML</a>')
        if r.executed:
            links.append(f'<a href="{html.escape(Path(r.executed).name)}">ipynb</a>')
        status = "ok" if r.ok else "FAILED"
        text = _sentence_html(r.summary) if r.ok else html.escape(r.error or "")
        anchor = html.escape(r.notebook)
        name = _sentence_html(r.title or r.notebook)
        warning = f'<div class="banner">{_sentence_html(r.banner)}</div>' if r.banner else ""
        rows.append(
            f'<tr class="{status.lower()}"><td><a href="#{anchor}">{name}</a></td>'
            f"<td>{status}</td><td>{r.seconds:.1f} s</td><td>{warning}{text}</td>"
            f"<td>{' · '.join(links)}</td></tr>"
        )
        parts = [f'<section id="{anchor}" class="{status.lower()}"><h2>{name}</h2>']
        if r.banner:
            parts.append(f'<div class="banner">{_sentence_html(r.banner)}</div>')
        if not r.ok:
            parts.append(f'<p class="error">FAILED: {html.escape(r.error or "")}</p>')
        elif r.summary:
            parts.append(f'<p class="result">{_sentence_html(r.summary)}</p>')
        if r.figure:
            parts.append(f'<div class="figure">{_headline_figure_html(r.figure)}</div>')
        if r.table:
            parts.append(f'<div class="table">{_headline_table_html(r.table)}</div>')
        if r.ok and not (r.figure or r.table):
            parts.append('<p class="missing">no headline figure or table</p>')
        if r.exports:
            files = " · ".join(
                f'<a href="{html.escape(Path(f).relative_to(out).as_posix())}">'
                f"{html.escape(Path(f).name)}</a>"
                for f in r.exports
            )
            parts.append(f"<p>figures for papers: {files}</p>")
        if links:
            parts.append(f"<p>full notebook: {' · '.join(links)}</p>")
        parts.append("</section>")
        sections.append("\n".join(parts))
    if grid is not None:
        header = _grid_html(grid)
    else:
        header = (
            "<ul>"
            + "".join(
                f"<li><b>{html.escape(str(k))}</b>: {html.escape(json.dumps(v, default=str))}</li>"
                for k, v in context.items()
            )
            + "</ul>"
        )
    results_link = (
        "<p>All numbers, the grid, the settings and package versions: "
        f'<a href="{RESULTS_FILE}">{RESULTS_FILE}</a> (<code>rbplab.load_results</code>).</p>'
        if (out / RESULTS_FILE).is_file()
        else ""
    )
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>rbplab report</title>
<script type="text/javascript" src="{PLOTLY_JS}"></script>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 1100px; }}
table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 0.4em 0.8em; text-align: left; vertical-align: top; }}
tr.failed td {{ background: #fde8e8; }}
table.headline td {{ text-align: right; font-variant-numeric: tabular-nums; }}
section {{ margin-top: 2.5em; border-top: 1px solid #ddd; }}
dl.grid {{ display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; }}
dl.grid dt {{ font-weight: 600; }}
dl.grid dd {{ margin: 0; }}
p.law {{ font-size: 1.15em; }}
p.result {{ background: #eef6ee; border-left: 6px solid #2e7d32; padding: 0.5em 1em; }}
div.banner {{ background: #fdecea; border: 3px solid #c62828; padding: 0.5em 1em; font-weight: 600;
  margin: 0.4em 0; }}
p.error {{ color: #a00; }}
p.missing {{ color: #777; }}
</style></head>
<body><h1>rbplab report</h1>
<p class="law">The relative-based scaling law: {_sentence_html(LAW)}, where RBP<sub>k</sub> = Pr(R ≤ k) is the
probability that the ground-truth token ranks within the model's top k and S counts its non-embedding
parameters. Notebooks executed with papermill on {time.strftime("%Y-%m-%d %H:%M %Z")}.</p>
{header}
{results_link}
<table><tr><th>notebook</th><th>status</th><th>time</th><th>result</th><th>outputs</th></tr>
{"".join(rows)}
</table>
{"".join(sections)}
</body></html>
"""
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    return index


EXTRACTION_NOTEBOOK = "05_extraction"
TRAINING_NOTEBOOK = "06_training_dynamics"


def declared_parameters(paths: Iterable[str | Path]) -> set[str]:
    """The union of the names the notebooks' `parameters` cells assign (as papermill reads them),
    read from the files' JSON: no papermill (whose import alone takes seconds) before a report
    has checked its arguments."""
    import ast

    names: set[str] = set()
    for path in paths:
        try:
            cells = json.loads(Path(path).read_text(encoding="utf-8")).get("cells", [])
        except (OSError, ValueError) as err:
            raise MissingFileError(f"cannot read notebook {path}: {err}") from None
        for cell in cells:
            if cell.get("cell_type") != "code" or "parameters" not in cell.get("metadata", {}).get(
                "tags", []
            ):
                continue
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else source
            try:
                tree = ast.parse(source)
            except SyntaxError as err:
                raise InvalidArgumentError(f"{path}: its parameters cell is not Python ({err.msg})") from None
            for node in tree.body:
                targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
                names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def run_report(
    family: str | Iterable[str] = "micro",
    corpora: str | Iterable[str] | None = None,
    *,
    models: Iterable[str] | None = None,
    output_dir: str | Path = "reports",
    notebooks: Iterable[str] | None = None,
    source_dir: str | Path | None = None,
    settings: ExtractionSettings | Mapping[str, object] | None = None,
    study_file: str | Path | None = None,
    cache_dir: str | Path | None = None,
    parameters: Mapping[str, object] | None = None,
    extract: bool = False,
    figures: Sequence[str] = (),
    figure_size: str = "full",
    html_export: bool = True,
    timeout: float | None = None,
    progress: Callable[[str], None] | None = print,
    jobs: int | None = None,
    missing_remedy: str | None = None,
    **overrides: object,
) -> pd.DataFrame:
    """Execute the notebooks for `family` (one name or several) on `corpora` (default: every
    bundled corpus) and write executed notebooks, HTML pages, index.html and results.json
    (`rbplab.load_results`) into `output_dir` (relative to the current directory).

    notebooks: names, stems or numbers to run, in that order (default all, in name order, e.g.
    ["01_rbp_vs_size"] or ["01"]); source_dir: where the notebooks are (default notebooks/);
    settings: the extraction settings of the runs (`rbplab.core.ExtractionSettings`, or its fields
    as keywords, e.g. max_tokens=2000), handed to every notebook as its `settings` parameter;
    study_file: a study TOML whose grid the notebooks analyse instead of family/corpora/settings;
    parameters: extra papermill parameters (each notebook receives those it declares; a name no
    notebook declares is an error; families, corpora, models, settings and study_file given here
    replace the arguments, and the index states what the notebooks analysed); extract: let the
    notebooks compute runs missing from the cache (their `extract` parameter). Without it, the
    grid is resolved and checked against the cache before any notebook runs: an unknown name or
    a run certainly missing is one error (`MissingRunsError`, whose fix reads `missing_remedy`
    when given, else extract=True). figures: formats ("png", "svg", "pdf", ...) every figure a
    notebook saved is also exported to, under figures/<notebook>/, as paper figures of
    `figure_size` ("full": 7 in, "column": 3.5 in, or "screen": `rbplab.viz.export.save`). The
    training notebook is handed the checkpoints the cache holds for the families (`cached_checkpoints`) unless
    `parameters` names some. Returns one row per notebook: notebook, ok, seconds, executed, html,
    summary, error, ... Failures do not raise; check the `ok` column. jobs: notebooks executed at
    once (default: one per CPU).
    """
    from rbplab.viz.export import check_formats, check_size
    from rbplab.viz.parameters import check_names

    formats = check_formats(figures)
    check_size(figure_size)
    # Every path is absolute before papermill starts: kernels run in the notebooks' folder and
    # several notebooks run at once, so nothing may depend on the process's working directory.
    out = Path(output_dir).expanduser().resolve()
    paths = [p.resolve() for p in select_notebooks(list_notebooks(source_dir), notebooks)]
    if parameters:
        check_names(parameters, declared_parameters(paths))
    params: dict[str, object] = {
        "families": [family] if isinstance(family, str) else list(family),
        "corpora": [corpora] if isinstance(corpora, str) else None if corpora is None else list(corpora),
        "models": list(models) if models is not None else None,
        "settings": resolve_settings(settings, **overrides).to_dict(changed_only=True),
        "study_file": study_file,
        "cache_dir": cache_dir,
        "extract": bool(extract),
    }
    params.update(parameters or {})
    params, resolved = _analysed(params)
    extract = params["extract"]  # `-p extract true` asks for it as --extract does
    cache_dir = params["cache_dir"]
    analysed = report_grid(params, resolved)
    grid = analysed.to_dict() | ({"study_file": params["study_file"]} if params["study_file"] else {})
    if extract and any(p.stem == EXTRACTION_NOTEBOOK for p in paths):
        # The corpora extraction will read, opened now (a hub corpus resolves its commit): an
        # unreachable hub or an unknown dataset is one error, not a failed notebook and the rest.
        _resolved(lambda: analysed.opened)
    if not extract and _reads_grid(paths, params):
        from rbplab.study.loading import absent_runs

        absent = absent_runs(analysed, cache_dir)
        if absent is not None:
            raise absent.with_remedy(missing_remedy) if missing_remedy else absent
    training = any(p.stem == TRAINING_NOTEBOOK for p in paths)
    if training and params.get("checkpoints") is None and not params["study_file"]:
        from rbplab.viz.grid import cached_checkpoints

        params["checkpoints"] = cached_checkpoints(params["families"], grid["corpora"], cache_dir)
    if training and params.get("checkpoints"):
        grid = {**grid, "checkpoints": params["checkpoints"]}
    grid = {**grid, "extract": bool(extract)}
    out.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda _line: None)
    results = []
    # Notebooks are independent kernels: run as many at once as there are CPUs (results in order),
    # except the extraction notebook, which runs first and alone: it fills the cache the others read
    # (they never extract). When it fails, the others would only fail on the runs it did not
    # compute, so they do not run.
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(paths)))
    first = [p for p in paths if p.stem == EXTRACTION_NOTEBOOK]
    order = first + [p for p in paths if p.stem != EXTRACTION_NOTEBOOK]
    done: dict[str, NotebookResult | Future] = {}
    with _static_figures(), ThreadPoolExecutor(jobs) as pool:
        for path in order:
            extraction = done.get(EXTRACTION_NOTEBOOK)
            if isinstance(extraction, NotebookResult) and not extraction.ok:
                done[path.stem] = NotebookResult(
                    path.stem,
                    False,
                    0.0,
                    None,
                    None,
                    "",
                    error=f"not run: {EXTRACTION_NOTEBOOK} failed",
                    title=notebook_title(path),
                )
                continue
            say(f"[{paths.index(path) + 1}/{len(paths)}] {path.stem} ...")
            future = pool.submit(
                execute_notebook, path, out, params, html_export=html_export, timeout=timeout
            )
            done[path.stem] = future.result() if path.stem == EXTRACTION_NOTEBOOK else future
        for i, path in enumerate(paths, start=1):
            result = done[path.stem]
            result = result if isinstance(result, NotebookResult) else result.result()
            results.append(result)
            if result.ok:
                say(f"[{i}/{len(paths)}] {path.stem}: ok in {result.seconds:.1f} s  {result.summary}")
            else:
                say(f"[{i}/{len(paths)}] {path.stem}: FAILED after {result.seconds:.1f} s at {result.error}")
    if formats:
        written = export_figures(results, out, formats, size=figure_size)
        say(f"figures: {written} files under {out / FIGURES_DIR}")
    write_report_results(results, out, grid, resolved, cache_dir)
    index = write_index(results, out, params, grid)
    n_failed = sum(not r.ok for r in results)
    say(f"report: {index}" + (f"  ({n_failed} of {len(results)} notebooks failed)" if n_failed else ""))
    return pd.DataFrame([asdict(r) for r in results])


def select_notebooks(paths: list[Path], wanted: str | Iterable[str] | None) -> list[Path]:
    """The notebooks named by stem ("01_rbp_vs_size"), file name or number ("01", "1"), in the
    order given (duplicates once); all of them when `wanted` is None."""
    if wanted is None:
        return paths
    by_stem = {p.stem: p for p in paths}
    by_number = {}
    for p in paths:
        number = p.stem.split("_", 1)[0]
        if number.isdigit():
            by_number.setdefault(int(number), p)
    chosen, unknown = [], []
    for name in [wanted] if isinstance(wanted, str) else wanted:
        stem = Path(str(name)).stem
        if stem in by_stem:
            chosen.append(by_stem[stem])
        elif stem.isdigit() and int(stem) in by_number:
            chosen.append(by_number[int(stem)])
        else:
            unknown.append(stem)
    if unknown:
        from rbplab.core.names import did_you_mean

        hint = did_you_mean(unknown[0], by_stem)
        raise InvalidArgumentError(
            f"unknown notebooks {unknown}{hint}; available: {sorted(by_stem)} (or their numbers)"
        )
    return list(dict.fromkeys(chosen))


def _analysed(params: Mapping[str, object]) -> tuple[dict, ExtractionSettings]:
    """The notebooks' parameters with the grid's read as the notebooks read them (lists and
    settings given as text, e.g. by -p) and every path absolute; and the settings."""
    from rbplab.viz.parameters import as_mapping, as_names

    values = dict(params)
    for name in ("families", "corpora", "models"):
        values[name] = as_names(values.get(name), name)
    values["families"] = values["families"] or []
    flag = values.get("extract")
    values["extract"] = flag.strip().lower() in ("true", "1", "yes") if isinstance(flag, str) else bool(flag)
    settings = ExtractionSettings.from_mapping(as_mapping(values.get("settings"), "settings"))
    values["settings"] = settings.to_dict(changed_only=True)
    for name in ("study_file", "cache_dir"):
        if values.get(name):
            values[name] = str(Path(str(values[name])).expanduser().resolve())
        else:
            values[name] = None
    return values, settings


def report_grid(params: Mapping[str, object], settings: ExtractionSettings):
    """The `rbplab.grid.Grid` the notebooks analyse (a study file's, else families x corpora, as
    the notebooks build it); an unknown family, model or corpus, or a broken study file, is one
    error here, before any notebook runs."""
    from rbplab.grid import Grid

    if params.get("study_file"):
        return _resolved(lambda: Grid.read(params["study_file"]))
    families, models = list(params["families"]), params.get("models")
    return _resolved(lambda: Grid.build(families, params.get("corpora"), settings, models=models))


def _resolved(resolve: Callable[[], object]):
    """resolve(), its failure one line: rbplab's own errors as they are, others named as the
    grid's."""
    try:
        return resolve()
    except RbplabError:
        raise
    except (ValueError, LookupError, OSError) as err:
        problem = " ".join(str(err).split()) or type(err).__name__
        raise InvalidArgumentError(f"the report's grid cannot be resolved: {problem}") from None


def _reads_grid(paths: Sequence[Path], params: Mapping[str, object]) -> bool:
    """Whether some notebook reads the grid's runs from the cache: one declaring `extract`, other
    than the training notebook without a study file (it reads the checkpoints the cache holds)."""
    declared = {p.stem: declared_parameters([p]) for p in paths}
    return any(
        "extract" in names and (stem != TRAINING_NOTEBOOK or params.get("study_file"))
        for stem, names in declared.items()
    )


def export_figures(
    results: list[NotebookResult], output_dir: Path, formats: Sequence[str], size: str = "full"
) -> int:
    """Export every figure the notebooks saved (<notebook>/*.plotly.json) to each format, under
    <output_dir>/figures/<notebook>/, in one kaleido session, at `size` (`rbplab.viz.export.save`);
    record the files on each result."""
    from rbplab.viz.export import save_many

    figs, paths, owners = [], [], []
    for result in results:
        folder = output_dir / result.notebook
        if not result.ok or not folder.is_dir():
            continue
        sources = sorted(folder.glob(f"*{FIGURE_SUFFIX}"))
        texts = {source: source.read_bytes() for source in sources}
        for source in sources:
            name = source.name[: -len(FIGURE_SUFFIX)]
            if name == HEADLINE and any(t == texts[source] for s, t in texts.items() if s != source):
                continue  # the headline figure saved under its own name too: exported once
            figure = json.loads(texts[source])
            for fmt in formats:
                figs.append(figure)
                paths.append(output_dir / FIGURES_DIR / result.notebook / f"{name}.{fmt}")
                owners.append(result)
    if figs:
        save_many(figs, paths, size=size)
    for result, path in zip(owners, paths, strict=True):
        result.exports.append(str(path))
    return len(paths)


def write_report_results(
    results: list[NotebookResult],
    output_dir: Path,
    grid: Mapping[str, object],
    settings: ExtractionSettings,
    cache_dir: str | Path | None,
) -> Path:
    """results.json: the grid, the settings, package versions, every run a notebook's headline
    rests on with its cache key (the final models of the runs tables, and the checkpoints of the
    training notebook, read at their own settings), every headline table and sentence."""
    from rbplab.study.results import results_document, write_results

    tables, sentences, runs = {}, {}, []
    for result in results:
        if not result.ok:
            continue
        if result.table:
            tables[result.notebook] = pd.read_csv(result.table)
        if result.summary:
            sentences[result.notebook] = result.summary
        folder = output_dir / result.notebook
        saved = folder / "runs.csv"
        if saved.is_file() and result.notebook != EXTRACTION_NOTEBOOK:
            runs.append(_keyed(pd.read_csv(saved), settings, cache_dir))
        checkpoints = folder / "checkpoints.csv"
        if result.notebook == TRAINING_NOTEBOOK and checkpoints.is_file() and not result.banner:
            table = grid.get("checkpoints") if isinstance(grid.get("checkpoints"), Mapping) else {}
            read = ExtractionSettings.from_mapping((table or {}).get("settings"))
            runs.append(_keyed(_checkpoint_runs(pd.read_csv(checkpoints)), read, cache_dir))
    every = None
    if runs:
        every = pd.concat(runs, ignore_index=True)
        identity = [c for c in ("family", "model", "revision", "corpus") if c in every.columns]
        every = every.drop_duplicates(identity, ignore_index=True)
    document = results_document(grid=grid, settings=settings, runs=every, tables=tables, headlines=sentences)
    return write_results(output_dir / RESULTS_FILE, document)


def _checkpoint_runs(table: pd.DataFrame) -> pd.DataFrame:
    """One row per checkpoint and corpus of the training notebook's table (one row per k)."""
    columns = [c for c in ("family", "model", "S", "revision", "step", "D", "C", "corpus") if c in table]
    return table[columns].drop_duplicates(["model", "revision", "corpus"], ignore_index=True)


def _keyed(runs: pd.DataFrame, settings: ExtractionSettings, cache_dir: str | Path | None) -> pd.DataFrame:
    """`runs` with the cache key of each (`rbplab.study.results.matching_keys`); a local model's
    final checkpoint is cached as the model itself (no revision), found by its step."""
    from rbplab.store.cache import list_entries
    from rbplab.study.results import matching_keys

    if not {"model", "corpus"} <= set(runs.columns):
        return runs
    keys = matching_keys(runs, settings, cache_dir)
    if "revision" in runs.columns and "step" in runs.columns and any(k is None for k in keys):
        entries = list_entries(cache_dir)
        cap = entries["max_tokens"]
        entries = entries[
            entries["complete"]
            & entries["revision"].isna()
            & (cap.isna() if settings.max_tokens is None else cap == settings.max_tokens)
        ]
        for i, row in enumerate(runs.to_dict("records")):
            if keys[i] is not None or pd.isna(row.get("step")):
                continue
            same = entries[
                (entries["model"] == row["model"])
                & (entries["corpus"] == row["corpus"])
                & (entries["step"] == int(row["step"]))
            ]
            keys[i] = str(same["key"].iloc[0]) if len(same) == 1 else None
    return runs.assign(cache_key=keys)
