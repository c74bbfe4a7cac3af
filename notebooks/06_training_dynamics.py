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
# # 6 · Relative-based scaling in training data and compute
#
# The paper varies only the model size S. Here the second axis is the number of training tokens
# seen D, read from the checkpoint schedule of each revision: per size, $-\log \mathrm{RBP}_k$ and
# the cross-entropy (CE) against D with power-law fits; the joint law
# $L(S, D) = E + A S^{-\alpha} + B D^{-\beta}$ fitted as Hoffmann et al. (2022) did (Huber loss on
# $\log L$, many initialisations, bootstrap intervals over checkpoints); and the compute-optimal
# frontier (for each compute $C = 6 S D$, the S and D minimising the fitted law) for RBP_k versus CE.

# %%
from typing import Optional

from rbplab import report
from rbplab.analysis import data_scaling
from rbplab.report import cached_checkpoints
from rbplab.study.loading import default_corpora
from rbplab.viz import headlines, plots
from rbplab.viz.parameters import NotebookParameters, typed_parameters
from rbplab.viz.readable import readable
from rbplab.viz.widgets import TrainingView, show

# %% tags=["parameters"]
families: list[str] = ["micro"]  # families whose cached checkpoints to analyse (or sizes of the fallback)
corpora: Optional[list[str]] = None  # corpora the cached checkpoints must cover; None: the bundled ones
ks: list[int] = [1, 10, 100]  # thresholds for RBP_k; the joint law is fitted at the smallest and largest k
settings: dict = {}  # extraction settings (unused here: checkpoints come from a study file)
synthetic: bool = False  # True: checkpoints drawn from a known law (no model runs)
study_file: Optional[str] = None  # a study TOML naming checkpoints (revisions like log:8): analyse them
checkpoints: Optional[dict] = None  # or their study table; None with no study_file: those the cache holds
cache_dir: Optional[str] = None  # None: $RBPLAB_CACHE or ~/.cache/rbplab
extract: bool = False  # True: run the models for checkpoints missing from the cache; False: name them
output_dir: Optional[str] = None  # folder for tables and figures (the report sets it); None: none
ties: str = "pessimistic"  # rank convention: pessimistic (paper), optimistic (g + 1) or expected
n_boot: int = 200  # bootstrap replicates over checkpoints for the joint fits and the frontier comparison

# %%
# The parameters above as values (batch runs hand lists and tables as text).
typed_parameters(globals())  # flags and numbers given as text (papermill -p) typed, or refused
params = NotebookParameters.read(globals())
ks, checkpoints = params.ks, params.checkpoints
if checkpoints is None and study_file is None and not synthetic:
    # The defaults analyse what the cache holds (what `rbplab demo` scored), found as a report finds it.
    checkpoints = cached_checkpoints(params.families or [], params.corpora or default_corpora(), cache_dir)
training = params.open_training(checkpoints)
if training.banner:
    report.banner(training.banner, output_dir)
table = report.save_table(training.table, "checkpoints", output_dir)
k_low, k_high = min(ks), max(ks)

# %% [markdown]
# ## Loss versus tokens seen D, per size
# OLS in log-log space per size: $L = a D^{-\beta}$, with the t-interval of $\beta$ over checkpoints.

# %%
readable(report.save_table(training.data_fits(), "data_fits", output_dir))

# %%
corpus = table["corpus"].iloc[0]
for k, y, label in (
    (k_low, "neg_log_rbp", f"-log RBP_{k_low}"),
    (k_high, "neg_log_rbp", f"-log RBP_{k_high}"),
    (k_low, "ce", "CE"),
):
    sel = table[(table["corpus"] == corpus) & (table["k"] == k)]
    fits = data_scaling.data_fits(sel, y=y)
    figure = plots.training_dynamics(sel, fits, y=y, y_label=label, title=f"{corpus}: {label} vs D")
    show(report.save_figure(figure, f"rbp{k}_vs_D" if y == "neg_log_rbp" else "ce_vs_D", output_dir))

# %% [markdown]
# ## The joint law L(S, D)
# One row per corpus and quantity: E, A, B, α (size exponent), β (data exponent) and the frontier
# exponent a = β/(α+β) (S_opt ∝ C^a), each with a percentile bootstrap interval. On scored
# checkpoints every replicate resamples the checkpoints and, paired across all of them, the
# corpus's documents (`resampled` says which).

# %%
laws = training.joint_laws(n_boot)
joint = report.save_table(laws.table(), "joint_fits", output_dir)
report.headline(headlines.training(joint, synthetic=training.source == "synthetic"), output_dir)
readable(joint)

# %% [markdown]
# ## Iso-loss contours and the compute-optimal frontier
# The fitted $-\log \mathrm{RBP}_1$ surface over (D, S); dashed lines are the compute-optimal
# frontiers of RBP_1 and of CE (each from its own fitted law), markers the checkpoints.

# %%
surface, frontiers = laws.surface(corpus)
sel = table[(table["corpus"] == corpus) & (table["k"] == k_low) & (table["D"] > 0)]
surface_figure = plots.iso_loss(
    surface, frontiers, sel, loss_label=f"-log RBP_{k_low}", title=f"{corpus}: fitted -log RBP_{k_low}(S, D)"
)
report.save_figure(surface_figure, "iso_loss", output_dir)
show(report.save_figure(surface_figure, "headline", output_dir))

# %% [markdown]
# ## Does the frontier of RBP_k differ from CE's?
# Paired bootstrap (the same checkpoints and documents for every quantity): the difference of the
# frontier exponents and log10 of the ratio of optimal sizes at the median compute, with intervals,
# on every corpus. `differs` is True only when an interval excludes 0; `extrapolated` is True when
# either optimum (S_opt, D_opt at that compute) lies outside the scored sizes and checkpoints, where
# the size ratio is the fitted laws' extrapolation rather than a measurement.

# %%
readable(report.save_table(laws.frontiers(reference="CE", source=training.source), "frontiers", output_dir))

# %% [markdown]
# ## Explore
# Slide k and the training step: left, the loss of every size against D with its power-law fit
# and the chosen step marked; right, the loss against S at that step.

# %%
TrainingView(table, k=k_low)

# %%
readable(report.save_table(laws.headline(source=training.source), "headline", output_dir))
