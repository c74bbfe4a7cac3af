"""IEEE float32 pinned while scoring: TF32 off inside whatever the caller set, the caller's
settings back afterwards (also after an error), and the manifest records the flags."""

from __future__ import annotations

import pytest
import torch
from helpers.extraction import extract_run

from rbplab.extraction.precision import pinned_precision, precision_flags
from rbplab.extraction.weights import numerics_record

PER_OP = (
    torch.backends,
    torch.backends.cuda.matmul,
    torch.backends.cudnn,
    torch.backends.cudnn.conv,
    torch.backends.cudnn.rnn,
    torch.backends.mkldnn,
    torch.backends.mkldnn.matmul,
    torch.backends.mkldnn.conv,
    torch.backends.mkldnn.rnn,
)


def _raw_state() -> list:
    # read straight from torch, not through rbplab.extraction.weights
    state = [holder.fp32_precision for holder in PER_OP]
    for getter in (
        torch.get_float32_matmul_precision,
        lambda: torch.backends.cuda.matmul.allow_tf32,
        lambda: torch.backends.cudnn.allow_tf32,
    ):
        try:
            state.append(getter())
        except RuntimeError as err:  # a mixed legacy/new state: torch refuses to read the legacy flag
            state.append(f"refused: {str(err)[:40]}")
    return state


def _legacy_tf32():
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


def _medium():
    torch.set_float32_matmul_precision("medium")  # TF32 on cuBLAS, bfloat16 on oneDNN matmuls


def _transformers_enable_tf32():
    from transformers.utils.import_utils import enable_tf32

    enable_tf32(True)  # the generic fp32_precision = "tf32"


def _new_api_mix():
    torch.backends.cuda.matmul.fp32_precision = "tf32"  # legacy flag left "highest": a mixed state
    torch.backends.cudnn.conv.fp32_precision = "ieee"


@pytest.fixture
def restore_torch_flags():
    saved = [holder.fp32_precision for holder in PER_OP]
    legacy = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)
    yield
    torch.set_float32_matmul_precision(legacy[0])
    torch.backends.cudnn.allow_tf32 = legacy[1]
    for holder, value in zip(PER_OP, saved, strict=True):
        holder.fp32_precision = value


@pytest.mark.parametrize("setup", [_legacy_tf32, _medium, _transformers_enable_tf32, _new_api_mix])
def test_tf32_off_inside_and_the_callers_settings_back_after(setup, restore_torch_flags):
    setup()
    before = _raw_state()
    with pinned_precision():
        assert torch.get_float32_matmul_precision() == "highest"
        assert torch.backends.cuda.matmul.allow_tf32 is False and torch.backends.cudnn.allow_tf32 is False
        assert all(holder.fp32_precision == "ieee" for holder in PER_OP)
    assert _raw_state() == before
    with pytest.raises(KeyError), pinned_precision():
        raise KeyError("an error inside")
    assert _raw_state() == before


def test_a_caller_who_enabled_tf32_gets_it_back_around_extraction(
    gpt2_dir, tiny_corpus, tmp_path, restore_torch_flags
):
    _legacy_tf32()
    seen = []  # the matmul precision during every forward rbplab runs (load check and scoring)
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda *args: seen.append((torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32))
    )
    try:
        result = extract_run(
            str(gpt2_dir), tiny_corpus, context_length=16, cache_dir=tmp_path / "c", progress=False
        )
    finally:
        handle.remove()
    assert seen and set(seen) == {("highest", False)}
    assert torch.backends.cuda.matmul.allow_tf32 is True and torch.backends.cudnn.allow_tf32 is True
    assert torch.get_float32_matmul_precision() == "high"
    numerics = result.manifest["provenance"]["numerics"]
    assert numerics["precision"]["float32_matmul_precision"] == "highest"
    assert numerics["precision"]["cuda.matmul.allow_tf32"] is False
    assert numerics["precision"]["cudnn.allow_tf32"] is False
    assert numerics["precision"]["cuda.matmul.fp32_precision"] == "ieee"
    assert numerics["gpu"] is None and numerics["cuda"] is None and numerics["cublas"] is None  # CPU


def test_record_on_cpu_and_flags_read_back(restore_torch_flags):
    record = numerics_record("cpu")
    assert record["gpu"] is None and record["cuda"] is None and record["cublas"] is None
    _new_api_mix()
    flags = precision_flags()
    assert flags["cuda.matmul.fp32_precision"] == "tf32" and flags["cuda.matmul.allow_tf32"] is None
