"""The report's front page and its numbers: index.html (the law, the resolved grid, one row and one
section per notebook with its headline sentence, figure and table) and results.json
(`rbplab.load_results`: the grid, the settings, package versions, every run a headline rests on
with its cache key, every headline table and sentence).
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from rbplab.core.documents import read_json
from rbplab.core.settings import ExtractionSettings
from rbplab.report.execution import EXTRACTION_NOTEBOOK, TRAINING_NOTEBOOK, NotebookResult
from rbplab.report.pages import PLOTLY_JS, figure_div, write_assets

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
    from rbplab.viz.labels import html_label

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
