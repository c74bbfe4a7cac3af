"""The tensors a local model's weight files declare, read from their headers only: a GGUF file's
tensor table, or the safetensors headers of a folder (one file, or an index and its shards).
No tensor data is read and no code runs; `rbplab.extraction.config_checks.check_weights_match`
holds them against the architecture the config builds.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

from rbplab.catalog.models import ModelLoadError, ResolvedModel
from rbplab.core.documents import Fields, MapOf, parse_json, read_json
from rbplab.core.errors import BadFileError
from rbplab.extraction.gguf_file import gguf_reader
from rbplab.store.files import open_regular_file

MAX_HEADER_BYTES = 100 << 20  # a safetensors header (JSON) of a large model is a few MB
MAX_INDEX_BYTES = 64 << 20  # an index maps each tensor name to its file: a few hundred KB


def weight_shapes(model: ResolvedModel, config: Any) -> dict[str, tuple[int, ...]] | None:
    """{tensor name: shape} of a local model's weight files (a GGUF's in ggml order); None where
    they are not read: a hub model, a quantised checkpoint, pickle weights."""
    if not model.local or getattr(config, "quantization_config", None):
        return None
    if model.gguf_file:  # the tensor table of the (memoised) header
        reader = gguf_reader(Path(model.location) / model.gguf_file)
        return {str(t.name): tuple(int(d) for d in t.shape) for t in reader.tensors}
    return local_weight_shapes(Path(model.location))


def safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """{tensor name: shape} from a safetensors file's header, reading only the header. A header
    that is cut off, not JSON or pointing past the end of the file is a ModelLoadError."""

    def broken(why: str) -> ModelLoadError:
        return ModelLoadError(
            f"a safetensors file is broken or truncated ({path}: {why}); download or save the model again"
        )

    with open_regular_file(path) as handle:  # a FIFO or device is refused, never waited on
        size = os.fstat(handle.fileno()).st_size
        head = handle.read(8)
        if len(head) < 8:
            raise broken("shorter than its header length")
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER_BYTES or 8 + length > size:
            raise broken(f"a header of {length:,} bytes in a file of {size:,}")
        try:
            header = parse_json(handle.read(length), "its header", shape=dict)
        except BadFileError as err:
            raise broken(str(err)) from None
    shapes: dict[str, tuple[int, ...]] = {}
    data = size - 8 - length
    for name, record in header.items():
        if name == "__metadata__":
            continue
        shape = record.get("shape") if isinstance(record, dict) else None
        offsets = record.get("data_offsets") if isinstance(record, dict) else None
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise broken(f"tensor {name!r} has no valid shape")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            raise broken(f"tensor {name!r} has no valid data offsets")
        if not 0 <= offsets[0] <= offsets[1] <= data:
            raise broken(f"tensor {name!r} lies past the end of the file")
        shapes[name] = tuple(shape)
    return shapes


def local_weight_shapes(folder: Path) -> dict[str, tuple[int, ...]] | None:
    """Shapes of every tensor of a local model folder's safetensors weights (one file or an index
    and its shards); None when it has none (pickle checkpoints are not read here)."""
    index = folder / "model.safetensors.index.json"
    if os.path.lexists(index):  # anything by that name is read, and refused unless a regular file
        shape = Fields({"weight_map": MapOf(str)}, required=("weight_map",))
        try:
            weight_map = read_json(index, "safetensors index", MAX_INDEX_BYTES, shape=shape)["weight_map"]
        except BadFileError as err:
            raise ModelLoadError(str(err)) from None
        except OSError as err:
            raise ModelLoadError(f"{index} is not a readable safetensors index ({err})") from None
        files = sorted(set(weight_map.values()))
        if not all(isinstance(f, str) and f == Path(f).name and f.endswith(".safetensors") for f in files):
            raise ModelLoadError(f"{index} names weight files outside its folder")
    elif (folder / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        return None
    shapes: dict[str, tuple[int, ...]] = {}
    for name in files:
        if not (folder / name).is_file():
            raise ModelLoadError(f"{folder}: weight file {name} named by its index is missing")
        shapes.update(safetensors_shapes(folder / name))
    return shapes
