"""Model x corpus -> exact per-token rank statistics, written to the cache.

The modules follow one run: `sources` describes a model without loading its weights (resolved from
what the user named, its config and tokenizer read and checked, its weight files listed, where it
will be placed); `gguf` reads GGUF files; `fingerprints` identifies the weights and finds requests
already planned on this machine without model code; `windows` turns documents into model inputs
(the token each starts with, the windows it is scored in); `plan` keys a run from metadata and
tells whether the cache holds it; `weights` loads the model and checks its head; `heads` decides
which head ranks (and refuses one that cannot run) and is the one interface to both: `ranks` (the
fp32 head, any device) and `fused_head` (one Triton kernel on a GPU), whose counts `exact` makes
exact arithmetic's (an error band, and the exact sign for the logits inside it) under the float32
arithmetic `precision` pins; `scoring` scores a plan's shards into the entry; `pipeline` is `extract`, a
grid's runs one after another (also `rbplab.extract`); `reading` reads a run's token stats back
(`load_stats`); `verify` checks entries against what only the corpus and the model can tell and
repairs damaged ones.

Names are imported on first use, so `rbplab.extraction.reading` and `fingerprints` work without
importing torch.
"""

from importlib import import_module
from typing import Any

_LAZY = {
    "ExtractResult": "rbplab.extraction.plan",
    "extract": "rbplab.extraction.pipeline",
    "load_stats": "rbplab.extraction.reading",
    # a run keyed from metadata alone, without weights: what tests/integration/test_cache_keys.py
    # pins keys with, importable here as before; documented under rbplab.extraction.plan
    "plan_extraction": "rbplab.extraction.plan",
}

__all__ = ["ExtractResult", "extract", "load_stats"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rbplab.extraction' has no attribute {name!r}")
