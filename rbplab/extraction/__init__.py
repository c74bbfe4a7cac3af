"""Model x corpus -> exact per-token rank statistics, written to the cache.

`sources` turns a model argument into a `ResolvedModel` (a grid's member as it is; anything else
through `rbplab.catalog.resolve`); `models` describes a resolved model without weights from what
`metadata` reads of its config and tokenizer; `weights` loads its weights and checks its head;
`config_checks` refuses configs that are insane or do not describe the weight files; `gguf_file`
parses a GGUF header once per process; `fingerprints` identifies models; `bos` decides which
token starts a document; `windows` turns documents into model inputs; `ranks` computes the exact
counts from hidden states; `plan` resolves a run's cache key from metadata (and its shards'
windows once, `Plan.shards`); `scoring` batches a shard's windows and turns them into rows with
the loaded model; `pipeline` runs the shard loop into cache entries; `in_process` runs every run
of a grid through it (`extract`, also `rbplab.extract`); `reading` reads a run's token stats
back; `known_plans` finds the entry of a request already planned on this machine without loading
model code; `repair` recomputes damaged entries from what their spec records; and `verify`
checks entries against what only the corpus and the model can tell (shard counts; shards
recomputed and compared).

Names are imported on first use, so `rbplab.extraction.known_plans`, `reading` and `sources` work
without importing torch.
"""

from importlib import import_module
from typing import Any

_LAZY = {
    "ExtractResult": "rbplab.extraction.hits",
    "extract": "rbplab.extraction.in_process",
    "load_stats": "rbplab.extraction.reading",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rbplab.extraction' has no attribute {name!r}")
