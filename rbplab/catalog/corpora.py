"""Corpora: what a corpus is (documents with stable ids, a content hash for the cache key), where
one comes from (bundled, local files, the paper's hub datasets) and how a user names one.

The corpus types and their keys: a `Corpus` of `Document`s with stable ids, a hub `LazyCorpus`
whose documents are read on first use, the part of a cache key each gives (`corpus_key`), and
`build_corpus`, through which every source's (id, text) rows become a corpus.

`Corpus.content_hash()` covers ids and texts, so a cache entry keyed on it can never be reused for
different text.

Corpora from local files: a .txt file (one document), a .jsonl / .jsonl.gz file ({"id", "text"}
per line), or a directory of such files (searched recursively, in sorted path order).

Ids are the file name (.txt) or the line's id; inside a directory each is prefixed with the file's
relative path, so ids stay unique and stable across machines.

Bundled corpora: data/corpora/<name>.jsonl.gz ({"id", "text"} per line) with its
<name>.meta.json (provenance, licence, description). An installed wheel without the bundled data
simply has none.

Hub corpora: the paper's four datasets (``hub:wikipedia``, ``hub:humaneval``, ``hub:hotpotqa``,
``hub:auslegal``) read through the `datasets` library, always streamed; they need the Hugging Face
hub or its local cache.

Each is read at a pinned revision (``hub:<name>@<revision>`` overrides it), resolved to a commit
that is recorded in the corpus source and the cache key. A document cap keeps the *first* N rows in
the dataset's own (dump) order: a fixed, reproducible slice, not a random sample.

A corpus as the user names it: open or load it, check the name before anything slow, spell it
as rbplab does, and list the corpora there are.

A corpus is named as
- a bundled name: data/corpora/<name>.jsonl.gz;
- ``hub:wikipedia``, ``hub:humaneval``, ``hub:hotpotqa``, ``hub:auslegal``, optionally
  ``@<revision>``;
- a local .txt, .jsonl or .jsonl.gz file, or a directory of them.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import itertools
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rbplab.catalog.names import name_problem, path_exists, shown
from rbplab.core.documents import parse_json, read_bytes, read_json
from rbplab.core.errors import BadFileError, RbplabError, RbplabWarning, did_you_mean
from rbplab.store import hub
from rbplab.store.files import UnsafeFileError, open_regular_file
from rbplab.store.hub import COMMIT_RE
from rbplab.store.paths import data_dir


class CorpusError(RbplabError, ValueError):
    """A corpus that cannot be loaded: unknown name, bad file format, no documents."""


# What a document may hold, checked before it reaches a tokenizer (a Rust tokenizer aborts the whole
# process on a document of a few hundred million characters and panics on one "word" of tens of
# millions): at most MAX_DOCUMENT_CHARS characters (a book is a few million), and no run of more
# than MAX_WORD_CHARS characters without whitespace (a long URL or a base64 line is a few thousand).
MAX_DOCUMENT_CHARS = 1 << 26
MAX_WORD_CHARS = 1 << 20
# A run is matched only from its first character (the lookbehind), so the search is linear.
_LONG_WORD = re.compile(rf"(?<!\S)\S{{{MAX_WORD_CHARS + 1}}}")


def document_problem(text: str) -> str | None:
    """Why a document's text cannot be tokenized safely (too long, or a run too long without
    whitespace), or None."""
    if len(text) > MAX_DOCUMENT_CHARS:
        return (
            f"holds {len(text):,} characters, more than the {MAX_DOCUMENT_CHARS:,} a document may; "
            "split it into smaller documents"
        )
    word = _LONG_WORD.search(text)
    if word is not None:
        return (
            f"has more than {MAX_WORD_CHARS:,} characters without whitespace (from character "
            f"{word.start():,}); no tokenizer takes such a word whole, break it with whitespace"
        )
    return None


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

    def key(self) -> dict:
        """What a cache key records of this corpus (see `corpus_key`)."""
        return corpus_key(self)


_KEY_FIELDS = ("dataset", "config", "split", "revision", "max_documents", "text_scheme")


def corpus_key(corpus: Corpus | LazyCorpus) -> dict:
    """The corpus part of a cache key. A hub corpus read at a commit is known by its identity
    (dataset, config, split, commit, document cap, text scheme), so the key needs no documents and
    a cached result is found offline; every other corpus by its content hash and size."""
    source = corpus.source
    # read at a full commit, a hub corpus is keyed by its identity, not its content
    if source.get("origin") == "hub" and COMMIT_RE.match(str(source.get("revision", ""))):
        return {"name": corpus.name, **{k: source[k] for k in _KEY_FIELDS}}
    return {"name": corpus.name, "content_hash": corpus.content_hash(), "n_documents": len(corpus)}


@dataclass(frozen=True)
class LazyCorpus:
    """A hub corpus at a resolved commit whose documents are read on first use, once.

    Stands in for a `Corpus` (name, source, documents, len, content_hash); `key()` needs no
    documents, so looking up cached results does not touch the dataset.
    """

    name: str
    source: dict
    loader: Callable[[], Corpus] = field(repr=False, compare=False)
    _loaded: list = field(default_factory=list, init=False, repr=False, compare=False)

    def load(self) -> Corpus:
        if not self._loaded:
            self._loaded.append(self.loader())
        return self._loaded[0]

    @property
    def loaded(self) -> bool:
        return bool(self._loaded)

    @property
    def documents(self) -> tuple[Document, ...]:
        return self.load().documents

    def __len__(self) -> int:
        return len(self.load())

    def content_hash(self) -> str:
        return self.load().content_hash()

    @property
    def n_characters(self) -> int:
        return self.load().n_characters

    def key(self) -> dict:
        return corpus_key(self)


def build_corpus(
    name: str, rows: Iterable[tuple[str, str]], source: dict, max_documents: int | None
) -> Corpus:
    """Collect documents, skipping empty ones with a warning; refuse duplicates and empty corpora.

    The warning points past this function, the source's loader and `load_corpus` (or
    `LazyCorpus.load`) at their caller."""
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
        problem = document_problem(text)
        if problem is not None:
            raise CorpusError(f"corpus {name!r}: document {doc_id!r} {problem}")
        seen.add(doc_id)
        documents.append(Document(doc_id, text))
        if max_documents is not None and len(documents) >= max_documents:
            break
    if not documents:
        raise CorpusError(f"corpus {name!r} has no non-empty documents")
    if empty:
        shown = ", ".join(repr(i) for i in empty[:5]) + (" ..." if len(empty) > 5 else "")
        warnings.warn(
            f"corpus {name!r}: skipped {len(empty)} empty document(s): {shown}", RbplabWarning, stacklevel=4
        )
    return Corpus(name=name, documents=tuple(documents), source=source)


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


def corpora_dir() -> Path:
    return data_dir() / "corpora"


def bundled_names() -> list[str]:
    # Without the bundled data (an installed wheel) there are simply no bundled names.
    root = data_dir(required=False)
    folder = root / "corpora" if root is not None else None
    return (
        sorted(p.name[: -len(".jsonl.gz")] for p in folder.glob("*.jsonl.gz"))
        if folder and folder.is_dir()
        else []
    )


def _meta(name: str) -> dict:
    meta_file = corpora_dir() / f"{name}.meta.json"
    return read_json(meta_file, "corpus metadata", 1 << 20, shape=dict) if meta_file.is_file() else {}


def load_bundled(name: str, max_documents: int | None) -> Corpus:
    source = {"origin": "bundled", "file": f"corpora/{name}.jsonl.gz", **_meta(name)}
    return build_corpus(name, jsonl_rows(corpora_dir() / f"{name}.jsonl.gz"), source, max_documents)


def _count_lines(path: Path) -> int:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return sum(1 for line in handle if line.strip())


def bundled_listing() -> list[dict]:
    """One row per bundled corpus for `list_corpora`: name, origin, documents, licence, description."""
    rows = []
    for name in bundled_names():
        meta = _meta(name)
        rows.append(
            {
                "name": name,
                "origin": "bundled",
                "documents": meta.get("n_documents") or _count_lines(corpora_dir() / f"{name}.jsonl.gz"),
                "licence": meta.get("licence", meta.get("license")),
                "description": meta.get("description", ""),
            }
        )
    return rows


# The revision each hub corpus is read at; overridable per load (``hub:wikipedia@<revision>`` or
# load_corpus(..., revision=...)). THESE MUST BE SET TO REAL COMMIT SHAS of the dataset repos
# (`huggingface_hub.HfApi().dataset_info(repo).sha`, or the repo's history on the hub), checked
# together with the `data_files` layout below. They could not be looked up where this was written
# (no hub access), so they still name the branch `main`: each load resolves the branch to the
# commit it points at, records that commit (corpus source and cache key) and warns that the corpus
# is unpinned. With a commit here, a study whose every run is cached needs no network at all.
WIKIPEDIA_REVISION = "main"
HUMANEVAL_REVISION = "main"
HOTPOTQA_REVISION = "main"
AUSLEGAL_REVISION = "main"

# Bump when the text assembled from a hub row changes: with a pinned commit the cache key is the
# dataset's identity (no content hash), so this number is what tells old texts from new.
HUB_TEXT_SCHEME = 1

# Each entry of HUB_CORPORA turns the rows of one split into (id, text), in the dataset's order.


def _wikipedia(row: dict) -> tuple[str, str]:
    return str(row["id"]), f"{row['title']}\n\n{row['text']}"


def _humaneval(row: dict) -> tuple[str, str]:
    return row["task_id"], row["prompt"] + row["canonical_solution"]


def _hotpotqa(row: dict) -> tuple[str, str]:
    """The question, then each context paragraph as its title on one line and its sentences joined
    (stripped) on the next, then ``Answer: <answer>``; blocks separated by blank lines."""
    context = row["context"]
    paragraphs = [
        f"{title}\n{''.join(sentences).strip()}"
        for title, sentences in zip(context["title"], context["sentences"], strict=True)
    ]
    return row["id"], "\n\n".join([row["question"], *paragraphs, f"Answer: {row['answer']}"])


def _auslegal(row: dict) -> tuple[str, str]:
    return row["version_id"], row["text"]


@dataclass(frozen=True)
class HubCorpus:
    document: Callable[[dict], tuple[str, str]]  # row -> (id, text)
    repo: str
    config: str | None
    split: str
    data_files: str  # the split's files inside the repo at `revision` (read directly when cached)
    revision: str  # pinned commit (see the *_REVISION constants)
    description: str
    licence: str
    default_max_documents: int | None  # large streams are capped unless the caller asks for more

    @property
    def dataset(self) -> str:
        return f"{self.repo}:{self.config}/{self.split}" if self.config else f"{self.repo}/{self.split}"


HUB_CORPORA: dict[str, HubCorpus] = {
    # ~1000 articles is ~0.7M tokens, above the paper's 5e5 tokens per point.
    "wikipedia": HubCorpus(
        _wikipedia,
        "wikimedia/wikipedia",
        "20231101.en",
        "train",
        "20231101.en/train-*.parquet",
        WIKIPEDIA_REVISION,
        "English Wikipedia articles",
        "CC BY-SA 4.0",
        1000,
    ),
    "humaneval": HubCorpus(
        _humaneval,
        "openai/openai_humaneval",
        None,
        "test",
        "openai_humaneval/test-*.parquet",
        HUMANEVAL_REVISION,
        "HumanEval: prompt + canonical solution",
        "MIT",
        None,
    ),
    "hotpotqa": HubCorpus(
        _hotpotqa,
        "hotpotqa/hotpot_qa",
        "distractor",
        "validation",
        "distractor/validation-*.parquet",
        HOTPOTQA_REVISION,
        "HotpotQA: question, context paragraphs, answer",
        "CC BY-SA 4.0",
        None,
    ),
    "auslegal": HubCorpus(
        _auslegal,
        "isaacus/open-australian-legal-corpus",
        None,
        "corpus",
        "corpus.jsonl",
        AUSLEGAL_REVISION,
        "Open Australian Legal Corpus documents",
        "Open Australian Legal Corpus Licence",
        1000,
    ),
}


def _repo_cache(repo: str) -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE) / f"datasets--{repo.replace('/', '--')}"


def resolve_dataset_revision(repo: str, revision: str) -> str:
    """The commit a dataset revision (branch, tag or commit) points at: a commit as is (no network);
    otherwise asked of the hub, or read from the local hub cache's refs/ when the hub cannot be
    reached (`rbplab.store.hub`: decided once, never retried). "has no revision" only when the hub
    says so; out of reach and not cached is `HubUnreachableError`."""
    what, pin = f"dataset {repo}@{revision}", "pin a commit: hub:<name>@<commit sha>"
    try:  # the dataset card: small, and cached with it the revision resolves offline later
        return hub.resolve_commit(repo, revision, "README.md", repo_type="dataset")
    except hub.NoSuchRevisionError as err:
        listed = ", ".join(err.branches) or "none listed"
        raise CorpusError(
            f"dataset {repo} has no revision {revision!r} on the hub; branches: {listed}"
        ) from None
    except hub.NoSuchRepositoryError:
        raise CorpusError(f"the hub has no dataset {repo!r} (or it is private or gated)") from None
    except hub.HubAnswerError as err:
        raise CorpusError(f"cannot resolve {what} to a commit ({err.kind}); {pin}") from None
    except hub.NoCommitError as err:
        raise CorpusError(f"cannot resolve {what} to a commit (got {err.path})") from None
    except hub.NotCachedError as err:
        raise hub.unreachable(what, err.reason, f", or {pin}") from None


def _hub_rows(entry: HubCorpus, commit: str) -> Iterable[dict]:
    """The split's rows, streamed (never a whole-dataset download): from the split's files when the
    commit's snapshot holds them in the local hub cache (works offline), else from the hub."""
    import datasets

    snapshot = _repo_cache(entry.repo) / "snapshots" / commit
    files = sorted(str(p) for p in snapshot.glob(entry.data_files) if p.is_file())
    if files:
        builder = "parquet" if files[0].endswith(".parquet") else "json"
        return datasets.load_dataset(builder, data_files=files, split="train", streaming=True)
    reason = hub.offline_reason()
    if reason is not None:  # datasets would retry the hub before saying so
        raise hub.unreachable(f"the files of dataset {entry.repo}@{commit}", reason)
    return datasets.load_dataset(entry.repo, entry.config, split=entry.split, revision=commit, streaming=True)


