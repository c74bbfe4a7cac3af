"""Figures, widgets and reports drawn from a study's tidy tables.

Import the module you need (`from rbplab.viz import plots, widgets, report`): plotly and
ipywidgets load only then.
"""

__all__ = ["plots", "report", "widgets"]
