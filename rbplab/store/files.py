"""Where the cache lives and how files get into and out of it safely.

The location is the `path` argument, else $RBPLAB_CACHE, else ~/.cache/rbplab. Before
writing, `check_writable` proves the directory can be written and has room; any OSError
while writing is turned into a one-line CacheLocationError that names the path and how to
choose another location. `atomic_write` writes a file to a temporary sibling, fsyncs and
renames it, so a killed run never leaves a partial file under its final name.

Everything below the cache root is untrusted: anyone who can write to a shared cache can put a
symbolic link, a FIFO or a huge sparse file where a shard should be. An entry lives at
``<root>/<key[:2]>/<key>/``; the root itself may be a symbolic link (a cache moved to another
disk), but neither the two-character prefix folder nor the entry folder may be, and every file
inside an entry must be a regular file. `read_entry_file` reads one such file without following
a symbolic link anywhere below the root, without opening anything but a regular file (so a FIFO
cannot block and a device cannot stream forever) and refuses a file larger than the caller's
bound; `ensure_entry_dir` creates an entry folder the same way before anything is written into it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from filelock import FileLock, Timeout

from rbplab.core.documents import file_kind, read_up_to
from rbplab.core.errors import RbplabError, RbplabWarning

MIN_FREE_BYTES = 64 * 2**20  # refuse to start writing with less free space than this
_HOW_TO_MOVE = "choose another location with --cache-dir or the RBPLAB_CACHE environment variable"


class CacheLocationError(RbplabError, OSError):
    """The cache directory cannot be written: no permission, read-only, or no space left."""

    def __str__(self) -> str:  # the message already names the problem; drop the "[Errno n]" prefix
        return self.strerror or super().__str__()


class UnsafeFileError(RbplabError, OSError):
    """A file or folder the cache will not read or write through: a symbolic link below the cache
    root, something other than a regular file (FIFO, device, socket, directory) where a file must
    be, or a file larger than it can be."""

    def __str__(self) -> str:  # one line naming the file and what is wrong with it
        return self.strerror or super().__str__()


_NO_FOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def _link_target(path: Path) -> str:
    with contextlib.suppress(OSError):
        return f" to {os.readlink(path)}"
    return ""


def _examine(path: Path, label: str) -> tuple[int | None, str | None]:
    """(st_mode, None) without following a link; (None, None) when `path` does not exist;
    (None, why) when it cannot be examined."""
    try:
        return os.lstat(path).st_mode, None
    except FileNotFoundError:
        return None, None
    except OSError as err:
        return None, f"{label} cannot be examined ({err.strerror or err})"


def folder_problem(path: Path, label: str) -> str | None:
    """Why `path` is not a real folder the cache may use (a symbolic link, a file, ...), or None
    (also when it does not exist). Never follows a link."""
    mode, problem = _examine(path, label)
    if mode is None or stat.S_ISDIR(mode):
        return problem
    if stat.S_ISLNK(mode):
        return f"{label} is a symbolic link{_link_target(path)}; the cache never reads or writes through one"
    return f"{label} is {file_kind(mode)}, not a folder"


def entry_dir_problem(entry_dir: Path) -> str | None:
    """Why the entry folder ``<root>/<key[:2]>/<key>`` (or its prefix folder) cannot be used: one
    of them is a symbolic link or not a folder. None when both are real folders or absent."""
    prefix = folder_problem(entry_dir.parent, f"the prefix folder {entry_dir.parent.name!r}")
    return prefix or folder_problem(entry_dir, "the entry folder")


def ensure_real_dir(path: Path, label: str) -> None:
    """Create the folder `path` (its parents as needed) unless it exists; refuse, with
    UnsafeFileError, when it is a symbolic link or not a folder, so nothing is written through it."""
    problem = folder_problem(path, label)
    if problem is None and not os.path.lexists(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # another process made it: checked below
            os.mkdir(path)
        problem = folder_problem(path, label)
    if problem is not None:
        raise UnsafeFileError(errno.ENOTDIR, problem, str(path))


def ensure_entry_dir(entry_dir: Path) -> None:
    """Create ``<root>/<key[:2]>/<key>`` without ever following a symbolic link below the root."""
    ensure_real_dir(entry_dir.parent, f"the prefix folder {entry_dir.parent.name!r}")
    ensure_real_dir(entry_dir, "the entry folder")


def _open_entry_dir(entry_dir: Path) -> int:
    """A descriptor of the entry folder, reached without following a link at the prefix folder
    or the entry folder (the levels above, up to the root, may be links)."""
    try:
        prefix = os.open(entry_dir.parent, os.O_RDONLY | os.O_DIRECTORY | _NO_FOLLOW)
    except OSError as err:
        if isinstance(err, FileNotFoundError):
            raise
        problem = folder_problem(entry_dir.parent, f"the prefix folder {entry_dir.parent.name!r}")
        raise UnsafeFileError(err.errno, problem or str(err), str(entry_dir.parent)) from None
    try:
        return os.open(entry_dir.name, os.O_RDONLY | os.O_DIRECTORY | _NO_FOLLOW, dir_fd=prefix)
    except OSError as err:
        if isinstance(err, FileNotFoundError):
            raise
        problem = folder_problem(entry_dir, "the entry folder")
        raise UnsafeFileError(err.errno, problem or str(err), str(entry_dir)) from None
    finally:
        os.close(prefix)


def entry_file_problem(path: Path) -> str | None:
    """Why the item `path` inside an entry is not a regular file (without following a link), or
    None (also when it does not exist)."""
    mode, problem = _examine(path, path.name)
    if mode is None or stat.S_ISREG(mode):
        return problem
    what = file_kind(mode) + (_link_target(path) if stat.S_ISLNK(mode) else "")
    return f"{path.name} is {what}, not a regular file"


def read_entry_file(path: Path, entry_dir: Path, max_bytes: int) -> bytes:
    """The bytes of `path`, a file directly inside the entry folder `entry_dir`, read safely.

    Refused with UnsafeFileError (an OSError whose message names the file and the reason) when
    `path` is not directly inside `entry_dir`, when the entry folder or its prefix folder is a
    symbolic link, when `path` is a symbolic link or anything but a regular file (it is never
    opened then, so a FIFO cannot block and a device cannot stream), or when it holds more than
    `max_bytes` bytes (checked before reading, and while reading). A missing file raises
    FileNotFoundError; other OSErrors (permission, I/O) pass through.
    """
    path, entry_dir = Path(path), Path(entry_dir)
    if path.parent != entry_dir or path.name in ("", ".", ".."):
        raise UnsafeFileError(errno.EINVAL, f"{path} is not a file directly inside {entry_dir}", str(path))
    folder = _open_entry_dir(entry_dir)
    try:
        try:
            before = os.stat(path.name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, f"{path.name} does not exist", str(path)) from None
        if not stat.S_ISREG(before.st_mode):
            problem = entry_file_problem(path) or f"{path.name} is not a regular file"
            raise UnsafeFileError(errno.EINVAL, problem, str(path))
        if before.st_size > max_bytes:
            problem = f"{path.name} holds {before.st_size} bytes, more than the {max_bytes} it can"
            raise UnsafeFileError(errno.EFBIG, problem, str(path))
        fd = os.open(path.name, os.O_RDONLY | os.O_NONBLOCK | _NO_FOLLOW, dir_fd=folder)
    finally:
        os.close(folder)
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino) or not stat.S_ISREG(now.st_mode):
            raise UnsafeFileError(errno.EAGAIN, f"{path.name} was replaced while being opened", str(path))
        # One byte past the bound, not past the size seen: a file that grows while it is read is read
        # as it now is, and one that grows past the bound is caught.
        data = read_up_to(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        problem = f"{path.name} grew beyond the {max_bytes} bytes it can hold while being read"
        raise UnsafeFileError(errno.EFBIG, problem, str(path))
    return data


def open_regular_file(path: Path) -> BinaryIO:
    """Open a file a user named (links followed) for reading, refusing anything but a regular
    file with UnsafeFileError before reading a byte: opening a FIFO this way does not wait for a
    writer, and its check fails at once."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnsafeFileError(errno.EINVAL, f"{path} is {file_kind(mode)}, not a regular file", str(path))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


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


@contextlib.contextmanager
def held_lock(path: Path, wait: bool) -> Iterator[bool]:
    """Hold the file lock at `path` (flock: released when its process dies); yields False when
    another process holds it and `wait` is false. A wait says so first, in one `RbplabWarning`
    naming the lock file, so a command blocked on another process does not look hung."""
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if not wait:
            yield False
            return
        warnings.warn(
            f"waiting for a lock another process holds ({path}); this goes on when it is released",
            RbplabWarning,
            stacklevel=3,
        )
        lock.acquire(timeout=-1)
    try:
        yield True
    finally:
        lock.release()


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
        with open(tmp, "xb") as handle:  # "x": never through a link or file planted at that name
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
