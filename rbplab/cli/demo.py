"""The main job on the embedded default: the micro-suite on every bundled corpus, end to end.

Extraction is `rbplab run`'s local runner over the grid (one progress bar), through the cache, so
a second run only reads parquet; the notebooks then run headless into a report, and the time
spent in each stage is printed. Everything is offline: the models and corpora ship in data/.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pandas as pd
import transformers

from rbplab.cli.study_command import probe_setup
from rbplab.core.errors import RunFailedError
from rbplab.core.settings import ExtractionSettings
from rbplab.grid import Grid, StudyFileError
from rbplab.report import run_report
from rbplab.runner import run_study
from rbplab.runner.costs import CostTotals, estimate_costs
from rbplab.store.files import cache_root
from rbplab.study import distribution, load_study, size
from rbplab.study.loading import default_corpora
from rbplab.viz.readable import text

DEMO_KS = (1, 10, 100)
# The data axis: the micro-suite's four intermediate checkpoints and its final models, each corpus
# cut to its first DEMO_CHECKPOINT_TOKENS tokens so 24 more models x 4 corpora cost a fraction of
# the full-corpus runs above (a full-corpus checkpoint study is `rbplab run studies/...toml`).
DEMO_REVISIONS = "log:5"
DEMO_CHECKPOINT_TOKENS = 16_384


def run_demo(
    family: str = "micro",
    corpora: list[str] | None = None,
    *,
    output_dir: str | Path = "reports",
    cache_dir: str | Path | None = None,
    settings: ExtractionSettings | None = None,
    notebooks: bool = True,
) -> pd.DataFrame:
    """Extract `family` on `corpora` (default: every bundled corpus), print RBP_k, alpha and R²
    per corpus, run the notebooks into `output_dir`, and return the fit table."""
    started = time.perf_counter()
    # The demo's models are local: transformers' per-load weight bar would only bury our own lines.
    transformers.utils.logging.disable_progress_bar()
    root = cache_root(cache_dir)
    settings = settings or ExtractionSettings()
    corpora = list(corpora) if corpora else default_corpora()
    print(f"rbplab demo: family {family!r}, cache {root}")
    grid = Grid.read(
        {"families": [family], "corpora": corpora, "settings": settings.to_dict(changed_only=True)}
    )
    # One single-threaded process per CPU: on CPUs the small micro models score ~2x faster this way
    # than in one multi-threaded process, with byte-identical shards (tests/runner).
    workers = os.cpu_count() or 1
    # What `rbplab plan` says of this grid, then what the run took: the estimate checked every time.
    estimate = estimate_costs(grid, root, workers=workers).totals
    print(plan_line(estimate))
    clock = time.perf_counter()
    run = run_study(grid, cache_dir=root, workers=workers)
    if not run.ok:
        raise RunFailedError(f"{len(run.failures)} extraction unit(s) failed: {run.failures[0]}")
    measured = time.perf_counter() - clock
    if estimate.wall_seconds is not None and estimate.missing + estimate.partial + estimate.damaged:
        print(
            f"extraction took {measured:.1f} s against {estimate.wall_seconds:.1f} s planned "
            f"(estimate / measured = {estimate.wall_seconds / measured:.2f})"
        )
    stages = {"planning (driver)": run.plan_seconds} | {f"{k} (units)": v for k, v in run.timings.items()}
    checkpoints = score_checkpoints(family, corpora, settings, root, stages)
    clock = time.perf_counter()
    study = load_study(grid, cache_dir=root)  # the grid that was run is the grid analysed
    stages["reading the cache"] = time.perf_counter() - clock

    runs_table = study.run_table()
    points = study.points(DEMO_KS).pivot_table(index=["corpus", "model", "S"], columns="k", values="rbp")
    points.columns = [f"RBP_{k}" for k in points.columns]
    per_model = points.reset_index().merge(
        runs_table[["corpus", "model", "n_tokens", "ce"]], on=["corpus", "model"]
    )
    fits = size.fit_table(study, DEMO_KS)
    ce_fits = distribution.ce_exponents(study)

    with pd.option_context("display.width", 160, "display.max_columns", 20):
        print("\nPer model and corpus (RBP_k, pessimistic ties; CE in nats/token):")
        print(text(per_model.sort_values(["corpus", "S"])))
        print("\nScaling fits  -log RBP_k = A * S^-alpha  (OLS in log-log, 95% CI):")
        print(text(fits))
        if ce_fits is not None:
            print("\nCross-entropy versus -log RBP_1 exponents:")
            print(text(ce_fits))

    out = Path(output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    fits.to_csv(out / "fits.csv", index=False)
    per_model.to_csv(out / "per_model.csv", index=False)
    if notebooks:
        print()
        clock = time.perf_counter()
        results = run_report(grid, out, cache_dir=root, parameters={"checkpoints": checkpoints})
        stages["notebooks"] = time.perf_counter() - clock
        failed = results[~results["ok"]]
        if len(failed):
            print(f"{len(failed)} notebook(s) failed: {', '.join(failed['notebook'])}")
        _print_data_axis(out / "06_training_dynamics" / "headline.csv", checkpoints is not None)
    print("\ntime by stage: " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in stages.items()))
    print(f"done in {time.perf_counter() - started:.0f} s")
    print(f"outputs: {out}  (index.html, fits.csv, per_model.csv)")
    print(f"cache:   {root}")
    return fits


def score_checkpoints(
    family: str, corpora: list[str], settings: ExtractionSettings, root: Path, stages: dict[str, float]
) -> dict | None:
    """Score the family's checkpoints (the data axis of notebook 06); the study table, or None when
    the family has no checkpoint schedule to space."""
    cap = min(settings.max_tokens or DEMO_CHECKPOINT_TOKENS, DEMO_CHECKPOINT_TOKENS)
    table = {
        "families": [family],
        "corpora": corpora,
        "revisions": DEMO_REVISIONS,
        "settings": settings.with_changes(max_tokens=cap).to_dict(changed_only=True),
    }
    try:
        grid = Grid.read(table)
    except StudyFileError as err:
        print(f"data axis skipped: {err}")
        return None
    checkpoints = DEMO_REVISIONS.split(":")[1]
    print(
        f"\ndata axis: {checkpoints} checkpoints per model, evenly spaced in log training step, "
        f"first {cap:,} tokens of each corpus"
    )
    run = run_study(grid, cache_dir=root, workers=os.cpu_count() or 1)
    if not run.ok:
        raise RunFailedError(f"{len(run.failures)} checkpoint unit(s) failed: {run.failures[0]}")
    stages["checkpoints: planning (driver)"] = run.plan_seconds
    stages["checkpoints: units"] = sum(run.timings.values())
    return table


def _print_data_axis(headline: Path, scored: bool) -> None:
    """Notebook 06's joint laws, when it ran on the scored checkpoints."""
    if not (scored and headline.is_file()):
        return
    table = pd.read_csv(headline)
    columns = ["corpus", "quantity", "alpha", "alpha_low", "alpha_high", "beta", "beta_low", "beta_high"]
    with pd.option_context("display.width", 160):
        print("\nJoint law L(S, D) = E + A S^-alpha + B D^-beta on the checkpoints (95% intervals):")
        print(text(table[columns]))


def plan_line(totals: CostTotals) -> str:
    """The plan in one line: what is cached, what is left to score and the time it should take."""
    head = f"plan: {totals.entries} entries, {totals.cached} cached"
    to_score = totals.missing + totals.partial + totals.damaged
    if not to_score:
        return head + ", nothing to score"
    when = ""
    if totals.wall_seconds is not None:
        when = f", about {totals.wall_seconds:.0f} s at {totals.workers} workers"
        rate = totals.throughput
        if rate is not None and rate.measured:
            probe = f"{rate.tokens_per_second:,.0f} tok/s per worker of {rate.model}, {probe_setup(rate)}"
            when += f" (probe: {probe})"
    return f"{head}, {to_score} to score ({totals.tokens_to_score:,} tokens){when}"
