"""Run every notebook with papermill and publish them as a browsable report.

`run_report` executes each notebook of notebooks/ for the chosen family and corpora,
writes the executed notebook and a self-contained HTML page (plotly.js embedded once
per page, so it opens offline) into the output directory, and an index.html with one
summary line per notebook. A notebook that fails is reported with the cell and the
error; the others still run.

Notebooks hand results to the report through `save_table`: each table lands as CSV in
the notebook's own output folder, and a table named "headline" becomes its summary line.
"""

from __future__ import annotations

import html
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from rbplab.core.settings import ExtractionSettings, resolve_settings
from rbplab.store.paths import notebooks_dir

HEADLINE = "headline"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
PLOTLY_MIME = "application/vnd.plotly.v1+json"


def list_notebooks(directory: str | Path | None = None) -> list[Path]:
    """Every .ipynb of the notebooks folder, in name order (01_..., 02_..., ...)."""
    folder = Path(directory) if directory is not None else notebooks_dir()
    found = sorted(p for p in folder.glob("*.ipynb") if not p.name.startswith("."))
    if not found:
        raise FileNotFoundError(f"no notebooks (*.ipynb) in {folder}")
    return found


def save_table(frame: pd.DataFrame, name: str, output_dir: str | Path | None) -> pd.DataFrame:
    """Write `frame` as <output_dir>/<name>.csv (nothing when output_dir is None) and return it,
    so a notebook cell can both record and display a table."""
    if output_dir is not None:
        folder = Path(output_dir)
        folder.mkdir(parents=True, exist_ok=True)
        frame.to_csv(folder / f"{name}.csv", index=False)
    return frame


def headline_text(frame: pd.DataFrame, digits: int = 3) -> str:
    """One line from a headline table: the identifying text columns, then name=value pairs."""
    parts = []
    for row in frame.to_dict("records"):
        labels = [str(v) for k, v in row.items() if isinstance(v, str)]
        values = [
            f"{k}=n/a" if pd.isna(v) else f"{k}={v:.{digits}g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in row.items()
            if not isinstance(v, str)
        ]
        parts.append(f"{'/'.join(labels)}: {', '.join(values)}" if labels else ", ".join(values))
    return "; ".join(parts)


@dataclass
class NotebookResult:
    notebook: str
    ok: bool
    seconds: float
    executed: str | None  # path of the executed .ipynb
    html: str | None
    summary: str
    error: str | None = None  # "cell 7: ValueError: ..." when the run failed


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


def execute_notebook(
    path: str | Path,
    output_dir: str | Path,
    parameters: Mapping[str, object] | None = None,
    *,
    html_export: bool = True,
    kernel_name: str | None = None,
    timeout: float | None = None,
) -> NotebookResult:
    """Execute one notebook headless with papermill. Only parameters the notebook declares in
    its `parameters` cell are passed; `output_dir` (the notebook's table folder) is added."""
    import papermill

    path = Path(path)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    executed = out / path.name
    tables = out / path.stem
    declared = papermill.inspect_notebook(str(path))
    params = {k: v for k, v in dict(parameters or {}).items() if k in declared}
    if "output_dir" in declared:
        params["output_dir"] = str(tables.resolve())
    start = time.perf_counter()
    error = None
    try:
        with _static_figures():
            papermill.execute_notebook(
                str(path),
                str(executed),
                parameters=params,
                kernel_name=kernel_name,
                progress_bar=False,
                cwd=str(path.parent),
                execution_timeout=timeout,
                # The plotly FigureWidget's state carries plotly.js (~5 MB); the static figure
                # next to each widget already shows its content.
                store_widget_state=False,
            )
    except Exception as err:  # noqa: BLE001 - one failed notebook must not stop the report
        error = _describe_failure(err)
    seconds = time.perf_counter() - start
    page = None
    if html_export and executed.is_file():
        page = str(export_html(executed, out / f"{path.stem}.html"))
    summary = ""
    headline = tables / f"{HEADLINE}.csv"
    if error is None and headline.is_file():
        summary = headline_text(pd.read_csv(headline))
    return NotebookResult(
        notebook=path.stem,
        ok=error is None,
        seconds=seconds,
        executed=str(executed) if executed.is_file() else None,
        html=page,
        summary=summary,
        error=error,
    )


def _html_outputs(nb) -> None:
    """Make an executed notebook's outputs exportable: plotly figures become HTML divs (the
    page loads plotly.js once), and widget views, which have no state after papermill, go."""
    import plotly.io as pio

    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        kept = []
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_MIME in data:
                continue
            if PLOTLY_MIME in data:
                fig = data.pop(PLOTLY_MIME)
                data["text/html"] = pio.to_html(
                    fig, include_plotlyjs=False, full_html=False, validate=False, config={"responsive": True}
                )
                data.pop("text/plain", None)
            kept.append(output)
        cell["outputs"] = kept


