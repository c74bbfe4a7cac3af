"""Installing the verified entries of an archive into the cache: all of them or none.

Only when every entry passes, every destination can take it (not a link, no foreign files, no
other writer) and every lock is held does any entry become visible, one rename each; a failure
while renaming moves the renamed ones back. No entry lock file is created before every destination
was found free. (Only a destination that changes, or a writer that starts, in the moment between
those checks and taking the locks can leave an empty lock file.) A process killed during the
renames, a few system calls, can leave some entries of the archive imported: each is complete and
verified, none partial.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path

from filelock import FileLock, Timeout

from rbplab.store.archive.members import ArchiveError
from rbplab.store.cache.entry import entry_at, foreign_items, remove_entry_dir
from rbplab.store.cache.reading import CacheError
from rbplab.store.files import ensure_real_dir, entry_dir_problem, folder_problem

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
