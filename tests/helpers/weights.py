"""Changing a model's weight files the ways a user or a tool does: other weights at the same size,
written in place or renamed over the file, with the modification time the write gave or put back.

The new bytes keep the file's size and header (one tensor scaled), so only the file's contents, its
ctime and (for a rename) its inode tell the versions apart; the modification time can be put back.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

HOW = ("in place", "rename")
MTIME = ("kept", "put back")
SCALE = -2.5  # a tensor times this: other ranks and other nll, the same bytes count


def _scaled(raw: bytes, dtype: str) -> bytes:
    """Little-endian float32 or bfloat16 values times SCALE, in the same type."""
    if dtype == "F32":
        return (np.frombuffer(raw, dtype="<f4") * np.float32(SCALE)).astype("<f4").tobytes()
    wide = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32) * np.float32(SCALE)
    return (wide.view(np.uint32) >> 16).astype("<u2").tobytes()  # back to bfloat16 (truncated)


def scaled_safetensors(path: Path, tensor: str | None = None) -> bytes:
    """The bytes of the safetensors file `path` with one float32 or bfloat16 tensor (default: the
    largest that is not an embedding) times SCALE; header and size unchanged."""
    import json

    data = bytearray(path.read_bytes())
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    records = {k: v for k, v in header.items() if k != "__metadata__" and v["dtype"] in ("F32", "BF16")}
    if tensor is None:
        tensor = max(
            (k for k in records if "wte" not in k and "embed" not in k),
            key=lambda k: records[k]["data_offsets"][1] - records[k]["data_offsets"][0],
        )
    start, end = (8 + length + o for o in records[tensor]["data_offsets"])
    data[start:end] = _scaled(bytes(data[start:end]), records[tensor]["dtype"])
    return bytes(data)


def scaled_gguf(path: Path) -> bytes:
    """The bytes of the float32 GGUF file `path` with its largest block tensor times SCALE."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    tensor = max((t for t in reader.tensors if str(t.name).startswith("blk.")), key=lambda t: t.n_bytes)
    start, end = int(tensor.data_offset), int(tensor.data_offset) + int(tensor.n_bytes)
    del reader  # its memory map
    data = bytearray(path.read_bytes())
    data[start:end] = _scaled(bytes(data[start:end]), "F32")
    return bytes(data)


def rewrite(path: Path, data: bytes, how: str, mtime: str) -> None:
    """Write `data` as the file `path`: `how` "in place" (the same inode, opened for writing) or
    "rename" (a new file renamed over it); `mtime` "kept" (what the write gave) or "put back" (the
    old access and modification times restored with os.utime, as `cp -p` or a careless tool does)."""
    assert how in HOW and mtime in MTIME
    old = os.stat(path)
    if how == "in place":
        with open(path, "r+b") as handle:
            handle.write(data)
            handle.truncate()
    else:
        fresh = path.with_name(path.name + ".new")
        fresh.write_bytes(data)
        os.replace(fresh, path)
    if mtime == "put back":
        os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
    now = os.stat(path)
    assert now.st_size == old.st_size
    assert (now.st_mtime_ns == old.st_mtime_ns) == (mtime == "put back")