def open_hub(name: str, max_documents: int | None, revision: str | None) -> LazyCorpus:
    if "@" in name and revision is None:
        name, revision = name.split("@", 1)
    if name not in HUB_CORPORA:
        raise unknown_hub_corpus(name)
    entry = HUB_CORPORA[name]
    requested = revision or entry.revision
    commit = resolve_dataset_revision(entry.repo, requested)
    if requested != commit:
        warnings.warn(
            f"hub:{name} is not pinned to a commit: {entry.repo}@{requested} is {commit[:12]} today; "
            f"pin it with hub:{name}@{commit} (or set the {name.upper()}_REVISION constant)",
            RbplabWarning,
            stacklevel=3,
        )
    limit = max_documents if max_documents is not None else entry.default_max_documents
    if limit is not None and limit < 1:
        raise CorpusError(f"max_documents must be a positive integer, got {limit}")
    source = {
        "origin": "hub",
        "dataset": entry.repo,
        "config": entry.config,
        "split": entry.split,
        "revision": commit,
        "requested_revision": requested,
        "max_documents": limit,
        "text_scheme": HUB_TEXT_SCHEME,
        "licence": entry.licence,
    }

    # A module-level function, not a closure: work units carry the corpus to other processes.
    return LazyCorpus(f"hub:{name}", source, functools.partial(_load_hub_corpus, name, commit, limit, source))