def export_html(executed: str | Path, target: str | Path) -> Path:
    """A self-contained HTML page of an executed notebook (plotly.js inlined)."""
    import nbformat
    from nbconvert import HTMLExporter
    from plotly.offline import get_plotlyjs

    nb = nbformat.read(str(executed), as_version=4)
    _html_outputs(nb)
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    script = f'<script type="text/javascript">{get_plotlyjs()}</script>'
    body = body.replace("</head>", script + "\n</head>", 1) if "</head>" in body else script + body
    target = Path(target)
    target.write_text(body, encoding="utf-8")
    return target


def write_index(results: list[NotebookResult], output_dir: str | Path, context: Mapping[str, object]) -> Path:
    """index.html: the run's settings and one row per notebook (status, time, summary, links)."""
    out = Path(output_dir)
    rows = []
    for r in results:
        links = []
        if r.html:
            links.append(f'<a href="{html.escape(Path(r.html).name)}">HTML</a>')
        if r.executed:
            links.append(f'<a href="{html.escape(Path(r.executed).name)}">ipynb</a>')
        status = "ok" if r.ok else "FAILED"
        text = r.summary if r.ok else r.error or ""
        rows.append(
            f'<tr class="{status.lower()}"><td>{html.escape(r.notebook)}</td><td>{status}</td>'
            f"<td>{r.seconds:.1f} s</td><td>{html.escape(text)}</td><td>{' · '.join(links)}</td></tr>"
        )
    settings = "".join(
        f"<li><b>{html.escape(str(k))}</b>: {html.escape(json.dumps(v, default=str))}</li>"
        for k, v in context.items()
    )
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>rbplab report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 0.4em 0.8em; text-align: left; }}
tr.failed td {{ background: #fde8e8; }}
</style></head>
<body><h1>rbplab report</h1>
<p>Relative-based scaling law: notebooks executed with papermill on {time.strftime("%Y-%m-%d %H:%M %Z")}.</p>
<ul>{settings}</ul>
<table><tr><th>notebook</th><th>status</th><th>time</th><th>summary</th><th>outputs</th></tr>
{"".join(rows)}
</table></body></html>
"""
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    return index


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
    html_export: bool = True,
    timeout: float | None = None,
    progress: Callable[[str], None] | None = print,
    **overrides: object,
) -> pd.DataFrame:
    """Execute the notebooks for `family` (one name or several) on `corpora` (default: every
    bundled corpus) and write executed notebooks, HTML pages and index.html into `output_dir`.

    notebooks: names or stems to run, in that order (default all, in name order, e.g.
    ["01_rbp_vs_size"]); source_dir: where the notebooks are (default notebooks/); settings: the
    extraction settings of the runs (`rbplab.core.ExtractionSettings`, or its fields as keywords,
    e.g. max_tokens=2000), handed to every notebook as its `settings` parameter; study_file: a
    study TOML whose grid the notebooks analyse instead of family/corpora/settings; parameters:
    extra papermill parameters (each notebook receives those it declares). Returns one row per
    notebook: notebook, ok, seconds, executed, html, summary, error. Failures do not raise;
    check the `ok` column.
    """
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = list_notebooks(source_dir)
    if notebooks is not None:
        wanted = [Path(n).stem for n in ([notebooks] if isinstance(notebooks, str) else notebooks)]
        by_stem = {p.stem: p for p in paths}
        unknown = [n for n in wanted if n not in by_stem]
        if unknown:
            raise ValueError(f"unknown notebooks {unknown}; available: {sorted(by_stem)}")
        paths = [by_stem[n] for n in dict.fromkeys(wanted)]
    families = [family] if isinstance(family, str) else list(family)
    params: dict[str, object] = {
        "families": families,
        "corpora": [corpora]
        if isinstance(corpora, str)
        else (list(corpora) if corpora is not None else None),
        "models": list(models) if models is not None else None,
        "settings": resolve_settings(settings, **overrides).to_dict(changed_only=True),
        # A study file (rbplab run) names the grid itself: notebooks analyse exactly what was run.
        "study_file": str(Path(study_file).expanduser().resolve()) if study_file is not None else None,
        "cache_dir": str(Path(cache_dir).expanduser().resolve()) if cache_dir is not None else None,
    }
    params.update(parameters or {})
    say = progress or (lambda _line: None)
    results = []
    for i, path in enumerate(paths, start=1):
        say(f"[{i}/{len(paths)}] {path.stem} ...")
        result = execute_notebook(path, out, params, html_export=html_export, timeout=timeout)
        results.append(result)
        if result.ok:
            say(f"[{i}/{len(paths)}] {path.stem}: ok in {result.seconds:.1f} s  {result.summary}")
        else:
            say(f"[{i}/{len(paths)}] {path.stem}: FAILED after {result.seconds:.1f} s at {result.error}")
    index = write_index(results, out, params)
    n_failed = sum(not r.ok for r in results)
    say(f"report: {index}" + (f"  ({n_failed} of {len(results)} notebooks failed)" if n_failed else ""))
    return pd.DataFrame([asdict(r) for r in results])
