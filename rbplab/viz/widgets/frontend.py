"""What the kernel's front end renders and how a figure reaches it: `live_frontend` (is a
widget front end attached?), `show` (a figure as the plotly mime bundle) and `sync_figure`
(a new figure copied into the shown one in place)."""

from __future__ import annotations

import os

import plotly.graph_objects as go
from IPython.display import display

STATIC_ENV = "RBPLAB_STATIC_FIGURES"  # "1": always add static figures, "0": never, unset: detect
_HEADLESS_PARENTS = ("papermill", "nbclient", "nbconvert")
PLOTLY_MIME = "application/vnd.plotly.v1+json"


def live_frontend() -> bool:
    """True when a front end that renders widgets is attached to this kernel.

    A kernel cannot ask its client what it renders, so this looks at who started it:
    papermill/nbconvert/nbclient mean headless; no IPython kernel at all
    (plain `python notebook.py`) means headless too. $RBPLAB_STATIC_FIGURES overrides.
    """
    forced = os.environ.get(STATIC_ENV, "").strip().lower()
    if forced in ("1", "true", "yes"):
        return False
    if forced in ("0", "false", "no"):
        return True
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        return False
    if shell is None or type(shell).__name__ != "ZMQInteractiveShell":
        return False
    try:
        import psutil

        for parent in psutil.Process().parents():
            cmdline = " ".join(parent.cmdline()).lower()
            if any(name in cmdline for name in _HEADLESS_PARENTS):
                return False
    except Exception:  # noqa: BLE001 - process inspection is best effort (permissions, platforms)
        pass
    return True


def show(fig: go.Figure | dict) -> None:
    """Display a plotly figure (or a figure's JSON, as `rbplab.viz.states.explorer` makes it) as
    the plotly mime bundle, which JupyterLab renders natively and the report's HTML export turns
    into an embedded plot."""
    if not isinstance(fig, dict):
        fig = go.Figure(fig).to_plotly_json()  # a FigureWidget's current state as a plain figure
    display({PLOTLY_MIME: fig}, raw=True)


def sync_figure(target: go.FigureWidget, source: go.Figure, keep_template: bool = False) -> None:
    """Make `target` show `source` in place: with the same trace layout, traces are updated
    one by one (the front end gets a small diff); otherwise traces are replaced. With
    `keep_template` (a `source` built under `layout.untemplated`) the target keeps its template:
    copying one costs plotly ~12 ms, and the redraw would otherwise lose it."""
    with target.batch_update():
        same = len(target.data) == len(source.data) and all(
            a.type == b.type for a, b in zip(target.data, source.data, strict=True)
        )
        if same:
            for old, new in zip(target.data, source.data, strict=True):
                old.update(new.to_plotly_json(), overwrite=True)
        else:
            target.data = ()
            target.add_traces(list(source.data))
        if not keep_template:
            target.layout = source.layout
            return
        new_layout = source.layout.to_plotly_json()
        new_layout.pop("template", None)
        if set(target.layout.to_plotly_json()) - set(new_layout) - {"template"}:
            # fewer panels than shown: a new layout (the template copied once, for this redraw)
            target.layout = go.Layout(new_layout, template=target.layout.template)
        else:
            target.layout.update(new_layout, overwrite=True)