def _load_hub_corpus(name: str, commit: str, limit: int | None, source: dict) -> Corpus:
    import datasets

    entry = HUB_CORPORA[name]
    rows = (entry.document(row) for row in _hub_rows(entry, commit))
    return build_corpus(f"hub:{name}", rows, {**source, "datasets_version": datasets.__version__}, limit)


def unknown_hub_corpus(name: str) -> CorpusError:
    return CorpusError(
        f"unknown hub corpus 'hub:{name}'{did_you_mean('hub:' + name, ['hub:' + n for n in HUB_CORPORA])}; "
        f"known: {', '.join('hub:' + n for n in HUB_CORPORA)}"
    )


def hub_listing() -> list[dict]:
    """One row per hub corpus for `list_corpora`: name, origin, documents (unknown before loading),
    licence, description."""
    rows = []
    for name, entry in HUB_CORPORA.items():
        cap = (
            f", first {entry.default_max_documents} in dump order by default"
            if entry.default_max_documents
            else ""
        )
        rows.append(
            {
                "name": f"hub:{name}",
                "origin": "hub",
                "documents": None,
                "licence": entry.licence,
                "description": f"{entry.description} ({entry.dataset}{cap})",
            }
        )
    return rows


def open_corpus(
    corpus: str | Path, *, max_documents: int | None = None, revision: str | None = None
) -> Corpus | LazyCorpus:
    """Like `load_corpus`, but a hub corpus comes back as a `LazyCorpus`: its commit is resolved
    now and its documents are read only when first used (a cache miss), at most once."""
    corpus = corpus_name(corpus)
    text = str(corpus)
    if text.startswith("hub:"):
        return open_hub(text[len("hub:") :], max_documents, revision)
    if revision is not None:
        raise CorpusError(f"revision={revision!r} applies to hub corpora only, not {text!r}")
    return load_corpus(corpus, max_documents=max_documents)


