"""Every warning of rbplab's reaches a user of the command line as one `rbplab: warning: ...` line
(no file path, no line of source), and a notebook through Python's own warnings machinery, which
the package leaves as it is: an `RbplabWarning` there names itself and the user's line."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest
from helpers.factories import complete_entry
from helpers.hostile import forge_summary
from helpers.models import DOCUMENTS

from rbplab.catalog.corpora import load_corpus
from rbplab.cli import app
from rbplab.core.errors import RbplabWarning
from rbplab.store import CacheEntry
from rbplab.store.archive import export_entries


def _only_warning_line(err: str) -> str:
    """The one line of `err` (stderr), checked to be a warning line and nothing else."""
    lines = err.splitlines()
    assert len(lines) == 1, err
    (line,) = lines
    assert line.startswith("rbplab: warning: ")
    assert ".py" not in line and "Warning:" not in line and "warnings.warn" not in line, line
    return line


def test_run_on_an_entry_with_a_deleted_shard_says_one_line(gpt2_dir, tmp_path, capsys):
    (tmp_path / "corpus.txt").write_text(" ".join(text for _, text in DOCUMENTS) + "\n")
    study = tmp_path / "study.toml"
    study.write_text(
        f'models = [{json.dumps(str(gpt2_dir))}]\ncorpora = ["corpus.txt"]\n'
        "[settings]\ncontext_length = 16\nshard_tokens = 48\n"
    )
    argv = ["run", str(study), "--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    assert app.main(argv) == 0
    capsys.readouterr()
    (manifest,) = (tmp_path / "cache").rglob("manifest.json")
    entry = CacheEntry.open(manifest.parent.name, tmp_path / "cache")
    entry.shard_path(1).unlink()
    assert app.main(argv) == 0
    line = _only_warning_line(capsys.readouterr().err)
    assert line.startswith(f"rbplab: warning: cache entry {entry.key[:12]}")
    assert line.endswith("recomputing the damaged shards now")
    assert entry.is_complete() and entry.has_shard(1)


def test_import_of_an_archive_with_a_forged_summary_says_one_line(tmp_path):
    """The command itself, as a user runs it (a process of its own, no test harness around it)."""
    entry = complete_entry(tmp_path / "cache")
    forge_summary(entry)
    archive = tmp_path / "entries.tar"
    export_entries([entry.key], archive, root=entry.root)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rbplab",
            "cache",
            "--cache-dir",
            str(tmp_path / "other"),
            "import",
            str(archive),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"imported {entry.key}\n"
    line = _only_warning_line(done.stderr)
    assert line == (
        f"rbplab: warning: archive {archive}: entry {entry.key[:12]}: its summary is not the one its "
        "shards give (pair_greater differs); its summary was derived again from its shards"
    )


def _warn_command(category: type[Warning], module: str, message: str):
    """A subcommand that warns from code of the module named `module`, with a stacklevel that
    names a frame far outside it (as a warning raised on a worker thread, or meant for a caller)."""
    code = compile(
        "import warnings\nwarnings.warn(message, category, stacklevel=9)\n", "somewhere.py", "exec"
    )

    def run(args) -> int:
        exec(code, {"__name__": module, "message": message, "category": category})
        return 0

    return app.Command("warns", lambda parser: None, run)


@pytest.mark.parametrize(
    ("category", "module", "ours"),
    [
        (RbplabWarning, "some_user_module", True),  # rbplab's by its category, wherever raised
        (UserWarning, "rbplab.extraction.plan", True),  # raised by a module of rbplab's
        (UserWarning, "rbplab", True),
        (UserWarning, "rbplabs.plan", False),  # a name that only begins like it
        (UserWarning, "torch.nn.modules.module", False),
        (FutureWarning, "transformers.utils", False),
    ],
)
def test_which_warnings_the_command_line_says_as_its_own(monkeypatch, capsys, category, module, ours):
    message = "cache entry 0123456789ab is damaged:\n  shard 1 is missing; recomputing"
    monkeypatch.setitem(app.COMMANDS, "warns", _warn_command(category, module, message))
    with warnings.catch_warnings(record=True) as passed:
        warnings.simplefilter("always")
        before = warnings.showwarning
        assert app.main(["warns"]) == 0
        assert warnings.showwarning is before  # the command line's display ends with the command
        err = capsys.readouterr().err
    if ours:
        # Whitespace (a newline in the message) collapsed: one line.
        assert (
            err == "rbplab: warning: cache entry 0123456789ab is damaged: shard 1 is missing; recomputing\n"
        )
        assert passed == []
    else:  # another package's warning: as Python shows it (here, to the recorder of the test)
        assert err == "" and [(w.category, str(w.message)) for w in passed] == [(category, message)]


def test_a_notebook_keeps_pythons_display_and_sees_the_users_line(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text(
        json.dumps({"id": "1", "text": ""}) + "\n" + json.dumps({"id": "2", "text": "kept"}) + "\n"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_corpus(path)  # the line a notebook's cell would show
    (warning,) = caught
    assert warning.category is RbplabWarning and issubclass(RbplabWarning, UserWarning)
    assert warning.filename == __file__  # the user's line, not rbplab's
    shown = warnings.formatwarning(warning.message, warning.category, warning.filename, warning.lineno)
    header = shown.splitlines()[0]
    assert (
        header
        == f"{__file__}:{warning.lineno}: RbplabWarning: corpus 'corpus': skipped 1 empty document(s): '1'"
    )
    # Importing rbplab and its command line changes nothing of Python's display.
    check = (
        "import warnings, rbplab, rbplab.cli.app\n"
        "assert warnings.showwarning is warnings._showwarning_orig\n"
        "assert warnings.formatwarning is warnings._formatwarning_orig\n"
    )
    subprocess.run([sys.executable, "-c", check], check=True, timeout=120)
