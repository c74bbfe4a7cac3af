"""`run_report`: a report's request (one grid, `rbplab.report.request`), every notebook executed
headless on it (the extraction notebook first and alone, the others at once), the index and
results.json (`rbplab.report.index_page`), in a folder that holds one report
(`rbplab.report.folder`), and the figures for papers exported from what the notebooks saved.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from rbplab.core.documents import parse_json
from rbplab.grid import Grid, require_grid
from rbplab.report.execution import (
    EXTRACTION_NOTEBOOK,
    TRAINING_NOTEBOOK,
    NotebookResult,
    declared_parameters,
    execute_notebook,
    list_notebooks,
    select_notebooks,
    static_figures,
)
from rbplab.report.folder import one_report
from rbplab.report.handoff import FIGURE_SUFFIX, HEADLINE
from rbplab.report.index_page import write_index, write_report_results
from rbplab.report.pages import notebook_title
from rbplab.report.request import (
    cached_checkpoints,
    check_parameters,
    notebook_parameters,
    reads_grid,
    resolved,
    synthetic_notebooks,
)

FIGURES_DIR = "figures"


@dataclass(frozen=True)
class ReportOptions:
    """How a report is made, apart from what it analyses (the grid) and where it goes.

    notebooks: names, stems or numbers to run, in that order (default all, in name order, e.g.
    ("01_rbp_vs_size",) or ("01",)); source_dir: where the notebooks are (default notebooks/);
    figures: formats ("png", "svg", "pdf", ...) every figure a notebook saved is also exported to,
    under figures/<notebook>/, as paper figures of `figure_size` ("full": 7 in, "column": 3.5 in,
    or "screen": `rbplab.viz.export.save`); html_export: an HTML page per notebook; timeout:
    seconds a cell may run (default: no limit); jobs: notebooks executed at once (default: one
    per CPU); missing_remedy: how the error for runs missing from the cache says to compute them
    (default: extract=True; the CLI names the user's command with --extract).
    """

    notebooks: tuple[str, ...] | None = None
    source_dir: str | Path | None = None
    figures: tuple[str, ...] = ()
    figure_size: str = "full"
    html_export: bool = True
    timeout: float | None = None
    jobs: int | None = None
    missing_remedy: str | None = None

    def __post_init__(self) -> None:
        from rbplab.viz.export import check_formats, check_size

        # Bad formats fail here, before any notebook runs, not after all of them.
        object.__setattr__(self, "figures", tuple(check_formats(self.figures)))
        check_size(self.figure_size)
        if self.notebooks is not None:
            wanted = [self.notebooks] if isinstance(self.notebooks, str) else self.notebooks
            object.__setattr__(self, "notebooks", tuple(str(n) for n in wanted))


def run_report(
    grid: Grid,
    output_dir: str | Path = "reports",
    *,
    cache_dir: str | Path | None = None,
    extract: bool = False,
    parameters: Mapping[str, object] | None = None,
    options: ReportOptions | None = None,
    progress: Callable[[str], None] | None = print,
) -> pd.DataFrame:
    """Execute the notebooks on `grid` and write executed notebooks, HTML pages, index.html and
    results.json (`rbplab.load_results`) into `output_dir` (relative to the current directory),
    after removing the files a previous report there wrote (`rbplab.report.folder`: files it did
    not write stay).

    grid: what the notebooks analyse, an `rbplab.grid.Grid` (`Grid.read` of a study file, or
    `Grid.from_names`: "micro" is its models on every bundled corpus), handed to every notebook
    as its families, models, corpora and settings parameters (or its study file).
    Unless `extract`, it is checked against the cache before any notebook runs: an
    unknown name or a run certainly missing is one error (`MissingRunsError`).
    parameters: other notebook parameters (each notebook receives those it declares; a name no
    notebook declares, or one the grid or this function sets, is an error). extract: let the
    notebooks compute runs missing from the cache (their `extract` parameter). The training
    notebook is handed the checkpoints the cache holds for the families (`cached_checkpoints`)
    unless `parameters` names some. options: which notebooks, figures for papers, timeouts
    (`ReportOptions`). Returns one row per notebook: notebook, ok, seconds, executed, html,
    summary, error, ... Failures do not raise; check the `ok` column.
    """
    from rbplab.viz.parameters import as_flag, check_names

    options = options or ReportOptions()
    # Every path is absolute before papermill starts: kernels run in the notebooks' folder and
    # several notebooks run at once, so nothing may depend on the process's working directory.
    out = Path(output_dir).expanduser().resolve()
    cache_dir = str(Path(cache_dir).expanduser().resolve()) if cache_dir else None
    paths = [p.resolve() for p in select_notebooks(list_notebooks(options.source_dir), options.notebooks)]
    if parameters:
        check_parameters(parameters)
        check_names(parameters, declared_parameters(paths))
    analysed = require_grid(grid, "run_report")
    params: dict[str, object] = {
        **notebook_parameters(analysed),
        "cache_dir": cache_dir,
        "extract": bool(extract),
        **(parameters or {}),
    }
    synthetic = as_flag(params.get("synthetic", False), "synthetic")
    if synthetic:  # made-up models: no cache is read, and a notebook without that mode cannot run
        paths = synthetic_notebooks(paths, chosen=options.notebooks is not None, say=progress)
    stated = analysed.to_dict()
    if extract and any(p.stem == EXTRACTION_NOTEBOOK for p in paths):
        # The corpora extraction will read, opened now (a hub corpus resolves its commit): an
        # unreachable hub or an unknown dataset is one error, not a failed notebook and the rest.
        resolved(lambda: analysed.opened)
    if not extract and not synthetic and reads_grid(paths, analysed.path is not None):
        from rbplab.study.lookup import absent_runs

        absent = absent_runs(analysed, cache_dir)
        if absent is not None:
            raise absent.with_remedy(options.missing_remedy) if options.missing_remedy else absent
    training = any(p.stem == TRAINING_NOTEBOOK for p in paths)
    if training and not synthetic and params.get("checkpoints") is None and analysed.path is None:
        params["checkpoints"] = cached_checkpoints(analysed.families, stated["corpora"], cache_dir)
    if training and params.get("checkpoints"):
        stated = {**stated, "checkpoints": params["checkpoints"]}
    stated = {**stated, "extract": bool(extract)}
    say = progress or (lambda _line: None)
    with one_report(out):  # the previous report's files go; this one's are listed
        results = _execute_all(paths, out, params, options, say)
        if options.figures:
            written = export_figures(results, out, options.figures, size=options.figure_size)
            say(f"figures: {written} files under {out / FIGURES_DIR}")
        write_report_results(results, out, stated, analysed.settings, cache_dir)
        index = write_index(results, out, stated)
    n_failed = sum(not r.ok for r in results)
    say(f"report: {index}" + (f"  ({n_failed} of {len(results)} notebooks failed)" if n_failed else ""))
    return pd.DataFrame([asdict(r) for r in results])


def _execute_all(
    paths: list[Path],
    out: Path,
    params: Mapping[str, object],
    options: ReportOptions,
    say: Callable[[str], None],
) -> list[NotebookResult]:
    """Notebooks are independent kernels: run as many at once as there are CPUs (results in order),
    except the extraction notebook, which runs first and alone: it fills the cache the others read
    (they never extract). When it fails, the others would only fail on the runs it did not
    compute, so they do not run."""
    results = []
    jobs = max(1, min(options.jobs or os.cpu_count() or 1, len(paths)))
    first = [p for p in paths if p.stem == EXTRACTION_NOTEBOOK]
    order = first + [p for p in paths if p.stem != EXTRACTION_NOTEBOOK]
    done: dict[str, NotebookResult | Future] = {}
    with static_figures(), ThreadPoolExecutor(jobs) as pool:
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
                execute_notebook,
                path,
                out,
                params,
                html_export=options.html_export,
                timeout=options.timeout,
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
    return results


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
            figure = parse_json(texts[source], f"figure {source}", shape=dict)
            for fmt in formats:
                figs.append(figure)
                paths.append(output_dir / FIGURES_DIR / result.notebook / f"{name}.{fmt}")
                owners.append(result)
    if figs:
        save_many(figs, paths, size=size)
    for result, path in zip(owners, paths, strict=True):
        result.exports.append(str(path))
    return len(paths)
