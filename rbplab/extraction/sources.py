"""A model described without loading its weights: resolved from what the user named, its config and
tokenizer read and checked, its weight files listed, where it will be placed (`describe_model`).

Checks that a model's config is sane and describes its weight files, before anything is allocated.

A config.json is data from whoever made the folder. transformers turns a bad field into a
traceback (`vocab_size = "4096"`: a TypeError; `num_attention_heads = 0`: ZeroDivisionError),
an allocation failure (`num_hidden_layers = 10**7`: std::bad_alloc, after minutes of building
modules; `vocab_size = -5`: "negative dimension"), or, worst, nothing at all: a config that
asks for more layers than the files hold loads, initialises the missing ones at random and is
scored as if it were the model. So, in order:

1. `check_config_fields` reads the raw fields (config.json, or what a GGUF file's metadata
   converts to) before transformers builds anything from them: integers where sizes go, within
   [1, an upper bound no released model comes near], heads dividing the hidden size (unless the
   config sets head_dim) and key-value heads dividing the heads.
2. `check_weight_files` compares the parameters of the architecture the config builds (the meta
   device instance rbplab builds anyway for S) with the tensors the weight files declare
   (safetensors headers, a GGUF tensor table: shapes only, no data read, no code run). The files
   must hold every parameter: at least as many values as the model has parameters, and no more
   than those plus a tied head saved twice and the buffers old checkpoints saved (transformers'
   own `_keys_to_ignore_on_load_unexpected` names those).
`check_weights_match` applies 2. to a model's own files (their shapes as
read from the weight files' headers, below). Each failure is one `ModelLoadError` line naming the field.

What a model's files say without its weights: its config and tokenizer, read safely.

A model folder is data from whoever made it. Its config and tokenizer are read only after
`check_remote_code` has made sure neither would import code from the folder (unless allowed),
and a config's size fields are checked (`check_config_fields`) before transformers
builds anything from them.

The tensors a local model's weight files declare, read from their headers only: a GGUF file's
tensor table, or the safetensors headers of a folder (one file, or an index and its shards).
No tensor data is read and no code runs; `rbplab.extraction.sources.check_weights_match`
holds them against the architecture the config builds.

Where and in what dtype a model runs: the device ("auto": cuda > mps > cpu), the dtype ("auto":
float32 on a CPU, the checkpoint's own half type on an accelerator), and a device map's marker.

Both are resolved when a model is described (they enter `ModelInfo`, and the dtype the cache key),
and read back when its weights are loaded.

Describing causal language models (hub ids, local directories, GGUF files) without weights.

A model is resolved once (`rbplab.catalog.resolve`); then two steps, so that a cache lookup never
touches weights:
- `describe_model` reads only the config and the tokenizer and returns a `ModelDescription`
  whose `ModelInfo` holds the size S from the config on the meta device, the real vocabulary,
  the fingerprints, and the dtype and device the settings resolve to;
- `rbplab.extraction.weights.load_weights` then loads the weights and checks that the output
  head the rank extractor uses reproduces the model's own logits.

The real vocabulary is `len(tokenizer)`: many checkpoints pad the output layer
(Pythia 50,304 rows for 50,277 tokens; Qwen2.5 151,936 for 151,665), and those rows
are never a token of the text, so ranks are taken over the tokenizer's vocabulary.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from rbplab.catalog.models import ModelLoadError, ModelSpec, ResolvedModel, resolve
from rbplab.core.documents import Fields, MapOf, parse_json, read_json
from rbplab.core.errors import BadFileError
from rbplab.core.settings import ExtractionSettings
from rbplab.extraction.fingerprints import WeightFiles, identify, tokenizer_fingerprint
from rbplab.extraction.gguf import check_gguf_header, embedded_vocabulary, gguf_reader, shared_gguf_reader
from rbplab.store.files import open_regular_file


def as_resolved(model: ResolvedModel | ModelSpec | str | Path) -> ResolvedModel:
    """`model` itself when already resolved (a grid's member: no second registry lookup), else
    `model` resolved once."""
    if isinstance(model, ResolvedModel):
        return model
    return resolve(model if isinstance(model, ModelSpec) else ModelSpec(str(model)))


# Size fields (the transformers name first, then the spellings other configs use) and an upper
# bound far above any released model (Llama 3.1 405B: 126 layers, hidden 16,384, 128 heads,
# intermediate 53,248; Gemma 3: 262,144 tokens; context windows up to 10M).
SIZE_FIELDS: dict[str, tuple[tuple[str, ...], int]] = {
    "vocab_size": (("vocab_size", "n_vocab", "padded_vocab_size"), 1 << 22),
    "hidden_size": (("hidden_size", "n_embd", "d_model", "model_dim"), 1 << 17),
    "num_hidden_layers": (("num_hidden_layers", "n_layer", "n_layers", "num_layers"), 1024),
    "num_attention_heads": (("num_attention_heads", "n_head", "n_heads", "num_heads"), 1 << 12),
    "num_key_value_heads": (("num_key_value_heads", "num_kv_heads", "n_head_kv"), 1 << 12),
    "intermediate_size": (("intermediate_size", "n_inner", "ffn_dim", "d_ff"), 1 << 20),
    "max_position_embeddings": (("max_position_embeddings", "n_positions", "n_ctx"), 1 << 26),
    "head_dim": (("head_dim",), 1 << 14),
}
# Float fields that must be finite and positive (softcap, rope base) or non-negative (epsilons).
POSITIVE_FLOATS = ("final_logit_softcapping", "rope_theta")
NON_NEGATIVE_FLOATS = ("layer_norm_eps", "layer_norm_epsilon", "rms_norm_eps")
# buffers transformers itself drops from checkpoints of every model (modeling_utils)
ALWAYS_IGNORED = (r"rotary_emb\.inv_freq", r"(^|\.)position_ids$")


def _field_problem(name: str, value: Any, bound: int) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"must be an integer, not {type(value).__name__}"
    if value < 1:
        return "must be a positive integer"
    if value > bound:
        return f"is larger than any model rbplab can load (at most {bound:,})"
    return None


def check_config_fields(raw: Mapping[str, Any], where: str) -> None:
    """Refuse (ModelLoadError, one line naming the field) a raw config dict whose size fields are
    not integers in range, or whose heads do not divide; `text_config` is checked the same way.
    `where` names the config in the message ("config.json of '/models/x'")."""
    _check_fields(raw, where, "")
    text = raw.get("text_config")
    if isinstance(text, Mapping):
        _check_fields(text, where, "text_config.")


def _check_fields(raw: Mapping[str, Any], where: str, prefix: str) -> None:
    found: dict[str, tuple[str, int]] = {}
    for canonical, (names, bound) in SIZE_FIELDS.items():
        for name in names:
            value = raw.get(name)
            if value is None:  # absent or null: the architecture's default applies
                continue
            problem = _field_problem(name, value, bound)
            if problem is not None:
                _refuse(where, f"{prefix}{name}", value, problem)
            found.setdefault(canonical, (name, value))
    for name in POSITIVE_FLOATS + NON_NEGATIVE_FLOATS:
        value = raw.get(name)
        if value is None:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value < 0 or (value == 0 and name in POSITIVE_FLOATS):
            sign = "positive" if name in POSITIVE_FLOATS else "non-negative"
            _refuse(where, f"{prefix}{name}", value, f"must be a finite {sign} number")
    heads, hidden = found.get("num_attention_heads"), found.get("hidden_size")
    if heads and hidden and "head_dim" not in found and hidden[1] % heads[1]:
        _refuse(
            where,
            f"{prefix}{heads[0]}",
            heads[1],
            f"does not divide {prefix}{hidden[0]} = {hidden[1]} (and no head_dim is set)",
        )
    kv = found.get("num_key_value_heads")
    if heads and kv and heads[1] % kv[1]:
        _refuse(where, f"{prefix}{kv[0]}", kv[1], f"does not divide {prefix}{heads[0]} = {heads[1]}")


def _refuse(where: str, field: str, value: Any, problem: str) -> None:
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    raise ModelLoadError(
        f"{where}: {field} = {shown} {problem}; the config is damaged or was edited (compare it with the "
        "original model's)"
    )


# ---------------------------------------------------------------------------------------------
# Weight files


def _numel(shape: Iterable[int]) -> int:
    return math.prod(shape)


def check_weight_files(
    meta: Any, config: Any, shapes: Mapping[str, tuple[int, ...]], where: str, layer_names: str = r"\.(\d+)\."
) -> None:
    """Refuse weights that do not hold the parameters of `meta` (the config's architecture on the
    meta device): ModelLoadError naming the config field that disagrees (the number of layers,
    the vocabulary or hidden size), or the two parameter counts when no single field explains it.
    `shapes` are the files' tensors by name; `layer_names` finds a layer index in a tensor name."""
    # transformers drops file tensors the model does not have when they match these patterns
    # (re.search: GPT-2's "attn.bias" also matches c_attn.bias, so only unexpected names count)
    patterns = [*ALWAYS_IGNORED, *(getattr(meta, "_keys_to_ignore_on_load_unexpected", None) or ())]
    ignored = re.compile("|".join(f"({p})" for p in patterns))
    prefix = f"{getattr(meta, 'base_model_prefix', '')}."
    known = {_unprefixed(name, prefix) for name in meta.state_dict()}
    held = sum(
        _numel(shape)
        for name, shape in shapes.items()
        if _unprefixed(name, prefix) in known or not ignored.search(name)
    )
    params = {id(p): p for p in meta.parameters()}
    wanted = sum(p.numel() for p in params.values())
    head = meta.get_output_embeddings() if hasattr(meta, "get_output_embeddings") else None
    embed = meta.get_input_embeddings() if hasattr(meta, "get_input_embeddings") else None
    tied = head is not None and embed is not None and head.weight is embed.weight
    slack = (head.weight.numel() if tied else 0) + sum(b.numel() for b in meta.buffers())
    if wanted <= held <= wanted + slack:
        return
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    json_name = getattr(text, "attribute_map", {}) or {}

    def field(canonical: str) -> str:
        return json_name.get(canonical, canonical)

    layers = getattr(text, "num_hidden_layers", None)
    found = {int(m.group(1)) for name in shapes if (m := re.search(layer_names, name))}
    if isinstance(layers, int) and found and len(found) != layers:
        raise ModelLoadError(
            f"{where}: {field('num_hidden_layers')} = {layers} but the weight files hold {len(found)} "
            "layers; the config does not belong to these weights (edited, or from another model)"
        )
    if embed is not None:
        rows, cols = embed.weight.shape
        suffix = _suffix(meta, embed)
        stored = next((shape for name, shape in shapes.items() if suffix and name.endswith(suffix)), None)
        if stored is not None and len(stored) == 2 and tuple(stored) != (rows, cols):
            canonical, value, have = (
                ("vocab_size", rows, stored[0]) if stored[0] != rows else ("hidden_size", cols, stored[1])
            )
            raise ModelLoadError(
                f"{where}: {field(canonical)} = {value} but the weight files' token embedding has "
                f"{have} {'rows' if canonical == 'vocab_size' else 'columns'}; the config does not belong to "
                "these weights (edited, or from another model)"
            )
    raise ModelLoadError(
        f"{where}: the config describes a model of {wanted:,} parameters but the weight files hold {held:,} "
        "values; the config does not belong to these weights (edited, or from another model)"
    )


def _unprefixed(name: str, prefix: str) -> str:
    return name[len(prefix) :] if prefix != "." and name.startswith(prefix) else name


def _suffix(model: Any, module: Any) -> str | None:
    """The name of `module`'s weight without the base-model prefix ("embed_tokens.weight"), so that
    it matches checkpoints saved with or without that prefix."""
    name = next((n for n, m in model.named_modules() if m is module), None)
    if name is None:
        return None
    return f"{name.split('.')[-1]}.weight"


def config_label(model: ResolvedModel) -> str:
    """How error messages name a model's config."""
    if model.gguf_file:
        return f"the config in {model.gguf_file}"
    return f"config.json of {model.location!r}"


def check_weights_match(model: ResolvedModel, config: Any, meta: Any, shapes: Mapping | None) -> None:
    """Refuse a local model whose weight files do not hold the parameters its config describes
    (`check_weight_files`); `shapes` are their tensors as `rbplab.extraction.sources`
    read them (None: not read: hub models, quantised and pickle checkpoints, which `load_weights`
    checks once loaded, since transformers would initialise a missing tensor at random)."""
    label = config_label(model)
    if shapes is not None:
        check_weight_files(meta, config, shapes, label)


class RemoteCodeError(ModelLoadError):
    """A model that needs Python code from its own directory or repository, which was not allowed."""


def remote_code_error(name: str, where: str) -> RemoteCodeError:
    return RemoteCodeError(
        f"{name} needs custom Python code from {where}, which rbplab does not run unless you opt in "
        "with --trust-remote-code (trust_remote_code=True; recorded in the cache key)"
    )


# Files whose auto_map makes transformers' config or tokenizer loader import code from the folder.
_REMOTE_CODE_FILES = ("config.json", "tokenizer_config.json")


_MAX_CONFIG_BYTES = 64 << 20  # a tokenizer_config.json with a large added-token table is a few MB
_CONFIG_KINDS = {"config.json": "model config", "tokenizer_config.json": "tokenizer config"}


def check_remote_code(model: ResolvedModel) -> None:
    """Refuse, unless allowed, a local model whose configs ask for custom code (an ``auto_map``)
    anywhere the config or tokenizer loader can reach: the model folder (a GGUF file's folder
    too), the tokenizer folder it uses (a checkpoint's base folder), a tokenizer override folder,
    and for a checkpoint (``<base>/checkpoints/step-<n>``) every folder up to its base. Only the
    JSON is read (bounded, regular files only); no code runs to find out. The files are read even
    when custom code is allowed: one that cannot be read safely is refused either way."""
    for folder in _loader_folders(model):
        for name in _REMOTE_CODE_FILES:
            if _has_auto_map(folder / name, model) and not model.trust_remote_code:
                where = "its directory" if str(folder) == model.location else f"{folder}"
                raise remote_code_error(model.model, f"{where} ({name} has an auto_map)")


def _loader_folders(model: ResolvedModel) -> list[Path]:
    from rbplab.catalog.registry import CHECKPOINTS_DIR

    folders: list[Path] = []
    if model.local:
        location = Path(model.location)
        folders.append(location)
        if location.parent.name == CHECKPOINTS_DIR:  # a checkpoint: its folder, checkpoints/, its base
            folders += [location.parent, location.parent.parent]
    if model.tokenizer_location:
        folders.append(Path(model.tokenizer_location))
    if model.tokenizer and Path(model.tokenizer).expanduser().is_dir():
        folders.append(Path(model.tokenizer).expanduser())
    return list(dict.fromkeys(folders))


def _has_auto_map(path: Path, model: ResolvedModel) -> bool:
    """Whether the JSON file `path` carries an auto_map (False when it is missing). It is read by
    the bounded reader, so a config that is not a JSON object, is nested too deeply, is huge or is
    not a regular file is a one-line ModelLoadError here, before transformers parses it."""
    try:
        parsed = read_json(path, _CONFIG_KINDS[path.name], _MAX_CONFIG_BYTES, shape=dict)
    except FileNotFoundError:
        return False
    except BadFileError as err:
        raise ModelLoadError(f"cannot check {path.name} of {model.model} for custom code: {err}") from None
    except OSError as err:
        if not path.exists():
            return False
        raise ModelLoadError(
            f"cannot check {path} of {model.model} for custom code: {err.strerror or err}"
        ) from None
    return bool(parsed.get("auto_map"))


def is_remote_code_refusal(err: BaseException) -> bool:
    return "trust_remote_code" in str(err)


def load_config(model: ResolvedModel, revision: str | None = None) -> Any:
    """The model's config (at `revision`: a hub commit; None for a local model, whose checkpoint is
    its own folder). The first read of a model's files: custom code is refused first, for the
    tokenizer's folders too (`check_remote_code`), and the size fields are checked
    (`check_config_fields`) before transformers builds anything from them, so a hostile
    config.json is one line naming the field."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig, PretrainedConfig

    check_remote_code(model)
    label = config_label(model)
    kwargs: dict[str, Any] = {"revision": revision} if revision else {}
    if model.gguf_file:
        kwargs["gguf_file"] = model.gguf_file
        if model.local:  # transformers' own GGUF reader believes every count the header declares
            check_gguf_header(Path(model.location) / model.gguf_file)
    try:
        if not model.gguf_file:  # a GGUF's config is converted from its metadata, checked below
            raw, _ = PretrainedConfig.get_config_dict(model.location, **kwargs)
            check_config_fields(raw, label)
        config = AutoConfig.from_pretrained(
            model.location, trust_remote_code=model.trust_remote_code, **kwargs
        )
    except ModelLoadError:
        raise
    except (OSError, ValueError, KeyError) as err:
        if not model.trust_remote_code and is_remote_code_refusal(err):
            raise remote_code_error(model.location, "its repository") from err
        where = "the Hugging Face hub" if not model.local else model.location
        raise ModelLoadError(
            f"could not read the model config of {model.location!r} from {where}: {err}"
        ) from err
    except (StrictDataclassError, TypeError, ArithmeticError) as err:  # transformers' own checks
        reason = " ".join(str(err).split())
        raise ModelLoadError(f"{label} is not a valid config: {reason}") from err
    check_config_fields(config.to_dict(), label)
    return config


def load_tokenizer(model: ResolvedModel, revision: str | None = None) -> tuple[Any, int]:
    """The model's tokenizer (at `revision`, default model.revision), or model.tokenizer when
    given, and how many placeholder tokens end its list (a local GGUF's embedded tokenizer:
    `rbplab.extraction.gguf`; 0 otherwise)."""
    from transformers import AutoTokenizer

    revision = revision or model.revision
    placeholders = 0
    if model.tokenizer:
        location, kwargs = model.tokenizer, {}
    else:
        location = model.tokenizer_location or model.location
        kwargs = {"revision": revision} if revision and not model.local else {}
        if model.gguf_file:
            embedded = embedded_vocabulary(Path(model.location) / model.gguf_file) if model.local else None
            if model.local and embedded is None:
                raise ModelLoadError(
                    f"GGUF file {model.gguf_file} has no embedded tokenizer; pass the tokenizer of the "
                    "original model with tokenizer=<hub id or local tokenizer directory> "
                    "(CLI: --tokenizer)"
                )
            kwargs["gguf_file"] = model.gguf_file
            placeholders = embedded.trailing_placeholders if embedded is not None else 0
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            location, trust_remote_code=model.trust_remote_code, **kwargs
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        if not model.trust_remote_code and is_remote_code_refusal(err):
            raise remote_code_error(str(location), "its tokenizer's repository") from err
        hint = " (pass tokenizer=... to load it from elsewhere)" if not model.tokenizer else ""
        raise ModelLoadError(f"could not load a tokenizer from {location!r}{hint}: {err}") from err
    return tokenizer, placeholders


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


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


DEVICE_MAP_PREFIX = "device_map:"  # ModelInfo.device of a model placed by a device map


def select_device(device: str = "auto") -> torch.device:
    """cuda > mps > cpu for "auto"; anything else is passed to torch.device."""
    if device != "auto":
        try:
            chosen = torch.device(device)
        except RuntimeError as err:
            raise ModelLoadError(
                f"unknown device {device!r}; use 'auto', 'cpu', 'cuda', 'cuda:1', 'mps'"
            ) from err
        if chosen.type != "cpu":
            _check_present(chosen, device)
        return chosen
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _check_present(chosen: torch.device, device: str) -> None:
    """Refuse a device this machine does not have, before a model is placed on it (torch would
    fail there with a multi-line error, or not until the first tensor moves)."""
    if chosen.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ModelLoadError(f"device {device!r} requested but CUDA is not available; use device='auto'")
        if chosen.index is not None and chosen.index >= count:
            raise ModelLoadError(
                f"device {device!r} requested but this machine has {count} CUDA device(s) (cuda:0 to "
                f"cuda:{count - 1})"
            )
        return
    backend = (
        getattr(torch.backends, chosen.type, None)
        if chosen.type == "mps"
        else getattr(torch, chosen.type, None)
    )
    available = getattr(backend, "is_available", None)
    if not callable(available) or not available():
        raise ModelLoadError(
            f"device {device!r} requested but this machine has no {chosen.type} device; use device='auto' "
            "or 'cpu'"
        )


def resolve_dtype(dtype: str, device: torch.device, config: Any = None) -> str:
    """The dtype to run the model body in. "auto": float32 on CPU (exact and, without bf16
    matrix units, not slower); on accelerators the checkpoint's own half type if it has one."""
    if dtype != "auto":
        if dtype not in DTYPES:
            raise ModelLoadError(f"unknown dtype {dtype!r}; use 'auto' or one of {sorted(DTYPES)}")
        return dtype
    if device.type == "cpu" or config is None:
        return "float32"
    stored = getattr(config, "dtype", None)  # transformers >= 4.56 reads a config's torch_dtype into dtype
    stored = str(stored).replace("torch.", "") if stored is not None else None
    return stored if stored in ("bfloat16", "float16") else "float32"


@dataclass(frozen=True)
class ModelInfo:
    """Model metadata recorded in every cache manifest."""

    name: str  # as the user named it
    revision: str | None
    fingerprint: str  # "hub:<commit>" or "sha256:<digest of weight files and config>"
    architecture: str
    n_params: int
    n_nonembedding: int  # S
    vocab_size: int  # real tokenizer vocabulary |V|
    head_rows: int  # rows of the output layer (>= vocab_size when padded)
    max_context: int | None
    dtype: str
    device: str
    bos_token_id: int | None
    source: str = ""  # what was loaded: hub id or absolute path
    gguf_file: str | None = None
    tokenizer: str = ""  # tokenizer source
    tokenizer_fingerprint: str = ""
    softcap: float | None = None  # final_logit_softcapping, applied before ranking
    trust_remote_code: bool = False  # code from the model's directory/repository was allowed to run
    # GGUF: converter placeholder entries ("[PAD<id>]", type UNUSED) at the end of the token
    # list, left out of vocab_size (see rbplab.extraction.gguf)
    placeholder_tokens: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ModelDescription:
    """What is known about a resolved model without loading its weights."""

    model: ResolvedModel
    config: Any
    tokenizer: Any
    info: ModelInfo  # dtype and device as resolved from the settings
    commit: str | None = None  # hub models: the commit the revision pointed at, used for every load
    # local models: the files the fingerprint hashed, checked again whenever their bytes are used
    weights: WeightFiles | None = None


def describe_model(
    model: ModelSpec | ResolvedModel | str, settings: ExtractionSettings | None = None
) -> ModelDescription:
    """Config, tokenizer and ModelInfo of a model, without loading weights (for cache keys);
    `settings` give the dtype, device and device map it is to run with (default: "auto").

    A hub model's revision (None = main) is resolved to its commit once, here; config, tokenizer
    and (later) weights are all loaded at that commit, so a branch moving meanwhile cannot mix them.
    """
    resolved = as_resolved(model)
    # config, tokenizer and placeholder scan share one parse of a GGUF file's header
    with shared_gguf_reader() if resolved.gguf_file else contextlib.nullcontext():
        return _describe(resolved, settings or ExtractionSettings())


def _describe(model: ResolvedModel, settings: ExtractionSettings) -> ModelDescription:
    from rbplab.catalog.registry import logit_softcap, max_context, meta_model, parameter_counts

    device = select_device(settings.device)
    commit, fingerprint, weights = identify(model)
    # a local checkpoint is its own directory (catalog.resolve), so no revision is passed for it
    config = load_config(model, commit or (None if model.local else model.revision))
    meta = meta_model(config)  # the architecture on the meta device: no memory, no weights
    counts = parameter_counts(meta)
    limit, softcap = max_context(config), logit_softcap(config)
    check_weights_match(model, config, meta, weight_shapes(model, config))
    tokenizer, placeholders = load_tokenizer(model, commit)
    dtype = resolve_dtype(settings.dtype, device, config)
    vocab = len(tokenizer) - placeholders
    head_rows = int(counts.head_rows or len(tokenizer))
    if vocab > head_rows:
        raise ModelLoadError(
            f"tokenizer has {vocab} tokens but the model's output layer has only {head_rows} rows; "
            "the tokenizer does not belong to this model (check tokenizer=...)"
        )
    info = ModelInfo(
        name=model.model,
        revision=model.revision,
        fingerprint=fingerprint,
        architecture=counts.architecture,
        n_params=counts.n_params,
        n_nonembedding=counts.n_nonembedding,
        vocab_size=vocab,
        head_rows=head_rows,
        max_context=limit,
        dtype=dtype,
        device=f"{DEVICE_MAP_PREFIX}{settings.device_map}" if settings.device_map else str(device),
        bos_token_id=tokenizer.bos_token_id,
        source=model.location if not model.gguf_file else f"{model.location}/{model.gguf_file}",
        gguf_file=model.gguf_file,
        tokenizer=model.tokenizer or model.tokenizer_location or model.location,
        tokenizer_fingerprint=tokenizer_fingerprint(tokenizer),
        softcap=softcap,
        trust_remote_code=model.trust_remote_code,
        placeholder_tokens=placeholders,
    )
    return ModelDescription(model, config, tokenizer, info, commit, weights)
