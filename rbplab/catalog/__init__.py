"""What can be measured: the model registry, the corpora, checkpoint schedules, model sizes and the
paper's published numbers. The catalog is the inputs; `rbplab.store` keeps the results.

`registry` says which models form a family, where each loads from and how large it is (read once
per process); `models` resolves one model as the user names it (`ModelSpec`) to where it loads
from and how it is named and keyed (`resolve` -> `ResolvedModel`); `corpora` loads evaluation
text; `schedules` knows each model's revisions and how far into training they are; `sizes`
counts S without weights; `reference` is the paper's own GPT-2 table. Nothing here runs a model.
"""

from rbplab.catalog.corpora import (
    Corpus,
    CorpusError,
    Document,
    LazyCorpus,
    list_corpora,
    load_corpus,
    open_corpus,
)
from rbplab.catalog.models import ModelLoadError, ModelSpec, ResolvedModel, resolve
from rbplab.catalog.reference import paper_reference, paper_reference_meta
from rbplab.catalog.registry import families, family_models, model_location
from rbplab.catalog.sizes import nonembedding_params, parameter_counts

__all__ = [
    "Corpus",
    "CorpusError",
    "Document",
    "LazyCorpus",
    "ModelLoadError",
    "ModelSpec",
    "ResolvedModel",
    "families",
    "family_models",
    "list_corpora",
    "load_corpus",
    "nonembedding_params",
    "open_corpus",
    "paper_reference",
    "paper_reference_meta",
    "parameter_counts",
    "resolve",
    "model_location",
]