def load_corpus(
    corpus: str | Path, *, max_documents: int | None = None, revision: str | None = None
) -> Corpus:
    """Load a corpus by bundled name, ``hub:<name>[@<revision>]``, or local path (see module docstring).

    `max_documents` keeps the first N non-empty documents (hub Wikipedia and the legal
    corpus default to 1000, the other sources to all). `revision` overrides a hub corpus's pinned
    commit (a branch is resolved to its commit now, and that commit is recorded).
    """
    corpus = corpus_name(corpus)
    text = str(corpus)
    if text.startswith("hub:") or revision is not None:
        opened = open_corpus(corpus, max_documents=max_documents, revision=revision)
        return opened.load() if isinstance(opened, LazyCorpus) else opened
    path = Path(text).expanduser()
    # A bare bundled name wins over a same-named entry of the working directory; anything
    # path-like (a separator or a file suffix) is a path.
    if isinstance(corpus, str) and "/" not in text and text in bundled_names():
        return load_bundled(text, max_documents)
    return load_local(path, max_documents)  # corpus_name found it on disk


def _unknown_corpus(text: str) -> CorpusError:
    known = bundled_names() + ["hub:" + n for n in HUB_CORPORA]
    return CorpusError(
        f"unknown corpus {shown(text)}{did_you_mean(text, known)}: not a bundled corpus, hub:<name>, or an "
        f"existing file or directory; known corpora: {', '.join(known)}"
    )


