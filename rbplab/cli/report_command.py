"""`rbplab fit` and `rbplab report`: the analyses of a grid's cached runs, as a table of fits or as
the notebooks' report.

`rbplab fit`: the scaling fits of -log RBP_k versus S, from the cache (a missing run is an error
naming it; --extract computes it).
"""

from __future__ import annotations

import argparse

from rbplab.cli.extract_command import (
    add_extract_flag,
    check_names,
    check_study_arguments,
    configure_study,
    missing_remedy,
    positive_int,
    settings_from_args,
)
from rbplab.cli.output import add_format_argument, print_table

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

    grid = Grid.from_names(args.family + args.model, args.corpus, settings_from_args(args))
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
    configure_study(p)
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
    """The report's grid, cache folder and extract flag: the study file, else --family/--corpus and
    the settings options, each replaced by a parameter of the same name from --params/-p (as
    papermill takes them), which leave `parameters` here: the grid is the report's one request."""
    from rbplab.core.settings import ExtractionSettings
    from rbplab.grid import Grid
    from rbplab.report.run import resolved
    from rbplab.viz.parameters import as_mapping, as_names

    study = parameters.pop("study_file", None) or args.study
    # Names given through -p get the checks --family/--corpus got (check_study_arguments).
    given_families = as_names(parameters.pop("families", None), "families")
    given_corpora = check_names(given_families or [], as_names(parameters.pop("corpora", None), "corpora"))
    families = given_families or args.family + args.model
    corpora = given_corpora or args.corpus
    models = as_names(parameters.pop("models", None), "models")
    settings = parameters.pop("settings", None)
    cache_dir = parameters.pop("cache_dir", None) or args.cache_dir
    flag = parameters.pop("extract", False)
    extract = args.extract or (
        flag.strip().lower() in ("true", "1", "yes") if isinstance(flag, str) else bool(flag)
    )
    if study:
        return resolved(lambda: Grid.read(study)), cache_dir, extract
    if settings is None:
        settings = settings_from_args(args)
    else:
        settings = resolved(lambda: ExtractionSettings.from_mapping(as_mapping(settings, "settings")))
    grid = resolved(lambda: Grid.from_names(families, corpora, settings, models=models))
    return grid, cache_dir, extract


def run_report_command(args: argparse.Namespace) -> int:
    check_study_arguments(args, families=args.study is None)
    from rbplab.viz.export import check_formats

    formats = check_formats([f for f in args.figures.split(",") if f.strip()])
    parameters = _report_parameters(args)
    from rbplab.report import ReportOptions, run_report

    grid, cache_dir, extract = _report_request(args, parameters)
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
