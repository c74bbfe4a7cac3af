"""What a notebook calls to hand its results to the report: `save_table`, `save_figure`,
`headline` and `banner`.

Each table lands as CSV and each figure as plotly JSON in the notebook's own output folder (the
report hands it over as the `output_dir` parameter; None, as in an interactive session, writes
nothing). The table and the figure named "headline" are shown on the report's index, with the
notebook's headline sentence (its result, with intervals) and, loudly, its banner (e.g.
"synthetic data").
"""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

HEADLINE = "headline"  # the name of the table and the figure the index shows
SENTENCE_FILE = "headline.txt"  # the notebook's result in one sentence (`headline`)
BANNER_FILE = "banner.txt"  # a warning the index shows loudly (`banner`)
FIGURE_SUFFIX = ".plotly.json"


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


def headline_text(frame: pd.DataFrame) -> str:
    """One line from a headline table: the identifying text columns, then name=value pairs, the
    values as the report's tables show them (`rbplab.viz.readable.text_table`: an estimate with its
    interval, sizes as 85.1M, whole numbers as integers, others to 3 significant digits)."""
    from rbplab.viz.readable import text_table

    shown = text_table(frame)
    text = [c for c in shown.columns if frame[c].map(lambda v: isinstance(v, str)).all()]
    parts = []
    for row in shown.to_dict("records"):
        labels = [row[c] for c in text]
        values = [f"{k}={v}" for k, v in row.items() if k not in text]
        parts.append(f"{'/'.join(labels)}: {', '.join(values)}" if labels else ", ".join(values))
    return "; ".join(parts)


def _show_block(text: str, css_class: str, style: str) -> None:
    from IPython.display import HTML, display

    from rbplab.viz.labels import html_label

    body = html_label(html.escape(text))
    display(HTML(f'<div class="{css_class}" style="padding:0.6em 1em;margin:0.5em 0;{style}">{body}</div>'))
