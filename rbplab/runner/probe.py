"""How fast this machine scores: a model's tokens per second measured on its own device, and the
FLOP rate that implies (`rbplab.runner.cost_model`), from which every other model's time scales.

The probe scores a batch of the cheapest model of a grid over and over for a few seconds after
one untimed batch, the way a run batches them; it is the one step of planning costs that loads
weights.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from rbplab.extraction.pipeline import load_scorer
from rbplab.extraction.plan import Plan
from rbplab.extraction.scoring import batches, default_batch_tokens
from rbplab.runner.cost_model import architecture, plan_costs

DEFAULT_PROBE_SECONDS = 3.0  # the least time the probe scores for (after one untimed batch)


@dataclass(frozen=True)
class Throughput:
    """Scored tokens per second of one model on one device, and the FLOP rate it implies."""

    model: str
    tokens_per_second: float
    flops_per_token: float
    device: str
    measured: bool  # False: given by the caller
    tokens: int = 0  # scored by the probe
    seconds: float = 0.0
    load_seconds_per_byte: float = 0.0  # loading the probed model's weights (0: not measured)

    @property
    def flops_per_second(self) -> float:
        return self.tokens_per_second * self.flops_per_token


def probe_throughput(
    plan: Plan, tokens: int | None = None, min_seconds: float = DEFAULT_PROBE_SECONDS
) -> Throughput:
    """Score the first `tokens` targets of `plan`'s corpus (default: one batch of the run's
    budget, `batch_tokens`) with its model (weights loaded) the way a run batches them, after one
    untimed batch (first-call costs: allocation, kernel selection), again and again until
    `min_seconds` have gone by. A probe smaller than a batch measures smaller batches than the run
    scores: 512 tokens put the demo's estimate at 1.7x its time, one CPU batch (2,048) at 1.25x."""
    from transformers.utils import logging

    from rbplab.extraction.plan import plan_windows

    logging.disable_progress_bar()  # the plan's table is the output; no weight-loading bar
    loading = time.perf_counter()
    scorer = load_scorer(plan)
    loading = time.perf_counter() - loading
    budget = plan.settings.batch_tokens or default_batch_tokens(scorer.device)
    windows, scored = [], 0
    for window in plan_windows(plan):
        if scored >= (tokens or budget):
            break
        windows.append(window)
        scored += window.n_scored
    groups = list(batches(windows, budget, plan.policy.context_length))
    scorer.score(*groups[0])
    # Passes over the same windows until `min_seconds` have gone by: on a machine shared with other
    # jobs one short pass can be several times off, and a longer window averages that out.
    passes, seconds = 0, 0.0
    while passes == 0 or seconds < min_seconds:
        _synchronize(scorer.device)
        started = time.perf_counter()
        for length, group in groups:
            scorer.score(length, group)
        _synchronize(scorer.device)
        seconds += time.perf_counter() - started
        passes += 1
    scored *= passes
    arch = architecture(plan.described.config)
    per_token, (weights, _, _) = plan_costs(plan, arch, batch_tokens=budget, device=str(scorer.device))
    return Throughput(
        plan.described.model.keyed_name,
        scored / seconds,
        float(per_token),
        str(scorer.device),
        True,
        scored,
        seconds,
        loading / weights,
    )


def _synchronize(device: Any) -> None:
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize(device)
