"""rbplab: measure and explore the Relative-Based Scaling Law of language models.

Extraction (`extract`, `load_stats`) turns a model and a corpus into cached per-token
rank statistics (`TokenStats`); `load_study` gathers a model family over corpora for the
analysis modules (`metrics`, `fit`, `ksweep`, `emergence`, `lognormal`).
"""

from importlib import import_module
from typing import Any

from rbplab.core.stats import TokenStats

# Imported on first use: torch and transformers take seconds to import, which
# `rbplab cache ls` and the analysis-only modules should not pay.
_LAZY = {
    "Corpus": "rbplab.store.corpora",
    "Document": "rbplab.store.corpora",
    "load_corpus": "rbplab.store.corpora",
    "extract": "rbplab.extraction.pipeline",
    "load_stats": "rbplab.extraction.pipeline",
    "ModelSpec": "rbplab.extraction.models",
    "Study": "rbplab.study.study",
    "load_study": "rbplab.study.study",
}

__all__ = ["TokenStats", *_LAZY]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rbplab' has no attribute {name!r}")
