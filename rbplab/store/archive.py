"""Sharing cache entries as one tar file: export verified entries, and import an archive as
untrusted input, all of its entries or none.

`export_entries` writes complete, verified cache entries into one tar file.

`import_archive` reads one. The archive path must be a regular file (a FIFO is refused without
waiting for a writer). Its member headers are checked before anything is created; the members are
unpacked into a temporary folder inside the cache root, ``<root>/.import-<pid>-<hex>``, locked
while its import runs; every entry is checked with every rule of `rbplab.store.cache.rules` (key
derived from spec.json, shard names, records, row counts, mirrored settings, checksums, shard
metadata, the summary's relations, and the summary against the one its shards give: a summary that
differs is derived again, with a warning); and the entries are installed all or none.

Installing: only when every entry passes, every destination can take it (not a link, no foreign
files, no other writer) and every lock is held does any entry become visible, by one rename each; a
failure while renaming moves the renamed ones back. No entry lock file is created before every
destination was found free. (Only a destination that changes, or a writer that starts, in the
moment between those checks and taking the locks can leave an empty lock file.) A process killed
during the renames, a few system calls, can leave some entries of the archive imported: each is
complete and verified, none partial.

A refused archive leaves the cache as it was, byte for byte: the temporary folder and its lock file
are removed, so are the folders the import created (the ``locks`` folder, the cache folder) while
empty. The folder of an import that was killed is litter: removed by the next import that succeeds
or by `rbplab cache verify --fix-litter` (`remove_stale_imports`).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import re
import shutil
import tarfile
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from rbplab.core.documents import parse_json
from rbplab.core.errors import BadFileError, RbplabWarning
from rbplab.store.cache.entry import CacheEntry, entry_at, foreign_items, remove_entry_dir
from rbplab.store.cache.layout import (
    MAX_RECORD_BYTES,
    MAX_SPEC_BYTES,
    SHA256_RE,
    SUMMARY_FILE,
    is_cache_file,
    max_manifest_bytes,
    max_shard_bytes,
    max_shard_rows,
    max_summary_bytes,
    shard_index,
)
from rbplab.store.cache.reading import CacheCorruptedError, CacheError
from rbplab.store.files import (
    UnsafeFileError,
    cache_root,
    check_writable,
    ensure_real_dir,
    entry_dir_problem,
    folder_problem,
    location_error,
    open_regular_file,
)

_FILE_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE)
_MEMBER_KINDS = {
    tarfile.SYMTYPE: "a symbolic link",
    tarfile.LNKTYPE: "a hard link",
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a FIFO",
    tarfile.CONTTYPE: "a contiguous file",
    tarfile.GNUTYPE_SPARSE: "a sparse file",
}


class ArchiveError(CacheError):
    """An archive that cannot be imported as it is; nothing was imported from it."""


def _member_problem(member: tarfile.TarInfo) -> str | None:
    """Why a member is not a plain regular file or folder, or None."""
    if member.isdir():
        return None
    if member.type not in _FILE_TYPES:
        kind = _MEMBER_KINDS.get(member.type, f"of tar type {member.type!r}")
        return f"member {member.name!r} is {kind}, not a regular file"
    if member.sparse is not None:
        return f"member {member.name!r} is a sparse file, not a regular file"
    return None


def _member_limit(name: str) -> int:
    """The most bytes a member called `name` may declare before its entry's manifest is known."""
    if name == "spec.json":
        return MAX_SPEC_BYTES
    if name.endswith(".sha256"):
        return MAX_RECORD_BYTES
    if name == "manifest.json":
        return max_manifest_bytes(None)
    if name == SUMMARY_FILE:
        return max_summary_bytes(None)
    return max_shard_bytes(max_shard_rows(None))


def _refusal(archive: Path, why: str) -> ArchiveError:
    return ArchiveError(f"refusing archive {archive}: {why}")


@contextlib.contextmanager
def open_tar(handle, archive: Path) -> Iterator[tarfile.TarFile]:
    """The open tar file of `handle`; a damaged or truncated one is refused wherever it shows."""
    try:
        tar = tarfile.open(fileobj=handle, mode="r:*")
    except (tarfile.TarError, OSError, EOFError) as err:
        raise _refusal(archive, f"not a readable tar file ({err})") from None
    with tar:
        try:
            yield tar
        except (tarfile.TarError, EOFError) as err:
            raise _refusal(archive, f"it is damaged or truncated ({err})") from None


