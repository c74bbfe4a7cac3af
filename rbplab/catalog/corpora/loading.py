"""A corpus as the user names it: open or load it, check the name before anything slow, spell it
as rbplab does, and list the corpora there are.

A corpus is named as
- a bundled name: data/corpora/<name>.jsonl.gz (`rbplab.catalog.corpora.bundled`);
- ``hub:wikipedia``, ``hub:humaneval``, ``hub:hotpotqa``, ``hub:auslegal``, optionally
  ``@<revision>`` (`rbplab.catalog.corpora.hub_datasets`);
- a local .txt, .jsonl or .jsonl.gz file, or a directory of them (`rbplab.catalog.corpora.files`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from rbplab.catalog.corpora.bundled import bundled_listing, bundled_names, load_bundled
from rbplab.catalog.corpora.corpus import Corpus, CorpusError, LazyCorpus
from rbplab.catalog.corpora.files import load_local
from rbplab.catalog.corpora.hub_datasets import HUB_CORPORA, hub_listing, open_hub, unknown_hub_corpus
from rbplab.core.names import did_you_mean


def open_corpus(
    corpus: str | Path, *, max_documents: int | None = None, revision: str | None = None
) -> Corpus | LazyCorpus:
    """Like `load_corpus`, but a hub corpus comes back as a `LazyCorpus`: its commit is resolved
    now and its documents are read only when first used (a cache miss), at most once."""
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
    text = str(corpus)
    if text.startswith("hub:") or revision is not None:
        opened = open_corpus(corpus, max_documents=max_documents, revision=revision)
        return opened.load() if isinstance(opened, LazyCorpus) else opened
    path = Path(text).expanduser()
    # A bare bundled name wins over a same-named entry of the working directory; anything
    # path-like (a separator or a file suffix) is a path.
    if isinstance(corpus, str) and "/" not in text and text in bundled_names():
        return load_bundled(text, max_documents)
    if path.exists():
        return load_local(path, max_documents)
    raise _unknown_corpus(text)


def _unknown_corpus(text: str) -> CorpusError:
    known = bundled_names() + ["hub:" + n for n in HUB_CORPORA]
    return CorpusError(
        f"unknown corpus {text!r}{did_you_mean(text, known)}: not a bundled corpus, hub:<name>, or an "
        f"existing file or directory; known corpora: {', '.join(known)}"
    )


def canonical_corpus(corpus: Any) -> Any:
    """A bundled or hub corpus name as rbplab spells it, whatever its case (``Prose`` is
    ``prose``, ``HUB:WikiPedia@abc`` is ``hub:wikipedia@abc``), as family names are matched;
    an existing path, a Corpus object and a name matching nothing (left for the corpus check to
    refuse with its did-you-mean) are returned unchanged."""
    if not isinstance(corpus, str) or Path(corpus).expanduser().exists():
        return corpus
    base, at, revision = corpus.partition("@")
    known = {name.lower(): name for name in bundled_names()}
    known |= {f"hub:{name.lower()}": f"hub:{name}" for name in HUB_CORPORA}
    found = known.get(base.lower())
    return found + at + revision if found is not None else corpus


def check_corpus(corpus: str | Path) -> None:
    """Raise the CorpusError `load_corpus` would raise for an unknown corpus, reading no document
    and touching no network: a bundled name, ``hub:<known name>[@revision]`` or an existing path
    passes (whether its files parse is `load_corpus`'s business). For argument checks that must
    come before anything slow."""
    text = str(corpus)
    if text.startswith("hub:"):
        name = text[len("hub:") :].split("@", 1)[0]
        if name not in HUB_CORPORA:
            raise unknown_hub_corpus(name)
        return
    if isinstance(corpus, str) and "/" not in text and text in bundled_names():
        return
    if Path(text).expanduser().exists():
        return
    raise _unknown_corpus(text)


def list_corpora() -> pd.DataFrame:
    """Bundled and hub corpora: name, origin, documents (when known without loading), licence, description."""
    rows = bundled_listing() + hub_listing()
    table = pd.DataFrame(rows, columns=["name", "origin", "documents", "licence", "description"])
    table["documents"] = table["documents"].astype("Int64")
    return table
