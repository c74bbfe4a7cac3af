"""Evaluation corpora: documents with stable ids, from bundled files, local files or the hub.

`corpus` holds the types and their cache keys, `files`, `bundled` and `hub_datasets` read each
source, and `loading` opens a corpus as the user names it (bundled name, ``hub:<name>[@revision]``
or path), checks and lists them.
"""

from rbplab.catalog.corpora.corpus import Corpus, CorpusError, Document, LazyCorpus
from rbplab.catalog.corpora.hub_datasets import HUB_CORPORA, HUB_TEXT_SCHEME
from rbplab.catalog.corpora.loading import (
    canonical_corpus,
    check_corpus,
    list_corpora,
    load_corpus,
    open_corpus,
)

__all__ = [
    "HUB_CORPORA",
    "HUB_TEXT_SCHEME",
    "Corpus",
    "CorpusError",
    "Document",
    "LazyCorpus",
    "canonical_corpus",
    "check_corpus",
    "list_corpora",
    "load_corpus",
    "open_corpus",
]
