"""Where the cache lives and how files get into it safely.

The location is the `path` argument, else $RBPLAB_CACHE, else ~/.cache/rbplab. Before
writing, `check_writable` proves the directory can be written and has room; any OSError
while writing is turned into a one-line CacheLocationError that names the path and how to
choose another location. `atomic_write` writes a file to a temporary sibling, fsyncs and
renames it, so a killed run never leaves a partial file under its final name.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import uuid
from pathlib import Path

MIN_FREE_BYTES = 64 * 2**20  # refuse to start writing with less free space than this
_HOW_TO_MOVE = "choose another location with --cache-dir or the RBPLAB_CACHE environment variable"


class CacheLocationError(OSError):
    """The cache directory cannot be written: no permission, read-only, or no space left."""

    def __str__(self) -> str:  # the message already names the problem; drop the "[Errno n]" prefix
        return self.strerror or super().__str__()


def cache_root(path: str | Path | None = None) -> Path:
    """The cache directory: `path` argument > $RBPLAB_CACHE > ~/.cache/rbplab."""
    chosen = path if path is not None else os.environ.get("RBPLAB_CACHE") or Path.home() / ".cache" / "rbplab"
    return Path(chosen).expanduser().absolute()


def check_writable(root: str | Path | None = None) -> Path:
    """Create the cache directory if needed and prove it is writable with enough free space."""
    root = cache_root(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".probe-{os.getpid()}-{uuid.uuid4().hex}"
        with open(probe, "wb") as handle:
            handle.write(b"ok")
            handle.flush()
            os.fsync(handle.fileno())
        probe.unlink()
    except OSError as err:
        raise location_error(err, root) from err
    free = shutil.disk_usage(root).free
    if free < MIN_FREE_BYTES:
        raise CacheLocationError(
            errno.ENOSPC,
            f"only {free / 2**20:.1f} MiB free at cache location {root} (need at least "
            f"{MIN_FREE_BYTES // 2**20} MiB); free some space or {_HOW_TO_MOVE}",
        )
    return root


def location_error(err: OSError, path: Path) -> OSError:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return CacheLocationError(
            err.errno, f"no space left on device writing {path}; free space or {_HOW_TO_MOVE}"
        )
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS) or isinstance(err, PermissionError):
        return CacheLocationError(
            err.errno or errno.EACCES,
            f"cannot write to cache location {path} (permission denied); {_HOW_TO_MOVE}",
        )
    if isinstance(err, (FileExistsError, NotADirectoryError)):
        return CacheLocationError(err.errno, f"cache location {path} is not a directory; {_HOW_TO_MOVE}")
    return err


def atomic_write(path: Path, data: bytes) -> None:
    """Write to a temporary sibling, fsync, rename over `path`; never leaves a partial `path`."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise location_error(err, path) from err
    # Make the rename itself durable before anything that depends on it is written.
    with contextlib.suppress(OSError):
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
