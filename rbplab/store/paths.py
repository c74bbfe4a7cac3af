"""Where rbplab finds what it ships: the notebooks, and the bundled corpora and micro-suite.

The notebooks (and the model registry, `rbplab.catalog.registry.registry_path`) travel inside the
package, so they work from an installed wheel. The bundled corpora and micro-suite models (~40 MB)
do not: they are found under $RBPLAB_DATA, else in the data/ folder of the source checkout the
package runs from (an editable install), and when neither exists the error says how to get them.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from rbplab.core.errors import RbplabError

DATA_ENV = "RBPLAB_DATA"
HOW_TO_GET_DATA = (
    "the bundled corpora and micro-suite models are not part of the installed package: use a source "
    f"checkout of rbplab (pip install -e <checkout>), or set {DATA_ENV}=<checkout>/data"
)


class DataNotFoundError(RbplabError, FileNotFoundError):
    """The bundled data folder (corpora, micro-suite models) is not available."""

    def __str__(self) -> str:  # one line, without the "[Errno n]" prefix
        return self.strerror or super().__str__()


def _checkout_data() -> Path:
    # rbplab/store/paths.py -> the checkout's root is two folders above the package.
    return Path(__file__).resolve().parents[2] / "data"


def data_dir(required: bool = True) -> Path | None:
    """The folder holding corpora/ and models/: $RBPLAB_DATA, else the source checkout's data/.

    With `required`, a missing folder raises DataNotFoundError naming how to get it; otherwise
    None is returned (listings that can do without the bundled data)."""
    override = os.environ.get(DATA_ENV)
    if override:
        path = Path(override).expanduser()
        if path.is_dir() or not required:
            return path if path.is_dir() else None
        raise DataNotFoundError(2, f"{DATA_ENV}={override} is not a directory; {HOW_TO_GET_DATA}")
    checkout = _checkout_data()
    if (checkout / "corpora").is_dir() or (checkout / "models").is_dir():
        return checkout
    if required:
        raise DataNotFoundError(2, HOW_TO_GET_DATA)
    return None


def notebooks_dir() -> Path:
    """The notebooks: the source checkout's notebooks/ (where edits happen), else the copies
    installed inside the package."""
    checkout = Path(__file__).resolve().parents[2] / "notebooks"
    if checkout.is_dir():
        return checkout
    return Path(str(resources.files("rbplab").joinpath("notebooks")))
