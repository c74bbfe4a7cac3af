"""Corpora from local files: a .txt file (one document), a .jsonl / .jsonl.gz file ({"id", "text"}
per line), or a directory of such files (searched recursively, in sorted path order).

Ids are the file name (.txt) or the line's id; inside a directory each is prefixed with the file's
relative path, so ids stay unique and stable across machines.
"""

from __future__ import annotations

import gzip
import io
import itertools
from collections.abc import Iterable, Iterator
from pathlib import Path

from rbplab.catalog.corpora.corpus import MAX_DOCUMENT_CHARS, Corpus, CorpusError, build_corpus
from rbplab.core.documents import parse_json, read_bytes
from rbplab.core.errors import BadFileError
from rbplab.store.files import UnsafeFileError, open_regular_file

# A UTF-8 character takes at most four bytes (a JSON escape six, rare): a .txt file or a .jsonl line
# longer than this cannot be a document `build_corpus` takes, and is refused before it is read.
MAX_DOCUMENT_BYTES = 4 * MAX_DOCUMENT_CHARS


def _read_text(path: Path) -> str:
    try:
        data = read_bytes(path, "corpus document", MAX_DOCUMENT_BYTES)
    except BadFileError as err:
        raise CorpusError(f"{err}; split it into smaller documents") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorpusError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start})") from err


def jsonl_rows(path: Path) -> Iterator[tuple[str, str]]:
    """(id, text) of each non-blank line of a .jsonl or .jsonl.gz file, checked line by line."""
    try:
        raw = open_regular_file(path)  # a FIFO or a device is refused, never waited on
    except UnsafeFileError as err:
        raise CorpusError(f"corpus file {err.strerror}") from None
    binary = gzip.GzipFile(fileobj=raw, mode="rb") if path.name.endswith(".gz") else raw
    try:
        with raw, binary, io.TextIOWrapper(binary, encoding="utf-8") as handle:
            # Lines are read with a bound, so a multi-GB line (or a gzip bomb) is refused unread.
            for lineno, line in enumerate(iter(lambda: handle.readline(MAX_DOCUMENT_BYTES + 1), ""), start=1):
                if len(line) > MAX_DOCUMENT_BYTES:
                    raise CorpusError(
                        f"{path}:{lineno}: the line holds more than {MAX_DOCUMENT_BYTES:,} characters; "
                        "split the document into smaller ones"
                    )
                if not line.strip():
                    continue
                try:
                    row = parse_json(line, f"{path}:{lineno}")
                except BadFileError as err:
                    raise CorpusError(str(err)) from None
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