def check_members(
    tar: tarfile.TarFile, archive: Path
) -> tuple[dict[tuple[str, str], tarfile.TarInfo], dict[tuple[str, str], bytes]]:
    """Every member of `archive` as ((key, name) -> header, (key, name) -> bytes of the small
    ones), refusing anything else; reads headers and the small members only, writes nothing."""

    def refuse(why: str) -> ArchiveError:
        return _refusal(archive, why)

    files: dict[tuple[str, str], tarfile.TarInfo] = {}
    for member in tar:  # headers only: nothing is read from a member before all are checked
        problem = _member_problem(member)
        if problem is not None:
            raise refuse(problem)
        key, _, name = member.name.rstrip("/").partition("/")
        if member.isdir():
            if SHA256_RE.match(key) and not name:
                continue  # the entry's own folder, as other tar tools write it
            raise refuse(f"member {member.name!r} is a folder other than an entry's <key>/")
        if not SHA256_RE.match(key) or "/" in name or not is_cache_file(name, temporary=False):
            raise refuse(
                f"member {member.name!r} is not a cache file (only <key>/spec.json, manifest.json, "
                "shard and summary files are allowed)"
            )
        if (key, name) in files:
            raise refuse(f"member {member.name!r} appears twice")
        if member.size > _member_limit(name):
            raise refuse(f"member {member.name!r} declares {member.size} bytes, more than a {name} can hold")
        files[(key, name)] = member
    small = {
        item: _read_member(tar, member, refuse)
        for item, member in files.items()
        if shard_index(item[1]) is None
    }
    for (key, name), data in small.items():
        if name == "manifest.json":  # read for the sizes below: one that cannot be is refused here
            try:
                parse_json(data, f"member {key}/{name}")
            except BadFileError as err:
                raise refuse(str(err)) from None
    for (key, name), member in files.items():
        if name == SUMMARY_FILE:
            expected = _recorded_summary_bytes(small.get((key, "manifest.json")))
            if expected is not None and expected != member.size:
                raise refuse(
                    f"member {member.name!r} declares {member.size} bytes but its manifest records {expected}"
                )
        index = shard_index(name)
        if index is not None:
            expected = _recorded_bytes(small.get((key, "manifest.json")), index)
            if expected != member.size:
                raise refuse(
                    f"member {member.name!r} declares {member.size} bytes but its manifest records "
                    f"{'none' if expected is None else expected}"
                )
    if not files:
        raise refuse("it holds no cache entries")
    return files, small


def unpack(
    tar: tarfile.TarFile,
    files: dict[tuple[str, str], tarfile.TarInfo],
    small: dict[tuple[str, str], bytes],
    archive: Path,
    staging: Path,
) -> list[str]:
    """Copy the checked members (`check_members`) into `staging/<key[:2]>/<key>/<name>`; their keys."""
    for (key, name), member in files.items():
        target = staging / key[:2] / key / name  # built from the validated parts only
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "xb") as out:
            if (key, name) in small:
                out.write(small[(key, name)])
            else:
                _copy_member(tar, member, out, lambda why: _refusal(archive, why))
    return sorted({key for key, _ in files})


def _recorded_summary_bytes(manifest: bytes | None) -> int | None:
    """The summary size a manifest records, None when it records none (older entries)."""
    try:
        record = parse_json(manifest or b"{}", "manifest.json").get("summary")
    except (ValueError, AttributeError):
        return None
    size = record.get("bytes") if isinstance(record, dict) else None
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo, refuse) -> bytes:
    source = tar.extractfile(member)
    data = source.read(member.size + 1) if source is not None else b""
    if len(data) != member.size:
        raise refuse(f"member {member.name!r} holds {len(data)} bytes, not the {member.size} it declares")
    return data


