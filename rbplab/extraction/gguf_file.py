"""A GGUF file's header parsed once per process, whoever asks for it.

`gguf.GGUFReader` parses a file's metadata and tensor table eagerly, building a numpy view per
value: 1.9 s of CPU for SmolLM2's 49,152 tokens and merges, ~6 s for Qwen2.5's 151,936. One
extraction of a GGUF model asked for it six times: transformers' `load_gguf_checkpoint` for the
config (describe), the tokenizer's config and, inside `from_pretrained`, the config again and
the tensors, plus rbplab's embedded-tokenizer check and placeholder scan.

`gguf_reader(path)` memoises the reader by the file's identity (resolved path, size, mtime,
ctime, device, inode: a file replaced or rewritten in place, even with its mtime put back, is
parsed afresh; the weights loaded through it are checked against the cache key afterwards,
`rbplab.extraction.fingerprints.WeightFiles`), and `shared_gguf_reader()`
hands that same reader to transformers while rbplab describes or loads a model: transformers
imports `GGUFReader` from the `gguf` package when it loads (`from gguf import GGUFReader` inside
`load_gguf_checkpoint`), so for the duration of the block that name gives the memoised reader.
The reader is only read (fields, tensor views of a read-only memory map), so sharing it changes
no result. Tensor data stays in the file's read-only mapping and is read when dequantised.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rbplab.extraction.gguf_header import check_gguf_header

_MEMO_SIZE = 2  # readers kept (each maps its file, reading nothing until asked)
_memo: OrderedDict[tuple, Any] = OrderedDict()
_lock = threading.RLock()
_shared_depth = 0
_original: Any = None  # gguf.GGUFReader, while shared_gguf_reader() replaces it


def file_identity(path: str | Path) -> tuple[str, int, int, int, int, int]:
    """(resolved path, size, mtime ns, ctime ns, device, inode): equal only for the same unchanged
    file (a rewrite that puts mtime back still moves ctime, which no user process can set)."""
    resolved = os.path.realpath(path)
    info = os.stat(resolved)
    return resolved, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_dev, info.st_ino


def gguf_reader(path: str | Path) -> Any:
    """The `gguf.GGUFReader` of `path`, parsed once per process for each version of the file."""
    identity = file_identity(path)
    with _lock:
        if identity in _memo:
            _memo.move_to_end(identity)
            return _memo[identity]
        check_gguf_header(identity[0])  # counts and lengths bounded before the library believes them
        reader = _reader_class()(identity[0])
        _memo[identity] = reader
        while len(_memo) > _MEMO_SIZE:
            _memo.popitem(last=False)
        return reader


def _reader_class() -> Any:
    import gguf

    return _original if _original is not None else gguf.GGUFReader


def _shared(path: Any, mode: str = "r") -> Any:
    """What `gguf.GGUFReader(path, mode)` gives inside `shared_gguf_reader()`."""
    if mode != "r":
        return _original(path, mode)
    return gguf_reader(path)


@contextlib.contextmanager
def shared_gguf_reader() -> Iterator[None]:
    """Within the block, `gguf.GGUFReader(path)` (as transformers calls it) returns the memoised
    reader of `path`; nested and concurrent blocks share one replacement, restored by the last."""
    import gguf

    global _shared_depth, _original
    with _lock:
        if _shared_depth == 0:
            _original = gguf.GGUFReader
            gguf.GGUFReader = _shared
        _shared_depth += 1
    try:
        yield
    finally:
        with _lock:
            _shared_depth -= 1
            if _shared_depth == 0:
                gguf.GGUFReader = _original
                _original = None
