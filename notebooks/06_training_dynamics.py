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

import numpy as np
import pandas as pd

from rbplab.analysis import data_scaling
from rbplab.store import registry
from rbplab.study import load_study_file
from rbplab.study.synthetic import synthetic_training_table
from rbplab.viz import headlines, plots, report
from rbplab.viz.parameters import as_mapping, as_names, as_numbers
from rbplab.viz.widgets import TrainingView, show

# %% tags=["parameters"]
families: list[str] = ["micro"]  # model families of the registry; their sizes shape the synthetic fallback
ks: list[int] = [1, 10, 100]  # thresholds for RBP_k; the joint law is fitted at the smallest and largest k
settings: dict = {}  # extraction settings (unused here: checkpoints come from a study file)
synthetic: bool = False  # True: checkpoints drawn from a known law (no model runs)
study_file: Optional[str] = None  # a study TOML naming checkpoints (revisions like log:8): analyse them
checkpoints: Optional[dict] = None  # or the checkpoints' study table (the report finds cached ones)
cache_dir: Optional[str] = None  # None: $RBPLAB_CACHE or ~/.cache/rbplab
extract: bool = False  # True: run the models for checkpoints missing from the cache; False: name them
output_dir: Optional[str] = None  # folder for tables and figures (the report sets it); None: none
ties: str = "pessimistic"  # rank convention: pessimistic (paper), optimistic (g + 1) or expected
n_boot: int = 200  # bootstrap replicates over checkpoints for the joint fits and the frontier comparison

# %%
# Batch runs hand lists and tables as text (papermill -p ks '[1, 100]'): read them as such.
families, ks = as_names(families, "families"), as_numbers(ks, "ks")
checkpoints = as_mapping(checkpoints, "checkpoints") or None
table, reason, study = None, None, None
if synthetic:
    reason = "`synthetic = True`"
elif checkpoints or study_file:
    grid = checkpoints or study_file
    study = load_study_file(grid, cache_dir=cache_dir, ties=ties, extract=extract)
    table = study.training_table(ks)
    enough = len(table) and table.groupby(["corpus", "k"])["D"].nunique().min() >= 2
    if not enough:
        table, study, reason = None, None, f"the study {grid} names no checkpoints with known D"
else:
    reason = (
        "no study file with checkpoints was given (the families' final models alone have no "
        'data axis; list checkpoints with `revisions = "log:8"` in a study file)'
    )
if table is None:
    sizes = None
    try:
        sizes = sorted({S for f in families or [] for S in registry.family_models(f)["S"]})
    except (registry.UnknownFamilyError, FileNotFoundError, ValueError):
        sizes = None
    table = synthetic_training_table(ks=ks, **({"sizes": sizes} if sizes and len(sizes) >= 3 else {}))
    report.banner(
        f"SYNTHETIC DATA: this notebook analyses checkpoints drawn from a known law "
        f"(rbplab.study.synthetic.synthetic_training_table) because {reason}. The fits below should "
        "recover that law; they say nothing about real models.",
        output_dir,
    )
source = "synthetic" if table["family"].eq("synthetic").all() else "checkpoints"
report.save_table(table, "checkpoints", output_dir)
k_low, k_high = min(ks), max(ks)

# %% [markdown]
# ## Loss versus tokens seen D, per size
# OLS in log-log space per size: $L = a D^{-\beta}$, with the t-interval of $\beta$ over checkpoints.

# %%
per_size = [
    data_scaling.data_fits(table, y="neg_log_rbp").assign(quantity="-log RBP_k"),
    data_scaling.data_fits(table[table["k"] == k_low], y="ce").assign(quantity="CE", k=np.nan),
]
data_fit_table = report.save_table(pd.concat(per_size, ignore_index=True), "data_fits", output_dir)
data_fit_table

# %%
corpus = table["corpus"].iloc[0]
for k in (k_low, k_high):
    sel = table[(table["corpus"] == corpus) & (table["k"] == k)]
    fits = data_scaling.data_fits(sel, y="neg_log_rbp")
    figure = plots.training_dynamics(sel, fits, y_label=f"-log RBP_{k}", title=f"{corpus}: -log RBP_{k} vs D")
    show(report.save_figure(figure, f"rbp{k}_vs_D", output_dir))
