"""Importing an archive written by `rbplab.store.archive.export` into a cache.

The archive path must be a regular file (a FIFO is refused without waiting for a writer). Its
member headers are checked before anything is created (`rbplab.store.archive.members`); the
members are unpacked into a temporary folder within the cache root
(`rbplab.store.archive.staging`), every entry is checked with every rule of
`rbplab.store.cache.verify` (key derived from spec.json, shard names, records, row counts, mirrored
settings, checksums, shard metadata, the summary's relations, and the summary against the one its
shards give: a summary that differs is derived again, with a warning), and the entries are
installed all or none (`rbplab.store.archive.install`). A refused archive leaves the cache as it was, byte for
byte: the temporary folder and its lock file are removed, so are the folders the import created
(the ``locks`` folder, the cache folder) while empty.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path

from rbplab.store.archive.install import install
from rbplab.store.archive.members import ArchiveError, check_members, open_tar, unpack
from rbplab.store.archive.staging import remove_stale_imports, staging_folder
from rbplab.store.cache.entry import entry_at
from rbplab.store.files import UnsafeFileError, cache_root, check_writable, location_error, open_regular_file


def import_archive(archive: str | Path, *, root: str | Path | None = None) -> list[tuple[str, str]]:
    """Import every entry of a tar file written by `export_entries`; see the module docstring.
    Returns (key, "imported" | "already present") per entry."""
    archive = Path(archive).expanduser()
    try:
        handle = open_regular_file(archive)
    except UnsafeFileError as err:
        raise ArchiveError(f"refusing archive {archive}: {err}") from None
    except OSError as err:
        raise ArchiveError(f"refusing archive {archive}: cannot open it ({err.strerror or err})") from None
    root = cache_root(root)
    with handle, open_tar(handle, archive) as tar:
        files, small = check_members(tar, archive)  # headers only: nothing is written yet
        created = [root / "locks"] if not os.path.lexists(root / "locks") else []
        created += _missing_folders(root)
        try:
            check_writable(root)  # its own one-line error (no space, not writable)
        except BaseException:
            _remove_empty(created)
            raise
        try:
            with staging_folder(root) as staging:
                keys = unpack(tar, files, small, archive, staging)
                for key in keys:
                    _check_staged(staging, key, archive)
                result = install(staging, root, keys, archive)
        except UnsafeFileError as err:
            _remove_empty(created)
            raise ArchiveError(f"refusing archive {archive}: {err}") from None
        except OSError as err:
            _remove_empty(created)
            raise location_error(err, root) from err
        except BaseException:
            _remove_empty(created)
            raise
    with contextlib.suppress(OSError):  # litter of killed imports: best effort, the import is done
        remove_stale_imports(root)
    return result


def _missing_folders(path: Path) -> list[Path]:
    """`path` and those of its parents that do not exist yet, deepest first."""
    missing = []
    for folder in (path, *path.parents):
        if os.path.lexists(folder):
            break
        missing.append(folder)
    return missing


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders a refused import created (deepest first), each only while empty: a
    lock file another process made in the locks folder meanwhile keeps it."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _check_staged(staging: Path, key: str, archive: Path) -> None:
    entry = entry_at(staging / key[:2] / key, staging)
    if entry is None:
        raise ArchiveError(
            f"refusing archive {archive}: entry {key[:12]} has no spec.json that hashes to its key"
        )
    if not entry.is_complete():
        raise ArchiveError(f"refusing archive {archive}: entry {key[:12]} is not complete (no manifest.json)")
    problems = entry.problems()
    if problems:
        raise ArchiveError(f"refusing archive {archive}: entry {key[:12]} is damaged: {problems[0]}")
    # A summary is derived data: one that passes its own rules but is not what the verified shards
    # give (a forgery, consistent in every relation) is replaced before the entry becomes visible.
    mismatch = entry.summary_problems(derive=True)
    if mismatch:
        warnings.warn(
            f"archive {archive}: entry {key[:12]}: {mismatch[0]}; its summary was derived again from its "
            "shards",
            stacklevel=3,
        )
        entry.derive_summary()
        if entry.summary_problems(derive=True):  # not stored after all (a full disk): never install it
            raise ArchiveError(
                f"refusing archive {archive}: entry {key[:12]}: {mismatch[0]}, and the summary derived "
                "again could not be stored"
            )
