"""The corpus types and their keys: a `Corpus` of `Document`s with stable ids, a hub `LazyCorpus`
whose documents are read on first use, the part of a cache key each gives (`corpus_key`), and
`build_corpus`, through which every source's (id, text) rows become a corpus.

`Corpus.content_hash()` covers ids and texts, so a cache entry keyed on it can never be reused for
different text.
"""

from __future__ import annotations

import hashlib
import re
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from rbplab.core.errors import RbplabError
from rbplab.store.hub import COMMIT_RE


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
        warnings.warn(f"corpus {name!r}: skipped {len(empty)} empty document(s): {shown}", stacklevel=4)
    return Corpus(name=name, documents=tuple(documents), source=source)
