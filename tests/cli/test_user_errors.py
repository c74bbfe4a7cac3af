"""The command line prints a user's error as one line and lets a bug keep its traceback: it
catches `RbplabError` (and OSError, the machine's answer about files and the network), nothing else."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import rbplab
from rbplab import RbplabError
from rbplab.cli import app as cli
from rbplab.core.settings import ExtractionSettings
from rbplab.study import size
from rbplab.study.synthetic import synthetic_study

# modules whose import needs torch/transformers (seconds) or an optional extra
HEAVY = ("rbplab.extraction.sources", "rbplab.extraction.pipeline", "rbplab.extraction.ranks")


def test_a_bug_inside_a_command_keeps_its_traceback(monkeypatch, capsys) -> None:
    def broken(*args, **kwargs):
        raise ValueError("boom: a bug, not the user's input")

    monkeypatch.setattr("rbplab.catalog.registry.family_models", broken)
    with pytest.raises(ValueError, match="boom"):
        cli.main(["families", "pythia"])


def test_a_user_error_is_still_one_line(capsys) -> None:
    assert cli.main(["families", "llama"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rbplab: error: unknown model family 'llama'") and err.count("\n") == 1


def test_every_error_class_rbplab_defines_is_an_rbplab_error() -> None:
    seen = []
    for info in pkgutil.walk_packages(rbplab.__path__, "rbplab."):
        if info.name.startswith(HEAVY) or info.name.endswith("__main__"):
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional extra (ray) is not installed here
            continue
        for name, value in vars(module).items():
            if inspect.isclass(value) and value.__module__ == info.name and name.endswith("Error"):
                seen.append(value)
                assert issubclass(value, RbplabError), f"{info.name}.{name} is not an RbplabError"
    assert len(seen) >= 25


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.points([0]),  # k out of range
        lambda s: size.bands(s, [1], kind="bootstrap"),
        lambda s: s.subset(corpora=["no-such-corpus"]),
        lambda s: s.stats("no-such-model", "synthetic-a"),
        lambda s: ExtractionSettings(context_length=1),
        lambda s: ExtractionSettings(dtype="float8"),
    ],
    ids=["k", "band kind", "corpus", "run", "context length", "dtype"],
)
def test_checks_of_user_input_raise_rbplab_errors_that_keep_their_builtin_base(call) -> None:
    study = synthetic_study(sizes=(1e5, 1e6, 1e7), corpora=("synthetic-a",), n_tokens=500, n_docs=5)
    with pytest.raises(RbplabError) as caught:
        call(study)
    assert isinstance(caught.value, (ValueError, KeyError)), type(caught.value)
    assert "\n" not in str(caught.value) and not str(caught.value).startswith("'")
