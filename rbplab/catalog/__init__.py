"""What can be measured: the model registry, the corpora, checkpoint schedules, model sizes and the
paper's published numbers. The catalog is the inputs; `rbplab.store` keeps the results.

`registry` says which models form a family, where each loads from and how large it is (S, counted
without weights), each model's revisions and how far into training they are, and the paper's own
GPT-2 table; `models` resolves one model as the user names it (`ModelSpec`) to where it loads from
and how it is named and keyed (`resolve` -> `ResolvedModel`); `corpora` opens evaluation text.
Nothing here runs a model.
"""

from rbplab.catalog.corpora import Corpus
from rbplab.catalog.models import ModelSpec, ResolvedModel, resolve
from rbplab.catalog.registry import families, paper_reference

__all__ = ["Corpus", "ModelSpec", "ResolvedModel", "families", "paper_reference", "resolve"]
