"""The GPU check and the GPU benchmark stay runnable between the sessions that are lent a GPU: the
check's parts (e) and (a) run here on the CPU (the fused head through Triton's interpreter), its
reference is exact where float64 is not, its bound-tight inputs are what part (e) says they are,
a ratio above 1 fails the check, and the benchmark reports a child that fails instead of waiting
for it."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


@pytest.fixture
def gpu_check(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import gpu_check

    return gpu_check


def interpreted():
    pytest.importorskip("triton", reason="the fused head's kernel needs Triton (the dev extra)")
    from rbplab.extraction import fused_head

    if not fused_head.INTERPRETED:
        pytest.skip("the fused head runs here only under TRITON_INTERPRET=1 (tests/conftest.py sets it)")
    return fused_head


def test_gpu_check_smoke_run_measures_the_bound_and_ranks_exactly():
    """Part (e) measures the bound on float16 and float32 (interpreted; bfloat16 skipped, said so):
    every ratio <= 1, nothing refused, counts exact, the nll near float64; part (a) ranks micro-1's
    states exactly with both heads, batch-invariantly; part (d) runs `rbplab run` end to end with
    the fused head and reads back its manifest."""
    pytest.importorskip("triton", reason="the fused head's kernel needs Triton (the dev extra)")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu_check.py"), "--smoke", "--exact-tokens", "100"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "# bfloat16 skipped: Triton's interpreter multiplies bfloat16 tiles as raw bit patterns" in lines
    for dtype in ("float16", "float32"):
        (verdict,) = [line for line in lines if line.startswith(f"bound {dtype}: max ratio ")]
        worst = float(verdict.split()[4])
        assert worst <= 1 and verdict.split()[5] == "<=" and "FAILED" not in verdict, verdict
        ratios = []
        for family in ("half-ulp tail", "ulp tail", "random tail", "equal"):
            # after dtype and family: rows, unit, one ratio per d (64, 256), u seen, refused, counts
            (row,) = [line[25:].split() for line in lines if line.startswith(f"{dtype:<10}{family:<15}")]
            assert row[1] == ("6.00u" if dtype == "float16" else "1.00u")
            assert len(row[2:-3]) == 2 and row[-2:] == ["0", "exact"], row
            ratios += [float(x) for x in row[2:-3]]
        assert max(ratios) == worst
        for head in ("plain", "softcap 30"):
            (row,) = [line[25:].split() for line in lines if line.startswith(f"{dtype:<10}{head:<15}")]
            assert row[-1] == "exact" and float(row[-2]) < 1e-4, row  # max |dnll|, counts
    rows = [line.split() for line in lines if line.startswith("micro-1-25K float32")]
    assert [row[2] for row in rows] == ["fp32", "fused", "fused"]
    for row in rows[:2]:  # model, dtype, head, tokens, exact, differ, settled, dnll, cert, b.inv
        assert row[3] == "100" and row[4] == "100.0000%" and row[5] == "0" and row[8] == "0"
        assert row[9] == "yes"
    assert rows[2][3] == "100" and rows[2][-4].endswith("%")  # (d): tokens, rows settled
    assert "all parts ran" in done.stdout


def test_a_ratio_above_one_fails_part_e(gpu_check, monkeypatch, capsys):
    """A kernel held to a bound 1,000 times too tight: its target logits exceed it, the run-time
    check refuses them, and part (e)'s verdict line reads FAILED (the check exits 1 on it)."""
    fused_head = interpreted()
    monkeypatch.setattr(fused_head, "accumulation_unit", lambda half, device: 2.0**-24 / 1000)
    with torch.inference_mode():
        ok = gpu_check.bound_rows(torch.float32, (64,), 128, torch.device("cpu"), "none")
    out = capsys.readouterr().out.splitlines()
    assert not ok
    (verdict,) = [line for line in out if line.startswith("bound float32:")]
    assert float(verdict.split()[4]) > 1 and verdict.endswith("this device") and "FAILED" in verdict
    half_ulp = next(line.split() for line in out if line.startswith("float32   half-ulp tail"))
    assert float(half_ulp[5]) > 1 and half_ulp[-2:] == ["1", "-"]  # refused, so no counts
    assert not any("disagree" in line for line in out)


def test_a_ratio_at_most_one_passes_part_e(gpu_check, capsys):
    """The same inputs held to their own bound (u for float32): every ratio <= 1, nothing refused,
    counts exact, the verdict line without FAILED."""
    interpreted()
    with torch.inference_mode():
        ok = gpu_check.bound_rows(torch.float32, (64,), 128, torch.device("cpu"), "none")
    out = capsys.readouterr().out
    assert ok and "FAILED" not in out and "bound float32: max ratio 0." in out


