"""Loading causal language models: hub ids, local directories and GGUF files.

A model is resolved once (`rbplab.catalog.resolve`); then two steps, so that a cache lookup never
touches weights:
- `describe_model` reads only the config and the tokenizer and returns a `ModelDescription`
  whose `ModelInfo` holds the size S from the config on the meta device, the real vocabulary,
  the fingerprints, and the dtype and device the settings resolve to;
- `load_model` additionally loads the weights and checks that the output head the
  rank extractor uses reproduces the model's own logits.

The real vocabulary is `len(tokenizer)`: many checkpoints pad the output layer
(Pythia 50,304 rows for 50,277 tokens; Qwen2.5 151,936 for 151,665), and those rows
are never a token of the text, so ranks are taken over the tokenizer's vocabulary.
"""

from __future__ import annotations

import contextlib
import json
import pickle
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from rbplab.catalog.models import ModelLoadError, ModelSpec, ResolvedModel
from rbplab.core.settings import ExtractionSettings
from rbplab.extraction.config_checks import check_config_fields, check_weight_files, local_weight_shapes
from rbplab.extraction.fingerprints import resolve_commit, tokenizer_fingerprint, weights_fingerprint
from rbplab.extraction.gguf_file import gguf_reader, shared_gguf_reader
from rbplab.extraction.sources import as_resolved

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEVICE_MAP_PREFIX = "device_map:"  # ModelInfo.device of a model placed by a device map


class RemoteCodeError(ModelLoadError):
    """A model that needs Python code from its own directory or repository, which was not allowed."""


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
    # list, left out of vocab_size (see rbplab.extraction.gguf_vocab)
    placeholder_tokens: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def select_device(device: str = "auto") -> torch.device:
    """cuda > mps > cpu for "auto"; anything else is passed to torch.device."""
    if device != "auto":
        try:
            chosen = torch.device(device)
        except RuntimeError as err:
            raise ModelLoadError(
                f"unknown device {device!r}; use 'auto', 'cpu', 'cuda', 'cuda:1', 'mps'"
            ) from err
        if chosen.type == "cuda" and not torch.cuda.is_available():
            raise ModelLoadError(f"device {device!r} requested but CUDA is not available; use device='auto'")
        return chosen
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def resolve_dtype(dtype: str, device: torch.device, config: Any = None) -> str:
    """The dtype to run the model body in. "auto": float32 on CPU (exact and, without bf16
    matrix units, not slower); on accelerators the checkpoint's own half type if it has one."""
    if dtype != "auto":
        if dtype not in DTYPES:
            raise ModelLoadError(f"unknown dtype {dtype!r}; use 'auto' or one of {sorted(DTYPES)}")
        return dtype
    if device.type == "cpu" or config is None:
        return "float32"
    stored = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    stored = str(stored).replace("torch.", "") if stored is not None else None
    return stored if stored in ("bfloat16", "float16") else "float32"


# ---------------------------------------------------------------------------------------------
# Config, tokenizer, metadata


def remote_code_error(name: str, where: str) -> RemoteCodeError:
    return RemoteCodeError(
        f"{name} needs custom Python code from {where}, which rbplab does not run unless you opt in "
        "with --trust-remote-code (trust_remote_code=True; recorded in the cache key)"
    )


# Files whose auto_map makes transformers' config or tokenizer loader import code from the folder.
_REMOTE_CODE_FILES = ("config.json", "tokenizer_config.json")
_MAX_CONFIG_BYTES = 64 << 20  # a tokenizer_config.json with a large added-token table is a few MB


def check_remote_code(model: ResolvedModel) -> None:
    """Refuse, unless allowed, a local model whose configs ask for custom code (an ``auto_map``)
    anywhere the config or tokenizer loader can reach: the model folder (a GGUF file's folder
    too), the tokenizer folder it uses (a checkpoint's base folder), a tokenizer override folder,
    and for a checkpoint (``<base>/checkpoints/step-<n>``) every folder up to its base. Only the
    JSON is read (bounded, regular files only); no code runs to find out."""
    if model.trust_remote_code:
        return
    for folder in _loader_folders(model):
        for name in _REMOTE_CODE_FILES:
            if _has_auto_map(folder / name, model):
                where = "its directory" if str(folder) == model.location else f"{folder}"
                raise remote_code_error(model.model, f"{where} ({name} has an auto_map)")


