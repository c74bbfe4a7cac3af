"""`rbplab fit` and `rbplab report`: the analyses of a grid's cached runs, as a table of fits or as
the notebooks' report.

`rbplab fit`: the scaling fits of -log RBP_k versus S, from the cache (a missing run is an error
naming it; --extract computes it).
"""

from __future__ import annotations

import argparse

from rbplab.cli.arguments import (
    add_grid_arguments,
    grid_from_args,
    positive_int,
    refuse_study_with_grid_options,
    revisions_from_args,
    settings_from_args,
)
from rbplab.cli.output import add_format_argument, print_table

FIT_EXAMPLES = """examples:
  rbplab fit -c prose --k 1 10 100
  rbplab fit -f pythia -c hub:wikipedia --max-tokens 500000 --extract   # runs the models it lacks"""


def configure_fit(p: argparse.ArgumentParser) -> None:
    add_grid_arguments(p, defaults=True)
    p.add_argument(
        "--k", nargs="+", type=positive_int, default=[1, 10, 100], help="thresholds k (default 1 10 100)"
    )
    add_extract_flag(p)
    add_format_argument(p)


def run_fit(args: argparse.Namespace) -> int:
    grid = grid_from_args(args)
    from rbplab.study import MissingRunsError, load_study, size

    try:
        study = load_study(grid, cache_dir=args.cache_dir, extract=args.extract)
    except MissingRunsError as err:
        raise err.with_remedy(missing_remedy(args)) from None
    print_table(size.fit_table(study, args.k), args.format)
    return 0


REPORT_EXAMPLES = """examples:
  rbplab report -c prose humaneval --figures png,pdf
  rbplab report --notebook 01 02 --params batch.yaml -p ks '[1, 5, 50]'   # notebooks by number or stem
  rbplab report studies/micro-checkpoints.toml --notebook 06_training_dynamics"""


def configure_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", nargs="?", help="a study TOML (rbplab run): analyse exactly its grid")
    add_grid_arguments(p, defaults=True)
    p.add_argument("--output-dir", "-o", default="reports", help="where executed notebooks and HTML go")
    p.add_argument(
        "--notebook",
        nargs="+",
        default=None,
        help="notebooks to run, by stem or number (01_rbp_vs_size or 01; default: all)",
    )
    p.add_argument(
        "--figures",
        metavar="FORMATS",
        default="",
        help="also export every figure as these formats, comma-separated (png,svg,pdf; needs the "
        "'export' extra and Chromium), under OUTPUT_DIR/figures/",
    )
    p.add_argument(
        "--figure-size",
        choices=("full", "column", "screen"),
        default="full",
        help="--figures as paper figures 7 in wide (full, default) or 3.5 in (column), 8-9 pt text and "
        "no in-figure title; or as shown on screen (screen)",
    )
    p.add_argument(
        "--params",
        metavar="FILE.yaml",
        help="notebook parameters from a YAML file (name: value), as papermill -f takes them",
    )
    p.add_argument(
        "-p",
        "--param",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "VALUE"),
        help="one notebook parameter, its value read as YAML (e.g. -p ks '[1, 5, 50]'); repeatable",
    )
    add_extract_flag(p)


def _report_parameters(args: argparse.Namespace) -> dict:
    """--params FILE.yaml, then each -p NAME VALUE over it."""
    from rbplab.core.documents import parse_yaml
    from rbplab.core.errors import BadFileError
    from rbplab.viz.parameters import ParameterError, read_params_file

    values = read_params_file(args.params) if args.params else {}
    for name, text in args.param:
        try:
            values[name] = parse_yaml(text, "the value")
        except BadFileError as err:
            raise ParameterError(f"-p {name}: cannot read {text!r} as a YAML value ({err})") from None
    return values


def _report_request(args: argparse.Namespace, parameters: dict):
    """The report's grid, cache folder and extract flag: the study file, else the grid options;
    a parameter from --params/-p named as part of the grid (families, corpora, models, settings,
    cache_dir, extract, study_file, as papermill takes them) replaces the option, and leaves
    `parameters` here: the grid is the report's one request."""
    from rbplab.core.settings import ExtractionSettings
    from rbplab.grid import Grid
    from rbplab.viz.parameters import as_mapping, as_names

    study = parameters.pop("study_file", None) or args.study
    families = as_names(parameters.pop("families", None), "families")
    corpora = as_names(parameters.pop("corpora", None), "corpora")
    models = as_names(parameters.pop("models", None), "models")
    settings = parameters.pop("settings", None)
    cache_dir = parameters.pop("cache_dir", None) or args.cache_dir
    flag = parameters.pop("extract", False)
    extract = args.extract or (
        flag.strip().lower() in ("true", "1", "yes") if isinstance(flag, str) else bool(flag)
    )
    if study:
        refuse_study_with_grid_options(args)
    else:
        grid = grid_from_args(args)  # before the report's imports: a bad name costs no seconds
    from rbplab.report.request import resolved

    if study:
        return resolved(lambda: Grid.read(study)), cache_dir, extract
    if families or corpora or models or settings is not None:
        if settings is not None:
            settings = resolved(lambda: ExtractionSettings.from_mapping(as_mapping(settings, "settings")))
        grid = resolved(
            lambda: Grid.from_names(
                families or grid.members,
                corpora or grid.corpora,
                grid.settings if settings is None else settings,
                models=models,
                revisions=revisions_from_args(args),
            )
        )
    return grid, cache_dir, extract


def run_report_command(args: argparse.Namespace) -> int:
    from rbplab.viz.export import check_formats

    formats = check_formats([f for f in args.figures.split(",") if f.strip()])
    parameters = _report_parameters(args)
    grid, cache_dir, extract = _report_request(args, parameters)
    from rbplab.report import ReportOptions, run_report

    options = ReportOptions(
        notebooks=args.notebook,
        figures=formats,
        figure_size=args.figure_size,
        missing_remedy=missing_remedy(args),
    )
    results = run_report(
        grid, args.output_dir, cache_dir=cache_dir, extract=extract, parameters=parameters, options=options
    )
    return 0 if results["ok"].all() else 1


def add_extract_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--extract",
        action="store_true",
        help="run the models for runs missing from the cache (default: a missing run is an error naming it)",
    )


def missing_remedy(args: argparse.Namespace) -> str:
    """How the CLI says to compute missing runs: the user's own command with --extract, less a
    `--head fused` this machine cannot run (the head changes no rank, so the command then works);
    a CUDA device this machine lacks is kept (it decides the dtype, so the key) and named."""
    import shlex

    from rbplab.extraction.fingerprints import cpu_only
    from rbplab.extraction.heads import runnable_here

    argv = [a for a in getattr(args, "argv", []) if a != "--extract"]
    settings = settings_from_args(args)
    if not runnable_here(settings):
        argv = _without_option(argv, "--head")
    command = shlex.join(["rbplab", *argv, "--extract"])
    if settings.device.startswith("cuda") and cpu_only(settings.with_changes(device="auto")):
        # the device asked for decides the dtype "auto" (so the key): the command stays, and where
        return f"--extract on a machine with CUDA (this one has none): {command}"
    return f"--extract: {command}"


def _without_option(argv: list[str], option: str) -> list[str]:
    """`argv` without `option` and its value (`--head fused` or `--head=fused`)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(option + "="):
            out.append(arg)
    return out
