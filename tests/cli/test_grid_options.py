"""The grid options, declared once (`rbplab.cli.arguments`): every command that takes a grid
parses them the same way, repeated and space-separated values accumulate, a bad name is one line
naming its option with nothing written, and the command a missing-run error suggests does what
it says."""

from __future__ import annotations

import argparse
import shlex

import pandas as pd
import pytest
from helpers.cli import run

from rbplab.catalog.corpora import CorpusError, corpus_name
from rbplab.catalog.names import MAX_NAME_CHARS, name_problem
from rbplab.catalog.registry import UnknownModelError, unregistered_location
from rbplab.cli import app as cli
from rbplab.cli.arguments import grid_from_args
from rbplab.store.cache.admin import list_entries

GRID_COMMANDS = ("extract", "plan", "fit", "report", "demo")
WITH_MODELS = ("extract", "plan", "fit", "report")  # the demo runs one family: no --model


def parse(command: str, *argv: str) -> argparse.Namespace:
    return cli.build_parser([command]).parse_args([command, *argv])


def grid_actions(command: str) -> dict[str, tuple]:
    """Every option of `command`'s grid and settings groups, as argparse holds it."""
    parser = cli.build_parser([command])._subparsers._group_actions[0].choices[command]
    return {
        a.option_strings[0]: (tuple(a.option_strings), a.nargs, type(a).__name__, a.default, a.help, a.type)
        for group in parser._action_groups
        if group.title.startswith(("the grid", "model loading", "extraction settings"))
        for a in group._group_actions
    } | {"--cache-dir": next((a.help, a.default) for a in parser._actions if a.dest == "cache_dir")}


def test_every_grid_command_declares_the_same_options():
    """The same flag means the same thing everywhere: one declaration, the demo taking a subset."""
    extract = grid_actions("extract")
    for command in GRID_COMMANDS[1:]:
        actions = grid_actions(command)
        assert set(actions) <= set(extract), command
        different = {flag for flag in actions if actions[flag][:3] != extract[flag][:3]}
        assert not different, (command, different)
    assert (
        set(grid_actions("plan")) == set(extract) == set(grid_actions("fit")) == set(grid_actions("report"))
    )
    assert "--model" not in grid_actions("demo") and "--family" in grid_actions("demo")


SPELLINGS = [
    ["-c", "prose", "-c", "humaneval"],
    ["-c", "prose", "humaneval"],
    ["--corpus", "prose", "--corpus=humaneval"],
    ["-c", "Prose", "HUMANEVAL", "-c", "prose"],  # names in any case; a repeat is one corpus
]


@pytest.mark.parametrize("command", GRID_COMMANDS)
@pytest.mark.parametrize("corpora", SPELLINGS, ids=["repeated", "space-separated", "long", "case"])
def test_each_command_parses_its_grid_the_same_way(command, corpora):
    models = ["-m", "micro-1-25K", "-m", "micro-2-85K"] if command in WITH_MODELS else []
    grid = grid_from_args(parse(command, "-f", "micro", *models, *corpora, "--max-tokens", "300"))
    assert grid.corpora == ("prose", "humaneval")
    assert grid.families == ["micro"] and len(grid.members) == 6  # the family, each model once
    assert grid.settings.max_tokens == 300


@pytest.mark.parametrize("command", WITH_MODELS)
def test_models_accumulate_and_a_family_is_not_a_model(command):
    grid = grid_from_args(
        parse(command, "-m", "micro-1-25K", "-m", "micro-2-85K", "micro-3-200K", "-c", "prose")
    )
    assert grid.models == ["micro-1-25K", "micro-2-85K", "micro-3-200K"]
    with pytest.raises(UnknownModelError, match=r"^--model: unknown model 'micro'"):
        grid_from_args(parse(command, "-m", "micro", "-c", "prose"))


def test_defaults_are_the_micro_family_on_every_bundled_corpus_where_a_command_has_them():
    for command in ("fit", "report", "demo"):
        grid = grid_from_args(parse(command))
        assert grid.families == ["micro"] and len(grid.corpora) >= 4, command
    for command in ("extract", "plan"):
        with pytest.raises(ValueError, match="give at least one --model or --family"):
            grid_from_args(parse(command, "-c", "prose"))
        with pytest.raises(ValueError, match="give at least one --corpus"):
            grid_from_args(parse(command, "-f", "micro"))


# ---- each command looks up every corpus it is given ------------------------------------------


