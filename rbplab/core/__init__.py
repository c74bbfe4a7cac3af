"""The data contract at the bottom of rbplab: per-token statistics, runs, tie conventions, settings,
the typed identity of a cache entry (`EntrySpec`), the tidy tables' column names (`rbplab.core.columns`).

Everything else may import from here; this package imports nothing of rbplab's. Its names load on
first use: `rbplab.core.errors` is imported by every command, and `rbplab --help` should not pay
for pandas and numpy, which `stats` and `runs` import.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rbplab.core.entry_spec import EntrySpec, EntrySpecError
    from rbplab.core.errors import RbplabError
    from rbplab.core.runs import Run, RunsLike, as_runs
    from rbplab.core.settings import ExtractionSettings, resolve_settings
    from rbplab.core.stats import TIES, Ties, TokenStats, check_ties

_LAZY = {
    "EntrySpec": "rbplab.core.entry_spec",
    "EntrySpecError": "rbplab.core.entry_spec",
    "ExtractionSettings": "rbplab.core.settings",
    "RbplabError": "rbplab.core.errors",
    "Run": "rbplab.core.runs",
    "RunsLike": "rbplab.core.runs",
    "TIES": "rbplab.core.stats",
    "Ties": "rbplab.core.stats",
    "TokenStats": "rbplab.core.stats",
    "as_runs": "rbplab.core.runs",
    "check_ties": "rbplab.core.stats",
    "resolve_settings": "rbplab.core.settings",
}

__all__ = [
    "TIES",
    "EntrySpec",
    "EntrySpecError",
    "ExtractionSettings",
    "RbplabError",
    "Run",
    "RunsLike",
    "Ties",
    "TokenStats",
    "as_runs",
    "check_ties",
    "resolve_settings",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rbplab.core' has no attribute {name!r}")
