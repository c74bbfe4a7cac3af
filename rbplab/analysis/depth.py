"""RBP_k through the depth of a model: tidy tables of RBP_k against relative depth, the size law at
each depth across a family, and the first depth at which a model's RBP_k reaches a level.

A layer's runs come from its own cache entry (`rbplab.core.settings.EntrySpec.lens`): the layer
before the last read through the logit lens, the final layer through the model's own head. A
layer of index i of a model of L layers sits at relative depth (i + 1) / L, so 1.0 is the final
layer. Models of one family may differ in L; the law at a relative depth d takes each model's
shallowest layer at least that deep (index ceil(d L) - 1), the rule `--layers` reads depths by.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rbplab.analysis import fit
from rbplab.analysis.metrics import rbp_curve
from rbplab.core.errors import InvalidArgumentError
from rbplab.core.runs import Run
from rbplab.core.stats import TIES, check_ties

DEPTH_COLUMNS = [
    "family",
    "model",
    "corpus",
    "S",
    "layer",
    "n_layers",
    "depth",
    "ties",
    "k",
    "rbp",
    "neg_log_rbp",
]


@dataclass(frozen=True, eq=False)
class DepthRun:
    """A run read at one layer: `layer` its index (0-based), `n_layers` the model's layer count."""

    run: Run
    layer: int
    n_layers: int

    def __post_init__(self) -> None:
        if not 0 <= self.layer < self.n_layers:
            raise InvalidArgumentError(
                f"{self.run.model} has {self.n_layers} layers (indices 0 to {self.n_layers - 1}), "
                f"so it has no layer {self.layer}"
            )

    @property
    def depth(self) -> float:
        """Relative depth (layer + 1) / n_layers: 1.0 is the final layer."""
        return (self.layer + 1) / self.n_layers


def depth_table(
    runs: Sequence[DepthRun], ks: Iterable[int] | int, ties: Iterable[str] | str | None = None
) -> pd.DataFrame:
    """RBP_k of every run at every k under every tie rule (`ties`: one or several of
    `rbplab.core.stats.TIES`; None: all): one row per (run, layer, tie rule, k), columns
    `DEPTH_COLUMNS`, sorted by family, corpus, model, ties, k and depth."""
    if not runs:
        raise InvalidArgumentError("depth_table needs at least one run read at a layer")
    rules = TIES if ties is None else ((ties,) if isinstance(ties, str) else tuple(ties))
    rules = tuple(check_ties(rule) for rule in rules)
    wanted = np.atleast_1d(np.asarray(list(ks) if not isinstance(ks, int) else ks, dtype=np.int64))
    if wanted.size == 0 or (wanted < 1).any():
        raise InvalidArgumentError(f"ks must be positive integers, got {wanted.tolist()}")
    rows = []
    for item in runs:
        run = item.run
        for rule in rules:
            values = np.asarray(rbp_curve(run.entry_summary, rule).rbp(wanted), dtype=np.float64)
            for k, value in zip(wanted, values, strict=True):
                rows.append(
                    (run.family, run.model, run.corpus, run.S, item.layer, item.n_layers, item.depth, rule)
                    + (int(k), value, -math.log(value) if value > 0 else math.inf)
                )
    table = pd.DataFrame(rows, columns=DEPTH_COLUMNS)
    order = ["family", "corpus", "S", "model", "ties", "k", "depth"]
    return table.sort_values(order, kind="stable").reset_index(drop=True)


def layer_at_depth(depth: float, n_layers: int) -> int:
    """The index of the shallowest layer at least `depth` deep in a model of `n_layers` layers:
    ceil(depth * n_layers) - 1 (depth in (0, 1]; 1.0 is the final layer)."""
    if not 0.0 < depth <= 1.0:
        raise InvalidArgumentError(f"a relative depth is in (0, 1] (1.0 is the final layer), got {depth}")
    return max(0, math.ceil(round(depth * n_layers, 9)) - 1)


def depth_fits(table: pd.DataFrame, depths: Iterable[float], level: float = 0.95) -> pd.DataFrame:
    """The size law -log RBP_k = A S^-alpha at each relative depth of `depths`, per family, corpus,
    tie rule and k (`rbplab.analysis.fit.scaling_fits`: alpha and r2 with their intervals, n_models
    and a note where no fit can be made), from a `depth_table`. At depth d each model contributes
    its layer `layer_at_depth(d, n_layers)`; a model whose table lacks that layer is left out of
    that depth (n_models says how many were fitted)."""
    depths = [float(d) for d in depths]
    if not depths:
        raise InvalidArgumentError("depth_fits needs at least one relative depth")
    frames = []
    for depth in depths:
        wanted = table["n_layers"].map(lambda n, d=depth: layer_at_depth(d, int(n)))
        chosen = table[table["layer"] == wanted]
        if chosen.empty:
            continue
        points = chosen.assign(loss=chosen["neg_log_rbp"], at_depth=depth)
        frames.append(
            fit.scaling_fits(points, y="loss", by=["at_depth", "family", "corpus", "ties", "k"], level=level)
        )
    if not frames:
        raise InvalidArgumentError(f"no run of the table is read at a layer of depths {depths}")
    return pd.concat(frames, ignore_index=True).rename(columns={"at_depth": "depth"})


def first_depth(table: pd.DataFrame, level: float) -> pd.DataFrame:
    """Per model, corpus, tie rule and k of a `depth_table`: the first (shallowest) layer at which
    RBP_k reaches `level` (in (0, 1]), its relative depth and its RBP_k; NaN depth and a <NA>
    layer where no layer read does."""
    if not 0.0 < level <= 1.0:
        raise InvalidArgumentError(f"level is an RBP_k in (0, 1], got {level}")
    groups = ["family", "model", "corpus", "S", "ties", "k"]
    rows = []
    for key, group in table.sort_values("depth", kind="stable").groupby(groups, sort=True, dropna=False):
        reached = group[group["rbp"] >= level]
        first = reached.iloc[0] if len(reached) else None
        rows.append(
            {
                **dict(zip(groups, key, strict=True)),
                "level": level,
                "layer": pd.NA if first is None else int(first["layer"]),
                "n_layers": int(group["n_layers"].iloc[0]),
                "depth": math.nan if first is None else float(first["depth"]),
                "rbp": math.nan if first is None else float(first["rbp"]),
            }
        )
    out = pd.DataFrame(rows)
    out["layer"] = out["layer"].astype("Int64")
    return out
