"""Where results are kept: the rank cache (the inputs, models and corpora, are `rbplab.catalog`).

`cache` owns the on-disk layout of entries (keys, shards, manifests, locks, listing, removal) and
the checks that nothing read back is trusted unless derived again; `archive` exports and imports
entries; `files` writes files atomically and reads entry files safely (no links, no special files,
bounded sizes); `hub` decides whether the Hugging Face hub can be reached and resolves a revision
there to its commit; `paths` finds the bundled data. Nothing here runs a model.
"""

from rbplab.store.archive import ArchiveError, export_entries, import_archive
from rbplab.store.cache import (
    CacheCorruptedError,
    CacheEntry,
    CacheError,
    cache_key,
    list_entries,
    remove_entries,
)
from rbplab.store.files import CacheLocationError, cache_root

__all__ = [
    "ArchiveError",
    "CacheCorruptedError",
    "CacheEntry",
    "CacheError",
    "CacheLocationError",
    "cache_key",
    "cache_root",
    "export_entries",
    "import_archive",
    "list_entries",
    "remove_entries",
]
