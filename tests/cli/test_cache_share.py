"""Issue 10 through the CLI: safe removal, verify that reports everything and deletes nothing,
export/import of entries, and an archive that cannot smuggle anything in."""

from __future__ import annotations

import io
import json
import tarfile

from helpers.cli import run
from helpers.factories import SPEC, complete_entry
from helpers.untrusted import snapshot

from rbplab.store.cache.admin import list_entries

SPEC_V = {**SPEC, "vocab": {"size": 50, "include_padded": False, "head_rows": 50}}


def test_rm_empty_prefix_is_refused(capsys, tmp_path):
    complete_entry(tmp_path, SPEC_V)
    before = snapshot(tmp_path)
    status, out, err = run(capsys, "cache", "--cache-dir", str(tmp_path), "rm", "")
    assert status == 1 and out == "" and err.count("\n") == 1
    assert "refusing key prefix '': give at least 8 hex characters" in err
    status, _, err = run(capsys, "cache", "--cache-dir", str(tmp_path), "rm", "abc")
    assert status == 1 and "refusing key prefix 'abc'" in err
    assert snapshot(tmp_path) == before


def test_rm_ambiguous_prefix_needs_all_matching(capsys, tmp_path):
    for tail in ("a" * 56, "b" * 56):  # two entry directories sharing an 8-character prefix
        path = tmp_path / "ab" / f"abcdef01{tail}"
        path.mkdir(parents=True)
        (path / "spec.json").write_text("{}")
    keep = complete_entry(tmp_path, SPEC_V)
    before = snapshot(tmp_path)
    status, _, err = run(capsys, "cache", "--cache-dir", str(tmp_path), "rm", "abcdef01")
    assert status == 1 and "key prefix 'abcdef01' matches 2 cache entries" in err and "--all-matching" in err
    assert snapshot(tmp_path) == before
    status, out, _ = run(capsys, "cache", "--cache-dir", str(tmp_path), "rm", "abcdef01", "--all-matching")
    assert status == 0 and out.count("removed abcdef01") == 2
    assert list_entries(tmp_path)["key"].tolist() == [keep.key]


def test_verify_checks_every_entry_and_deletes_nothing(capsys, tmp_path):
    good = complete_entry(tmp_path, SPEC_V)
    swapped = complete_entry(tmp_path, {**SPEC_V, "ctx": 1})
    empty = complete_entry(tmp_path, {**SPEC_V, "ctx": 2})
    (swapped.manifest_path).write_text(good.manifest_path.read_text())
    empty.manifest_path.write_text("{}")
    before = snapshot(tmp_path)
    status, out, err = run(capsys, "cache", "--cache-dir", str(tmp_path), "verify")
    assert status == 1 and f"ok       {good.key[:12]}" in out
    assert f"CORRUPT  {swapped.key[:12]}  the manifest's key" in out
    assert f"CORRUPT  {empty.key[:12]}  the manifest records no key" in out
    assert "problem(s) found" in err and snapshot(tmp_path) == before


def test_export_import_round_trip_is_bit_identical(capsys, tmp_path):
    source, target = tmp_path / "a", tmp_path / "b"
    first = complete_entry(source, SPEC_V, shards=3)
    second = complete_entry(source, {**SPEC_V, "ctx": 7})
    archive = tmp_path / "runs.tar"
    status, out, _ = run(
        capsys,
        "cache",
        "--cache-dir",
        str(source),
        "export",
        first.key[:8],
        second.key[:8],
        "-o",
        str(archive),
    )
    assert status == 0 and "exported 2 entries" in out
    status, out, _ = run(capsys, "cache", "--cache-dir", str(target), "import", str(archive))
    assert status == 0 and f"imported {first.key}" in out and f"imported {second.key}" in out
    # locks, and the index (derived from the summaries by the next read), are the cache's, not the entries'
    strip = {k: v for k, v in snapshot(target).items() if not k.startswith(("locks", "index"))}
    assert strip == {k: v for k, v in snapshot(source).items() if not k.startswith(("locks", "index"))}
    status, out, _ = run(capsys, "cache", "--cache-dir", str(target), "import", str(archive))
    assert status == 0 and f"already present {first.key}" in out


def _rewrite(archive, out, change):
    with tarfile.open(archive) as tar, tarfile.open(out, "w") as dst:
        for member in tar:
            data = tar.extractfile(member).read()
            member, data = change(member, data)
            member.size = len(data)
            dst.addfile(member, io.BytesIO(data))


def test_tampered_archive_is_refused_with_nothing_visible(capsys, tmp_path):
    source, target = tmp_path / "a", tmp_path / "b"
    entry = complete_entry(source, SPEC_V, shards=3)
    good = complete_entry(target, {**SPEC_V, "ctx": 5})
    archive = tmp_path / "runs.tar"
    assert (
        run(capsys, "cache", "--cache-dir", str(source), "export", entry.key[:8], "-o", str(archive))[0] == 0
    )

    def flip_shard(member, data):
        if member.name.endswith("shard-00001.parquet"):
            data = bytearray(data)
            data[len(data) // 2] ^= 0xFF
            data = bytes(data)
        return member, data

    def escape(member, data):
        if member.name.endswith("spec.json"):
            member.name = "../escaped.json"
        return member, data

    def edit_manifest(member, data):
        if member.name.endswith("manifest.json"):
            manifest = json.loads(data)
            manifest["n_tokens"] = 123
            data = json.dumps(manifest).encode()
        return member, data

    cases = [
        (flip_shard, "is damaged: shard 1 failed its checksum"),
        (escape, "member '../escaped.json' is not a cache file"),
        (edit_manifest, "is damaged: n_tokens 123 is not the sum of the shard rows"),
    ]
    for change, message in cases:
        bad = tmp_path / f"bad-{change.__name__}.tar"
        _rewrite(archive, bad, change)
        before = snapshot(tmp_path, exclude=bad)
        status, out, err = run(capsys, "cache", "--cache-dir", str(target), "import", str(bad))
        assert status == 1 and out == "" and err.count("\n") == 1
        assert "refusing archive" in err and message in err, err
        assert snapshot(tmp_path, exclude=bad) == before  # nothing visible, nothing escaped
        assert list_entries(target)["key"].tolist() == [good.key]
    assert not (tmp_path / "escaped.json").exists()
