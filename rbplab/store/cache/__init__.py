"""The content-addressed cache of per-token rank statistics.

`layout` (keys, file names, size bounds), `verify` (every rule an entry is checked by, one
table; `rule`: what a rule is; the rows: `entry_rules`, the entry's files, and `summary_rules`, the
summary, whose tables `summary_tables` reads), `reading` (an entry as a reader sees it), `entry`
(`CacheEntry`: lock, claims, writes, finalization), `summary_file` (the summary on disk), `admin`
(listing and removal). What the cache guarantees is in docs/cache.md ("What the cache guarantees").
"""

from rbplab.store.cache.admin import LISTING_COLUMNS, list_entries, remove_entries
from rbplab.store.cache.entry import CacheEntry, entry_at
from rbplab.store.cache.layout import cache_key, canonical_json
from rbplab.store.cache.reading import CacheCorruptedError, CacheError

__all__ = [
    "LISTING_COLUMNS",
    "CacheCorruptedError",
    "CacheEntry",
    "CacheError",
    "cache_key",
    "canonical_json",
    "entry_at",
    "list_entries",
    "remove_entries",
]
