"""Evaluation corpora: documents with stable ids, from bundled files, local files or the hub.

A corpus is an ordered tuple of documents. Ids are stable across runs and machines
(article ids, task ids, relative file paths), and `Corpus.content_hash()` covers ids
and texts, so a cache entry keyed on it can never be reused for different text.

Corpus specs accepted by `load_corpus`:
- a bundled name: data/corpora/<name>.jsonl.gz ({"id", "text"} per line) + <name>.meta.json;
- ``hub:wikipedia``, ``hub:humaneval``, ``hub:hotpotqa``, ``hub:auslegal`` (the paper's four
  datasets, via the `datasets` library; needs the Hugging Face hub);
- a local .txt file (one document), .jsonl / .jsonl.gz file ({"id", "text"} per line), or a
  directory of such files (searched recursively, in sorted path order).
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from rbplab.store.paths import data_dir


class CorpusError(ValueError):
    """A corpus that cannot be loaded: unknown name, bad file format, no documents."""


@dataclass(frozen=True)
class Document:
    id: str
    text: str


@dataclass(frozen=True)
class Corpus:
    name: str
    documents: tuple[Document, ...]
    source: dict  # provenance: origin, path or dataset, version, licence
    _hash: list = field(default_factory=list, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.documents)

    def content_hash(self) -> str:
        """sha256 over every (id, text) pair in order; length-prefixed so no two corpora collide."""
        if not self._hash:
            digest = hashlib.sha256()
            for doc in self.documents:
                for part in (doc.id.encode(), doc.text.encode()):
                    digest.update(len(part).to_bytes(8, "little"))
                    digest.update(part)
            self._hash.append(digest.hexdigest())
        return self._hash[0]

    @property
    def n_characters(self) -> int:
        return sum(len(doc.text) for doc in self.documents)


def corpora_dir() -> Path:
    return data_dir() / "corpora"


def _bundled_names() -> list[str]:
    # Without the bundled data (an installed wheel) there are simply no bundled names.
    root = data_dir(required=False)
    folder = root / "corpora" if root is not None else None
    return (
        sorted(p.name[: -len(".jsonl.gz")] for p in folder.glob("*.jsonl.gz"))
        if folder and folder.is_dir()
        else []
    )


# ---------------------------------------------------------------------------------------------
# Hub datasets (users with hub access). Each loader yields (id, text) in the dataset's order.


def _wikipedia(load_dataset: Callable) -> Iterator[tuple[str, str]]:
    # Streaming: the English dump is ~20 GB and only the first max_documents articles are used.
    rows = load_dataset("wikimedia/wikipedia", "20231101.en", split="train", streaming=True)
    for row in rows:
        yield str(row["id"]), f"{row['title']}\n\n{row['text']}"


def _humaneval(load_dataset: Callable) -> Iterator[tuple[str, str]]:
    for row in load_dataset("openai/openai_humaneval", split="test"):
        yield row["task_id"], row["prompt"] + row["canonical_solution"]


def _hotpotqa(load_dataset: Callable) -> Iterator[tuple[str, str]]:
    for row in load_dataset("hotpotqa/hotpot_qa", "distractor", split="validation"):
        context = row["context"]
        paragraphs = [
            f"{title}\n{''.join(sentences).strip()}"
            for title, sentences in zip(context["title"], context["sentences"], strict=True)
        ]
        text = "\n\n".join([row["question"], *paragraphs, f"Answer: {row['answer']}"])
        yield row["id"], text


def _auslegal(load_dataset: Callable) -> Iterator[tuple[str, str]]:
    rows = load_dataset("umarbutler/open-australian-legal-corpus", split="corpus", streaming=True)
    for row in rows:
        yield row["version_id"], row["text"]


@dataclass(frozen=True)
class HubCorpus:
    loader: Callable[[Callable], Iterator[tuple[str, str]]]
    dataset: str
    description: str
    licence: str
    default_max_documents: int | None  # large streams are capped unless the caller asks for more


HUB_CORPORA: dict[str, HubCorpus] = {
    # ~1000 articles is ~0.7M tokens, above the paper's 5e5 tokens per point.
    "wikipedia": HubCorpus(
        _wikipedia, "wikimedia/wikipedia:20231101.en", "English Wikipedia articles", "CC BY-SA 4.0", 1000
    ),
    "humaneval": HubCorpus(
        _humaneval, "openai/openai_humaneval", "HumanEval: prompt + canonical solution", "MIT", None
    ),
    "hotpotqa": HubCorpus(
        _hotpotqa,
        "hotpotqa/hotpot_qa:distractor/validation",
        "HotpotQA: question, context paragraphs, answer",
        "CC BY-SA 4.0",
        None,
    ),
    "auslegal": HubCorpus(
        _auslegal,
        "umarbutler/open-australian-legal-corpus",
        "Open Australian Legal Corpus documents",
        "Open Australian Legal Corpus Licence",
        1000,
    ),
}


def _load_hub(name: str, max_documents: int | None) -> Corpus:
    if name not in HUB_CORPORA:
        raise CorpusError(
            f"unknown hub corpus 'hub:{name}'; known: {', '.join('hub:' + n for n in HUB_CORPORA)}"
        )
    entry = HUB_CORPORA[name]
    try:
        from datasets import load_dataset
    except ImportError as err:  # pragma: no cover - datasets is a declared dependency
        raise CorpusError("hub corpora need the 'datasets' package: pip install datasets") from err
    limit = max_documents if max_documents is not None else entry.default_max_documents
    import datasets

    source = {
        "origin": "hub",
        "dataset": entry.dataset,
        "licence": entry.licence,
        "max_documents": limit,
        "datasets_version": datasets.__version__,
    }
    return _build(f"hub:{name}", entry.loader(load_dataset), source, limit)


# ---------------------------------------------------------------------------------------------
# Local files


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise CorpusError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start})") from err


def _jsonl_rows(path: Path) -> Iterator[tuple[str, str]]:
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
        for doc_id, text in _jsonl_rows(path):
            yield (f"{prefix}:{doc_id}" if prefix else doc_id), text


def _load_local(path: Path, max_documents: int | None) -> Corpus:
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
    return _build(name, rows, {"origin": "local", "path": str(path.resolve())}, max_documents)


def _load_bundled(name: str, max_documents: int | None) -> Corpus:
    folder = corpora_dir()
    meta_file = folder / f"{name}.meta.json"
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    source = {"origin": "bundled", "file": f"corpora/{name}.jsonl.gz", **meta}
    return _build(name, _jsonl_rows(folder / f"{name}.jsonl.gz"), source, max_documents)


def _build(name: str, rows: Iterable[tuple[str, str]], source: dict, max_documents: int | None) -> Corpus:
    """Collect documents, skipping empty ones with a warning; refuse duplicates and empty corpora."""
    if max_documents is not None and max_documents < 1:
        raise CorpusError(f"max_documents must be a positive integer, got {max_documents}")
    documents: list[Document] = []
    seen: set[str] = set()
    empty: list[str] = []
    for doc_id, text in rows:
        if not text.strip():
            empty.append(doc_id)
            continue
        if doc_id in seen:
            raise CorpusError(f"corpus {name!r}: duplicate document id {doc_id!r}; ids must be unique")
        seen.add(doc_id)
        documents.append(Document(doc_id, text))
        if max_documents is not None and len(documents) >= max_documents:
            break
    if not documents:
        raise CorpusError(f"corpus {name!r} has no non-empty documents")
    if empty:
        shown = ", ".join(repr(i) for i in empty[:5]) + (" ..." if len(empty) > 5 else "")
        warnings.warn(f"corpus {name!r}: skipped {len(empty)} empty document(s): {shown}", stacklevel=4)
    return Corpus(name=name, documents=tuple(documents), source=source)


def load_corpus(spec: str | Path, *, max_documents: int | None = None) -> Corpus:
    """Load a corpus by bundled name, ``hub:<name>``, or local path (see module docstring).

    `max_documents` keeps the first N non-empty documents (hub Wikipedia and the legal
    corpus default to 1000, the other sources to all).
    """
    text = str(spec)
    if text.startswith("hub:"):
        return _load_hub(text[len("hub:") :], max_documents)
    path = Path(text).expanduser()
    # A bare bundled name wins over a same-named entry of the working directory; anything
    # path-like (a separator or a file suffix) is a path.
    if isinstance(spec, str) and "/" not in text and text in _bundled_names():
        return _load_bundled(text, max_documents)
    if path.exists():
        return _load_local(path, max_documents)
    known = ", ".join(_bundled_names() + ["hub:" + n for n in HUB_CORPORA])
    raise CorpusError(
        f"unknown corpus {text!r}: not a bundled corpus, hub:<name>, or an existing file or directory; "
        f"known corpora: {known}"
    )


def _count_lines(path: Path) -> int:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return sum(1 for line in handle if line.strip())


def list_corpora() -> pd.DataFrame:
    """Bundled and hub corpora: name, origin, documents (when known without loading), licence, description."""
    rows = []
    for name in _bundled_names():
        meta_file = corpora_dir() / f"{name}.meta.json"
        meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
        rows.append(
            {
                "name": name,
                "origin": "bundled",
                "documents": meta.get("n_documents") or _count_lines(corpora_dir() / f"{name}.jsonl.gz"),
                "licence": meta.get("licence", meta.get("license")),
                "description": meta.get("description", ""),
            }
        )
    for name, entry in HUB_CORPORA.items():
        cap = f", first {entry.default_max_documents} by default" if entry.default_max_documents else ""
        rows.append(
            {
                "name": f"hub:{name}",
                "origin": "hub",
                "documents": None,
                "licence": entry.licence,
                "description": f"{entry.description} ({entry.dataset}{cap})",
            }
        )
    table = pd.DataFrame(rows, columns=["name", "origin", "documents", "licence", "description"])
    table["documents"] = table["documents"].astype("Int64")
    return table
