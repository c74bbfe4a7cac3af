"""Temporary folders of imports: ``<root>/.import-<pid>-<hex>``, each locked while its import runs.

An import unpacks and verifies an archive in such a folder inside the cache root, so that its
entries become visible by one rename each (`rbplab.store.archive.install`). The folder of an
import that was killed is litter: removed by the next import that succeeds or by
`rbplab cache verify --fix-litter` (`remove_stale_imports`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from rbplab.store.files import cache_root, ensure_real_dir, location_error

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