def _copy_member(tar: tarfile.TarFile, member: tarfile.TarInfo, out, refuse) -> None:
    source = tar.extractfile(member)
    copied = 0
    while source is not None:
        chunk = source.read(min(1 << 20, member.size + 1 - copied))
        if not chunk:
            break
        out.write(chunk)
        copied += len(chunk)
        if copied > member.size:
            break
    if copied != member.size:
        raise refuse(f"member {member.name!r} holds {copied} bytes, not the {member.size} it declares")


def _recorded_bytes(manifest_bytes: bytes | None, index: int) -> int | None:
    """The byte count the manifest records for shard `index`, None when it records none."""
    try:
        shards = parse_json(manifest_bytes or b"", "manifest.json")["shards"]
        record = next(r for r in shards if isinstance(r, dict) and r.get("index") == index)
    except (ValueError, TypeError, KeyError, StopIteration):
        return None
    size = record.get("bytes")
    return size if isinstance(size, int) and not isinstance(size, bool) else None


_STAGING_RE = re.compile(r"^\.import-\d+-[0-9a-f]{8}$")


def _staging_lock(root: Path, staging: Path) -> Path:
    return root / "locks" / f"{staging.name[1:]}.lock"


@contextlib.contextmanager
def staging_folder(root: Path) -> Iterator[Path]:
    """A fresh ``.import-<pid>-<hex>`` folder in the cache root, locked (so no other process takes
    it for litter) and removed on the way out, whatever happens."""
    staging = root / f".import-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    ensure_real_dir(root / "locks", "the locks folder")
    lock_path = _staging_lock(root, staging)
    try:
        with FileLock(str(lock_path)):  # taken before the folder exists: an unlocked folder is litter
            staging.mkdir()
            try:
                yield staging
            finally:
                shutil.rmtree(staging, ignore_errors=True)  # our own temporary folder
    finally:
        with contextlib.suppress(OSError):
            lock_path.unlink()


def _lock_is_free(path: Path) -> bool:
    """Whether no process holds the flock on `path` (a missing lock file is free). Opens the file
    read-only, so it works on a read-only cache and writes nothing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    except OSError:
        return False  # a link or something odd at a lock's name: leave that folder alone
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)  # closing releases the flock
    return True


def stale_imports(root: str | Path | None = None) -> list[Path]:
    """Temporary folders of imports that were killed (``<root>/.import-*`` whose lock no process
    holds); real folders only, never a link."""
    root = cache_root(root)
    if not root.is_dir():
        return []
    return sorted(
        path
        for path in root.iterdir()
        if _STAGING_RE.match(path.name)
        and path.is_dir()
        and not path.is_symlink()
        and _lock_is_free(_staging_lock(root, path))
    )


def remove_stale_imports(root: str | Path | None = None) -> list[Path]:
    """Delete the temporary folders of killed imports (`stale_imports`), each under its lock."""
    root = cache_root(root)
    removed = []
    for path in stale_imports(root):
        lock_path = _staging_lock(root, path)
        try:
            with FileLock(str(lock_path), timeout=0):
                shutil.rmtree(path)  # rmtree never follows a link inside the folder
            lock_path.unlink(missing_ok=True)
        except Timeout:
            continue  # an import started using it meanwhile
        except OSError as err:
            raise location_error(err, path) from err
        removed.append(path)
    return removed


LOCK_TIMEOUT = 10.0  # seconds an import waits for an entry another process is writing


def install(staging: Path, root: Path, keys: list[str], archive: Path) -> list[tuple[str, str]]:
    """Move every verified entry from staging into the cache, or none (see the module docstring)."""
    for key in keys:  # what can be refused without a lock is refused before any lock file exists
        _destination_problem(root, key, archive)
    _wait_for_writers(root, keys, archive)
    with contextlib.ExitStack() as locks:
        ensure_real_dir(root / "locks", "the locks folder")
        for key in keys:
            try:
                locks.enter_context(FileLock(str(root / "locks" / f"{key}.lock"), timeout=LOCK_TIMEOUT))
            except Timeout:
                raise _busy(key, archive) from None
        states = {key: _destination_state(root, key, archive) for key in keys}
        todo = [key for key in keys if states[key] != "already present"]
        replaced = staging / "replaced"  # what the new entries replace: incomplete or damaged copies
        replaced.mkdir()
        moved: list[str] = []
        placed: list[str] = []
        try:
            for key in todo:
                dest = root / key[:2] / key
                if os.path.lexists(dest):
                    os.rename(dest, replaced / key)  # a linked folder moves as the link itself
                    moved.append(key)
                ensure_real_dir(dest.parent, f"the prefix folder {key[:2]!r}")
                os.rename(staging / key[:2] / key, dest)
                placed.append(key)
        except BaseException:
            for key in reversed(placed):  # put everything back as it was
                with contextlib.suppress(OSError):
                    os.rename(root / key[:2] / key, staging / key[:2] / key)
            for key in reversed(moved):
                with contextlib.suppress(OSError):
                    os.rename(replaced / key, root / key[:2] / key)
            raise
        for key in moved:  # the replaced copies hold cache files only (checked), or are links
            with contextlib.suppress(OSError, CacheError):
                remove_entry_dir(replaced / key)
    return [(key, "already present" if states[key] == "already present" else "imported") for key in keys]


def _busy(key: str, archive: Path) -> CacheError:
    return CacheError(
        f"cache entry {key[:12]} is being written by another process; nothing was imported from {archive}"
    )


def _lock_is_held(path: Path) -> bool:
    """Whether a process holds the flock on the lock file `path` (opened read-only: nothing is
    created; a missing or odd file is left to the lock itself)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def _wait_for_writers(root: Path, keys: list[str], archive: Path) -> None:
    """Wait up to LOCK_TIMEOUT for every entry lock of `keys` to be free, without creating any."""
    deadline = time.monotonic() + LOCK_TIMEOUT
    for key in keys:
        while _lock_is_held(root / "locks" / f"{key}.lock"):
            if time.monotonic() > deadline:
                raise _busy(key, archive)
            time.sleep(0.05)


