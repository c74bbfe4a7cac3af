"""Sharing cache entries: `export_entries` writes complete, verified entries into one tar file;
`import_archive` brings them into a cache.

An archive is untrusted input: its members are checked from their headers before a byte is copied
(`members`), unpacked into a locked temporary folder of the cache root (`staging`), verified entry
by entry with every rule of the cache, and installed all or none (`install`); `importing` runs
these steps, `export` writes archives.
"""

from rbplab.store.archive.export import export_entries
from rbplab.store.archive.importing import import_archive
from rbplab.store.archive.members import ArchiveError
from rbplab.store.archive.staging import remove_stale_imports, stale_imports

__all__ = ["ArchiveError", "export_entries", "import_archive", "remove_stale_imports", "stale_imports"]
