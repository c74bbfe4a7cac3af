"""The data contract at the bottom of rbplab: per-token statistics, runs, tie conventions, settings,
the typed identity of a cache entry (`EntrySpec`), the tidy tables' column names (`rbplab.core.columns`).

Everything else may import from here; this package imports nothing of rbplab's.
"""

from rbplab.core.entry_spec import EntrySpec, EntrySpecError
from rbplab.core.errors import RbplabError
from rbplab.core.runs import Run, RunsLike, as_runs
from rbplab.core.settings import ExtractionSettings, resolve_settings
from rbplab.core.stats import TIES, Ties, TokenStats, check_ties

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
