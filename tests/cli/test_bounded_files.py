"""Every file handed to rbplab is read by the one bounded reader (`rbplab.core.documents`, issue 41
§4): nested too deeply, /dev/zero, a FIFO, a sparse 2 GiB file or the wrong shape is one line
and exit 1 at the command line within seconds, and nothing is written or deleted. Before, these
were RecursionErrors, MemoryErrors, hangs and tracebacks."""

from __future__ import annotations

import shutil
import struct
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.factories import SPEC, complete_entry
from helpers.hostile import SPARSE, deep_json, hostile_file, no_hang, safe_snapshot

from rbplab.cli import app as cli
from rbplab.store.paths import data_dir

# Levels: Python's parsers die near a thousand; 3,000 fit every byte bound (16 KiB for a checksum
# record), so the depth, not the size, is what is refused.
DEEP = 3_000
DEEP_JSON = deep_json(DEEP)
HOSTILITIES = ("deep", "/dev/zero", "fifo", "sparse 2 GiB", "wrong shape")


def make(path: Path, how: str, deep: str, wrong: str) -> None:
    """Put at `path` the file `how` names: deep nesting, a link to /dev/zero, a FIFO, a sparse
    2 GiB file (no disk used) or a well-formed file of the wrong shape."""
    if how in ("deep", "wrong shape"):
        hostile_file(path, "text", text=deep if how == "deep" else wrong)
    else:
        hostile_file(path, "sparse" if how == "sparse 2 GiB" else how)


def one_line_exit_1(capsys, argv: list[str], root: Path, seconds: int = 60) -> str:
    """Run the CLI on `argv`: exit status 1, one error line, within `seconds`, with nothing under
    `root` written or deleted (the cache folder `root`/cache exists, as a user's does). Returns the
    line."""
    (root / "cache").mkdir(exist_ok=True)
    before = safe_snapshot(root)
    started = time.monotonic()
    with no_hang(seconds):
        status = cli.main([str(a) for a in argv])
    took = time.monotonic() - started
    err = capsys.readouterr().err
    assert status == 1, err
    assert err.startswith("rbplab: error: ") and err.count("\n") == 1, err
    assert took < seconds
    assert safe_snapshot(root) == before
    return err


def model_copy(root: Path) -> Path:
    """micro-1-25K's files (without its checkpoints) in a folder of their own."""
    source = data_dir() / "models" / "micro-1-25K"
    target = root / "model"
    target.mkdir()
    for item in source.iterdir():
        if item.is_file():
            shutil.copy(item, target / item.name)
    return target


EXTRACT = ["--max-tokens", "64", "--context-length", "16"]


# -- files named on the command line ------------------------------------------------------------


def _study(root: Path, path: Path) -> list:
    return ["plan", path, "--cache-dir", root / "cache", "--no-probe"]


def _params(root: Path, path: Path) -> list:
    return [
        "report",
        "-f",
        "micro",
        "-c",
        "prose",
        "-o",
        root / "out",
        "--params",
        path,
        "--cache-dir",
        root / "cache",
    ]


def _size(root: Path, path: Path) -> list:
    return ["size", path]


USER_FILES: dict[str, tuple[str, str, str, Callable[[Path, Path], list], str]] = {
    # kind: (file name, deep text, wrong-shape text, argv, what the wrong shape is told)
    "study file": (
        "study.toml",
        "models = " + DEEP_JSON,
        'models = ["micro-1-25K"]\ncorpora = ["prose"]\nsettings = [1]\n',
        _study,
        "'settings' must be a table",
    ),
    "--params file": ("params.yaml", "a: " + DEEP_JSON, "- 1\n- 2\n", _params, "must hold one mapping"),
    "model config (size)": ("config.json", DEEP_JSON, "[1, 2]", _size, "holds a list, expected an object"),
}


@pytest.mark.parametrize("how", HOSTILITIES)
@pytest.mark.parametrize("kind", USER_FILES)
def test_a_hostile_file_named_on_the_command_line_is_one_line(kind, how, tmp_path, capsys):
    name, deep, wrong, argv, told = USER_FILES[kind]
    path = tmp_path / name
    make(path, how, deep, wrong)
    err = one_line_exit_1(capsys, argv(tmp_path, path), tmp_path)
    expected = {
        "deep": "nested more than 64 levels deep",
        "/dev/zero": "is a character device, not a regular file",
        "fifo": "is a FIFO, not a regular file",
        "sparse 2 GiB": "is larger than",
        "wrong shape": told,
    }[how]
    assert expected in err and str(path) in err


# -- the files of a model folder ------------------------------------------------------------------

SAFETENSORS_DEEP = struct.pack("<Q", 2 * DEEP) + DEEP_JSON.encode()


