"""One resolution of corpus names (`rbplab.catalog.corpora.corpus_name`) behind every entry point:
the CLI's commands, `Grid.from_names`, `load_study`, the notebooks' `corpora` parameter and study
files take bundled and hub names in any case, and refuse a mistyped one in one line naming it, with
a did-you-mean, before anything looks in the cache."""

from __future__ import annotations

import pytest

import rbplab
from rbplab.catalog.corpora import CorpusError, corpus_name, load_corpus
from rbplab.cli import app as cli
from rbplab.grid import Grid
from rbplab.report import cached_checkpoints
from rbplab.viz.parameters import NotebookParameters

MISTYPED = "prosse"  # close to prose, so the error suggests it
HINT = f"unknown corpus {MISTYPED!r} (did you mean 'prose'?)"


@pytest.fixture
def no_cache_lookup(monkeypatch):
    """Fail any test that reaches the cache: a name must be refused before. Every binding of the
    cache's entry points is replaced (and restored), so no module keeps the stand-in."""
    import importlib
    import sys

    from rbplab.store import files
    from rbplab.store.cache import layout

    for name in ("rbplab.study.lookup", "rbplab.extraction.fingerprints", "rbplab.store.cache.admin"):
        importlib.import_module(name)  # bound to the real functions before any is replaced

    def looked(*args, **kwargs):
        raise AssertionError("the cache was looked in before the corpus name was checked")

    originals = (files.cache_root, layout.entry_dirs)
    for module in [m for n, m in sys.modules.items() if n.startswith("rbplab") and m is not None]:
        for attribute, value in list(vars(module).items()):
            if any(value is original for original in originals):
                monkeypatch.setattr(module, attribute, looked)


def test_corpus_name_spells_and_checks_every_kind_of_name(tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("a document")
    assert corpus_name("Prose") == "prose"
    assert corpus_name("LEGAL-STANDIN") == "legal-standin"
    assert corpus_name("HUB:WikiPedia@abc") == "hub:wikipedia@abc"
    assert corpus_name(str(texts)) == str(texts)
    assert corpus_name("texts.txt", tmp_path) == str(texts)  # a study file's folder first
    with pytest.raises(CorpusError, match=r"hub corpus 'hub:wikipeda' \(did you mean 'hub:wikipedia'"):
        corpus_name("hub:wikipeda")
    with pytest.raises(CorpusError) as err:
        corpus_name(MISTYPED)
    assert HINT in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(CorpusError, match="not int"):
        corpus_name(3)
    assert load_corpus("HumanEval").name == "humaneval"  # the readers resolve names the same way


@pytest.mark.parametrize(
    "argv",
    [
        ["extract", "-m", "micro-1-25K", "-c", "prose", MISTYPED],
        ["fit", "-c", MISTYPED],
        ["fit", "-m", "micro-1-25K", "-c", MISTYPED],
        ["report", "-c", "prose", MISTYPED, "-o", "unused"],
        ["report", "-p", "corpora", f"[prose, {MISTYPED}]", "-o", "unused"],
        ["plan", "-m", "micro-1-25K", "-c", MISTYPED, "--no-probe"],
        ["demo", "-c", MISTYPED],
    ],
)
def test_a_mistyped_corpus_is_one_line_from_every_command(capsys, tmp_path, no_cache_lookup, argv):
    status = cli.main([*argv, "--cache-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert status == 1 and out == "" and err.count("\n") == 1, err
    assert HINT in err


def test_a_mistyped_corpus_is_one_line_from_a_study_file(capsys, tmp_path, no_cache_lookup):
    study = tmp_path / "study.toml"
    study.write_text(f'models = ["micro-1-25K"]\ncorpora = ["prose", "{MISTYPED}"]\n')
    for argv in (["run", str(study)], ["report", str(study), "-o", "unused"], ["plan", str(study)]):
        status = cli.main(argv)
        err = capsys.readouterr().err
        assert status == 1 and err.count("\n") == 1 and HINT in err and "'corpora'" in err, (argv, err)


def test_a_mistyped_corpus_is_one_line_from_python_and_the_notebooks(no_cache_lookup):
    """It used to read as "6 run(s) are not in the cache ... compute them with extract=True"."""
    with pytest.raises(CorpusError) as err:
        rbplab.load_study(Grid.from_names(["micro"], ["prose", MISTYPED]))
    assert HINT in str(err.value) and "\n" not in str(err.value)
    # the notebooks' parameter cell, as papermill -p corpora '["prose", "prosse"]' hands it over
    params = NotebookParameters.read({"families": ["micro"], "corpora": f'["prose", "{MISTYPED}"]'})
    with pytest.raises(CorpusError, match=r"\(did you mean 'prose'\?\)"):
        params.open_study()
    # notebook 06 looks for the checkpoints the cache holds on its corpora: a mistyped one used to
    # find none and fall back to a synthetic law
    with pytest.raises(CorpusError, match=r"\(did you mean 'prose'\?\)"):
        cached_checkpoints(["micro"], ["prose", MISTYPED])


def test_corpus_case_is_ignored_everywhere(tmp_path, monkeypatch, capsys):
    """docs/inputs.md: "Corpus names ignore case", in every command (extract refused `-c Prose`)."""
    seen = []

    def fake_load(grid, *args, **kwargs):
        seen.append(list(grid.corpora))
        raise SystemExit(0)

    monkeypatch.setattr("rbplab.study.load_study", fake_load)
    with pytest.raises(SystemExit):
        cli.main(["fit", "-f", "MICRO", "-c", "Prose", "HumanEval", "hub:Wikipedia@abc"])
    assert seen.pop() == ["prose", "humaneval", "hub:wikipedia@abc"]

    def fake_extract(grid, **kwargs):
        seen.append([c.name for c in grid.opened])
        return []

    monkeypatch.setattr("rbplab.extraction.pipeline.extract", fake_extract)
    assert cli.main(["extract", "-m", "micro-1-25K", "-c", "Prose", "--cache-dir", str(tmp_path)]) == 0
    assert seen.pop() == ["prose"]

    assert Grid.from_names(["micro-1-25K"], ["Prose", "HUB:WikiPedia@abc"]).corpora == (
        "prose",
        "hub:wikipedia@abc",
    )
    assert Grid.from_names("micro-1-25K", "HumanEval").corpora == ("humaneval",)
    study = tmp_path / "s.toml"
    study.write_text('models = ["micro-1-25K"]\ncorpora = ["PROSE", "hub:AusLegal"]\n')
    assert Grid.read(study).corpora == ("prose", "hub:auslegal")
    assert NotebookParameters.read({"families": "micro", "corpora": "[Prose]"}).grid().corpora == ("prose",)
