"""A GGUF file's header is parsed once per extraction (and once per process for an unchanged file):
gguf.GGUFReader, the eager parser transformers and rbplab both use, is counted where it is
constructed, whoever calls it. Before: six parses per extraction (config, tokenizer check,
tokenizer, placeholder scan, and twice inside from_pretrained)."""

from __future__ import annotations

import os
import shutil

import gguf
import numpy as np
import pytest
from helpers.extraction import extract_run

from rbplab.extraction.reading import load_stats


@pytest.fixture
def parses(monkeypatch):
    """A list that gets the path of every GGUFReader constructed while the test runs."""
    seen: list[str] = []
    original = gguf.gguf_reader.GGUFReader.__init__

    def counting(self, path, *args, **kwargs):
        seen.append(os.fspath(path))
        original(self, path, *args, **kwargs)

    monkeypatch.setattr(gguf.gguf_reader.GGUFReader, "__init__", counting)
    return seen


@pytest.fixture
def fresh_gguf(gguf_files, tmp_path):
    """A copy of the tiny llama GGUF with its tokenizer: a file no process has parsed yet."""
    path = tmp_path / "model" / "tiny.gguf"
    path.parent.mkdir()
    shutil.copy(gguf_files["with_tokenizer"], path)
    return path


def test_one_header_parse_per_extraction(fresh_gguf, tiny_corpus, tmp_path, parses):
    result = extract_run(
        str(fresh_gguf), tiny_corpus, context_length=16, cache_dir=tmp_path / "c", progress=False
    )
    assert result.n_tokens > 0 and not result.from_cache
    assert parses == [str(fresh_gguf)]
    # the same unchanged file in the same process: describing and loading it again parse nothing
    again = extract_run(
        str(fresh_gguf), tiny_corpus, context_length=16, cache_dir=tmp_path / "d", progress=False
    )
    assert again.n_tokens == result.n_tokens and parses == [str(fresh_gguf)]
    assert gguf.GGUFReader is gguf.gguf_reader.GGUFReader  # the shared reader is handed back


def test_shared_header_gives_the_same_ranks(fresh_gguf, gguf_files, llama_dir, tiny_corpus, tmp_path):
    """Ranks from the GGUF (read through one shared header) equal those of the original weights."""
    from_gguf = load_stats(
        str(fresh_gguf), tiny_corpus, context_length=16, cache_dir=tmp_path / "c", progress=False
    )
    original = load_stats(
        str(llama_dir), tiny_corpus, context_length=16, cache_dir=tmp_path / "c", progress=False
    )
    assert np.array_equal(from_gguf.n_greater, original.n_greater)
    assert np.allclose(from_gguf.nll, original.nll, atol=1e-5)


def test_a_changed_file_is_parsed_again(fresh_gguf, gguf_files, parses):
    from rbplab.extraction.gguf import gguf_reader

    first = gguf_reader(fresh_gguf)
    assert gguf_reader(fresh_gguf) is first and len(parses) == 1
    stat = fresh_gguf.stat()
    os.utime(fresh_gguf, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched: maybe rewritten
    assert gguf_reader(fresh_gguf) is not first and len(parses) == 2
    replaced = fresh_gguf.with_name("other.gguf")
    shutil.copy(gguf_files["bare"], replaced)
    os.replace(replaced, fresh_gguf)  # another file under the same name
    reader = gguf_reader(fresh_gguf)
    assert len(parses) == 3 and "tokenizer.ggml.tokens" not in reader.fields


def test_shared_reader_is_scoped_and_nests():
    from rbplab.extraction.gguf import shared_gguf_reader

    real = gguf.GGUFReader
    with shared_gguf_reader():
        inside = gguf.GGUFReader
        with shared_gguf_reader():
            assert gguf.GGUFReader is inside
        assert gguf.GGUFReader is inside and inside is not real
    assert gguf.GGUFReader is real
    with pytest.raises(RuntimeError), shared_gguf_reader():
        raise RuntimeError("restored on errors too")
    assert gguf.GGUFReader is real
