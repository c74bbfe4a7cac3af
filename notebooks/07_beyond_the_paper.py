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
# # 7 · Beyond the paper: the cross-entropy decomposition, and does the law predict the next model?
#
# Two analyses the per-token statistics already support. **The error-entropy decomposition**
# (arXiv 2510.04067): with RBE the number of tokens ranked above the target, $p_e = \Pr(\mathrm{RBE}=e)$
# and $Q_e$ the geometric mean of the target probability over tokens with $\mathrm{RBE}=e$,
# cross-entropy splits exactly as $\mathrm{CE} = \mathrm{EE} + \mathrm{SA} - \mathrm{Conf}$: the error
# entropy $\mathrm{EE} = -\sum_e p_e \log p_e$, the self-alignment $\mathrm{SA} = \sum_e p_e \log(p_e/q_e)$
# ($q_e = Q_e/C$) and the confidence $\mathrm{Conf} = \log C$, $C = \sum_e Q_e$. Its claim: only EE
# follows a power law in model size. SA and Conf sum over the RBE values a corpus happens to show, so
# they grow with the number of tokens: compare them across corpora only at equal token counts.
# **The prediction audit**: fit the law on the smaller models, predict the held-out larger ones with a
# prediction interval, and count how often the interval covers the measurement.

# %%
from typing import Optional

from rbplab import report
from rbplab.analysis import fit
from rbplab.study import decomposition
from rbplab.viz import headlines, plots
from rbplab.viz.parameters import NotebookParameters, typed_parameters
from rbplab.viz.readable import readable
from rbplab.viz.widgets import show

# %% tags=["parameters"]
families: list[str] = ["micro"]  # model families of the registry (`rbplab families`)
models: Optional[list[str]] = None  # a subset of the families' model names; None: all members
corpora: Optional[list[str]] = None  # bundled names, "hub:<name>" or paths; None: every bundled corpus
ks: list[int] = [1, 10, 100]  # thresholds of -log RBP_k audited beside CE and EE
holdouts: list[int] = [1, 2]  # how many of the largest sizes are held out and predicted
settings: dict = {}  # extraction settings (ExtractionSettings fields), e.g. {"max_tokens": 2000}
synthetic: bool = False  # True: made-up models (rbplab.study.synthetic_study), no cache needed
study_file: Optional[str] = None  # a study TOML (`rbplab run`): analyse exactly its grid
cache_dir: Optional[str] = None  # None: $RBPLAB_CACHE or ~/.cache/rbplab
extract: bool = False  # True: run the models for runs missing from the cache; False: name them
output_dir: Optional[str] = None  # folder for tables and figures (the report sets it); None: none
ties: str = "pessimistic"  # rank convention: pessimistic (paper), optimistic (g + 1) or expected
n_boot: int = 200  # document-bootstrap replicates of the terms' exponents (reads each run's tokens)

# %%
# The parameters above as values (batch runs hand lists as text) and the study they name.
typed_parameters(globals())  # flags and numbers given as text (papermill -p) typed, or refused
params = NotebookParameters.read(globals())
study, ks, holdouts = params.open_study(), params.ks, params.holdouts
# Size laws compare models at one training step: a study of checkpoints keeps each model's last.
final = study.at_step() if study.has_training else study
terms = report.save_table(decomposition.table(final), "decomposition", output_dir)
decomposition_fits = report.save_table(decomposition.fits(final), "decomposition_fits", output_dir)
audit = report.save_table(decomposition.prediction_audit(final, ks, holdouts), "prediction_audit", output_dir)
audit_summary = report.save_table(fit.audit_summary(audit), "audit_summary", output_dir)
report.headline(
    headlines.decomposition(decomposition_fits)
    + " "
    + headlines.prediction_audit(audit_summary, study.level),
    output_dir,
)

# %% [markdown]
# ## The decomposition per model
# One row per model and corpus (in nats): `n_tokens` and `n_rbe` (distinct RBE values observed)
# stand beside SA and Conf because both grow with them; `ee_mm` is the Miller-Madow bias-corrected
# EE, `mrr` the mean reciprocal rank, `residual` = CE − (EE + SA − Conf), zero up to rounding.

# %%
readable(terms)

# %% [markdown]
# ## EE, SA and Conf against model size
# Power laws of each term against S (`note` says why a term has none, e.g. a negative Conf).

# %%
show(report.save_figure(plots.decomposition_vs_size(terms), "decomposition_vs_size", output_dir))
readable(decomposition_fits[["family", "corpus", "metric", "alpha", "alpha_low", "alpha_high", "r2", "note"]])

# %% [markdown]
# Uncertainty from the corpus: the document bootstrap of each term's exponent, every model of a
# corpus on the same resamples. SA and Conf replicates are biased low (a resample shows fewer distinct
# RBE values), so read their intervals as spread, not as intervals around the estimate.

# %%
readable(
    report.save_table(decomposition.bootstrap(final, n_boot), "decomposition_bootstrap", output_dir)[
        ["family", "corpus", "metric", "alpha", "alpha_boot_low", "alpha_boot_high", "n_boot_valid"]
    ]
)

# %% [markdown]
# ## The decomposition of cross-entropy, model by model
# EE and SA stack upwards, −Conf downwards: the bars' net height is CE (the diamond).

# %%
show(report.save_figure(plots.decomposition_bars(terms), "decomposition_bars", output_dir))

# %% [markdown]
# ## Does the law predict the next model?
# For each k, CE and EE: fit on all but the n largest sizes, predict those with a prediction interval
# at the study's level. `interval_units` is the error in half-widths of that interval (|·| ≤ 1: covered);
# errors of one sign growing with the distance say the law bends.

# %%
figure = plots.prediction_audit(audit, level=study.level)
show(report.save_figure(figure, "headline", output_dir))
readable(audit_summary)

# %%
readable(audit)

# %%
readable(report.save_table(audit_summary, "headline", output_dir))
