"""A report folder holds one report: each report lists the files it wrote in the folder's
`report-files.json`, and the next report into the same folder first removes exactly those files
(and the folders they leave empty), so a 2-corpus report never sits beside a 4-corpus report's
tables. A file the report did not write (a user's notes, a table saved by hand) is never listed,
so it survives.

A file counts as written when it appeared, or changed (size or modification time), while the
report ran; the list is written even when the report stops with an error or Ctrl-C, so the
files of a half-finished report are removed by the next one too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MANIFEST = "report-files.json"

Snapshot = dict[str, tuple[int, int]]  # relative path -> (size, mtime in ns)


def _snapshot(folder: Path) -> Snapshot:
    files: Snapshot = {}
    for root, dirs, names in os.walk(folder):
        # A linked folder is not the report's: its files are neither listed nor removed.
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
        for name in names:
            path = Path(root, name)
            if path.is_symlink() or not path.is_file():
                continue
            stat = path.stat()
            files[path.relative_to(folder).as_posix()] = (stat.st_size, stat.st_mtime_ns)
    return files


def previous_files(folder: Path) -> list[str]:
    """The files the last report in `folder` wrote (relative paths), as its manifest lists them;
    none when there is no readable manifest."""
    try:
        listed = json.loads((folder / MANIFEST).read_text(encoding="utf-8")).get("files", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [p for p in listed if isinstance(p, str)]


def _inside(folder: Path, relative: str) -> Path | None:
    """`folder / relative` when it names a path inside `folder` (the manifest is only data: a
    listed "../x" or absolute path is never followed)."""
    path = folder / relative
    if Path(relative).is_absolute() or ".." in Path(relative).parts:
        return None
    return path


def remove_previous(folder: Path) -> list[str]:
    """Remove the files the last report in `folder` listed, then the folders they leave empty
    (never `folder` itself); returns the removed paths, relative."""
    removed = []
    parents: set[Path] = set()
    for relative in previous_files(folder):
        path = _inside(folder, relative)
        if path is None or path.is_symlink() or not path.is_file():
            continue
        path.unlink()
        removed.append(relative)
        parents.update(p for p in path.parents if folder in p.parents)
    for parent in sorted(parents, key=lambda p: len(p.parts), reverse=True):  # deepest first
        try:
            parent.rmdir()  # only when empty: a user's file keeps its folder
        except OSError:
            pass
    (folder / MANIFEST).unlink(missing_ok=True)
    return removed


def _write_manifest(folder: Path, before: Snapshot) -> None:
    after = _snapshot(folder)
    written = sorted(p for p, stamp in after.items() if before.get(p) != stamp and p != MANIFEST)
    text = json.dumps({"written_by": "rbplab report", "files": written}, indent=1)
    tmp = folder / f".{MANIFEST}.tmp-{os.getpid()}"
    tmp.write_text(text + "\n", encoding="utf-8")
    os.replace(tmp, folder / MANIFEST)


@contextmanager
def one_report(folder: Path) -> Iterator[None]:
    """Within it a report is written into `folder` (created if missing): the previous report's
    files are removed first, and every file written inside it is listed in the folder's
    manifest on the way out, also on an error."""
    folder.mkdir(parents=True, exist_ok=True)
    remove_previous(folder)
    before = _snapshot(folder)
    try:
        yield
    finally:
        _write_manifest(folder, before)