@pytest.fixture
def handed(monkeypatch, tmp_path):
    """What each command hands on, recorded in place of its work: the grid (or, for the demo,
    its family and corpora)."""
    seen: dict = {}

    def record(name):
        def recorder(*args, **kwargs):
            seen[name] = (args, kwargs)
            raise SystemExit(0)

        return recorder

    monkeypatch.setattr("rbplab.study.load_study", record("fit"))
    monkeypatch.setattr("rbplab.report.run_report", record("report"))
    monkeypatch.setattr("rbplab.runner.costs.estimate_costs", record("plan"))
    monkeypatch.setattr("rbplab.extraction.pipeline.extract", record("extract"))
    monkeypatch.setattr("rbplab.cli.demo.run_demo", record("demo"))
    return seen


def corpora_handed(command: str, seen: dict) -> list[str]:
    args, _ = seen[command]
    if command == "demo":
        return list(args[1])
    return [str(c) if isinstance(c, str) else c.name for c in args[0].corpora]


@pytest.mark.parametrize("command", GRID_COMMANDS)
@pytest.mark.parametrize("spelling", [["-c", "prose", "-c", "humaneval"], ["-c", "prose", "humaneval"]])
def test_a_command_looks_up_every_corpus_given(capsys, tmp_path, handed, command, spelling):
    """`rbplab fit -m micro-1-25K -c prose -c humaneval` used to drop prose."""
    models = ["-m", "micro-1-25K"] if command in WITH_MODELS else []
    extra = ["-o", str(tmp_path / "out")] if command in ("report", "demo") else []
    argv = [command, *models, *spelling, "--cache-dir", tmp_path / "cache", *extra]
    with pytest.raises(SystemExit):
        run(capsys, *argv)
    assert corpora_handed(command, handed) == ["prose", "humaneval"]
    if command == "demo":  # the family, as the registry spells it, and the settings options
        assert handed["demo"][0][0] == "micro" and handed["demo"][1]["settings"].max_tokens is None


# ---- bad values: one line naming the option, nothing written -----------------------------------


def command_line(command: str, *corpus: str, model: str = "micro-1-25K") -> list[str]:
    models = ["-m", model] if command in WITH_MODELS else []
    extra = ["-o", "out"] if command in ("report", "demo") else []
    return [command, *models, "-c", *corpus, *extra]


