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
# # 4 · Lognormal ranks, and cross-entropy versus -log RBP_1 (paper Figure 8, appendix B)
#
# The paper observes that cross-entropy and $-\log \mathrm{RBP}_1$ fall with nearly the same
# exponent, and conjectures why: the rank of the ground-truth token is lognormal, with $\mu/\sigma$
# scaling with model size. This notebook fits the discretised, truncated lognormal to every rank
# histogram by maximum likelihood, compares it with a power law and a log-logistic, tracks μ, σ and
# μ/σ against S, and compares the measured scaling with the theory's.

# %%
from typing import Optional

from rbplab import report
from rbplab.study import distribution
from rbplab.viz import headlines, plots
from rbplab.viz.parameters import NotebookParameters, typed_parameters
from rbplab.viz.readable import readable
from rbplab.viz.widgets import RankDistributionView, show

# %% tags=["parameters"]
families: list[str] = ["micro"]  # model families of the registry
models: Optional[list[str]] = None  # a subset of the families' model names; None: all members
corpora: Optional[list[str]] = None  # bundled names, "hub:<name>" or paths; None: every bundled corpus
settings: dict = {}  # extraction settings (ExtractionSettings fields), e.g. {"max_tokens": 2000}
synthetic: bool = False  # True: made-up models (rbplab.study.synthetic_study), no cache needed
study_file: Optional[str] = None  # a study TOML (`rbplab run`): analyse exactly its grid
cache_dir: Optional[str] = None  # None: $RBPLAB_CACHE or ~/.cache/rbplab
extract: bool = False  # True: run the models for runs missing from the cache; False: name them
output_dir: Optional[str] = None  # folder for tables and figures (the report sets it); None: none
ties: str = "pessimistic"  # rank convention: pessimistic (paper), optimistic (g + 1) or expected
n_boot: int = 100  # document-bootstrap replicates for the intervals on mu and sigma (0: none)

# %%
# The parameters above as values (batch runs hand lists as text) and the study they name.
typed_parameters(globals())  # flags and numbers given as text (papermill -p) typed, or refused
params = NotebookParameters.read(globals())
study = params.open_study()
exponents = report.save_table(distribution.ce_exponents(study), "ce_exponents", output_dir)
report.headline(headlines.lognormal(exponents), output_dir)

# %% [markdown]
# ## Fits per model and corpus
# `llr_vs_power_law` and `llr_vs_loglogistic` are log-likelihood ratios per token (> 0: the
# lognormal fits better). With ~10⁶ correlated tokens p-values would be meaningless, so none are shown.

# %%
ln = report.save_table(distribution.lognormal(study), "lognormal", output_dir)
readable(
    ln[
        [
            "family",
            "corpus",
            "model",
            "S",
            "mu",
            "sigma",
            "mu_over_sigma",
            "llr_vs_power_law",
            "llr_vs_loglogistic",
        ]
    ]
)

# %% [markdown]
# ## Figure 8c: the rank distribution and its lognormal fit

# %%
RankDistributionView(study)

# %% [markdown]
# ## Figure 8d: μ, σ and μ/σ against S
# Intervals: a bootstrap over documents (the independent units; tokens within a document are
# correlated), each replicate fitted on the summary's k grid, its spread added to the exact fit.

# %%
params = (
    report.save_table(distribution.lognormal_intervals(study, n_boot), "lognormal_intervals", output_dir)
    if n_boot
    else ln
)
show(report.save_figure(plots.lognormal_params(params), "figure8d", output_dir))
readable(report.save_table(distribution.lognormal_scaling(study), "lognormal_scaling", output_dir))

# %% [markdown]
# ## Figures 8a and 8b: cross-entropy and -log RBP_1, measured and predicted
# Left: measured per model. Right: the appendix-B values implied by the fitted (μ, σ) trends.
# The appendix reads "CE" as the entropy of the rank distribution, so the right panel's CE is on
# another scale than the measured mean nll (the table's `rank_entropy_*` columns); the exponents
# are what the theory predicts. The predicted curves are deterministic functions of the fitted
# trends, so their exponents carry no confidence interval. In the table, the `*_discrete` columns
# use the discretised model's (μ, σ) and the appendix's `*_sum` and `*_closed` columns the
# appendix model's own fit (`mu_psi`, `sigma_psi`); `*_closed` truncates the appendix's integrals
# at |V| like the sums, `*_closed_untruncated` is the formula as printed.

# %%
figure8ab = plots.ce_vs_rbp(distribution.ce_comparison(study))
report.save_figure(figure8ab, "figure8ab", output_dir)
show(report.save_figure(figure8ab, "headline", output_dir))

# %%
readable(exponents)

# %%
headline = exponents.pivot_table(index=["family", "corpus"], columns=["source", "quantity"], values="alpha")
headline.columns = [f"alpha {quantity} ({source})" for source, quantity in headline.columns]
readable(report.save_table(headline.reset_index(), "headline", output_dir))
