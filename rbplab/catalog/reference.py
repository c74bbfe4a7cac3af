"""The paper's own measurements, bundled as a reference table (data/reference/).

`paper_reference()` reads the GPT-2 results on Wikipedia that the paper's code repository
published (scripts/build_reference.py records the repository, commit and paths, and the setup:
the optimistic tie convention, fp32, 1,000 sequences of 512 tokens). A user who runs GPT-2 on
Wikipedia can draw their points beside the paper's (`rbplab.viz.plots.reference_vs_size`);
their own runs use their own tie convention and corpus, which the figure states.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rbplab.core.documents import read_json
from rbplab.store.paths import data_dir

PAPER_GPT2 = "paper_gpt2_wikipedia"


def _reference_path(name: str, suffix: str) -> Path:
    return data_dir() / "reference" / f"{name}{suffix}"


def paper_reference(name: str = PAPER_GPT2) -> pd.DataFrame:
    """The reference table: family, model, corpus, S, vocab_size, k, rbp, neg_log_rbp, ce,
    ties (the paper's convention), source ("paper"), source_path (the file in the repository)."""
    table = pd.read_csv(_reference_path(name, ".csv"))
    meta = paper_reference_meta(name)
    table.insert(table.columns.get_loc("rbp") + 1, "neg_log_rbp", -np.log(table["rbp"]))
    return table.assign(ties=meta["ties"], source="paper")


def paper_reference_meta(name: str = PAPER_GPT2) -> dict:
    """Where the reference table comes from: repository, commit, paths, fields, setup, licence."""
    return read_json(_reference_path(name, ".meta.json"), "reference metadata", 1 << 20, shape=dict)