@pytest.mark.parametrize("command", GRID_COMMANDS)
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "--corpus: corpus name '' is empty"),
        (" \t", "--corpus: corpus name ' \\t' is empty"),
        ("a" * 5000, "--corpus: corpus name 'aaaa"),
        ("a" * 300, "--corpus: unknown corpus 'aaaa"),  # a path part longer than the file system's
        ("x\0y", "--corpus: corpus name 'x\\x00y' holds a NUL character"),
    ],
    ids=["empty", "blank", "5000", "300", "nul"],
)
def test_a_bad_corpus_name_is_one_line_and_writes_nothing(
    capsys, tmp_path, monkeypatch, command, value, message
):
    """`-c ''` used to read the working directory as a corpus and write a complete entry of its
    files; a 5,000-character name printed a raw `[Errno 36] File name too long`."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("a file the working directory holds")
    cache = tmp_path / "cache"
    status, out, err = run(capsys, *command_line(command, "prose", value), "--cache-dir", cache)
    assert status == 1 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"rbplab: error: {message}") and "Errno" not in err
    assert len(value) < 100 or value[:100] not in err  # a long name is shortened
    assert not cache.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("command", WITH_MODELS)
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "--model: model name '' is empty"),
        ("m" * 5000, "--model: model name 'mmmm"),
        ("m" * 300, "--model: unknown model 'mmmm"),
    ],
    ids=["empty", "5000", "300"],
)
def test_a_bad_model_name_is_one_line_and_writes_nothing(
    capsys, tmp_path, monkeypatch, command, value, message
):
    monkeypatch.chdir(tmp_path)
    cache = tmp_path / "cache"
    status, out, err = run(capsys, *command_line(command, "prose", model=value), "--cache-dir", cache)
    assert status == 1 and out == "" and err.count("\n") == 1, err
    assert (
        err.startswith(f"rbplab: error: {message}")
        and "Errno" not in err
        and (len(value) < 100 or value[:100] not in err)
    )
    assert not cache.exists() and not any(tmp_path.iterdir())


def test_a_family_name_is_shortened_in_its_error(capsys, tmp_path):
    status, _, err = run(capsys, "fit", "-f", "f" * 5000, "--cache-dir", tmp_path / "cache")
    assert status == 1 and err.startswith("rbplab: error: --family: unknown model family 'ffff")
    assert err.count("\n") == 1 and len(err) < 400 and not (tmp_path / "cache").exists()


def test_the_name_limit_at_its_edge(tmp_path):
    """A name of MAX_NAME_CHARS characters is looked up (here a real corpus file at that path,
    and one a character shorter); one more character is refused before the file system is asked."""
    assert name_problem("a" * MAX_NAME_CHARS) is None and name_problem("a" * (MAX_NAME_CHARS - 1)) is None
    assert "1,025 characters long" in name_problem("a" * (MAX_NAME_CHARS + 1))
    folder = tmp_path
    while len(str(folder / ("d" * 200) / "c.txt")) < MAX_NAME_CHARS:  # parts within NAME_MAX
        folder = folder / ("d" * 200)
    for length in (MAX_NAME_CHARS - 1, MAX_NAME_CHARS):
        stem = "c" * (length - len(str(folder)) - len("/.txt"))
        path = folder / f"{stem}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("a document")
        assert len(str(path)) == length and corpus_name(str(path)) == str(path)
    over = str(path.with_name("c" + path.name))
    assert len(over) == MAX_NAME_CHARS + 1
    with pytest.raises(CorpusError, match="is 1,025 characters long; a name or path has at most 1,024"):
        corpus_name(over)
    with pytest.raises(UnknownModelError, match="is 1,025 characters long"):
        unregistered_location("o/" + "m" * (MAX_NAME_CHARS - 1))
    assert unregistered_location("o/" + "m" * (MAX_NAME_CHARS - 2)) == "o/" + "m" * (MAX_NAME_CHARS - 2)


@pytest.mark.parametrize("command", ["plan", "report"])
def test_a_study_file_and_grid_options_together_are_refused(capsys, tmp_path, command):
    """A study file names its grid: options beside it used to be dropped without a word."""
    study = tmp_path / "s.toml"
    study.write_text('models = ["micro-1-25K"]\ncorpora = ["prose"]\n')
    extra = ["-o", tmp_path / "out"] if command == "report" else []
    for options, named in ((["-c", "humaneval"], "--corpus"), (["--max-tokens", "5"], "--max-tokens")):
        status, out, err = run(capsys, command, study, *options, *extra, "--cache-dir", tmp_path / "c")
        assert status == 1 and out == "" and err.count("\n") == 1, err
        assert "give a study file or grid options, not both" in err and f"({named})" in err
    assert not (tmp_path / "c").exists() and not (tmp_path / "out").exists()


def test_the_demo_refuses_a_second_family_it_would_drop(capsys, tmp_path):
    status, out, err = run(capsys, "demo", "-f", "micro", "pythia", "--cache-dir", tmp_path / "c")
    assert status == 1 and out == "" and err.count("\n") == 1
    assert "the demo runs one family with its checkpoints, not 2 (micro, pythia)" in err


# ---- the command an error suggests does what it says -----------------------------------------


@pytest.mark.parametrize("spelling", [["-c", "prose", "-c", "humaneval"], ["-c", "prose", "humaneval"]])
def test_the_suggested_extract_command_computes_every_missing_run(capsys, repo, tmp_path, spelling):
    """The missing-run error's command used to extract humaneval alone, and fail again on prose."""
    argv = ["fit", "-f", "micro", *spelling, "--context-length", "32", "--cache-dir", str(tmp_path)]
    status, out, err = run(capsys, *argv)
    assert status == 1 and out == "" and "2 run(s) are not in the cache" in err
    suggested = shlex.split(err.rstrip().split("compute them with --extract: ", 1)[1])
    assert suggested[0] == "rbplab" and suggested[-1] == "--extract"
    status, out, err = run(capsys, *suggested[1:], "--format", "csv")
    assert status == 0, err
    entries = list_entries(tmp_path)
    assert sorted(entries["corpus"]) == ["humaneval", "prose"] and entries["complete"].all()
    table = pd.read_csv(pd.io.common.StringIO(out))
    assert sorted(set(table["corpus"])) == ["humaneval", "prose"]
    status, _, err = run(capsys, *argv)  # the user's command now finds both
    assert status == 0, err