def _write_bytes(data: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(data)


def _sparse(size: int) -> Callable[[Path], None]:
    return lambda path: hostile_file(path, "sparse", size=size)


def _hostile(how: str) -> Callable[[Path], None]:
    return lambda path: hostile_file(path, how)


MODEL_FILES: dict[str, tuple[str, Callable[[Path], None], str]] = {
    # case: (file of the model folder, how it is made, what the error says)
    "config.json nested deep": ("config.json", _write_bytes(DEEP_JSON.encode()), "nested more than 64"),
    "config.json a list": ("config.json", _write_bytes(b"[1, 2]"), "holds a list, expected an object"),
    "config.json sparse 2 GiB": ("config.json", _sparse(SPARSE), "is larger than 64 MiB"),
    "tokenizer_config.json nested deep": (
        "tokenizer_config.json",
        _write_bytes(DEEP_JSON.encode()),
        "nested more",
    ),
    "tokenizer_config.json /dev/zero": (
        "tokenizer_config.json",
        _hostile("/dev/zero"),
        "is a character device",
    ),
    "tokenizer_config.json a FIFO": (
        "tokenizer_config.json",
        _hostile("fifo"),
        "is a FIFO",
    ),
    "safetensors header nested deep": (
        "model.safetensors",
        _write_bytes(SAFETENSORS_DEEP),
        "nested more than 64",
    ),
    "safetensors header a list": (
        "model.safetensors",
        _write_bytes(struct.pack("<Q", 2) + b"[]"),
        "its header holds a list, expected an object",
    ),
    "index nested deep": (
        "model.safetensors.index.json",
        _write_bytes(DEEP_JSON.encode()),
        "nested more than 64",
    ),
    "index /dev/zero": (
        "model.safetensors.index.json",
        _hostile("/dev/zero"),
        "character device",
    ),
    "index a FIFO": ("model.safetensors.index.json", _hostile("fifo"), "is a FIFO, not a regular file"),
    "index sparse 2 GiB": (
        "model.safetensors.index.json",
        _sparse(SPARSE),
        "is larger than 64 MiB",
    ),
    "index of the wrong shape": (
        "model.safetensors.index.json",
        _write_bytes(b'{"weight_map": {"a": 1}}'),
        "field 'weight_map.a' is an integer, expected a string",
    ),
}


@pytest.mark.parametrize("case", MODEL_FILES)
def test_a_hostile_model_file_is_one_line(case, tmp_path, capsys):
    name, damage, told = MODEL_FILES[case]
    folder = model_copy(tmp_path)
    damage(folder / name)
    argv = ["extract", "-m", folder, "-c", "prose", "--cache-dir", tmp_path / "cache", *EXTRACT]
    assert told in one_line_exit_1(capsys, argv, tmp_path)


def _gguf(kv_count: int, body: bytes = b"", tensor_count: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, tensor_count, kv_count) + body


def _key(name: bytes) -> bytes:
    return struct.pack("<Q", len(name)) + name


GGUF_HEADERS = {
    "2^62 metadata pairs": (_gguf(2**62), "declares 4,611,686,018,427,387,904 metadata pairs"),
    "a 2^60-byte string": (_gguf(1, _key(b"a") + struct.pack("<IQ", 8, 2**60)), "a string of 'a'"),
    "arrays nested 5,000 deep": (
        _gguf(
            1,
            _key(b"a")
            + struct.pack("<I", 9)
            + struct.pack("<IQ", 9, 1) * 5000
            + struct.pack("<IQI", 4, 1, 0),
        ),
        "nests arrays more than 8 deep",
    ),
    "a tensor past the end": (
        _gguf(0, _key(b"t") + struct.pack("<IQIQ", 1, 10**6, 0, 0), tensor_count=1),
        "tensor 't' ends at byte",
    ),
}


@pytest.mark.parametrize("case", GGUF_HEADERS)
def test_a_hostile_gguf_header_is_one_line(case, tmp_path, capsys):
    data, told = GGUF_HEADERS[case]
    path = tmp_path / "model" / "hostile.gguf"
    path.parent.mkdir()
    path.write_bytes(data)
    tokenizer = data_dir() / "models" / "micro-1-25K"
    argv = ["extract", "-m", path, "--tokenizer", tokenizer, "-c", "prose", "--cache-dir", tmp_path / "cache"]
    err = one_line_exit_1(capsys, [*argv, *EXTRACT], tmp_path)
    assert f"GGUF file {path} is broken or truncated" in err and told in err


# -- corpora ------------------------------------------------------------------------------------


def _word(path: Path) -> None:
    path.write_text("before " + "a" * ((1 << 20) + 1) + " after")


CORPORA = {
    "a sparse 1 GiB .txt": ("big.txt", _sparse(1 << 30), "is larger than 256 MiB"),
    "a word of 1 MiB + 1": (
        "word.txt",
        _word,
        "document 'word.txt' has more than 1,048,576 characters without",
    ),
    "a FIFO .txt": ("fifo.txt", _hostile("fifo"), "is a FIFO, not a regular file"),
    "a .txt linked to /dev/zero": ("zero.txt", _hostile("/dev/zero"), "is a character device"),
    "a FIFO .jsonl": ("fifo.jsonl", _hostile("fifo"), "is a FIFO, not a regular file"),
    "a .jsonl line nested deep": (
        "deep.jsonl",
        lambda p: p.write_text('{"id": "a", "text": "fine"}\n' + DEEP_JSON + "\n"),
        "deep.jsonl:2 is nested more than 64 levels deep",
    ),
}


@pytest.mark.parametrize("case", CORPORA)
def test_a_hostile_corpus_is_one_line_naming_the_document(case, tmp_path, capsys):
    name, make_corpus, told = CORPORA[case]
    make_corpus(tmp_path / name)
    argv = [
        "extract",
        "-m",
        "micro-1-25K",
        "-c",
        tmp_path / name,
        "--cache-dir",
        tmp_path / "cache",
        *EXTRACT,
    ]
    assert told in one_line_exit_1(capsys, argv, tmp_path)


# -- a model or a device that is not there ------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "told"),
    [
        (["-m", "/dev/null"], "/dev/null is a character device, not a model"),
        (
            ["-m", "micro-1-25K", "--device", "mps"],
            "device 'mps' requested but this machine has no mps device",
        ),
        (["-m", "micro-1-25K", "--device", "cuda:7"], "device 'cuda:7' requested but"),
    ],
)
def test_an_absent_model_or_device_is_one_line(args, told, tmp_path, capsys):
    if "cuda:7" in args:
        import torch

        if torch.cuda.device_count() > 7:
            pytest.skip("this machine has a cuda:7")
    argv = ["extract", *args, "-c", "prose", "--cache-dir", tmp_path / "cache", *EXTRACT]
    assert told in one_line_exit_1(capsys, argv, tmp_path)


