"""Sharing cache entries: `export_entries` writes complete, verified entries into one tar file;
`import_archive` brings them into a cache.

An archive is untrusted input. Import never lets tarfile place anything: each member must be a
regular file named ``<key>/<cache file name>`` (spec.json, manifest.json, shard-NNNNN.parquet
and its .sha256, the summary and its .sha256), and is copied to a path built from those
validated parts inside a temporary directory within the cache root. Every entry is then checked
with every rule of `rbplab.store.cache` (key derived from spec.json, shard names, records, row
counts, mirrored settings, checksums, shard metadata). Only when all of them pass does each entry become
visible, by one atomic rename per entry; a refused archive leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tarfile
import uuid
from pathlib import Path

from filelock import FileLock, Timeout

from rbplab.store.cache import (
    CacheCorruptedError,
    CacheEntry,
    CacheError,
    entry_at,
    remove_entry_dir,
    shard_name,
)
from rbplab.store.files import cache_root, check_writable, location_error
from rbplab.store.summaries import SUMMARY_FILE

_MEMBER_RE = re.compile(
    r"^([0-9a-f]{64})/(spec\.json|manifest\.json|shard-(\d{5,})\.parquet(\.sha256)?|"
    + re.escape(SUMMARY_FILE)
    + r"(\.sha256)?)$"
)


class ArchiveError(CacheError):
    """An archive that cannot be imported as it is; nothing was imported from it."""


def export_entries(keys: list[str], output: str | Path, *, root: str | Path | None = None) -> list[str]:
    """Write the complete entries named by `keys` (unique key prefixes) into the tar file `output`.
    Every entry is verified first; a damaged or incomplete one stops the export. Returns the keys."""
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
                n_shards = len(entry.manifest()["shards"])
                names = ["spec.json"]
                for index in range(n_shards):
                    names += [shard_name(index), shard_name(index) + ".sha256"]
                if (entry.path / SUMMARY_FILE).is_file():  # verified by problems() above
                    names += [SUMMARY_FILE, SUMMARY_FILE + ".sha256"]
                for name in [*names, "manifest.json"]:
                    path = entry.path / name
                    info = tarfile.TarInfo(f"{key}/{name}")
                    info.size = path.stat().st_size
                    info.mode = 0o644
                    info.mtime = int(path.stat().st_mtime)
                    with open(path, "rb") as handle:
                        tar.addfile(info, handle)
        os.replace(tmp, output)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise location_error(err, output) from err
    return sorted(entries)


def import_archive(archive: str | Path, *, root: str | Path | None = None) -> list[tuple[str, str]]:
    """Import every entry of a tar file written by `export_entries`; see the module docstring.
    Returns (key, "imported" | "already present") per entry."""
    archive = Path(archive).expanduser()
    root = check_writable(cache_root(root))
    staging = root / f".import-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        staging.mkdir()
        keys = _unpack(archive, staging)
        for key in keys:
            entry = entry_at(staging / key[:2] / key, staging)
            if entry is None:
                raise ArchiveError(
                    f"refusing archive {archive}: entry {key[:12]} has no spec.json that hashes to its key"
                )
            if not entry.is_complete():
                raise ArchiveError(
                    f"refusing archive {archive}: entry {key[:12]} is not complete (no manifest.json)"
                )
            problems = entry.problems()
            if problems:
                raise ArchiveError(f"refusing archive {archive}: entry {key[:12]} is damaged: {problems[0]}")
        return [_install(staging, root, key) for key in keys]
    except OSError as err:
        raise location_error(err, root) from err
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # our own temporary directory


def _unpack(archive: Path, staging: Path) -> list[str]:
    """Copy the members of `archive` into `staging/<key[:2]>/<key>/<name>`, refusing anything else."""
    try:
        tar = tarfile.open(archive, "r:*")
    except (tarfile.TarError, OSError) as err:
        raise ArchiveError(f"refusing archive {archive}: not a readable tar file ({err})") from err
    seen: set[str] = set()
    keys: set[str] = set()
    with tar:
        try:
            for member in tar:
                match = _MEMBER_RE.match(member.name)
                if match is None or not member.isfile():
                    raise ArchiveError(
                        f"refusing archive {archive}: member {member.name!r} is not a cache file "
                        "(only <key>/spec.json, manifest.json, shard and summary files are allowed)"
                    )
                key, name, index = match.group(1), match.group(2), match.group(3)
                if index is not None and not name.startswith(shard_name(int(index))):
                    raise ArchiveError(
                        f"refusing archive {archive}: member {member.name!r} is not a shard name"
                    )
                if member.name in seen:
                    raise ArchiveError(f"refusing archive {archive}: member {member.name!r} appears twice")
                seen.add(member.name)
                keys.add(key)
                target = staging / key[:2] / key / name  # built from the validated parts only
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                with source, open(target, "xb") as handle:
                    shutil.copyfileobj(source, handle)
        except (tarfile.TarError, EOFError) as err:
            raise ArchiveError(f"refusing archive {archive}: it is damaged or truncated ({err})") from err
    if not keys:
        raise ArchiveError(f"refusing archive {archive}: it holds no cache entries")
    return sorted(keys)


def _install(staging: Path, root: Path, key: str) -> tuple[str, str]:
    """Move one verified entry from staging into the cache under its write lock (atomic rename)."""
    dest = root / key[:2] / key
    existing = entry_at(dest, root) if dest.is_dir() else None
    if existing is not None and existing.is_complete() and not existing.problems():
        return key, "already present"
    (root / "locks").mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(str(root / "locks" / f"{key}.lock"), timeout=10):
            if dest.is_dir() or dest.is_symlink():
                remove_entry_dir(dest)  # an incomplete or damaged copy: its own files only
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.rename(staging / key[:2] / key, dest)
    except Timeout as err:
        raise CacheError(f"cache entry {key[:12]} is being written by another process; not imported") from err
    return key, "imported"
