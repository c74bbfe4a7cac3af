"""Loading a model's weights, checking its head, and recording the numerics it scores with.

IEEE float32 arithmetic is pinned by `rbplab.extraction.precision`; the manifest records what ran.
"""

from __future__ import annotations

import contextlib
import ctypes
import pickle
from collections.abc import Iterator
from typing import Any

import torch

from rbplab.catalog.models import ModelLoadError, ModelSpec, ResolvedModel
from rbplab.core.settings import ExtractionSettings
from rbplab.extraction.gguf import shared_gguf_reader
from rbplab.extraction.precision import pinned_precision
from rbplab.extraction.ranks import linear_weight, softcapped
from rbplab.extraction.sources import (
    DEVICE_MAP_PREFIX,
    DTYPES,
    ModelDescription,
    ModelInfo,
    describe_model,
    is_remote_code_refusal,
    remote_code_error,
)


def numerics_record(device: torch.device | str | None = None) -> dict[str, Any]:
    """What the numbers were computed with, for the manifest (never the cache key): the pinned
    precision flags, and on CUDA the GPU's name, CUDA and cuBLAS versions (None on a CPU)."""
    device = torch.device(device) if device is not None else None
    on_cuda = device is not None and device.type == "cuda" and torch.cuda.is_available()
    with pinned_precision() as flags:
        pass
    return {
        "precision": flags,
        "gpu": torch.cuda.get_device_name(device) if on_cuda else None,
        "cuda": torch.version.cuda if on_cuda else None,
        "cublas": cublas_version() if on_cuda else None,
    }


def cublas_version() -> str | None:
    """Version of the cuBLAS library this process has loaded ("12.4.5"), None when none is loaded
    (torch loads it at the first CUDA matmul) or it cannot be asked."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = {line.split()[-1] for line in maps if "libcublas.so" in line and "/" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            library = ctypes.CDLL(path)
            parts = []
            for kind in (0, 1, 2):  # cublasGetProperty: MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
                value = ctypes.c_int()
                if library.cublasGetProperty(kind, ctypes.byref(value)) != 0:
                    break
                parts.append(str(value.value))
        except (OSError, AttributeError):
            continue
        if len(parts) == 3:
            return ".".join(parts)
    return None


@contextlib.contextmanager
def _no_loading_bar() -> Iterator[None]:
    """transformers' own bars (its "Loading weights") off while a model loads: the command's bar
    is the one progress report of a step, and a second bar beside it breaks it up. The hub's
    download bars stay (a first download can take minutes). transformers before 5 has no tqdm
    hook: its bars, and the hub's, are off for the load and back as they were after."""
    from transformers.utils import logging

    set_hook = getattr(logging, "set_tqdm_hook", None)
    if set_hook is None:
        enabled = logging.is_progress_bar_enabled()
        logging.disable_progress_bar()
        try:
            yield
        finally:
            if enabled:
                logging.enable_progress_bar()
        return
    previous = set_hook(lambda factory, args, kwargs: factory(*args, **{**kwargs, "disable": True}))
    try:
        yield
    finally:
        set_hook(previous)


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
        with shared_gguf_reader() if resolved.gguf_file else contextlib.nullcontext(), _no_loading_bar():
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
        if not resolved.trust_remote_code and is_remote_code_refusal(err):
            raise remote_code_error(name, "its repository") from err
        raise ModelLoadError(f"could not load the weights of {name!r}: {err}") from err
    if described.weights is not None:  # the bytes just loaded are the ones the cache key names
        described.weights.check("since the run was planned")
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
    length = min(length, info.max_context or length)
    ids = (torch.arange(length) * 7919 % info.vocab_size).unsqueeze(0).to(input_device(model))
    check_head_placed(model.get_output_embeddings())
    with torch.inference_mode(), pinned_precision():
        reference = model(ids, use_cache=False).logits[0].float()
        hidden = model.base_model(ids, use_cache=False).last_hidden_state[0]
        head = model.get_output_embeddings()
        ours = softcapped(_float32_logits(head, hidden.to(head.weight.device)), info.softcap)
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


CHECK_ROWS = 8192  # head rows multiplied at a time by `check_head`


def _float32_logits(head: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """The head's logits in float32, its rows converted a block at a time: a float32 copy of a whole
    Qwen2.5-7B head is 2.2 GB, which a run with the fused head never needs otherwise."""
    weight, bias = linear_weight(head), getattr(head, "bias", None)
    x = hidden.to(torch.float32)
    blocks = []
    for start in range(0, weight.shape[0], CHECK_ROWS):
        rows = slice(start, start + CHECK_ROWS)
        b = None if bias is None else bias[rows].to(torch.float32)
        blocks.append(torch.nn.functional.linear(x, weight[rows].to(torch.float32), b))
    return torch.cat(blocks, dim=-1)


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
