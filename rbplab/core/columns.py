"""Column names of rbplab's tidy tables, one place for every layer.

Every table that describes runs starts with the run's identity (RUN_COLUMNS); metric tables add
METRIC_COLUMNS. Fits group by FIT_GROUP_COLUMNS: one line per family, corpus, tie convention,
metric and threshold.
"""

from __future__ import annotations

FAMILY = "family"  # a registry family (or "custom" / "synthetic")
MODEL = "model"  # the model's short name; "name@revision" for a checkpoint
CORPUS = "corpus"
SIZE = "S"  # non-embedding parameters
K = "k"  # rank threshold of RBP_k
METRIC = "metric"  # "rbp", "ce" or "mean_p"
VALUE = "value"  # the metric itself (RBP_k, CE in nats, mean target probability)
LOSS = "loss"  # the positive quantity a scaling law fits: -log RBP_k, CE, -log mean p
TIES = "ties"  # the tie convention of the ranks

RUN_COLUMNS = (FAMILY, MODEL, CORPUS, SIZE)
METRIC_COLUMNS = (METRIC, K, VALUE, LOSS)
FIT_GROUP_COLUMNS = (FAMILY, CORPUS, TIES, METRIC, K)
