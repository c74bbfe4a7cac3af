"""Where things are kept: the rank cache, the corpora, the model registry and model sizes S.

`cache` owns the on-disk layout of entries (keys, shards, manifests, locks, listing, removal) and
the checks that nothing read back is trusted unless derived again; `archive` exports and imports
entries; `files` writes files atomically and reads entry files safely (no links, no special files,
bounded sizes); `corpora` loads evaluation text; `registry` and `sizes` say which models form a
family and how large each is. Nothing here runs a model.
"""

from rbplab.store.archive import ArchiveError, export_entries, import_archive
from rbplab.store.cache import (
    CacheCorruptedError,
    CacheEntry,
    CacheError,
    cache_key,
    list_entries,
    remove_entries,
)
from rbplab.store.corpora import (
    Corpus,
    CorpusError,
    Document,
    LazyCorpus,
    list_corpora,
    load_corpus,
    open_corpus,
)
from rbplab.store.files import CacheLocationError, cache_root
from rbplab.store.reference import paper_reference, paper_reference_meta
from rbplab.store.registry import families, family_models, resolve_model
from rbplab.store.sizes import nonembedding_params, parameter_counts

__all__ = [
    "ArchiveError",
    "CacheCorruptedError",
    "CacheEntry",
    "CacheError",
    "CacheLocationError",
    "Corpus",
    "CorpusError",
    "Document",
    "LazyCorpus",
    "cache_key",
    "cache_root",
    "export_entries",
    "families",
    "family_models",
    "import_archive",
    "list_corpora",
    "list_entries",
    "load_corpus",
    "paper_reference",
    "paper_reference_meta",
    "nonembedding_params",
    "open_corpus",
    "parameter_counts",
    "remove_entries",
    "resolve_model",
]
