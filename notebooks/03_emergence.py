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
# # 3 · Emergence from a smooth token-level law (paper Figure 7)
#
# A task of N consecutive tokens succeeds when every token ranks within the top k. If tokens were
# independent, $p_{N,k} = \mathrm{RBP}_k^N \approx \exp(-C N S^{-\alpha})$: a sigmoid in log S that
# sharpens with N. Here the independence prediction meets the empirical fraction of N-token runs
# that are all in the top k.

# %%
from typing import Optional

from rbplab import report
from rbplab.study import emergence
from rbplab.viz import headlines, plots
from rbplab.viz.parameters import NotebookParameters, typed_parameters
from rbplab.viz.readable import readable
from rbplab.viz.widgets import EmergenceView, show

# %% tags=["parameters"]
families: list[str] = ["micro"]  # model families of the registry
models: Optional[list[str]] = None  # a subset of the families' model names; None: all members
corpora: Optional[list[str]] = None  # bundled names, "hub:<name>" or paths; None: every bundled corpus
ks: list[int] = [1, 10, 100]  # top-k thresholds
ns: list[int] = [1, 2, 4, 8, 16, 32]  # sequence lengths N
n_boot: int = 200  # document-bootstrap replicates for the ratios' intervals (0: none)
n_max: int = 300  # range of the N slider
extrapolate: bool = False  # True: draw the fitted law beyond the measured sizes (its full sigmoid)
settings: dict = {}  # extraction settings (ExtractionSettings fields), e.g. {"max_tokens": 2000}
synthetic: bool = False  # True: made-up models (rbplab.study.synthetic_study), no cache needed
study_file: Optional[str] = None  # a study TOML (`rbplab run`): analyse exactly its grid
cache_dir: Optional[str] = None  # None: $RBPLAB_CACHE or ~/.cache/rbplab
extract: bool = False  # True: run the models for runs missing from the cache; False: name them
output_dir: Optional[str] = None  # folder for tables and figures (the report sets it); None: none
ties: str = "pessimistic"  # rank convention: pessimistic (paper), optimistic (g + 1) or expected

# %%
# The parameters above as values (batch runs hand lists as text) and the study they name.
typed_parameters(globals())  # flags and numbers given as text (papermill -p) typed, or refused
params = NotebookParameters.read(globals())
study, ks, ns = params.open_study(), params.ks, params.ns

# %% [markdown]
# ## Fits of $-\log p_{N,k}$
# Per N: α and C of $-\log p_{N,k} = C N S^{-\alpha}$; under independence α matches the token-level
# exponent `alpha_token` and C stays flat in N. `alpha_joint` fits one law over every N.

# %%
em_fits = report.save_table(emergence.fits(study, ks, ns), "emergence_fits", output_dir)
report.headline(headlines.emergence(em_fits, k=min(ks)), output_dir)
readable(em_fits)

# %% [markdown]
# ## $p_{N,k}$ against S: the sigmoid view
# Markers: empirical $p_{N,k}$; thin dotted lines: $\mathrm{RBP}_k^N$; broad faint dashed:
# $\exp(-C N S^{-\alpha})$ from the RBP_k power law, over the measured sizes. With
# `extrapolate = True` the fitted law also runs
# beyond them, faded: an extrapolation, not data, that shows where the sigmoid would go if the law
# held (a small α stretches it over many decades).

# %%
em = report.save_table(emergence.table(study, ks, ns, n_boot=n_boot), "emergence", output_dir)
figure7 = plots.emergence(em, title="Figure 7: p_{N,k} vs S", extrapolate=extrapolate)
show(report.save_figure(figure7, "figure7", output_dir))

# %% [markdown]
# ## The linearised law: $-\log p_{N,k}$ against $N S^{-\alpha}$

# %%
show(report.save_figure(plots.emergence_linearised(em), "figure7_linearised", output_dir))

# %% [markdown]
# ## Is it dependence? Ratios against matched baselines
# `ratio` = empirical / $\mathrm{RBP}_k^N$ mixes two things: hits that cluster (dependence between
# neighbouring tokens) and difficulty that varies by document and by position. Even fully
# independent tokens give a ratio above 1 when some documents or positions are easier. Two
# baselines take those apart (95% document-bootstrap intervals in the `*_low/high` columns):
#
# * `ratio_position`: against independent tokens with their position's own hit rate (pooled over
#   documents). Near 1: the clustering is position-dependent difficulty (e.g. hard openings).
# * `ratio_doc`: against shuffling each document's tokens (each keeps its hit count). Near 1:
#   the clustering is document-level difficulty; above 1: hits cluster within documents.

# %%
ratio_cols = [f"{r}{end}" for r in ("ratio", "ratio_position", "ratio_doc") for end in ("", "_low", "_high")]
ratio = em[["family", "model", "corpus", "S", "k", "N"] + [c for c in ratio_cols if c in em]]
readable(report.save_table(ratio, "independence_ratio", output_dir))

# %% [markdown]
# ## Explore
# N from 1 to a few hundred and k on a log scale. The view opens at N = 10 on the smallest k where
# the largest model's $p_{N,k}$ is above 5 %; tick "extrapolate" to draw the fitted law beyond the
# measured S.

# %%
view = EmergenceView(study, n=10, n_max=n_max, extrapolate=extrapolate)
report.save_figure(view.figure, "figure7_view", output_dir)
report.save_figure(view.figure, "headline", output_dir)
view

# %%
headline = em_fits[em_fits["k"] == min(ks)].drop_duplicates(["family", "corpus"])
readable(
    report.save_table(
        headline[["family", "corpus", "alpha_token", "alpha_joint", "r2_joint"]], "headline", output_dir
    )
)
