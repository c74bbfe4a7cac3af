"""`run_report`: a report's request (one grid), every notebook executed headless on it, the index
and results.json, in a folder that holds one report.

What a report analyses: its request, one `rbplab.grid.Grid`, handed to every notebook as the
parameters their `parameters` cells declare (a study file's path, else families, models, corpora
and settings), and checked before any notebook runs, so that an unknown name, a corpus that cannot
be opened or a run missing from the cache is one error rather than a failed notebook each.

The index page and the results file state this grid, so "corpora: null" (the notebooks' own
default) never stands in for the corpora that were analysed.

The training checkpoints the cache already holds, which the report hands the training-dynamics
notebook when nothing names its checkpoints (what `rbplab demo` scored), and which the notebook
finds the same way when opened with its defaults.

A report folder holds one report: each report lists the files it wrote in the folder's
`report-files.json`, and the next report into the same folder first removes exactly those files
(and the folders they leave empty), so a 2-corpus report never sits beside a 4-corpus report's
tables. A file the report did not write (a user's notes, a table saved by hand) is never listed,
so it survives.

A file counts as written when it appeared, or changed (size or modification time), while the
report ran; the list is written even when the report stops with an error or Ctrl-C, so the
files of a half-finished report are removed by the next one too.

The report's front page and its numbers: index.html (the law, the resolved grid, one row and one
section per notebook with its headline sentence, figure and table) and results.json
(`rbplab.load_results`: the grid, the settings, package versions, every run a headline rests on
with its cache key, every headline table and sentence).
"""

from __future__ import annotations

import html
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

import pandas as pd

from rbplab.core.documents import parse_json, read_json
from rbplab.core.errors import InvalidArgumentError, RbplabError
from rbplab.core.settings import ExtractionSettings
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
from rbplab.report.handoff import FIGURE_SUFFIX, HEADLINE
from rbplab.report.pages import PLOTLY_JS, figure_div, notebook_title, write_assets

# The notebooks' parameters that name the grid: a report sets them from its Grid, never from
# `parameters`, so the index states exactly what the notebooks analysed.
GRID_PARAMETERS = ("families", "models", "corpora", "settings", "study_file")
# The parameters run_report sets from its own arguments.
RUN_PARAMETERS = ("cache_dir", "extract", "output_dir")

T = TypeVar("T")


def resolved(resolve: Callable[[], T]) -> T:
    """resolve(), its failure one line: rbplab's own errors as they are, others named as the
    grid's."""
    try:
        return resolve()
    except RbplabError:
        raise
    except (ValueError, LookupError, OSError) as err:
        problem = " ".join(str(err).split()) or type(err).__name__
        raise InvalidArgumentError(f"the report's grid cannot be resolved: {problem}") from None


def check_parameters(parameters: Mapping[str, object]) -> None:
    """Refuse notebook parameters that would replace the grid or run_report's own arguments."""
    for name in parameters:
        if name in GRID_PARAMETERS:
            raise InvalidArgumentError(
                f"parameter {name!r} is part of the report's grid: give it in the grid "
                "(run_report(Grid.from_names(...)) or Grid.read(study_file), or rbplab report's "
                "--family/--corpus/settings)"
            )
        if name in RUN_PARAMETERS:
            raise InvalidArgumentError(f"parameter {name!r} is run_report's own: pass run_report({name}=...)")


def notebook_parameters(grid: Grid) -> dict[str, object]:
    """The grid as the notebooks' parameters: a study file's path (the notebooks read the file),
    else families, models (None: every member of the families), corpora and the settings that
    differ from the defaults. A grid the notebooks cannot be handed as such (one changed after its
    file was read, or with revisions, or models outside the registry's families, or Corpus
    objects) is refused in one line: write it as a study file."""
    fix = "write the grid as a study file (rbplab run's TOML) and report on that"
    if grid.path is not None:
        read = resolved(lambda: Grid.read(grid.path))
        if {**read.to_dict(), "study_file": None} != {**grid.to_dict(), "study_file": None}:
            raise InvalidArgumentError(
                f"the grid differs from its study file {grid.path}, which the notebooks read: "
                "make the changes in the file"
            )
        return {"study_file": str(read.path)}
    if any(grid.revisions_of(m.model) != (None,) for m in grid.members):
        raise InvalidArgumentError(
            f"the notebooks take checkpoints (revisions) from a study file only: {fix}"
        )
    outside = [m.model for m in grid.members if not m.family]
    if outside:
        raise InvalidArgumentError(f"the notebooks take registry families, and {outside} are in none: {fix}")
    if not all(isinstance(c, str) for c in grid.corpora):
        raise InvalidArgumentError(f"the notebooks take corpora by name or path, not Corpus objects: {fix}")
    families = grid.families
    every = [m.model for m in Grid.from_names(families).members]
    return {
        "families": families,
        "models": None if grid.models == every else grid.models,
        "corpora": list(grid.corpora),
        "settings": grid.settings.to_dict(changed_only=True),
        "study_file": None,
    }


