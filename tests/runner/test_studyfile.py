"""Study files: the example of the docs works as written; bad files are one-line errors before any work."""

from __future__ import annotations

import pytest

from rbplab.core import ExtractionSettings
from rbplab.runner import StudyFileError, read_study_file

EXAMPLE = """models = ["micro-1-25K", "micro-2-85K", "micro-3-200K"]
corpora = ["humaneval", "prose"]
[settings]
max_tokens = 8000
"""


def write(tmp_path, text: str):
    path = tmp_path / "study.toml"
    path.write_text(text)
    return path


def test_the_documented_example_parses(tmp_path):
    study = read_study_file(write(tmp_path, EXAMPLE))
    assert study.models == ["micro-1-25K", "micro-2-85K", "micro-3-200K"]
    assert study.families == ["micro"] and study.corpora == ("humaneval", "prose")
    assert study.settings == ExtractionSettings(max_tokens=8000)
    assert [m.S for m in study.members] == sorted(m.S for m in study.members)


def test_families_revisions_and_local_corpora(tmp_path):
    (tmp_path / "texts.jsonl").write_text('{"id": "a", "text": "hello"}\n')
    text = 'families = ["micro"]\ncorpora = ["texts.jsonl"]\n[revisions]\n"micro-1-25K" = ["main"]\n'
    study = read_study_file(write(tmp_path, text))
    assert len(study.members) == 6 and study.revisions_of("micro-1-25K") == ("main",)
    assert study.revisions_of("micro-2-85K") == (None,)
    assert study.corpora == (str(tmp_path / "texts.jsonl"),)  # relative to the study file


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("epochs = 3\n" + EXAMPLE, "unknown key.*epochs.*a study file has families, models"),
        ('corpora = ["prose"]\n', "give 'families' and/or 'models'"),
        ('models = ["micro-9-9T"]\ncorpora = ["prose"]\n', "unknown model 'micro-9-9T'.*registered models"),
        ('families = ["gpt5"]\ncorpora = ["prose"]\n', "unknown model family 'gpt5'; known families"),
        (
            'models = ["micro-1-25K"]\ncorpora = ["prosee"]\n',
            "unknown corpus 'prosee' in 'corpora'; known: .*prose",
        ),
        ('models = ["micro-1-25K"]\n', "give 'corpora'"),
        ('models = []\ncorpora = ["prose"]\n', "'models' must be a non-empty list"),
        (
            'models = ["micro-1-25K"]\ncorpora = ["prose"]\n[settings]\nmax_token = 5\n',
            r"\[settings\]: unknown",
        ),
        ('models = ["micro-1-25K"]\ncorpora = ["prose"]\n[settings]\nbos = "maybe"\n', "bos must be one of"),
        (
            'models = ["micro-1-25K"]\ncorpora = ["prose"]\n[revisions]\nother = ["x"]\n',
            "names models not in",
        ),
        ("models = [\n", "not valid TOML"),
    ],
)
def test_bad_study_files_are_one_line_errors(tmp_path, text, message):
    with pytest.raises(StudyFileError, match=message) as err:
        read_study_file(write(tmp_path, text))
    assert "\n" not in str(err.value)


def test_missing_study_file(tmp_path):
    with pytest.raises(StudyFileError, match="not found"):
        read_study_file(tmp_path / "nope.toml")
