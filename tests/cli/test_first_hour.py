"""What a newcomer meets in the first hour: a fast `--help` (no pandas, no torch), the dtype names
people type, every default in the help, sizes as 85.1M, no columns of None, one progress bar per
step, and `rbplab.extraction` reachable after `import rbplab` alone."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from contextlib import redirect_stdout

import pandas as pd
import pytest

from rbplab.cli import app
from rbplab.cli.output import print_table

HEAVY = ("pandas", "numpy", "torch", "transformers")


def _modules_after(code: str, folder) -> list[str]:
    """The heavy modules a fresh interpreter holds after running `code` (in `folder`: `-c` puts
    the working directory first on the path)."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=folder
    )
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("argv", [["--help"], ["report", "--help"], ["cache", "ls", "--help"]])
def test_help_imports_neither_pandas_nor_torch(argv, tmp_path):
    code = f"from rbplab.cli.app import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass"
    assert _modules_after(code, tmp_path) == []


def test_import_rbplab_reaches_its_subpackages(tmp_path):
    """`import rbplab` alone, then `rbplab.extraction.extract` (docs/python.md): the subpackage
    loads on first use (and `import rbplab` itself stays light)."""
    assert _modules_after("import rbplab", tmp_path) == []
    code = "import rbplab\nassert callable(rbplab.extraction.extract) and rbplab.study.load_study"
    assert "torch" in _modules_after(code, tmp_path)


def _parse(*argv: str) -> argparse.Namespace:
    return app.build_parser().parse_args(list(argv))


@pytest.mark.parametrize(("typed", "meant"), [("fp32", "float32"), ("bf16", "bfloat16"), ("FP16", "float16")])
def test_dtype_takes_the_short_names(typed, meant, capsys):
    assert _parse("extract", "-m", "micro-1-25K", "-c", "prose", "--dtype", typed).dtype == meant
    assert _parse("plan", "-m", "micro-1-25K", "-c", "prose", "--dtype", typed).dtype == meant
    with pytest.raises(SystemExit):  # anything else is still refused, naming the choices
        _parse("extract", "-m", "micro-1-25K", "-c", "prose", "--dtype", "bfloat61")
    err = capsys.readouterr().err
    assert "invalid choice: 'bfloat61'" in err and "bfloat16" in err


def _parsers(parser: argparse.ArgumentParser, name: str = "rbplab"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child_name, child in action.choices.items():
                yield from _parsers(child, f"{name} {child_name}")


def test_every_default_is_in_the_help():
    """Each option with a default value (not a flag, not "none") says it in its --help line."""
    missing = []
    for name, parser in _parsers(app.build_parser()):
        formatter = parser._get_formatter()
        for action in parser._actions:
            default = action.default
            if (
                not action.option_strings
                or action.help == argparse.SUPPRESS
                or default is None
                or default is False
                or default == argparse.SUPPRESS
                or default == []
            ):
                continue
            if "default" not in " ".join(formatter._format_action(action).split()).lower():
                missing.append(f"{name} {action.option_strings[0]} (default {default!r})")
    assert missing == []
    report = next(p for n, p in _parsers(app.build_parser()) if n == "rbplab report")
    assert "(default: reports)" in " ".join(report.format_help().split())


def test_sizes_read_as_people_say_them(capsys):
    from rbplab.core.display import size

    assert [size(n) for n in (512, 25_472, 85_056_000, 1_475_561_600, 999_950)] == [
        "512",
        "25.5K",
        "85.1M",
        "1.48B",
        "1M",
    ]
    assert app.main(["families", "gpt2"]) == 0
    out = capsys.readouterr().out
    assert "85.1M" in out and "124M" in out and "85056000" not in out
    assert app.main(["families"]) == 0  # the summary's S_min and S_max
    assert "25.5K" in capsys.readouterr().out
    assert app.main(["families", "gpt2", "--format", "csv"]) == 0  # exact in csv
    assert "85056000" in capsys.readouterr().out


def test_tables_leave_out_columns_of_nothing():
    frame = pd.DataFrame({"k": [1, 10], "alpha": [0.1, 0.2], "note": [None, None], "why": [None, "few"]})
    out = io.StringIO()
    with redirect_stdout(out):
        print_table(frame)
    text = out.getvalue()
    assert "note" not in text and "None" not in text and "few" in text and "why" in text
    with redirect_stdout(out := io.StringIO()):
        print_table(frame, "csv")
    assert "note" in out.getvalue()  # csv and json keep every column


def test_loading_a_model_shows_no_second_bar(capfd):
    """transformers' "Loading weights" bar stays off while rbplab loads (its own bar is the step's)."""
    from transformers.utils import logging

    from rbplab.extraction.sources import describe_model
    from rbplab.extraction.weights import load_weights

    was = logging.is_progress_bar_enabled()  # an earlier test's worker code may have turned it off
    logging.enable_progress_bar()
    try:
        load_weights(describe_model("micro-1-25K"))
        assert "Loading weights" not in capfd.readouterr().err
        assert logging.is_progress_bar_enabled()  # as it was: the hub's download bars stay
    finally:
        if not was:
            logging.disable_progress_bar()


def test_a_command_line_configures_only_its_own_subcommand(monkeypatch, capsys):
    """`rbplab families` builds no other subcommand's options (each configure would raise here),
    yet every subcommand is still listed by `rbplab --help`."""

    def refuse(parser):
        raise AssertionError("configured a subcommand that was not asked for")

    for name, command in list(app.COMMANDS.items()):
        if name != "families":
            monkeypatch.setitem(app.COMMANDS, name, app.Command(command.help, refuse, command.run))
    assert app.main(["families", "--format", "csv"]) == 0
    assert "micro" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        app.main(["--help"])
    listed = capsys.readouterr().out
    assert all(name in listed for name in app.COMMANDS)