def reads_grid(paths: Sequence[Path], study_file: bool) -> bool:
    """Whether some notebook reads the grid's runs from the cache: one declaring `extract`, other
    than the training notebook without a study file (it reads the checkpoints the cache holds)."""
    declared = {p.stem: declared_parameters([p]) for p in paths}
    return any(
        "extract" in names and (stem != TRAINING_NOTEBOOK or study_file) for stem, names in declared.items()
    )


def synthetic_notebooks(
    paths: Sequence[Path], *, chosen: bool, say: Callable[[str], None] | None = None
) -> list[Path]:
    """The notebooks of `paths` with a synthetic mode (they declare `synthetic`): a report on made-up
    models leaves the others out (05 only extracts and reads real runs), saying so; one the user
    chose by name (`chosen`) is a one-line error instead."""
    without = [p.stem for p in paths if "synthetic" not in declared_parameters([p])]
    if without and chosen:
        raise InvalidArgumentError(
            f"notebook {', '.join(without)} has no synthetic mode (it reads real runs): "
            "leave it out of --notebook, or drop synthetic"
        )
    if without and say is not None:
        say(f"synthetic: {', '.join(without)} left out (no synthetic mode: it reads real runs)")
    return [p for p in paths if p.stem not in without]


def cached_checkpoints(
    families: Iterable[str],
    corpora: Sequence[str],
    cache_dir: str | Path | None = None,
) -> dict | None:
    """A study table naming the training checkpoints of `families` that the cache holds on every
    one of `corpora` (what `rbplab demo` scores, or `rbplab run` with revisions): the revisions
    every model has at one scoring cap, the cap that covers the most checkpoints. None when the
    cache holds no checkpoint of every model on every corpus. Corpus names are resolved as
    everywhere (`rbplab.catalog.corpora.corpus_name`: any case; an unknown one is an error, not
    "no checkpoints")."""
    from rbplab.catalog import registry
    from rbplab.catalog.corpora import corpus_name
    from rbplab.store.cache.admin import list_entries

    corpora = [str(corpus_name(c)) for c in corpora]
    families = list(families)
    members = pd.concat([registry.family_models(f) for f in families], ignore_index=True)["model"]
    entries = list_entries(cache_dir)
    entries = entries[
        entries["complete"] & entries["model"].isin(list(members)) & entries["corpus"].isin(list(corpora))
    ].copy()
    # A final checkpoint is cached under the model itself (no revision): name it as its schedule does.
    finals = {}
    for model in members:
        schedule = registry.schedule_of(model)
        if schedule is not None:
            finals[model] = (schedule.final_step, schedule.revision(schedule.final_step))
    for i, row in entries[entries["revision"].isna() & entries["step"].notna()].iterrows():
        final = finals.get(row["model"])
        if final is not None and int(row["step"]) == final[0]:
            entries.loc[i, "revision"] = final[1]
    entries = entries[entries["revision"].notna()]
    if entries.empty:
        return None
    best: tuple[int, dict] | None = None
    cap = entries["max_tokens"].astype("object").where(entries["max_tokens"].notna(), None)
    for value, group in entries.assign(cap=cap).groupby("cap", dropna=False):
        present = group.groupby("revision").apply(
            lambda g: set(zip(g["model"], g["corpus"], strict=True)), include_groups=False
        )
        needed = {(m, c) for m in members for c in corpora}
        revisions = sorted((r for r, pairs in present.items() if needed <= pairs), key=_step_order)
        if len(revisions) < 2:
            continue
        table = {
            "families": families,
            "corpora": list(corpora),
            "revisions": revisions,
            "settings": {} if pd.isna(value) else {"max_tokens": int(value)},
        }
        if best is None or len(revisions) > best[0]:
            best = (len(revisions), table)
    return None if best is None else best[1]


def _step_order(revision: str) -> tuple:
    digits = "".join(ch if ch.isdigit() else " " for ch in revision).split()
    return (int(digits[-1]) if digits else -1, revision)


MANIFEST = "report-files.json"

Snapshot = dict[str, tuple[int, int]]  # relative path -> (size, mtime in ns)


