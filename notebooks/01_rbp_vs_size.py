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
# # 1 · RBP_k versus model size (paper Figures 3 and 4)
#
# The relative-based scaling law: for small k, $-\log \mathrm{RBP}_k \propto S^{-\alpha}$, where
# $\mathrm{RBP}_k = \Pr(R \le k)$ is the probability that the ground-truth token ranks within the
# model's top k and S is the non-embedding parameter count. This notebook fits the law per family
# and corpus at k = 1 and moderate k, with three kinds of uncertainty: the OLS interval over models,
# the document bootstrap over the corpus, and leave-one-model-out refits; then it checks whether
# the law extrapolates to the largest model.

# %%
from typing import Optional

from rbplab import report
from rbplab.analysis import fit
from rbplab.catalog import paper_reference
from rbplab.study import size
from rbplab.viz import headlines, plots
from rbplab.viz.parameters import NotebookParameters, typed_parameters
from rbplab.viz.readable import readable
from rbplab.viz.widgets import ScalingView, show

# %% tags=["parameters"]
families: list[str] = ["micro"]  # model families of the registry (`rbplab families`)
models: Optional[list[str]] = None  # a subset of the families' model names; None: all members
corpora: Optional[list[str]] = None  # bundled names, "hub:<name>" or paths; None: every bundled corpus
ks: list[int] = [1, 10, 50, 100]  # thresholds: k 1 (greedy) and moderate k (top-k sampling)
settings: dict = {}  # extraction settings (ExtractionSettings fields), e.g. {"max_tokens": 2000}
synthetic: bool = False  # True: made-up models (rbplab.study.synthetic_study), no cache needed
study_file: Optional[str] = None  # a study TOML (`rbplab run`): analyse exactly its grid
cache_dir: Optional[str] = None  # None: $RBPLAB_CACHE or ~/.cache/rbplab
extract: bool = False  # True: run the models for runs missing from the cache; False: name them
output_dir: Optional[str] = None  # folder for tables and figures (the report sets it); None: none
ties: str = "pessimistic"  # rank convention: pessimistic (paper), optimistic (g + 1) or expected
n_boot: int = 200  # document-bootstrap replicates

# %%
# The parameters above as values (batch runs hand lists as text) and the study they name.
typed_parameters(globals())  # flags and numbers given as text (papermill -p) typed, or refused
params = NotebookParameters.read(globals())
study, ks = params.open_study(), params.ks
runs = report.save_table(study.run_table(), "runs", output_dir)

# %% [markdown]
# ## Power-law fits
# One row per family, corpus and k: α with its t-interval over models, R², and the range of α when
# one model is left out.

# %%
fits = report.save_table(size.fits(study, ks), "fits", output_dir)
readable(fits)

# %% [markdown]
# The runs: one model on one corpus each, with its tokens, cross-entropy (nats per token) and RBP_1.

# %%
readable(runs)

# %% [markdown]
# ## Figure 3: k = 1
# Markers are models with their document-bootstrap 95 % intervals, the dashed line the fitted
# power law, the shaded band its 95 % confidence band (`size.bands(study, k, kind="prediction")` gives
# the wider band where a new model would fall).

# %%
points = study.points(1, n_boot=n_boot)
figure3 = plots.rbp_vs_size(
    points, size.fits(study, 1), size.bands(study, 1), title="Figure 3: -log RBP_1 vs S"
)
report.save_figure(figure3, "figure3", output_dir)
show(report.save_figure(figure3, "headline", output_dir))

# %% [markdown]
# ## Figure 4: moderate k

# %%
moderate = [k for k in ks if 1 < k <= 100]
figure4 = plots.rbp_vs_size(
    study.points(moderate, n_boot=n_boot),
    size.fits(study, moderate),
    size.bands(study, moderate),
    title="Figure 4: 1 < k ≤ 100",
)
show(report.save_figure(figure4, "figure4", output_dir))

# %% [markdown]
# ## Uncertainty from the corpus: document bootstrap
# Tokens of one document are correlated, so the corpus is resampled by documents, and every model
# is evaluated on the same resample.

# %%
readable(report.save_table(size.bootstrap(study, ks, n_boot=n_boot), "bootstrap", output_dir))

# %% [markdown]
# ## Does the law extrapolate?
# Fit all models but the largest and predict the largest one's RBP_k.

# %%
readable(report.save_table(size.extrapolation(study, ks), "extrapolation", output_dir))

# %% [markdown]
# ## The paper's own GPT-2 numbers
# The paper's code repository published its GPT-2 results on Wikipedia; rbplab bundles them
# (`rbplab.catalog.paper_reference`, source and commit in data/SOURCES.md) and fits them with the same
# code. Their setup: the optimistic tie convention (ranks `(logits > target).sum() + 1`), fp32
# models, 1,000 Wikipedia sequences of 512 tokens, special-token positions dropped. When this study
# holds GPT-2, its points are drawn beside the paper's, with this study's own tie convention and corpora.

# %%
reference = paper_reference()
own = None
if "gpt2" in study.families:
    gpt2 = study.subset(families="gpt2")
    reference_ks = [k for k in sorted(reference["k"].unique()) if k <= gpt2.vocab_size]
    own = gpt2.points(reference_ks).assign(ties=study.ties)
reference_fits = fit.scaling_fits(
    reference.assign(loss=reference["neg_log_rbp"], metric="rbp"), by=["family", "corpus", "ties", "k"]
)
show(report.save_figure(plots.reference_vs_size(reference, own), "paper_reference", output_dir))
readable(
    report.save_table(reference_fits, "paper_reference_fits", output_dir)[
        ["family", "corpus", "ties", "k", "alpha", "alpha_low", "alpha_high", "r2", "n_models"]
    ]
)

# %% [markdown]
# This study's exponents beside the paper's, k by k (none unless the study holds GPT-2). The
# corpora and tie conventions may differ, and the table says which; the report's headline states
# the comparison at the smallest k.

# %%
versus_paper = report.save_table(fit.compare_fits(fits, reference_fits), "versus_paper", output_dir)
report.headline(headlines.size_law(fits, k=min(ks), level=study.level, paper=versus_paper), output_dir)
readable(versus_paper)

# %% [markdown]
# ## Explore
# Drag k over its whole range (log scale, 1 to |V|) and watch the fit hold for small k and break
# down as k approaches the vocabulary size.

# %%
ScalingView(study, k=1)

# %%
columns = ["family", "corpus", "alpha", "alpha_low", "alpha_high", "r2", "n_models"]
readable(report.save_table(fits.loc[fits["k"] == min(ks), columns], "headline", output_dir))
