"""Helpers for tests of an untrusted cache: snapshots of a directory tree and a read-only guard."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Iterator
from pathlib import Path


def snapshot(root: Path, exclude: Path | None = None) -> dict[str, bytes]:
    """{relative path: bytes} of every file under `root` (outside `exclude`)."""
    out = {}
    for path in sorted(Path(root).rglob("*")):
        if exclude is not None and (path == exclude or exclude in path.parents):
            continue
        if path.is_file():
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


_READ_ONLY: list[str] = []
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _guard(event: str, args: tuple) -> None:
    if not _READ_ONLY:
        return
    paths: list = []
    if event == "open":
        path, mode, flags = args
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        paths = [path] if writing else []
    elif event in ("os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.truncate", "os.utime"):
        paths = [args[0]]
    elif event in ("os.rename", "os.replace", "os.link", "os.symlink"):
        paths = [args[0], args[1]]
    elif event == "shutil.rmtree":
        paths = [args[0]]
    for path in paths:
        if isinstance(path, (str, bytes, os.PathLike)):
            text = os.path.abspath(os.fsdecode(path))
            if any(text == root or text.startswith(root + os.sep) for root in _READ_ONLY):
                raise OSError(errno.EROFS, "Read-only file system (test guard)", text)


sys.addaudithook(_guard)


@contextlib.contextmanager
def read_only(root: Path) -> Iterator[None]:
    """Make every write below `root` fail with EROFS, as on a read-only mount (root ignores chmod)."""
    _READ_ONLY.append(os.path.abspath(root))
    try:
        yield
    finally:
        _READ_ONLY.pop()