def _snapshot(folder: Path) -> Snapshot:
    files: Snapshot = {}
    for root, dirs, names in os.walk(folder):
        # A linked folder is not the report's: its files are neither listed nor removed.
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
        for name in names:
            path = Path(root, name)
            if path.is_symlink() or not path.is_file():
                continue
            stat = path.stat()
            files[path.relative_to(folder).as_posix()] = (stat.st_size, stat.st_mtime_ns)
    return files


def previous_files(folder: Path) -> list[str]:
    """The files the last report in `folder` wrote (relative paths), as its manifest lists them;
    none when there is no readable manifest."""
    try:
        listed = json.loads((folder / MANIFEST).read_text(encoding="utf-8")).get("files", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [p for p in listed if isinstance(p, str)]


def _inside(folder: Path, relative: str) -> Path | None:
    """`folder / relative` when it names a path inside `folder` (the manifest is only data: a
    listed "../x" or absolute path is never followed)."""
    path = folder / relative
    if Path(relative).is_absolute() or ".." in Path(relative).parts:
        return None
    return path


def remove_previous(folder: Path) -> list[str]:
    """Remove the files the last report in `folder` listed, then the folders they leave empty
    (never `folder` itself); returns the removed paths, relative."""
    removed = []
    parents: set[Path] = set()
    for relative in previous_files(folder):
        path = _inside(folder, relative)
        if path is None or path.is_symlink() or not path.is_file():
            continue
        path.unlink()
        removed.append(relative)
        parents.update(p for p in path.parents if folder in p.parents)
    for parent in sorted(parents, key=lambda p: len(p.parts), reverse=True):  # deepest first
        try:
            parent.rmdir()  # only when empty: a user's file keeps its folder
        except OSError:
            pass
    (folder / MANIFEST).unlink(missing_ok=True)
    return removed


def _write_manifest(folder: Path, before: Snapshot) -> None:
    after = _snapshot(folder)
    written = sorted(p for p, stamp in after.items() if before.get(p) != stamp and p != MANIFEST)
    text = json.dumps({"written_by": "rbplab report", "files": written}, indent=1)
    tmp = folder / f".{MANIFEST}.tmp-{os.getpid()}"
    tmp.write_text(text + "\n", encoding="utf-8")
    os.replace(tmp, folder / MANIFEST)


@contextmanager
def one_report(folder: Path) -> Iterator[None]:
    """Within it a report is written into `folder` (created if missing): the previous report's
    files are removed first, and every file written inside it is listed in the folder's
    manifest on the way out, also on an error."""
    folder.mkdir(parents=True, exist_ok=True)
    remove_previous(folder)
    before = _snapshot(folder)
    try:
        yield
    finally:
        _write_manifest(folder, before)


RESULTS_FILE = "results.json"


def _headline_table_html(path: str | Path) -> str:
    """The headline table as the notebooks show theirs (`rbplab.viz.readable.readable`: estimates
    with their intervals, sizes as 85.1M, 3 significant digits), in a box that scrolls sideways
    rather than run past the page's edge."""
    from rbplab.viz.readable import table_html

    return f'<div class="table-box">{table_html(pd.read_csv(path), classes="headline")}</div>'


MAX_FIGURE_BYTES = 512 << 20  # a figure's JSON holds its points: a few MB, more for large grids


def _headline_figure_html(path: str | Path) -> str:
    try:
        return figure_div(read_json(path, "figure", MAX_FIGURE_BYTES, shape=dict))
    except (OSError, ValueError) as err:
        name = html.escape(Path(path).name)
        return f'<p class="missing">figure {name} unreadable: {html.escape(str(err))}</p>'


def _grid_html(grid: Mapping[str, object]) -> str:
    """The resolved grid as a definition list: study file, families with their models and sizes,
    corpora, settings that differ from the defaults (and a note that the rest are defaults)."""
    from rbplab.core.display import size

    items = []
    if grid.get("study_file"):
        items.append(("study file", html.escape(str(grid["study_file"]))))
    models = list(grid.get("models") or [])
    for family in grid.get("families") or []:
        members = [m for m in models if m.get("family") == family]
        sizes = ", ".join(
            f"{html.escape(str(m['model']))} (S = {size(m['S'])})"
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
    grid: Mapping[str, object],
) -> Path:
    """index.html: the law, the resolved `grid` (`rbplab.grid.Grid.to_dict`, with what the report
    adds: the training notebook's checkpoints, extract), one row per
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
    header = _grid_html(grid)
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
table.headline td {{ text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }}
div.table-box {{ overflow-x: auto; max-width: 100%; }}
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
    from rbplab.store.cache.admin import list_entries
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
    after removing the files a previous report there wrote (`rbplab.report.run`: files it did
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
        from rbplab.study.study import absent_runs

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
