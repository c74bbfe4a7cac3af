"""Model x corpus -> exact per-token rank statistics, written to the cache.

`sources` says where a model comes from, `models` loads config, tokenizer and weights,
`fingerprints` identifies them, `windows` turns documents into model inputs, `ranks` computes
the exact counts from hidden states, `pipeline` runs it all into cache entries, `repair`
recomputes damaged entries from what their spec records, and `verify` checks entries against what
only the corpus and the model can tell (shard counts; shards recomputed and compared).
"""

from rbplab.extraction.grid import extract_many
from rbplab.extraction.models import ModelInfo, describe_model, load_model
from rbplab.extraction.pipeline import ExtractResult, extract, load_stats, plan_extraction
from rbplab.extraction.ranks import rank_stats
from rbplab.extraction.repair import repair_entry
from rbplab.extraction.sources import ModelLoadError, ModelSpec, RemoteCodeError

__all__ = [
    "ExtractResult",
    "ModelInfo",
    "ModelLoadError",
    "ModelSpec",
    "RemoteCodeError",
    "describe_model",
    "extract",
    "extract_many",
    "load_model",
    "load_stats",
    "plan_extraction",
    "rank_stats",
    "repair_entry",
]
