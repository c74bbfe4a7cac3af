# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: kernelspec,jupytext
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 5 · Extraction: fill or refresh the rank cache
#
# Every other notebook reads per-token rank statistics from the cache. With `extract = True` this
# one runs `rbplab.extract` (what `rbplab extract` runs) for models and corpora:
# entries already in the cache are reused without running a model, interrupted ones resume from
# their finished shards, so running it again after an interruption or after adding models or
# corpora refreshes the cache with only the missing work. With `extract = False` (the default) no
# model runs: it checks that the cache holds every run and names the missing ones.
# `rbplab cache rm KEY` drops an entry to recompute it.

# %%
from typing import Optional

import pandas as pd

import rbplab
from rbplab import report
from rbplab.grid import Grid
from rbplab.runner import run_study
from rbplab.store import list_entries
from rbplab.study import load_study
from rbplab.viz import headlines
from rbplab.viz.parameters import NotebookParameters, typed_parameters
from rbplab.viz.readable import readable

# %% tags=["parameters"]
families: list[str] = ["micro"]  # model families of the registry (`rbplab families`)
models: Optional[list[str]] = None  # model names, hub ids or paths instead of families; None: families
corpora: Optional[list[str]] = None  # bundled names, "hub:<name>" or paths; None: every bundled corpus
study_file: Optional[str] = None  # a study TOML (`rbplab run`): run exactly its grid
settings: dict = {}  # extraction settings (ExtractionSettings fields), e.g. {"max_tokens": 2000}
cache_dir: Optional[str] = None  # None: $RBPLAB_CACHE or ~/.cache/rbplab
extract: bool = False  # True: run the models for runs missing from the cache; False: name them
output_dir: Optional[str] = None  # folder for tables and figures (the report sets it); None: none
progress: bool = True  # progress bars with tokens/s

# %%
# The parameters above as values (batch runs hand lists as text); models, when given, replace families.
typed_parameters(globals())  # flags and numbers given as text (papermill -p) typed, or refused
params = NotebookParameters.read(globals())
grid = (
    params.grid()
    if study_file
    else Grid.from_names(params.models or params.families, params.corpora, params.settings)
)
before = list_entries(cache_dir)

# %%
if not extract:  # a missing run is a MissingRunsError naming it: no model runs unasked
    runs = load_study(grid, cache_dir=cache_dir, outer="model").run_table()
elif study_file:
    runs = run_study(grid, cache_dir=cache_dir, progress=progress).table
else:
    results = rbplab.extract(grid, cache_dir=cache_dir, progress=progress)  # one ExtractResult per run
    runs = pd.DataFrame(results)[["model", "corpus", "n_tokens", "from_cache", "key", "path"]]
readable(report.save_table(runs, "runs", output_dir))

# %% [markdown]
# ## The cache after the run

# %%
entries = list_entries(cache_dir)
entries["new"] = ~entries["key"].isin(before["key"])
report.headline(headlines.extraction(runs, entries), output_dir)
readable(report.save_table(entries.drop(columns=["path"]), "cache", output_dir))

# %%
complete = entries[entries["complete"]]
headline = complete.groupby("model", as_index=False).agg(
    corpora=("corpus", "nunique"), tokens=("n_tokens", "sum")
)
readable(report.save_table(headline, "headline", output_dir))
