"""The head a run ranks with: one rule for "auto" whoever asks, refusals before any model is
described, and suggestions that do not refuse."""

from __future__ import annotations

import sys

import pytest

from rbplab.core.errors import InvalidArgumentError
from rbplab.core.settings import ExtractionSettings
from rbplab.extraction import heads


def test_every_caller_resolves_auto_with_the_one_function():
    """Planning and the cost model name the one rule, not copies of it (the runner's workers plan
    with `plan_extraction`; lookups by the fingerprint records and the study ignore the head, which
    is not in the key)."""
    from rbplab.extraction import plan
    from rbplab.runner import cost_model

    for module in (plan, cost_model):
        assert module.resolve_head is heads.resolve_head


@pytest.mark.parametrize(("stored", "expected"), [("bfloat16", "fused"), ("float32", "fp32")])
def test_the_same_run_plans_one_head_through_every_caller(
    tmp_path, gpt2_dir, tiny_corpus, stored, expected, monkeypatch
):
    """One GPU run of a model stored in `stored`: the plan a CUDA worker makes, and the memory
    `rbplab plan` estimates for it from a driver without a GPU, use one head."""
    import json
    import shutil

    import torch

    from rbplab.extraction.plan import plan_extraction
    from rbplab.grid import Grid
    from rbplab.runner import cost_model, costs

    model = tmp_path / "model"
    shutil.copytree(gpt2_dir, model)
    config = json.loads((model / "config.json").read_text())
    config["torch_dtype"] = config["dtype"] = stored
    (model / "config.json").write_text(json.dumps(config))
    seen = []
    real = cost_model.memory_needed

    def spy(*args, **kwargs):
        seen.append(kwargs["head"])
        return real(*args, **kwargs)

    monkeypatch.setattr(cost_model, "memory_needed", spy)
    grid = Grid.from_names([str(model)], [tiny_corpus], ExtractionSettings(context_length=32))
    costs.estimate_costs(grid, tmp_path / "cache", probe=False, accelerator=True)
    assert seen == [expected]
    # The worker: "auto" on a CUDA device (as this machine would describe one with a GPU).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    worker = plan_extraction(str(model), tiny_corpus, ExtractionSettings(context_length=32))
    assert worker.described.info.device == "cuda" and worker.head == expected


def test_a_fused_head_that_cannot_run_is_refused_before_the_model_is_described(monkeypatch):
    """From names alone: the model named here does not exist, and the head is refused first."""
    from rbplab.extraction.plan import plan_extraction

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(InvalidArgumentError, match="head='fused'") as err:
        plan_extraction("/no/such/model", "prose", head="fused", device="cpu")
    assert "\n" not in str(err.value)
    with pytest.raises(Exception) as other:  # the fp32 head goes on to the model, and fails there
        plan_extraction("/no/such/model", "prose", head="fp32", device="cpu")
    assert "head" not in str(other.value)


@pytest.mark.parametrize(
    ("settings", "runnable"),
    [
        (dict(head="fp32", device="cpu"), True),
        (dict(head="auto", device="cpu"), True),
        (dict(head="fused", device="cpu"), False),
        (dict(head="fused", device="cuda"), True),
        (dict(head="fused", device="cpu", device_map="auto"), True),
    ],
)
def test_runnable_here_judges_from_names(settings, runnable, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    if settings.get("device_map"):
        settings = dict(settings, device="auto")
    assert heads.runnable_here(ExtractionSettings(**settings)) == runnable


def test_the_interpreter_runs_float32_and_float16_but_refuses_bfloat16(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for dtype in ("float32", "float16", "auto"):
        heads.check_head("fused", "cpu", dtype)
    with pytest.raises(InvalidArgumentError, match="bfloat16"):
        heads.check_head("fused", "cpu", "bfloat16")
    heads.check_head("fused", "cuda", "bfloat16")  # on a GPU bfloat16 is the kernel's own dtype


def test_a_missing_run_suggests_a_command_that_runs_here(monkeypatch, tmp_path, capsys):
    """`rbplab fit --head fused` on a CPU: the suggested --extract command drops the head it cannot
    run (the head changes no rank), and that command is not refused for its head."""
    from rbplab.cli.app import main

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    status = main(["fit", "-f", "micro", "-c", "prose", "--head", "fused", "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert status != 0 and "--extract: rbplab fit" in err
    suggestion = err.split("--extract: ", 1)[1]
    assert "--head" not in suggestion and suggestion.endswith("--extract")


def test_the_head_policy_imports_no_torch():
    """A cached `rbplab fit` asks the policy (a missing run's suggestion) without loading torch."""
    import subprocess

    code = "import sys, rbplab.extraction.heads; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr[-2000:]


def test_a_missing_run_on_an_absent_gpu_says_where_its_command_runs(monkeypatch, tmp_path, capsys):
    """`--device cuda` decides the dtype "auto", so the key: the suggestion keeps it and says that
    the command runs on a machine with CUDA, rather than offering one that this machine refuses."""
    from rbplab.cli.app import main
    from rbplab.extraction import fingerprints

    monkeypatch.setattr(fingerprints, "cpu_only", lambda settings: settings.device in ("auto", "cpu"))
    status = main(["fit", "-f", "micro", "-c", "prose", "--device", "cuda", "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert status != 0 and "--extract on a machine with CUDA (this one has none): rbplab fit" in err


@pytest.mark.parametrize("value", ["1", "0", "", "true", "TRUE", "false", "on", "yes", "2", "no"])
def test_the_interpreter_switch_is_read_as_triton_reads_it(value, monkeypatch):
    """The refusal (`check_head`) and the kernel (`fused_head.INTERPRETED`, Triton's own knob) read
    TRITON_INTERPRET alike: a value Triton takes as false ("2", "false") is no licence to run the
    fused head on a CPU."""
    libtriton = pytest.importorskip("triton._C.libtriton")
    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert heads.triton_interpreted() == libtriton.getenv_bool("TRITON_INTERPRET", False)