def test_size_of_a_config_transformers_cannot_build_is_one_line(tmp_path, capsys):
    (tmp_path / "config.json").write_text('{"model_type": "no-such-architecture"}')
    err = one_line_exit_1(capsys, ["size", tmp_path / "config.json"], tmp_path)
    assert "not a config transformers can build: Unrecognized model identifier: no-such-architecture" in err


# -- the cache's own JSON files -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["spec.json", "manifest.json", "shard-00000.parquet.sha256"])
@pytest.mark.parametrize("how", ["deep", "wrong shape"])
def test_cache_ls_and_verify_take_a_hostile_cache_json_file(name, how, tmp_path, capsys):
    entry = complete_entry(tmp_path / "cache", SPEC)
    (entry.path / name).write_text(DEEP_JSON if how == "deep" else "[1, 2]")
    before = safe_snapshot(tmp_path)
    with no_hang(60):
        listed = cli.main(["cache", "--cache-dir", str(tmp_path / "cache"), "ls"])
        out = capsys.readouterr()
        verified = cli.main(["cache", "--cache-dir", str(tmp_path / "cache"), "verify"])
    checked = capsys.readouterr()
    assert listed == 0 and "Traceback" not in out.err and entry.key[:12] in out.out
    assert verified == 1 and "Traceback" not in checked.err
    assert f"CORRUPT  {entry.key}" in checked.out or f"CORRUPT  {entry.key[:12]}" in checked.out
    assert safe_snapshot(tmp_path) == before


def test_a_deep_manifest_inside_an_archive_is_refused_in_one_line(tmp_path, capsys):
    entry = complete_entry(tmp_path / "source", SPEC)
    archive = tmp_path / "hostile.tar"
    with tarfile.open(archive, "w") as tar:
        for item in sorted(entry.path.iterdir()):
            arcname = f"{entry.key}/{item.name}"
            if item.name == "manifest.json":
                item.write_text(DEEP_JSON)
            tar.add(item, arcname=arcname)
    err = one_line_exit_1(capsys, ["cache", "--cache-dir", tmp_path / "cache", "import", archive], tmp_path)
    assert f"refusing archive {archive}: member {entry.key}/manifest.json is nested more than 64" in err


def test_a_deep_plan_record_is_ignored(tmp_path):
    """Plan records are cache files: a study finds its runs without them (the record is planned and
    written again), whatever one holds."""
    import rbplab

    cache = tmp_path / "cache"
    grid = {
        "models": ["micro-1-25K"],
        "corpora": ["prose"],
        "settings": {"max_tokens": 64, "context_length": 16},
    }
    first = rbplab.load_study(rbplab.Grid.read(grid), cache_dir=cache, extract=True)
    records = sorted((cache / "plans").rglob("*.json"))
    assert records
    for record in records:
        record.write_text(DEEP_JSON)
    with no_hang(60):
        again = rbplab.load_study(rbplab.Grid.read(grid), cache_dir=cache)
    assert again.run_table()["n_tokens"].tolist() == first.run_table()["n_tokens"].tolist() == [64]
