"""rbplab: measure and explore the Relative-Based Scaling Law of language models.

The package follows the data path, one subpackage per step:

    grid        what a study runs: models, revisions, corpora, settings (`Grid`)
    extraction  a grid's model x corpus runs -> exact per-token ranks (`extract`, `load_stats`)
    catalog     the inputs: model registry, corpora, checkpoint schedules, sizes S
    store       the cache those ranks live in
    analysis    RBP_k, fits against S, k-sweeps, emergence, rank distributions
    study       a family x corpora of cached runs, ready for tables (`load_study`, `Study`)
    viz         figures and widgets
    report      the notebooks executed headless into an HTML report (`run_report`)
    cli         the `rbplab` command

with `core` (TokenStats, runs, tie conventions, settings) at the bottom.
"""

from importlib import import_module
from typing import Any

from rbplab.core.errors import RbplabError, RbplabWarning

# Imported on first use: torch and transformers take seconds to import, which
# `rbplab cache ls` and the analysis-only modules should not pay, and pandas a third of a
# second, which `rbplab --help` should not. No name here is also the name of a submodule, so
# `rbplab.extract` is always the function.
_LAZY = {
    "extract": "rbplab.extraction",
    "load_stats": "rbplab.extraction",
    "load_study": "rbplab.study",
    "load_results": "rbplab.study.results",
    "save_results": "rbplab.study.results",
    "ExtractionSettings": "rbplab.core",
    "Grid": "rbplab.grid",
}

# The subpackages, loaded on first use as well: after `import rbplab` alone,
# `rbplab.study.size.fits(...)` works after `import rbplab` alone (docs/python.md).
_SUBPACKAGES = frozenset(
    ("analysis", "catalog", "cli", "core", "extraction", "grid", "report", "runner", "store", "study", "viz")
)

__all__ = ["RbplabError", "RbplabWarning", *_LAZY]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    if name in _SUBPACKAGES:
        return import_module(f"rbplab.{name}")
    raise AttributeError(f"module 'rbplab' has no attribute {name!r}")
