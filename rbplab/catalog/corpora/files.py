"""Corpora from local files: a .txt file (one document), a .jsonl / .jsonl.gz file ({"id", "text"}
per line), or a directory of such files (searched recursively, in sorted path order).

Ids are the file name (.txt) or the line's id; inside a directory each is prefixed with the file's
relative path, so ids stay unique and stable across machines.
"""

from __future__ import annotations

import gzip
import itertools
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from rbplab.catalog.corpora.corpus import Corpus, CorpusError, build_corpus


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise CorpusError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start})") from err


def jsonl_rows(path: Path) -> Iterator[tuple[str, str]]:
    """(id, text) of each non-blank line of a .jsonl or .jsonl.gz file, checked line by line."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for lineno, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise CorpusError(f"{path}:{lineno}: not valid JSON ({err.msg})") from err
                if not isinstance(row, dict) or "id" not in row or "text" not in row:
                    keys = sorted(row) if isinstance(row, dict) else type(row).__name__
                    raise CorpusError(
                        f"{path}:{lineno}: each line must be a JSON object with 'id' and 'text' fields, "
                        f"got {keys}"
                    )
                if not isinstance(row["text"], str):
                    raise CorpusError(f"{path}:{lineno}: 'text' must be a string")
                yield str(row["id"]), row["text"]
    except (gzip.BadGzipFile, UnicodeDecodeError, EOFError) as err:
        raise CorpusError(f"{path}: cannot read ({err})") from err


_SUFFIXES = (".txt", ".jsonl", ".jsonl.gz")


def _file_rows(path: Path, prefix: str | None) -> Iterator[tuple[str, str]]:
    """Documents of one file; `prefix` (relative path inside a directory) keeps ids unique."""
    if path.name.endswith(".txt"):
        yield (prefix or path.name), _read_text(path)
    else:
        for doc_id, text in jsonl_rows(path):
            yield (f"{prefix}:{doc_id}" if prefix else doc_id), text


def load_local(path: Path, max_documents: int | None) -> Corpus:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(_SUFFIXES))
        if not files:
            raise CorpusError(f"directory {path} holds no {', '.join(_SUFFIXES)} files")
        rows: Iterable[tuple[str, str]] = itertools.chain.from_iterable(
            _file_rows(f, f.relative_to(path).as_posix()) for f in files
        )
        name = path.name
    elif path.name.endswith(_SUFFIXES):
        rows = _file_rows(path, None)
        name = next(path.name[: -len(s)] for s in _SUFFIXES if path.name.endswith(s))
    else:
        raise CorpusError(
            f"{path}: unsupported corpus file; use {', '.join(_SUFFIXES)} or a directory of them"
        )
    return build_corpus(name, rows, {"origin": "local", "path": str(path.resolve())}, max_documents)
