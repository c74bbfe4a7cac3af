"""A GGUF file's header walked and bounded before `gguf.GGUFReader` parses it.

`GGUFReader` believes every count and length the file declares: a header that declares 2^62
metadata pairs, a 2^60-byte string or an array nested a thousand deep ends in `struct.error`,
`MemoryError` or `RecursionError` inside the library. `check_gguf_header` walks the same
structure first, without allocating anything a count asks for: each count or length is held
against the bytes that remain in the file before it is believed, arrays nest at most
`MAX_ARRAY_NESTING` deep (walked with a stack, not recursion), each tensor has at most
`MAX_DIMS` dimensions, a known type, and data inside the file. Anything else is one
ModelLoadError naming the file and what is wrong.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

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
