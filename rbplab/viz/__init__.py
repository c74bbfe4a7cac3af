"""Figures and widgets drawn from a study's tidy tables (the report that publishes them is
`rbplab.report`).

Import the module you need (`from rbplab.viz import plots, widgets`): plotly and
ipywidgets load only then. `rbplab.viz.save(fig, "figure3.pdf")` writes a figure for a paper
(`rbplab.viz.export`).
"""

from importlib import import_module
from typing import Any

# Every submodule loads on first use; the figures, the notebook views and `save` are the API.
_SUBMODULES = ("export", "headlines", "layout", "parameters", "plots", "readable", "states", "widgets")
# headlines, parameters and readable are what every notebook imports.
__all__ = ["headlines", "parameters", "plots", "readable", "save", "widgets"]


def __getattr__(name: str) -> Any:
    # Lazy, like the modules themselves: `import rbplab.viz` imports no plotly.
    if name == "save":
        return import_module("rbplab.viz.export").save
    if name in _SUBMODULES:
        return import_module(f"rbplab.viz.{name}")
    raise AttributeError(f"module 'rbplab.viz' has no attribute {name!r}")
