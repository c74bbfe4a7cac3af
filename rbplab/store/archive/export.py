"""Exporting complete, verified cache entries into one tar file."""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
import uuid
from pathlib import Path

from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.reading import CacheCorruptedError, CacheError
from rbplab.store.files import cache_root, location_error


def export_entries(keys: list[str], output: str | Path, *, root: str | Path | None = None) -> list[str]:
    """Write the complete entries named by `keys` (unique key prefixes) into the tar file `output`.
    Every entry is verified first; a damaged or incomplete one stops the export. The bytes written
    are the bytes verified (`CacheEntry.verified_files`). Returns the keys."""
    root = cache_root(root)
    if not keys:
        raise CacheError("say which entries to export: KEY_PREFIX... (rbplab cache ls lists them)")
    entries: dict[str, CacheEntry] = {}
    for prefix in keys:
        entry = CacheEntry.open(prefix, root)
        if not entry.is_complete():
            raise CacheError(
                f"cache entry {entry.key[:12]} is not complete; only complete entries are exported"
            )
        problems = entry.problems()
        if problems:
            raise CacheCorruptedError(
                f"cache entry {entry.key[:12]} is damaged: {problems[0]}; not exported "
                f"(rbplab cache repair {entry.key[:12]} recomputes it)"
            )
        entries[entry.key] = entry
    output = Path(output).expanduser().absolute()
    tmp = output.with_name(f".{output.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with tarfile.open(tmp, "w") as tar:
            for key, entry in sorted(entries.items()):
                for name, data in entry.verified_files():
                    info = tarfile.TarInfo(f"{key}/{name}")
                    info.size = len(data)
                    info.mode = 0o644
                    info.mtime = int((entry.path / name).lstat().st_mtime)
                    tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, output)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise location_error(err, output) from err
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return sorted(entries)
