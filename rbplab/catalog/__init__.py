"""What can be measured: the model registry, the corpora, checkpoint schedules, model sizes and the
paper's published numbers. The catalog is the inputs; `rbplab.store` keeps the results.

`registry` says which models form a family, where each loads from and how large it is (read once
per process); `models` resolves one model as the user names it (`ModelSpec`) to where it loads
from and how it is named and keyed (`resolve` -> `ResolvedModel`); `corpora` loads evaluation
text; `schedules` knows each model's revisions and how far into training they are; `sizes`
counts S without weights; `reference` is the paper's own GPT-2 table. Nothing here runs a model.
"""

from rbplab.catalog.corpora.corpus import Corpus
from rbplab.catalog.models import ModelSpec, ResolvedModel, resolve
from rbplab.catalog.reference import paper_reference
from rbplab.catalog.registry import families

__all__ = ["Corpus", "ModelSpec", "ResolvedModel", "families", "paper_reference", "resolve"]