def _loader_folders(model: ResolvedModel) -> list[Path]:
    from rbplab.catalog.schedules import CHECKPOINTS_DIR

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
    """Whether the JSON file `path` carries an auto_map (False when it is missing or not JSON: the
    loader then fails on it with its own error); a file that cannot be read safely is refused."""
    from rbplab.store.files import open_regular_file

    try:
        with open_regular_file(path) as handle:
            data = handle.read(_MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return False
    except OSError as err:
        if not path.exists():
            return False
        raise ModelLoadError(
            f"cannot check {path} of {model.model} for custom code: {err.strerror or err}"
        ) from None
    if len(data) > _MAX_CONFIG_BYTES:
        raise ModelLoadError(
            f"{path} of {model.model} is larger than {_MAX_CONFIG_BYTES >> 20} MiB; not a model config"
        )
    try:
        parsed = json.loads(data)
    except ValueError:
        return False
    return isinstance(parsed, dict) and bool(parsed.get("auto_map"))


def _is_remote_code_refusal(err: BaseException) -> bool:
    return "trust_remote_code" in str(err)


def config_label(model: ResolvedModel) -> str:
    """How error messages name a model's config."""
    if model.gguf_file:
        return f"the config in {model.gguf_file}"
    return f"config.json of {model.location!r}"


def load_config(model: ResolvedModel, revision: str | None = None) -> Any:
    """The model's config (at `revision`: a hub commit; None for a local model, whose checkpoint is
    its own folder); its size fields are checked (`check_config_fields`) before transformers
    builds anything from them, so a hostile config.json is one line naming the field."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig, PretrainedConfig

    kwargs: dict[str, Any] = {"revision": revision} if revision else {}
    if model.gguf_file:
        kwargs["gguf_file"] = model.gguf_file
    label = config_label(model)
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
        if not model.trust_remote_code and _is_remote_code_refusal(err):
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


def _gguf_has_tokenizer(path: Path) -> bool:
    return "tokenizer.ggml.model" in gguf_reader(path).fields


def load_tokenizer(model: ResolvedModel, revision: str | None = None) -> Any:
    """The model's tokenizer (at `revision`, default model.revision), or model.tokenizer when given."""
    from transformers import AutoTokenizer

    revision = revision or model.revision
    if model.tokenizer:
        location, kwargs = model.tokenizer, {}
    else:
        location = model.tokenizer_location or model.location
        kwargs = {"revision": revision} if revision and not model.local else {}
        if model.gguf_file:
            if model.local and not _gguf_has_tokenizer(Path(model.location) / model.gguf_file):
                raise ModelLoadError(
                    f"GGUF file {model.gguf_file} has no embedded tokenizer; pass the tokenizer of the "
                    "original model with tokenizer=<hub id or local tokenizer directory> "
                    "(CLI: --tokenizer)"
                )
            kwargs["gguf_file"] = model.gguf_file
    try:
        return AutoTokenizer.from_pretrained(location, trust_remote_code=model.trust_remote_code, **kwargs)
    except (OSError, ValueError, KeyError, TypeError) as err:
        if not model.trust_remote_code and _is_remote_code_refusal(err):
            raise remote_code_error(str(location), "its tokenizer's repository") from err
        hint = " (pass tokenizer=... to load it from elsewhere)" if not model.tokenizer else ""
        raise ModelLoadError(f"could not load a tokenizer from {location!r}{hint}: {err}") from err


def max_context(config: Any) -> int | None:
    """Longest input the architecture accepts, from the usual config fields."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    for field in ("max_position_embeddings", "n_positions", "n_ctx", "seq_length", "max_sequence_length"):
        value = getattr(config, field, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def logit_softcap(config: Any) -> float | None:
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    cap = getattr(config, "final_logit_softcapping", None)
    return float(cap) if cap else None


@dataclass(frozen=True)
class ModelDescription:
    """What is known about a resolved model without loading its weights."""

    model: ResolvedModel
    config: Any
    tokenizer: Any
    info: ModelInfo  # dtype and device as resolved from the settings
    commit: str | None = None  # hub models: the commit the revision pointed at, used for every load


def describe_model(
    model: ModelSpec | ResolvedModel | str, settings: ExtractionSettings | None = None
) -> ModelDescription:
    """Config, tokenizer and ModelInfo of a model, without loading weights (for cache keys);
    `settings` give the dtype, device and device map it is to run with (default: "auto").

    A hub model's revision (None = main) is resolved to its commit once, here; config, tokenizer
    and (later) weights are all loaded at that commit, so a branch moving meanwhile cannot mix them.
    """
    resolved = as_resolved(model)
    check_remote_code(resolved)
    # config, tokenizer and placeholder scan share one parse of a GGUF file's header
    with shared_gguf_reader() if resolved.gguf_file else contextlib.nullcontext():
        return _describe(resolved, settings or ExtractionSettings())


def _describe(model: ResolvedModel, settings: ExtractionSettings) -> ModelDescription:
    from rbplab.catalog.sizes import meta_model, parameter_counts

    commit = None if model.local else resolve_commit(model)
    # a local checkpoint is its own directory (catalog.resolve), so no revision is passed for it
    config = load_config(model, commit or (None if model.local else model.revision))
    tokenizer = load_tokenizer(model, commit)
    meta = meta_model(config)  # the architecture on the meta device: no memory, no weights
    counts = parameter_counts(meta)
    check_weights_match(model, config, meta)
    device = select_device(settings.device)
    placeholders = _gguf_placeholders(model)
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
        fingerprint=f"hub:{commit}" if commit else weights_fingerprint(model),
        architecture=counts.architecture,
        n_params=counts.n_params,
        n_nonembedding=counts.n_nonembedding,
        vocab_size=vocab,
        head_rows=head_rows,
        max_context=max_context(config),
        dtype=resolve_dtype(settings.dtype, device, config),
        device=f"{DEVICE_MAP_PREFIX}{settings.device_map}" if settings.device_map else str(device),
        bos_token_id=tokenizer.bos_token_id,
        source=model.location if not model.gguf_file else f"{model.location}/{model.gguf_file}",
        gguf_file=model.gguf_file,
        tokenizer=model.tokenizer or model.tokenizer_location or model.location,
        tokenizer_fingerprint=tokenizer_fingerprint(tokenizer),
        softcap=logit_softcap(config),
        trust_remote_code=model.trust_remote_code,
        placeholder_tokens=placeholders,
    )
    return ModelDescription(model, config, tokenizer, info, commit)


def check_weights_match(model: ResolvedModel, config: Any, meta: torch.nn.Module) -> None:
    """Refuse a local model whose weight files do not hold the parameters its config describes
    (`check_weight_files`), reading only safetensors headers or a GGUF tensor table. Hub models,
    quantised and pickle checkpoints are not counted here; `load_weights` refuses any tensor they
    lack once loaded (transformers would initialise it at random)."""
    if not model.local or getattr(config, "quantization_config", None):
        return
    if model.gguf_file:  # the tensor table of the (memoised) header: shapes in ggml order
        reader = gguf_reader(Path(model.location) / model.gguf_file)
        shapes = {str(t.name): tuple(int(d) for d in t.shape) for t in reader.tensors}
    else:
        shapes = local_weight_shapes(Path(model.location))
    if shapes is not None:
        check_weight_files(meta, config, shapes, config_label(model))


def _gguf_placeholders(model: ResolvedModel) -> int:
    """Trailing placeholder tokens of a local GGUF whose embedded tokenizer is used (0 otherwise)."""
    if not model.gguf_file or not model.local or model.tokenizer:
        return 0
    from rbplab.extraction.gguf_vocab import trailing_placeholders

    return trailing_placeholders(Path(model.location) / model.gguf_file)


# ---------------------------------------------------------------------------------------------
# Weights


def load_weights(described: ModelDescription) -> torch.nn.Module:
    """Instantiate the model with weights, on the device and dtype its description resolved, in
    eval mode, its output head checked to reproduce the model's logits (`check_head`)."""
    from transformers import AutoModelForCausalLM

    resolved, info = described.model, described.info
    kwargs: dict[str, Any] = {"dtype": DTYPES[info.dtype], "trust_remote_code": resolved.trust_remote_code}
    revision = described.commit or (None if resolved.local else resolved.revision)
    if revision:
        kwargs["revision"] = revision
    if resolved.gguf_file:
        kwargs["gguf_file"] = resolved.gguf_file
    device_map = (
        info.device.removeprefix(DEVICE_MAP_PREFIX) if info.device.startswith(DEVICE_MAP_PREFIX) else None
    )
    if device_map:
        kwargs["device_map"] = device_map
    from safetensors import SafetensorError

    name = resolved.model
    try:
        # the GGUF header describe_model parsed: transformers reads config and tensors through it
        with shared_gguf_reader() if resolved.gguf_file else contextlib.nullcontext():
            model, loading = AutoModelForCausalLM.from_pretrained(
                resolved.location, output_loading_info=True, **kwargs
            )
    except SafetensorError as err:
        raise ModelLoadError(
            f"could not load the weights of {name!r}: a safetensors file is broken or truncated ({err}); "
            "download or save the model again"
        ) from err
    except pickle.UnpicklingError as err:
        raise ModelLoadError(
            f"could not load the weights of {name!r}: its pickle checkpoint is refused by "
            "torch.load(weights_only=True) because it holds more than tensors (it could run code); "
            "use a safetensors copy of the model"
        ) from err
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        if not resolved.trust_remote_code and _is_remote_code_refusal(err):
            raise remote_code_error(name, "its repository") from err
        raise ModelLoadError(f"could not load the weights of {name!r}: {err}") from err
    missing = sorted(loading.get("missing_keys") or ())
    if missing:  # what check_weights_match cannot see: hub files, pickle checkpoints
        raise ModelLoadError(
            f"the weight files of {name!r} lack {len(missing)} tensor(s) its config's architecture has "
            f"({missing[0]}{', ...' if len(missing) > 1 else ''}), which transformers would initialise at "
            "random; the config does not belong to these weights (edited, from another model, or a file "
            "is missing)"
        )
    if not device_map:
        model = model.to(torch.device(info.device))
    model.eval()
    head = model.get_output_embeddings()
    check_head_placed(head, device_map)
    rows = getattr(getattr(head, "weight", None), "shape", (info.head_rows,))[0]
    if rows != info.head_rows:
        raise ModelLoadError(f"output layer has {rows} rows, config says {info.head_rows}")
    check_head(model, info)
    return model


def check_head_placed(head: torch.nn.Module | None, device_map: str | None = None) -> None:
    """Refuse an output head whose weight is not in memory: `device_map` offloading it to CPU or disk
    leaves a meta tensor that the float32 head copy cannot read (one-line ModelLoadError)."""
    weight = getattr(head, "weight", None)
    if weight is not None and weight.device.type == "meta":
        raise ModelLoadError(
            f"device_map={device_map!r} offloaded the output head to CPU or disk (its weight is a meta "
            "tensor), and rank extraction needs it in memory on a device; free GPU memory, use a device "
            "map that keeps the output head on a GPU, or run without device_map on one device"
        )


def input_device(model: torch.nn.Module) -> torch.device:
    """Device of the token embeddings (the first device under a device map)."""
    return model.get_input_embeddings().weight.device


def check_head(model: torch.nn.Module, info: ModelInfo, length: int = 16) -> float:
    """Verify that base-model hidden states through the output head (float32, softcap) reproduce
    model(input_ids).logits; architectures that transform logits otherwise are refused.
    Returns the largest absolute difference seen."""
    from rbplab.extraction.precision import pinned_precision
    from rbplab.extraction.ranks import FloatHead

    length = min(length, info.max_context or length)
    ids = (torch.arange(length) * 7919 % info.vocab_size).unsqueeze(0).to(input_device(model))
    check_head_placed(model.get_output_embeddings())
    with torch.inference_mode(), pinned_precision():
        reference = model(ids, use_cache=False).logits[0].float()
        hidden = model.base_model(ids, use_cache=False).last_hidden_state[0]
        head = model.get_output_embeddings()
        ours = FloatHead.from_module(head, head.weight.shape[0])(hidden.to(head.weight.device))
        if info.softcap:
            ours = torch.tanh(ours / info.softcap) * info.softcap
    if not bool(torch.isfinite(reference).all()):
        raise ModelLoadError(
            f"{info.name}: the model produced NaN logits{nan_source(model, ids)}; its weights hold NaN "
            f"or overflow in {info.dtype}"
        )
    reference = reference.to(ours.device)
    diff = float((ours - reference).abs().max())
    scale = float(reference.abs().max()) + 1.0
    tolerance = 1e-4 if info.dtype == "float32" else 5e-2
    if not diff <= tolerance * scale:
        raise ModelLoadError(
            f"{info.architecture}: the output head applied to the base model's hidden states does not "
            f"reproduce the model's logits (max difference {diff:.3g}); this architecture transforms its "
            "logits in a way rank extraction does not support"
        )
    return diff


def nan_source(model: torch.nn.Module, ids: torch.Tensor) -> str:
    """ " (first at layer i of n)" for the first hidden state that is not finite, "" if none is."""
    try:
        with torch.inference_mode():
            states = model(ids, output_hidden_states=True, use_cache=False).hidden_states or ()
    except (RuntimeError, ValueError, TypeError):
        return ""
    for index, state in enumerate(states):
        if not bool(torch.isfinite(state).all()):
            where = "the embeddings" if index == 0 else f"layer {index - 1} of {len(states) - 1}"
            return f" (first non-finite output: {where})"
    return ""


def load_model(
    model: ModelSpec | ResolvedModel | str, settings: ExtractionSettings | None = None
) -> tuple[torch.nn.Module, Any, ModelInfo]:
    """Load (model, tokenizer, ModelInfo); the model is in eval mode on the device and dtype
    `settings` ask for (default: "auto")."""
    described = describe_model(model, settings)
    return load_weights(described), described.tokenizer, described.info
