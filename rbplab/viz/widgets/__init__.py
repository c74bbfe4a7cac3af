"""Interactive views (being split into one module per view; see base.py)."""

from rbplab.viz.widgets.base import *  # noqa: F403 - transitional, replaced by the split's public list