@pytest.mark.parametrize("family", ["half-ulp tail", "ulp tail", "random tail", "equal"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_bound_tight_inputs_are_as_documented(gpu_check, family, dtype):
    """Every value exact in its dtype; every product positive (w carries h's signs); the first
    product the largest, in [1, 2), its row's own (other rows' apart by >= 1/128); the tails just
    under half an ulp of the sum (2**-24), just under one (2**-23), within [2**-26, 2**-22), or
    all equal; the sum stays below 2, so an ulp of it is 2**-23 throughout."""
    d, rows = 256, 130
    h, w = gpu_check.aligned_inputs(family, dtype, d, rows, seed=1)
    for x in (h, w):
        assert torch.equal(x.to(dtype).double(), x)
    products = h * w
    assert bool((products > 0).all())
    bits = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}[dtype]
    if family == "equal":
        assert bool((products == (2 - 2.0**-bits) ** 2).all())
        return
    first, tail = products[:, 0], products[:, 1:]
    assert bool(((first >= 1) & (first < 2)).all()) and bool((products.sum(1) < 2).all())
    assert torch.equal(first[:128].unique().sort().values, 1 + torch.arange(128).double() / 128)
    low, high = {
        "half-ulp tail": (2.0**-24 * (1 - 2.0**-bits), 2.0**-24),
        "ulp tail": (2.0**-23 * (1 - 2.0**-bits), 2.0**-23),
        "random tail": (2.0**-26, 2.0**-22),
    }[family]
    assert float(tail.min()) >= low and float(tail.max()) < high


def test_rational_sign_is_fractions_sign(gpu_check):
    """The reference's integer arithmetic against Python's rationals on values of every scale."""
    rng = random.Random(0)

    def draw() -> float:
        return rng.choice([0.0, 1.0, -1.0]) * rng.random() * 2.0 ** rng.randint(-140, 120)

    for _ in range(200):
        d = rng.randint(1, 6)
        h, w_v, w_t = ([draw() for _ in range(d)] for _ in range(3))
        b_v, b_t = draw(), draw()
        want = Fraction(b_v) - Fraction(b_t)
        want += sum(Fraction(a) * (Fraction(b) - Fraction(c)) for a, b, c in zip(h, w_v, w_t, strict=True))
        assert gpu_check.rational_sign(h, w_v, w_t, b_v, b_t) == (want > 0) - (want < 0)


def test_exact_reference_settles_what_float64_cannot(gpu_check):
    """Row 0 (target 0, z_t = 0): z_1 = 2**-10 hides under products of 2**60 that cancel (float64
    sums it to 0 in the order written); exact arithmetic counts it greater, with z_2..z_4 near
    2**60. Row 1 (target 2, z_t = 1): z_1 = 1 + 2**-25 above, z_3 = 1 - 2**-40 below, z_4 an exact
    tie (an equal head row). The two pairs float64 cannot call go to integer arithmetic; the nll
    is float64's, softcapped or not."""
    big = 2.0**60
    hidden = torch.tensor([[big, 2.0**-5, big], [1.0, 2.0**-20, 0.0]])
    weight = torch.tensor(
        [[0.0, 0.0, 0.0], [1.0, 2.0**-5, -1.0], [1.0, 0.0, 0.0], [1.0, -(2.0**-20), 0.0], [1.0, 0.0, 0.0]]
    )
    assert (big + 2.0**-10) - big == 0  # float64 loses the gap in this order
    head = torch.nn.Linear(3, 5, bias=False)
    with torch.no_grad():
        head.weight.copy_(weight)
    targets = torch.tensor([0, 2])
    z = hidden.double() @ weight.double().T
    for softcap in (None, 30.0):
        ((start, greater, equal, nll, settled),) = list(
            gpu_check.exact_reference(hidden, head, targets, 5, softcap)
        )
        assert start == 0 and greater.tolist() == [4, 1] and equal.tolist() == [1, 2] and settled == 2
        zc = z if softcap is None else torch.tanh(z / softcap) * softcap
        assert torch.allclose(nll, torch.logsumexp(zc, 1) - zc.gather(1, targets[:, None])[:, 0])


def test_bench_gpu_reports_a_failed_child_with_its_exit_code(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_gpu

    args = bench_gpu.resolve(bench_gpu.parser().parse_args(["--device", "cpu", "--timeout", "60"]))
    # A model the benchmark does not know fails in the child (KeyError), before any weights.
    result = bench_gpu.run_approach("bare forward", "no-such-model", args, mp.get_context("spawn"))
    assert result == "exit code 1"
