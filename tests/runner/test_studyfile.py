"""Study files: the example of the docs works as written; bad files are one-line errors before any work."""

from __future__ import annotations

import re

import pytest
from helpers.cli import run
from helpers.hostile import hostile_file

from rbplab.core import ExtractionSettings
from rbplab.grid import Grid, StudyFileError

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
    study = Grid.read(write(tmp_path, EXAMPLE))
    assert study.models == ["micro-1-25K", "micro-2-85K", "micro-3-200K"]
    assert study.families == ["micro"] and study.corpora == ("humaneval", "prose")
    assert study.settings == ExtractionSettings(max_tokens=8000)
    assert [m.S for m in study.members] == sorted(m.S for m in study.members)


def test_families_revisions_and_local_corpora(tmp_path):
    (tmp_path / "texts.jsonl").write_text('{"id": "a", "text": "hello"}\n')
    text = 'families = ["micro"]\ncorpora = ["texts.jsonl"]\n[revisions]\n"micro-1-25K" = ["main"]\n'
    study = Grid.read(write(tmp_path, text))
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
            "'corpora': unknown corpus 'prosee' \\(did you mean 'prose'\\?\\).*known corpora: .*prose",
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
        Grid.read(write(tmp_path, text))
    assert "\n" not in str(err.value)


def test_missing_study_file(tmp_path):
    with pytest.raises(StudyFileError, match="not found"):
        Grid.read(tmp_path / "nope.toml")


def test_log_spaced_revisions_of_pythia_come_from_its_schedule(tmp_path):
    text = 'models = ["pythia-70m", "pythia-160m"]\ncorpora = ["prose"]\nrevisions = "log:8"\n'
    study = Grid.read(write(tmp_path, text))
    chosen = study.revisions_of("pythia-70m")
    assert len(chosen) == 8 and chosen[0] == "step1" and chosen[-1] == "step143000"
    assert study.revisions_of("pythia-160m") == chosen


def test_revisions_per_model_mix_names_and_spacing(tmp_path, tiny_tokenizer):
    from helpers.models import build_checkpointed

    local = build_checkpointed(tmp_path / "micro-t", tiny_tokenizer)
    text = (
        f'models = ["pythia-70m", "{local}"]\ncorpora = ["prose"]\n'
        f'[revisions]\n"pythia-70m" = ["step1000", "log:2"]\n"{local}" = "log:2"\n'
    )
    study = Grid.read(write(tmp_path, text))
    assert study.revisions_of("pythia-70m") == ("step1000", "step1", "step143000")
    assert study.revisions_of(str(local)) == ("step-10", "step-40")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'models = ["pythia-70m"]\ncorpora = ["prose"]\nrevisions = ["step1500"]\n',
            "'revisions': pythia has no revision 'step1500'; available: step0, step1, .*step143000",
        ),
        (
            'models = ["micro-1-25K"]\ncorpora = ["prose"]\nrevisions = ["step-1600"]\n',
            "micro-1-25K has no revision 'step-1600'; available: step-98, step-195, step-390, "
            "step-781, step-1562",
        ),
        ('models = ["pythia-70m"]\ncorpora = ["prose"]\nrevisions = "log:999"\n', "between 1 and 153"),
        ('models = ["gpt2"]\ncorpora = ["prose"]\nrevisions = "log:4"\n', "none is known for gpt2"),
    ],
)
def test_unknown_revisions_are_rejected_on_the_driver(tmp_path, text, message):
    with pytest.raises(StudyFileError, match=message) as err:
        Grid.read(write(tmp_path, text))
    assert "\n" not in str(err.value)


def test_revisions_of_models_without_a_schedule_pass_as_given(tmp_path):
    text = 'models = ["gpt2"]\ncorpora = ["prose"]\nrevisions = ["main", "abc123"]\n'
    assert Grid.read(write(tmp_path, text)).revisions_of("gpt2") == ("main", "abc123")


