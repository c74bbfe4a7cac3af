"""GGUF files: the header parsed as untrusted input, a reader per file per process, and the vocabulary.

A GGUF file's header walked and bounded before `gguf.GGUFReader` parses it.

`GGUFReader` believes every count and length the file declares: a header that declares 2^62
metadata pairs, a 2^60-byte string or an array nested a thousand deep ends in `struct.error`,
`MemoryError` or `RecursionError` inside the library. `check_gguf_header` walks the same
structure first, without allocating anything a count asks for: each count or length is held
against the bytes that remain in the file before it is believed, arrays nest at most
`MAX_ARRAY_NESTING` deep (walked with a stack, not recursion), each tensor has at most
`MAX_DIMS` dimensions, a known type, and data inside the file. Anything else is one
ModelLoadError naming the file and what is wrong.

A GGUF file's header parsed once per process, whoever asks for it.

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

Placeholder tokens of GGUF files: entries a converter added to pad the token list to the
output layer's size.

llama.cpp's converters fill ids that the tokenizer does not use with entries named "[PAD<id>]"
of token type UNUSED, so that the token list has one entry per output row. A tokenizer built
from such a file then counts them as tokens, and ranks would be taken over the padded set,
unlike the same model loaded from the hub. `trailing_placeholders` counts the placeholder
block at the end of the token list (the only kind that truncating the head's rows removes);
`rbplab.extraction.sources.describe_model` ranks over the ids before it and records the count
(ModelInfo.placeholder_tokens); `embedded_vocabulary` says whether a file embeds a tokenizer
at all. `include_padded_vocab` still ranks over every row.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rbplab.catalog.models import ModelLoadError
from rbplab.store.files import open_regular_file

MAX_ARRAY_NESTING = 8  # GGUF metadata holds arrays of scalars or strings; the reader recurses per level
MAX_DIMS = 8  # ggml tensors have at most 4
_SUPPORTED_VERSIONS = (2, 3)
_STRING, _ARRAY, _UINT32 = 8, 9, 4
# Bytes of each scalar value type (uint8, int8, uint16, int16, uint32, int32, float32, bool, uint64,
# int64, float64).
_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_MIN_BYTES = {**_SCALAR_BYTES, _STRING: 8, _ARRAY: 12}  # the least one value of each type takes
_MIN_KV_BYTES = 8 + 4 + 1  # key length, value type, the smallest value
_MIN_TENSOR_BYTES = 8 + 4 + 4 + 8  # name length, dimension count, type, offset
_DEFAULT_ALIGNMENT = 32


class _Broken(Exception):
    """Why the header cannot be believed (turned into a ModelLoadError naming the file)."""


class _Walk:
    """A cursor over the header's bytes that refuses to read past the end of the file."""

    def __init__(self, data: mmap.mmap, size: int) -> None:
        self.data, self.size, self.pos, self.order = data, size, 0, "<"

    def need(self, n: int, what: str) -> None:
        if n > self.size - self.pos:
            raise _Broken(
                f"{what} at byte {self.pos:,} needs {n:,} bytes; the file has {self.size - self.pos:,} left"
            )

    def unpack(self, fmt: str, what: str) -> int:
        self.need(struct.calcsize(fmt), what)
        (value,) = struct.unpack_from(self.order + fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def count(self, what: str, least: int) -> int:
        """A u64 count of items of at least `least` bytes each, held against the bytes left."""
        n = self.unpack("Q", what)
        if n * least > self.size - self.pos:
            raise _Broken(
                f"it declares {n:,} {what}, more than the {self.size - self.pos:,} bytes left at byte "
                f"{self.pos:,} can hold"
            )
        return n

    def string(self, what: str) -> bytes:
        length = self.unpack("Q", f"the length of {what}")
        self.need(length, f"{what} of {length:,} bytes")
        value = self.data[self.pos : self.pos + length]
        self.pos += length
        return value

    def name(self, what: str) -> str:
        raw = self.string(what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _Broken(f"{what} at byte {self.pos - len(raw):,} is not UTF-8") from None

    def value(self, value_type: int, key: str) -> None:
        """Skip one value of `value_type`, arrays walked with a stack of (type, items left)."""
        stack = [(value_type, 1)]
        while stack:
            kind, left = stack.pop()
            if left == 0:
                continue
            if kind in _SCALAR_BYTES:
                self.need(left * _SCALAR_BYTES[kind], f"the value of {key!r}")
                self.pos += left * _SCALAR_BYTES[kind]
            elif kind == _STRING:
                for _ in range(left):  # skipped, not copied: a vocabulary holds 10^5 of them
                    length = self.unpack("Q", f"the length of a string of {key!r}")
                    self.need(length, f"a string of {key!r} of {length:,} bytes")
                    self.pos += length
            elif kind == _ARRAY:
                if len(stack) >= MAX_ARRAY_NESTING:
                    raise _Broken(f"metadata {key!r} nests arrays more than {MAX_ARRAY_NESTING} deep")
                stack.append((kind, left - 1))
                item = self.unpack("I", f"the item type of {key!r}")
                if item not in _MIN_BYTES:
                    raise _Broken(f"metadata {key!r} holds items of unknown type {item}")
                stack.append((item, self.count(f"items of {key!r}", _MIN_BYTES[item])))
            else:
                raise _Broken(f"metadata {key!r} has unknown value type {kind}")


def _walk(data: mmap.mmap, size: int) -> None:
    walk = _Walk(data, size)
    walk.need(4, "the magic")
    if data[:4] != b"GGUF":
        raise _Broken("it does not start with the GGUF magic")
    walk.pos = 4
    version = walk.unpack("I", "the version")
    if version & 0xFFFF == 0:  # written for the other byte order, as GGUFReader reads it too
        walk.order = ">"
        version = struct.unpack(">I", data[4:8])[0]
    if version not in _SUPPORTED_VERSIONS:
        raise _Broken(f"GGUF version {version} is not one this reader takes ({_SUPPORTED_VERSIONS})")
    tensor_count = walk.count("tensors", 0)  # held against the bytes left below, after the metadata
    kv_count = walk.count("metadata pairs", _MIN_KV_BYTES)
    alignment = _DEFAULT_ALIGNMENT
    for _ in range(kv_count):
        key = walk.name("a metadata key")
        kind = walk.unpack("I", f"the value type of {key!r}")
        if key == "general.alignment":
            if kind != _UINT32:
                raise _Broken("general.alignment is not a uint32")
            alignment = walk.unpack("I", "general.alignment")
            if alignment == 0 or alignment & (alignment - 1):
                raise _Broken(f"general.alignment {alignment} is not a power of two")
        else:
            walk.value(kind, key)
    if tensor_count * _MIN_TENSOR_BYTES > size - walk.pos:
        raise _Broken(f"it declares {tensor_count:,} tensors, more than the bytes left can describe")
    tensors, names = [], set()
    for _ in range(tensor_count):
        name = walk.name("a tensor name")
        if name in names:
            raise _Broken(f"tensor {name!r} is declared twice")
        names.add(name)
        n_dims = walk.unpack("I", f"the dimension count of {name!r}")
        if n_dims > MAX_DIMS:
            raise _Broken(f"tensor {name!r} has {n_dims:,} dimensions (at most {MAX_DIMS})")
        dims = [walk.unpack("Q", f"a dimension of {name!r}") for _ in range(n_dims)]
        tensors.append(
            (
                name,
                dims,
                walk.unpack("I", f"the type of {name!r}"),
                walk.unpack("Q", f"the offset of {name!r}"),
            )
        )
    start = -(-walk.pos // alignment) * alignment
    _check_tensor_data(tensors, start, size)


def _check_tensor_data(tensors: list[tuple[str, list[int], int, int]], start: int, size: int) -> None:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    for name, dims, kind, offset in tensors:
        try:
            block, type_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
        except (ValueError, KeyError):
            raise _Broken(f"tensor {name!r} has unknown type {kind}") from None
        elements = 1
        for d in dims:
            elements *= d
        end = start + offset + elements * type_bytes // block
        if end > size:
            raise _Broken(f"tensor {name!r} ends at byte {end:,}, past the end of the file ({size:,} bytes)")


def check_gguf_header(path: str | Path) -> None:
    """Refuse, with one ModelLoadError, a GGUF file whose header `gguf.GGUFReader` cannot parse
    safely: not a regular file, a count or length beyond the file, arrays nested too deeply, a
    tensor of unknown type or outside the file. Reads the header only (through a memory map)."""
    path = Path(path)
    with open_regular_file(path) as handle:  # a FIFO or a device is refused, never waited on
        size = os.fstat(handle.fileno()).st_size
        try:
            if size == 0:
                raise _Broken("it is empty")
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                _walk(data, size)
        except _Broken as why:
            raise ModelLoadError(
                f"GGUF file {path} is broken or truncated ({why}); download or convert it again"
            ) from None


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


# gguf.TokenType: NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6
UNUSED = 5
CONTROL, USER_DEFINED = 3, 4
_PLACEHOLDER_NAME = re.compile(r"^(\[PAD\d+\]|<pad_?\d+>|<\|?(extra|reserved|unused)[_a-z]*\d+\|?>)$", re.I)


def is_placeholder(token: str, token_type: int | None) -> bool:
    """An UNUSED entry, or a CONTROL/USER_DEFINED/untyped entry named like a converter's pad
    ("[PAD123]", "<pad_5>", "<|reserved_special_token_7|>", "<unused42>")."""
    if token_type == UNUSED:
        return True
    return token_type in (None, CONTROL, USER_DEFINED) and bool(_PLACEHOLDER_NAME.match(token))


@dataclass(frozen=True)
class EmbeddedVocabulary:
    """What rank extraction needs of a GGUF file's embedded tokenizer."""

    trailing_placeholders: int


def embedded_vocabulary(path: str | Path) -> EmbeddedVocabulary | None:
    """The embedded tokenizer of a GGUF file (None when it embeds none), from one header read."""
    fields = gguf_reader(path).fields
    if "tokenizer.ggml.model" not in fields:
        return None
    return EmbeddedVocabulary(_trailing(_vocabulary(fields)))


def gguf_vocabulary(path: str | Path) -> tuple[list[str], list[int | None]] | None:
    """(tokens, token types) of a GGUF file's embedded tokenizer; None without one."""
    return _vocabulary(gguf_reader(path).fields)


def trailing_placeholders(path: str | Path) -> int:
    """Number of placeholder entries at the end of a GGUF file's token list (0 without an
    embedded tokenizer)."""
    return _trailing(gguf_vocabulary(path))


def _vocabulary(fields: Any) -> tuple[list[str], list[int | None]] | None:
    tok = fields.get("tokenizer.ggml.tokens")
    if tok is None:
        return None
    tokens = [bytes(tok.parts[i]).decode("utf-8", errors="replace") for i in tok.data]
    typ = fields.get("tokenizer.ggml.token_type")
    types = [int(typ.parts[i][0]) for i in typ.data] if typ is not None else [None] * len(tokens)
    return tokens, types


def _trailing(vocab: tuple[list[str], list[int | None]] | None) -> int:
    if vocab is None:
        return 0
    count = 0
    for token, token_type in zip(reversed(vocab[0]), reversed(vocab[1]), strict=True):
        if not is_placeholder(token, token_type):
            break
        count += 1
    return count
