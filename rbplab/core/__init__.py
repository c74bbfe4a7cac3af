"""The data contract at the bottom of rbplab: per-token statistics, runs, tie conventions, settings,
the typed identity of a cache entry (`EntrySpec`), the tidy tables' column names (`rbplab.core.stats`).

Everything else may import from here; this package imports nothing of rbplab's. Its names load on
first use: `rbplab.core.errors` is imported by every command, and `rbplab --help` should not pay
for pandas and numpy, which `stats` and `runs` import.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rbplab.core.errors import RbplabError, RbplabWarning
    from rbplab.core.runs import Run
    from rbplab.core.settings import ExtractionSettings
    from rbplab.core.stats import TokenStats

_LAZY = {
    "ExtractionSettings": "rbplab.core.settings",
    "RbplabError": "rbplab.core.errors",
    "RbplabWarning": "rbplab.core.errors",
    "Run": "rbplab.core.runs",
    "TokenStats": "rbplab.core.stats",
}

__all__ = ["ExtractionSettings", "RbplabError", "RbplabWarning", "Run", "TokenStats"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rbplab.core' has no attribute {name!r}")