# ---------------------------------------------------------------------------------------------
# Issue 31 item 4: hostile study files and settings are one-line errors before any work


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("binary", r"not a UTF-8 text file \(byte 0 is b'\\x89'\)"),
        ("/dev/zero", "study.toml is a character device, not a regular file"),
        ("large", "is larger than 1 MiB"),
        ("folder", "is a directory, not a regular file"),
    ],
)
def test_hostile_study_files_are_one_line_errors(tmp_path, capsys, kind, message):
    """Binary garbage gave UnicodeDecodeError and /dev/zero MemoryError: now a bounded read of a
    regular file and a text check, each one line, for `Grid.read` and `rbplab run`."""
    if kind == "large":
        path = write(tmp_path, EXAMPLE + "#" * (1 << 20) + "\n")
    else:
        binary = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
        path = hostile_file(tmp_path / "study.toml", "text" if kind == "binary" else kind, text=binary)
    with pytest.raises(StudyFileError, match=message) as info:
        Grid.read(path)
    assert "\n" not in str(info.value)
    cache = tmp_path / "cache"
    status, out, err = run(capsys, "run", path, "--cache-dir", cache, "--no-progress")
    assert status == 1 and out == "" and err.count("\n") == 1 and err.startswith("rbplab: error: "), err
    assert not cache.exists()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ('device = "meta"', "device must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', got 'meta'"),
        ('device = "abacus"', "device must be .* got 'abacus'"),
        ('device_map = "bogus"', "device_map must be one of auto, balanced, .* got 'bogus'"),
        ("device_map = 3", "device_map must be one of .* got 3"),
    ],
)
def test_device_settings_are_refused_on_the_driver_before_any_entry(
    tmp_path, capsys, gpt2_dir, setting, message
):
    """device = "meta" or device_map = "bogus" exited 1 with no error line and wrote an entry."""
    (tmp_path / "docs.jsonl").write_text('{"id": "a", "text": "hello there, general kenobi"}\n')
    path = write(tmp_path, f'models = ["{gpt2_dir}"]\ncorpora = ["docs.jsonl"]\n[settings]\n{setting}\n')
    with pytest.raises(StudyFileError, match=message):
        Grid.read(path)
    cache = tmp_path / "cache"
    status, out, err = run(capsys, "run", path, "--cache-dir", cache, "--no-progress")
    assert status == 1 and out == "" and err.count("\n") == 1, err
    assert re.search(message, err), err
    assert not cache.exists()  # no entry, no spec.json, not even the cache folder


@pytest.mark.parametrize(
    ("option", "message"),
    [(["--device", "meta"], "device must be"), (["--device-map", "bogus"], "device_map must be")],
)
def test_device_options_of_extract_are_refused_before_any_entry(tmp_path, capsys, gpt2_dir, option, message):
    (tmp_path / "docs.jsonl").write_text('{"id": "a", "text": "hello there, general kenobi"}\n')
    cache = tmp_path / "cache"
    args = ["extract", "-m", gpt2_dir, "-c", tmp_path / "docs.jsonl", "--cache-dir", cache]
    status, out, err = run(capsys, *args, *option, "--no-progress")
    assert status == 1 and out == "" and err.count("\n") == 1 and message in err, err
    assert not list(cache.glob("??/*"))


def test_settings_made_in_python_refuse_the_same_devices():
    from rbplab.core.errors import InvalidArgumentError
    from rbplab.core.settings import ExtractionSettings

    for fields in ({"device": "meta"}, {"device_map": "bogus"}, {"dtype": "float8"}):
        with pytest.raises(InvalidArgumentError):
            ExtractionSettings(**fields)
    for fields in ({"device": "cuda:1"}, {"device": "mps"}, {"device_map": "balanced_low_0"}):
        assert ExtractionSettings(**fields)  # names a real device: checked when the model is placed
