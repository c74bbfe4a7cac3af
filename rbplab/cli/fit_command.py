"""`rbplab fit`: the scaling fits of -log RBP_k versus S, from the cache (a missing run is an error
naming it; --extract computes it)."""

from __future__ import annotations

import argparse

from rbplab.cli.extract_command import positive_int, settings_from_args
from rbplab.cli.output import add_format_argument, print_table
from rbplab.cli.study_arguments import (
    add_extract_flag,
    check_study_arguments,
    configure_study,
    missing_remedy,
)

FIT_EXAMPLES = """examples:
  rbplab fit -c prose --k 1 10 100
  rbplab fit -f pythia -c hub:wikipedia --max-tokens 500000 --extract   # runs the models it lacks"""


def configure_fit(p: argparse.ArgumentParser) -> None:
    configure_study(p)
    p.add_argument(
        "--k", nargs="+", type=positive_int, default=[1, 10, 100], help="thresholds k (default 1 10 100)"
    )
    add_extract_flag(p)
    add_format_argument(p)


def run_fit(args: argparse.Namespace) -> int:
    check_study_arguments(args)
    from rbplab.grid import Grid
    from rbplab.study import MissingRunsError, load_study, size

    grid = Grid.from_names(args.family, args.corpus, settings_from_args(args))
    try:
        study = load_study(grid, cache_dir=args.cache_dir, extract=args.extract)
    except MissingRunsError as err:
        raise err.with_remedy(missing_remedy(args)) from None
    print_table(size.fit_table(study, args.k), args.format)
    return 0