def corpus_name(corpus: Any, base: str | Path | None = None) -> Any:
    """A corpus as a user named it, checked and spelled as rbplab does: the one resolution of
    corpus names behind every entry point (the CLI, `Grid.from_names`, `load_study`, the
    notebooks' `corpora`, study files), reading no document and touching no network.

    A bundled name or ``hub:<name>[@<revision>]`` matches whatever its case (``Prose`` is
    ``prose``, ``HUB:WikiPedia@abc`` is ``hub:wikipedia@abc``, as family names are matched); a
    bare name is bundled before it is a path (as `load_corpus` reads it); anything else must be
    an existing file or directory, looked for under `base` first (a study file's folder) and
    returned as that path. A Corpus object is returned as it is. An unknown name, and one
    `rbplab.catalog.names.name_problem` refuses (empty, over-long), is a one-line CorpusError
    naming it, with a did-you-mean, before anything looks in the cache."""
    if isinstance(corpus, (Corpus, LazyCorpus)):
        return corpus
    if not isinstance(corpus, (str, Path)):
        raise CorpusError(
            f"a corpus is a name, hub:<name>, a path or a Corpus, not {type(corpus).__name__} ({corpus!r})"
        )
    text = str(corpus)
    problem = name_problem(text)
    if problem is not None:
        raise CorpusError(
            f"corpus name {shown(text)} {problem}: name a bundled corpus, hub:<name>, or an existing "
            "file or directory"
        )
    name, at, revision = text.partition("@")
    if name.lower().startswith("hub:"):
        hub_name = name[len("hub:") :]
        spelled = {n.lower(): n for n in HUB_CORPORA}.get(hub_name.lower())
        if spelled is None:
            raise unknown_hub_corpus(hub_name)
        return f"hub:{spelled}{at}{revision}"
    if isinstance(corpus, str) and "/" not in text:
        spelled = {n.lower(): n for n in bundled_names()}.get(text.lower())
        if spelled is not None:
            return spelled
    if base is not None and not Path(text).expanduser().is_absolute():
        under = Path(base) / Path(text).expanduser()
        if path_exists(str(under)):
            return str(under)
    if path_exists(text):
        return corpus
    raise _unknown_corpus(text)


def list_corpora() -> pd.DataFrame:
    """Bundled and hub corpora: name, origin, documents (when known without loading), licence, description."""
    rows = bundled_listing() + hub_listing()
    table = pd.DataFrame(rows, columns=["name", "origin", "documents", "licence", "description"])
    table["documents"] = table["documents"].astype("Int64")
    return table
