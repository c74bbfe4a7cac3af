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
# # 2 · The k-sweep: R² and α versus k (paper Figures 5 and 6)
#
# The law is fitted at log-spaced k from 1 to |V|. The paper finds three regimes: a precise power
# law at k = 1, one that stays precise with a growing exponent for 1 < k ≤ 100, and a breakdown as
# k approaches the vocabulary size.

# %%
from rbplab.analysis import ksweep
from rbplab.study import open_study
from rbplab.viz import plots, report
from rbplab.viz.widgets import ScalingView, show

# %% tags=["parameters"]
families = ["micro"]  # model families of the registry
models = None  # a subset of the model names of the families; None: all members
corpora = None  # bundled names, "hub:<name>" or paths; None: every bundled corpus
settings = {}  # extraction settings (rbplab.core.ExtractionSettings fields), e.g. {"max_tokens": 2000}
synthetic = False  # True: made-up models (rbplab.study.synthetic_study) instead of families; no model runs
study_file = None  # a study TOML (`rbplab run`): analyse exactly its models, corpora and settings
cache_dir = None  # None: $RBPLAB_CACHE or ~/.cache/rbplab
output_dir = None  # folder for the tables as CSV (the report sets it); None: do not write
ks = None  # thresholds of the sweep; None: 8 per decade from 1 up to |V|, plus the paper values
ties = "pessimistic"  # rank convention: pessimistic (paper), optimistic (g + 1) or expected
large_fractions = [0.4, 0.6]  # k near |V| as fractions of |V| (paper: 20k and 30k of ~50k)
n_boot = 0  # document-bootstrap replicates for α(k) and R²(k); 0: OLS intervals only

# %%
study = open_study(
    families,
    corpora,
    settings,
    models=models,
    study_file=study_file,
    synthetic=synthetic,
    cache_dir=cache_dir,
    ties=ties,
)

# %% [markdown]
# ## Figure 6: fit quality and exponent as functions of k

# %%
sweep = report.save_table(study.ksweep(ks, n_boot=n_boot), "ksweep", output_dir)
figure6 = plots.ksweep(sweep, vocab_size=study.vocab_size, title="Figure 6: R²(k) and α(k)")
show(report.save_figure(figure6, "headline", output_dir))

# %%
summary = report.save_table(ksweep.sweep_summary(sweep), "ksweep_summary", output_dir)
summary

# %% [markdown]
# ## Figure 5: k near |V|

# %%
large = sorted({max(1, int(f * study.vocab_size)) for f in large_fractions})
show(plots.rbp_vs_size(study.points(large), study.fits(large), study.bands(large), title="Figure 5: k → |V|"))
report.save_table(study.fits(large), "fits_large_k", output_dir)

# %% [markdown]
# ## RBP_k against k for every model
# RBP_k is the CDF of the rank: larger models move mass toward rank 1.

# %%
show(plots.rbp_curves(study.curve_frame()))

# %% [markdown]
# ## Explore

# %%
ScalingView(study, k=100)

# %%
report.save_table(summary[["family", "corpus", "k_max_r2", "alpha_k1", "alpha_k100"]], "headline", output_dir)
