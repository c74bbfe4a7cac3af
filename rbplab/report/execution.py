"""The notebooks and their headless execution: which notebooks there are (`list_notebooks`,
`select_notebooks`), the parameters each declares (`declared_parameters`), and `execute_notebook`,
which runs one with papermill's engine, exports its page and reads back what it handed over
(`rbplab.report.handoff`) as a `NotebookResult`. A notebook that fails is reported with the cell
and the error, never raised.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from rbplab.core.documents import Fields, ListOf, read_json
from rbplab.core.errors import InvalidArgumentError, MissingFileError, did_you_mean
from rbplab.report.handoff import BANNER_FILE, FIGURE_SUFFIX, HEADLINE, SENTENCE_FILE, headline_text
from rbplab.report.pages import export_html, notebook_title
from rbplab.store.paths import notebooks_dir

EXTRACTION_NOTEBOOK = "05_extraction"  # fills the cache the others read: runs first and alone
TRAINING_NOTEBOOK = "06_training_dynamics"  # reads the checkpoints the cache holds
KERNEL_ARGUMENTS = ["--IPKernelApp.log_level=CRITICAL"]


def list_notebooks(directory: str | Path | None = None) -> list[Path]:
    """Every .ipynb of the notebooks folder, in name order (01_..., 02_..., ...)."""
    folder = Path(directory) if directory is not None else notebooks_dir()
    found = sorted(p for p in folder.glob("*.ipynb") if not p.name.startswith("."))
    if not found:
        raise MissingFileError(f"no notebooks (*.ipynb) in {folder}")
    return found


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
        hint = did_you_mean(unknown[0], by_stem)
        raise InvalidArgumentError(
            f"unknown notebooks {unknown}{hint}; available: {sorted(by_stem)} (or their numbers)"
        )
    return list(dict.fromkeys(chosen))


MAX_NOTEBOOK_BYTES = 256 << 20  # a notebook with its outputs (figures) is a few MB
_NOTEBOOK = Fields({"cells": ListOf(Fields({"cell_type": str, "metadata": Fields({"tags": ListOf(str)})}))})


def declared_parameters(paths: Iterable[str | Path]) -> set[str]:
    """The union of the names the notebooks' `parameters` cells assign (as papermill reads them),
    read from the files' JSON: no papermill (whose import alone takes seconds) before a report
    has checked its arguments."""
    import ast

    names: set[str] = set()
    for path in paths:
        try:
            cells = read_json(path, "notebook", MAX_NOTEBOOK_BYTES, shape=_NOTEBOOK).get("cells", [])
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
def static_figures() -> Iterator[None]:
    """Within it, kernels started from this process draw every widget view as a static figure too
    (`rbplab.viz.widgets`): a headless run has nobody to render widgets."""
    # The kernel inherits our environment: tell rbplab.viz.widgets nobody renders widgets there.
    from rbplab.viz.widgets.base import STATIC_ENV

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
            # The kernel's own log is noise here: its "running over TCP without encryption" warning
            # at every start (it listens on localhost only), and "KeyboardInterrupt caught in
            # kernel" when jupyter_client interrupts it to shut it down after the last cell. A
            # cell's error reaches the report through the notebook's outputs, not this log.
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
        with static_figures():
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