sel = table[(table["corpus"] == corpus) & (table["k"] == k_low)]
figure = plots.training_dynamics(
    sel, data_scaling.data_fits(sel, y="ce"), y="ce", y_label="CE", title=f"{corpus}: CE vs D"
)
show(report.save_figure(figure, "ce_vs_D", output_dir))

# %% [markdown]
# ## The joint law L(S, D)
# One row per corpus and quantity: E, A, B, α (size exponent), β (data exponent) and the frontier
# exponent a = β/(α+β) (S_opt ∝ C^a), each with a percentile bootstrap interval. On scored
# checkpoints every replicate resamples the checkpoints and, paired across all of them, the
# corpus's documents (`resampled` says which).

# %%
quantities = {
    f"RBP_{k_low}": ("neg_log_rbp", k_low),
    f"RBP_{k_high}": ("neg_log_rbp", k_high),
    "CE": ("ce", k_low),
}


def checkpoint_losses(corpus_name):
    """S, D, losses and document replicates of one corpus (points with D > 0, table order)."""
    parts = {
        name: table[(table["corpus"] == corpus_name) & (table["k"] == k)]
        for name, (_, k) in quantities.items()
    }
    first = parts[f"RBP_{k_low}"]
    keep = first["D"].to_numpy() > 0  # step 0 has seen no data: no place on a log axis
    losses = {name: parts[name][column].to_numpy()[keep] for name, (column, _) in quantities.items()}
    replicates = None
    if study is not None:
        reps = study.training_replicates(corpus_name, [k_low, k_high], n_rep=n_boot)
        by_name = {f"RBP_{k_low}": reps[k_low], f"RBP_{k_high}": reps[k_high], "CE": reps["ce"]}
        replicates = {name: r[:, keep] for name, r in by_name.items()}
    return first["S"].to_numpy()[keep], first["D"].to_numpy()[keep], losses, replicates


# One bootstrap per corpus, read twice: here for the laws, below for the frontier comparison.
bootstraps, rows = {}, []
for name in table["corpus"].unique():
    S, D, losses, replicates = checkpoint_losses(name)
    fits, boots = data_scaling.bootstrap_joint(S, D, losses, n_boot=n_boot, replicates=replicates)
    bootstraps[name] = (S, D, fits, boots)
    law = data_scaling.law_rows(fits, boots, losses, replicates=replicates)
    rows.append(law.assign(family=table["family"].iloc[0], corpus=name))
joint = report.save_table(pd.concat(rows, ignore_index=True), "joint_fits", output_dir)
report.headline(headlines.training(joint, synthetic=source == "synthetic"), output_dir)
joint

# %% [markdown]
# ## Iso-loss contours and the compute-optimal frontier
# The fitted $-\log \mathrm{RBP}_1$ surface over (D, S); dashed lines are the compute-optimal
# frontiers of RBP_1 and of CE (each from its own fitted law), markers the checkpoints.

# %%
S, D, laws, _ = bootstraps[corpus]
sel = table[(table["corpus"] == corpus) & (table["k"] == k_low) & (table["D"] > 0)]
surface = data_scaling.law_surface(laws[f"RBP_{k_low}"], S, D)
C = np.geomspace(surface["C"].min(), surface["C"].max(), 40)
frontiers = pd.concat(
    [data_scaling.frontier(laws[name], C).assign(quantity=name) for name in (f"RBP_{k_low}", "CE")],
    ignore_index=True,
)
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
comparison = [
    data_scaling.frontier_rows(fits, boots, S, D, reference="CE").assign(corpus=name, source=source)
    for name, (S, D, fits, boots) in bootstraps.items()
]
report.save_table(pd.concat(comparison, ignore_index=True), "frontiers", output_dir)

# %% [markdown]
# ## Explore
# Slide k and the training step: left, the loss of every size against D with its power-law fit
# and the chosen step marked; right, the loss against S at that step.

# %%
TrainingView(table, k=k_low)

# %%
headline = joint[
    [
        "corpus",
        "quantity",
        "alpha",
        "alpha_low",
        "alpha_high",
        "beta",
        "beta_low",
        "beta_high",
        "E",
        "frontier_exponent",
    ]
].assign(source=source)
report.save_table(headline, "headline", output_dir)