def _destination_problem(root: Path, key: str, archive: Path) -> None:
    """The refusals of `_destination_state` that need no lock and read no shard (a linked prefix
    folder, an odd entry folder, foreign files beside an incomplete entry)."""
    dest = root / key[:2] / key
    prefix_problem = folder_problem(root / key[:2], f"the prefix folder {key[:2]!r}")
    if prefix_problem is not None or not os.path.lexists(dest) or os.path.islink(dest):
        _destination_state(root, key, archive)  # cheap in these cases: refuses, or says new/replace
        return
    if entry_dir_problem(dest) is not None or not os.path.lexists(dest / "manifest.json"):
        _destination_state(root, key, archive)  # no shard is read for an incomplete entry


def _destination_state(root: Path, key: str, archive: Path) -> str:
    """ "new", "replace" (an incomplete or damaged copy, or a link) or "already present"; refuses a
    destination under a linked prefix folder or one holding files the cache did not write."""
    dest = root / key[:2] / key
    prefix_problem = folder_problem(root / key[:2], f"the prefix folder {key[:2]!r}")
    if prefix_problem is not None:
        raise ArchiveError(
            f"refusing archive {archive}: {prefix_problem} (entry {key[:12]}); nothing was imported"
        )
    if not os.path.lexists(dest):
        return "new"
    if os.path.islink(dest):
        return "replace"  # the link moves aside; its target is never touched
    if entry_dir_problem(dest) is not None:
        raise ArchiveError(
            f"refusing archive {archive}: entry {key[:12]}: {entry_dir_problem(dest)}; nothing was imported"
        )
    existing = entry_at(dest, root)
    # derive: a copy whose summary is not its shards' is replaced by the archive's, checked the same way
    if existing is not None and existing.is_complete() and not existing.problems(derive=True):
        return "already present"
    foreign = foreign_items(dest)
    if foreign:
        raise ArchiveError(
            f"refusing archive {archive}: cache entry {key[:12]} already exists with files the cache did not "
            f"write ({', '.join(foreign)}); nothing was imported: move those away first"
        )
    return "replace"


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
            RbplabWarning,
            stacklevel=3,
        )
        entry.derive_summary()
        if entry.summary_problems(derive=True):  # not stored after all (a full disk): never install it
            raise ArchiveError(
                f"refusing archive {archive}: entry {key[:12]}: {mismatch[0]}, and the summary derived "
                "again could not be stored"
            )
