"""Did-you-mean hints for mistyped commands, families, corpora and models, and argument errors that
come before any heavy import."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rbplab.cli import app as cli
from rbplab.core.errors import closest, did_you_mean


def test_closest_is_case_insensitive_and_keeps_the_known_spelling():
    known = ["micro-1-25K", "micro-2-85K", "pythia-70m"]
    assert closest("MICRO-1-25k", known)[0] == "micro-1-25K"
    assert closest("zzz", known) == []
    assert did_you_mean("zzz", known) == ""
    assert did_you_mean("pythia-70", known) == " (did you mean 'pythia-70m'?)"


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["fitt"], "invalid choice: 'fitt' (did you mean 'fit'?)"),
        (["cache", "lss"], "invalid choice: 'lss' (did you mean 'ls'?)"),
        (["cache", "ls", "--format", "jsn"], "invalid choice: 'jsn' (did you mean 'json'?)"),
    ],
)
def test_mistyped_choices_suggest(capsys, argv, hint):
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and hint in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["families", "micr"],
            "unknown model family 'micr'; known families: gpt2, micro, opt, pythia, qwen2.5"
            " (did you mean 'micro'?)",
        ),
        (["size", "pythia-70"], "unknown model 'pythia-70' (did you mean 'pythia-70m'"),
        (["fit", "-f", "pythya"], "qwen2.5 (did you mean 'pythia'?)"),
        (["fit", "-c", "prosee"], "unknown corpus 'prosee' (did you mean 'prose'?)"),
        (["fit", "-c", "hub:wikipeda"], "unknown hub corpus 'hub:wikipeda' (did you mean 'hub:wikipedia'?)"),
        (
            ["report", "-c", "humaneva", "-o", "unused"],
            "unknown corpus 'humaneva' (did you mean 'humaneval' or",
        ),
        (
            ["extract", "-m", "gpt2-larg", "-c", "prose"],
            "unknown model 'gpt2-larg' (did you mean 'gpt2-large'",
        ),
    ],
)
def test_mistyped_names_are_one_line_errors_with_a_hint(capsys, tmp_path, argv, message):
    takes_cache = argv[0] not in ("families", "size")
    status = cli.main([*argv, *(["--cache-dir", str(tmp_path)] if takes_cache else [])])
    out, err = capsys.readouterr()
    assert status == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("rbplab: error: ") and message in err


# Run in a fresh interpreter: the test session itself has imported torch long ago.
PROBE = """
import json, sys
from rbplab.cli import app
status = app.main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "transformers", "papermill", "plotly") if m in sys.modules)
print(json.dumps({"status": status, "heavy": heavy}))
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["fit", "--family", "micr"],
        ["fit", "--corpus", "prose", "wikipedai"],
        ["report", "--corpus", "hub:nope", "-o", "unused"],
        ["demo", "--family", "pythya"],
    ],
)
def test_argument_errors_come_before_heavy_imports(tmp_path, argv):
    env = {k: v for k, v in os.environ.items() if k != "RBPLAB_DEBUG"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv, "--cache-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"status": 1, "heavy": []}, done.stderr
    assert done.stderr.count("\n") == 1 and "did you mean" in done.stderr


@pytest.mark.parametrize(
    ("argv", "usage", "hint"),
    [
        (["fit", "--famly", "micro"], "usage: rbplab fit", "--famly micro (did you mean '--family'?)"),
        (["report", "--figuers", "png"], "usage: rbplab report", "(did you mean '--figures'"),
        (
            ["extract", "-m", "x", "-c", "prose", "--max-tokns", "5"],
            "usage: rbplab extract",
            "did you mean '--max-tokens'",
        ),
        (["cache", "ls", "--modle", "x"], "usage: rbplab cache ls", "(did you mean '--model'?)"),
    ],
)
def test_mistyped_options_get_the_subcommand_usage_and_a_suggestion(capsys, argv, usage, hint):
    """A subcommand's mistyped option used to get the top-level usage and no suggestion."""
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith(usage) and hint in err, err
