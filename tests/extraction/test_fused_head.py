"""The fused rank head (Triton, run here by Triton's interpreter on CPU tensors) against a float64
reference and against `rank_stats`: padded vocabulary, bias, softcap, ties at the target, NaN and inf
rows, n and V off the tile sizes, one row and many, batch invariance, band settling, a row of exactly
MAX_CANDIDATES candidates, the accumulation unit of the half path, and the run-time checks. The
exactness cases both heads share (underflow, overflow, order-sensitive near-ties) are in
test_exact.py.

The interpreter multiplies tiles with numpy, in an order its BLAS picks (OPENBLAS_CORETYPE changes
it); the counts must equal float64's whatever that order, so besides small-integer inputs (exact in
any order) the tests use real-valued ones and constructed near-ties. bfloat16 is refused under the
interpreter (it multiplies bfloat16 bits as integers); bfloat16-representable values in float32
stand in for it. Half-precision numerics are a GPU check (benchmarks/gpu_check.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

triton = pytest.importorskip("triton", reason="Triton (the dev extra, Linux x86_64) runs the fused head")

from rbplab.core.errors import InvalidArgumentError  # noqa: E402
from rbplab.extraction import fused_head  # noqa: E402
from rbplab.extraction.exact import LogitRangeError, Tally  # noqa: E402
from rbplab.extraction.fused_head import HeadCertificateError, fused_rank_stats  # noqa: E402
from rbplab.extraction.heads import check_head, resolve_head  # noqa: E402
from rbplab.extraction.ranks import NonFiniteLogitsError, rank_stats  # noqa: E402

pytestmark = pytest.mark.skipif(
    not fused_head.INTERPRETED and not torch.cuda.is_available(),
    reason="the fused head needs CUDA or TRITON_INTERPRET=1 (tests/conftest.py sets it without a GPU)",
)
DEVICE = "cuda" if torch.cuda.is_available() and not fused_head.INTERPRETED else "cpu"


def integer_head(rows: int, d: int, bias: bool, seed: int = 0) -> nn.Linear:
    g = torch.Generator().manual_seed(seed)
    head = nn.Linear(d, rows, bias=bias)
    with torch.no_grad():
        head.weight.copy_(torch.randint(-3, 4, (rows, d), generator=g).float())
        if bias:
            head.bias.copy_(torch.randint(-6, 7, (rows,), generator=g).float())
    return head.to(DEVICE)


def integer_hidden(n: int, d: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-3, 4, (n, d), generator=g).float().to(DEVICE)


def float64_reference(hidden, head, targets, vocab_size, softcap=None):
    """Logits in float64 from the same inputs; counts by broadcasting, nll by logsumexp."""
    w = head.weight[:vocab_size].double()
    z = hidden.double() @ w.T
    if head.bias is not None:
        z = z + head.bias[:vocab_size].double()
    if softcap:
        z = torch.tanh(z / softcap) * softcap
    z_t = z.gather(1, targets[:, None].long())
    return (z > z_t).sum(1), (z == z_t).sum(1), torch.logsumexp(z, 1) - z_t[:, 0], z


def assert_exact(hidden, head, targets, vocab_size, softcap=None):
    greater, equal, nll = fused_rank_stats(hidden, head, targets, vocab_size=vocab_size, softcap=softcap)
    ref_g, ref_e, ref_nll, _ = float64_reference(hidden, head, targets, vocab_size, softcap)
    assert greater.dtype == equal.dtype == torch.int32 and nll.dtype == torch.float32
    assert torch.equal(greater.cpu().long(), ref_g.cpu())
    assert torch.equal(equal.cpu().long(), ref_e.cpu())
    assert torch.allclose(nll.cpu().double(), ref_nll.cpu(), rtol=1e-6, atol=1e-5)
    return greater, equal, nll


@pytest.mark.parametrize(
    ("n", "vocab", "rows", "d", "bias"),
    [
        (1, 300, 300, 40, False),  # one row
        (150, 300, 305, 40, True),  # n, V and d off the tile sizes; padded head rows; bias
        (257, 1000, 1024, 96, False),  # many programs, several K steps
        (128, 128, 128, 64, True),  # exactly one tile each way
    ],
)
def test_counts_and_nll_equal_a_float64_reference(n, vocab, rows, d, bias):
    head = integer_head(rows, d, bias)
    hidden = integer_hidden(n, d)
    targets = torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(2)).to(DEVICE)
    greater, equal, nll = assert_exact(hidden, head, targets, vocab)
    # ... and equal the fp32 head's results (counts exactly; nll to float32 rounding).
    fp32 = rank_stats(hidden, head, targets, vocab_size=vocab)
    assert torch.equal(greater, fp32[0]) and torch.equal(equal, fp32[1])
    assert torch.allclose(nll, fp32[2], rtol=1e-5, atol=1e-4)
    # The padded rows (vocab..rows) took no part: a padded row above every logit changes nothing.
    with torch.no_grad():
        head.weight[vocab:] = 50.0
    again = fused_rank_stats(hidden, head, targets, vocab_size=vocab)
    assert all(torch.equal(a, b) for a, b in zip(again, (greater, equal, nll), strict=True))


def test_ties_at_the_target_are_counted_exactly():
    head = integer_head(200, 16, bias=False)
    with torch.no_grad():
        head.weight[10:20] = head.weight[5]  # eleven identical rows: eleven equal logits
    hidden = integer_hidden(70, 16)
    targets = torch.full((70,), 5, dtype=torch.long, device=DEVICE)
    targets[::2] = 13
    _, equal, _ = assert_exact(hidden, head, targets, 200)
    assert bool((equal >= 11).all())


def test_softcap_ranks_well_separated_logits_as_float64_does():
    """With a cap, logits are no longer integers: the kernel's tanh rounds otherwise than float64's,
    so the inputs keep logits apart (distinct integers before the cap, far from saturation)."""
    n, vocab, d = 40, 120, 8
    head = integer_head(vocab, d, bias=False, seed=3)
    with torch.no_grad():
        head.weight.zero_()
        head.weight[:, 0] = torch.arange(vocab, dtype=torch.float32) - vocab / 2  # distinct logits
    hidden = torch.zeros(n, d, device=DEVICE)
    hidden[:, 0] = 0.25
    targets = torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(4)).to(DEVICE)
    greater, equal, nll = fused_rank_stats(hidden, head, targets, vocab_size=vocab, softcap=30.0)
    ref_g, ref_e, ref_nll, _ = float64_reference(hidden, head, targets, vocab, softcap=30.0)
    assert torch.equal(greater.cpu().long(), ref_g.cpu()) and bool((equal == 1).all())
    assert torch.allclose(nll.cpu().double(), ref_nll.cpu(), atol=1e-5)


def test_batch_invariance_a_row_is_the_same_in_any_call():
    head = integer_head(300, 24, bias=True)
    hidden = integer_hidden(200, 24) / 8  # powers of two: still exact
    targets = torch.randint(0, 300, (200,), generator=torch.Generator().manual_seed(5)).to(DEVICE)
    whole = fused_rank_stats(hidden, head, targets, vocab_size=300)
    for rows in (slice(0, 1), slice(63, 130), slice(199, 200)):
        part = fused_rank_stats(hidden[rows], head, targets[rows], vocab_size=300)
        assert all(torch.equal(p, w[rows]) for p, w in zip(part, whole, strict=True))


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_head_holding_nan_or_inf_is_refused(value):
    head = integer_head(150, 8, bias=True)
    hidden = integer_hidden(90, 8)
    with torch.no_grad():
        head.bias[7] = value  # column 7 would be non-finite in every row ...
    targets = torch.zeros(90, dtype=torch.long, device=DEVICE)
    with pytest.raises(LogitRangeError, match="the output head's bias holds NaN or \\+inf") as err:
        fused_rank_stats(hidden, head, targets, vocab_size=150)
    assert "\n" not in str(err.value)
    # ... but only the padded rows hold it: ranking over the first 7 columns is fine.
    assert_exact(hidden, head, torch.zeros(90, dtype=torch.long, device=DEVICE) + 3, 7)


def test_a_non_finite_hidden_row_names_its_row():
    head = integer_head(150, 8, bias=False)
    hidden = integer_hidden(90, 8)
    hidden[70, 3] = float("nan")
    with pytest.raises(NonFiniteLogitsError) as err:
        fused_rank_stats(hidden, head, torch.zeros(90, dtype=torch.long, device=DEVICE), vocab_size=150)
    assert err.value.row == 70 and err.value.rows == 1


@pytest.mark.parametrize("masked", [slice(100, None), slice(0, fused_head.BLOCK_V)])
def test_minus_inf_logits_elsewhere_are_zero_probabilities(masked):
    """-inf logits at the end, or filling the whole first tile of BLOCK_V columns (the online
    exp-sum then starts from nothing: exp2(-inf - -inf) would be NaN)."""
    head = integer_head(300, 8, bias=True)
    with torch.no_grad():
        head.bias[masked] = float("-inf")
    hidden = integer_hidden(30, 8)
    first = fused_head.BLOCK_V
    targets = torch.randint(first, 300, (30,), generator=torch.Generator().manual_seed(6)).to(DEVICE)
    if masked.start == 100:
        targets = targets % 100  # targets among the finite logits
    greater, equal, nll = fused_rank_stats(hidden, head, targets, vocab_size=300)
    ref = float64_reference(hidden, head, targets, 300)
    assert torch.equal(greater.cpu().long(), ref[0].cpu()) and torch.equal(equal.cpu().long(), ref[1].cpu())
    assert bool(torch.isfinite(nll).all())
    assert torch.allclose(nll.cpu().double(), ref[2].cpu(), atol=1e-5)


def test_the_certificate_refuses_a_target_logit_that_is_not_the_compared_value():
    """The kernel takes z_t from a gathered tile; pointing one row's gathered column elsewhere makes
    its z_t differ from the in-tile value at its target, which the kernel must count and refuse."""
    head = integer_head(300, 16, bias=False)
    hidden = integer_hidden(100, 16)
    targets = torch.randint(0, 300, (100,), generator=torch.Generator().manual_seed(7)).to(DEVICE)
    z = float64_reference(hidden, head, targets, 300)[3]
    gathered = targets.clone()
    # A column whose logit differs from the target's in row 70 (an equal one would pass, rightly).
    other = int(torch.nonzero(z[70] != z[70, targets[70]])[0, 0])
    gathered[70] = other
    with pytest.raises(HeadCertificateError, match="1 target logit"):
        fused_rank_stats(hidden, head, targets, vocab_size=300, gathered=gathered)
    fused_rank_stats(hidden, head, targets, vocab_size=300, gathered=targets.clone())  # the control


def test_targets_outside_the_vocabulary_are_refused():
    head = integer_head(64, 8, bias=False)
    with pytest.raises(InvalidArgumentError, match=r"\[0, 60\)"):
        fused_rank_stats(integer_hidden(3, 8), head, torch.tensor([0, 60, 1], device=DEVICE), vocab_size=60)


def test_the_fused_head_is_refused_off_cuda_without_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(InvalidArgumentError, match="head='fp32'"):
        check_head("fused", "cpu", "float32")
    check_head("fp32", "cpu", "bfloat16")
    check_head("fused", "cuda:0", "bfloat16")
    check_head("fused", "device_map:auto", "bfloat16")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    check_head("fused", "cpu", "float32")
    check_head("fused", "cpu", "float16")
    with pytest.raises(InvalidArgumentError, match="bfloat16") as err:
        check_head("fused", "cpu", "bfloat16")
    assert "\n" not in str(err.value)


def test_bfloat16_is_refused_under_the_interpreter_in_one_line():
    """The interpreter multiplies bfloat16 tiles as raw bit patterns (garbage by ~5e10), so the call
    is refused before the kernel runs; float32 with bfloat16 values is the stand-in."""
    if not fused_head.INTERPRETED:
        pytest.skip("on a GPU bfloat16 is the fused head's own dtype")
    head = integer_head(64, 8, bias=False).to(torch.bfloat16)
    hidden = integer_hidden(4, 8).to(torch.bfloat16)
    with pytest.raises(InvalidArgumentError, match="bfloat16") as err:
        fused_rank_stats(hidden, head, torch.zeros(4, dtype=torch.long), vocab_size=64)
    assert "\n" not in str(err.value)


# --- the head as a setting: not in the key, opt-in, refused where it cannot run --------------------


def test_the_head_is_a_checked_setting_and_not_in_the_key(gpt2_dir, tiny_corpus):
    """Both heads give float64's counts, so an entry is the same whichever head computes it."""
    from rbplab.core import ExtractionSettings
    from rbplab.core.settings import EntrySpec, EntrySpecError
    from rbplab.extraction.plan import plan_extraction

    with pytest.raises(InvalidArgumentError, match="head must be one of"):
        ExtractionSettings(head="bf16")
    assert ExtractionSettings().head == "auto"
    fp32 = plan_extraction(str(gpt2_dir), tiny_corpus, context_length=32)  # "auto" on a CPU: fp32
    fused = plan_extraction(str(gpt2_dir), tiny_corpus, context_length=32, head="fused")
    assert (fp32.head, fused.head) == ("fp32", "fused")
    assert fused.key_spec == fp32.key_spec and "head" not in fused.key_spec
    assert EntrySpec.from_json(fused.key_spec).to_json() == fused.key_spec
    with pytest.raises(EntrySpecError, match="has keys"):
        EntrySpec.from_json({**fp32.key_spec, "head": "fused"})


@pytest.mark.parametrize(
    ("device", "dtype", "triton", "expected"),
    [
        ("cuda", "bfloat16", True, "fused"),
        ("cuda:1", "float16", True, "fused"),
        ("device_map:auto", "bfloat16", True, "fused"),
        ("cuda", "float32", True, "fp32"),  # the kernel's IEEE float32 path is unmeasured on a GPU
        ("cpu", "bfloat16", True, "fp32"),
        ("mps", "float16", True, "fp32"),
        ("cuda", "bfloat16", False, "fp32"),  # no Triton
    ],
)
def test_auto_is_the_fused_head_only_for_a_half_body_on_cuda_with_triton(device, dtype, triton, expected):
    assert resolve_head("auto", device, dtype, triton=triton) == expected
    # an explicit head is kept as asked (where it cannot run, planning refuses it in one line)
    assert resolve_head("fp32", device, dtype, triton=triton) == "fp32"
    assert resolve_head("fused", device, dtype, triton=triton) == "fused"


def test_extract_with_the_fused_head_matches_the_fp32_head(gpt2_dir, tiny_corpus, tmp_path):
    """Real-valued GPT-2 states through both heads, each into its own cache: the same counts (each
    float64's, whatever the BLAS the interpreter's numpy uses), nll to 1e-5, and each manifest
    records its head and the rows it settled; either entry serves a lookup by either head."""
    from helpers.extraction import extract_run

    from rbplab.extraction.reading import load_stats
    from rbplab.store.cache.entry import CacheEntry

    settings = dict(context_length=32, max_tokens=120, progress=False)
    fp32 = extract_run(str(gpt2_dir), tiny_corpus, cache_dir=tmp_path / "a", head="fp32", **settings)
    fused = extract_run(str(gpt2_dir), tiny_corpus, cache_dir=tmp_path / "b", head="fused", **settings)
    assert fused.key == fp32.key and not fused.from_cache and fused.n_tokens == 120
    again = extract_run(str(gpt2_dir), tiny_corpus, cache_dir=tmp_path / "a", head="fused", **settings)
    assert again.from_cache and again.key == fp32.key
    a = load_stats(str(gpt2_dir), tiny_corpus, cache_dir=tmp_path / "a", **settings)
    b = load_stats(str(gpt2_dir), tiny_corpus, cache_dir=tmp_path / "b", head="fused", **settings)
    assert (a.n_greater == b.n_greater).all() and (a.n_equal == b.n_equal).all()
    assert float(abs(a.nll - b.nll).max()) < 1e-5
    for root, head in ((tmp_path / "a", "fp32"), (tmp_path / "b", "fused")):
        provenance = CacheEntry.open(fp32.key, root).manifest()["provenance"]
        assert provenance["heads"] == [head]
        assert 0 <= provenance["settled_rows"] <= 120


def test_cli_refuses_the_fused_head_on_a_cpu_in_one_line(
    gpt2_dir, tiny_corpus, tmp_path, monkeypatch, capsys
):
    from rbplab.cli.app import main

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(d.text for d in tiny_corpus.documents))
    cache = tmp_path / "cache"
    status = main(
        [
            "extract",
            "-m",
            str(gpt2_dir),
            "-c",
            str(corpus),
            "--device",
            "cpu",
            "--head",
            "fused",
            "--cache-dir",
            str(cache),
            "--context-length",
            "32",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert status == 1 and len(err.splitlines()) == 1 and "head='fp32'" in err
    assert not any(p.is_file() for p in cache.rglob("*") if "plans" not in p.parts and p.name != ".lock")


def test_the_kernel_compiles_for_an_h100_without_a_gpu():
    """The interpreter runs what the compiler refuses (a global that is not a constexpr raised
    NameError only when compiled): the kernel goes through Triton's front end for sm_90 here."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    helper = Path(__file__).resolve().parents[1] / "helpers" / "fused_head_ttir.py"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    done = subprocess.run([sys.executable, str(helper)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and "TTIR ok" in done.stdout and "PTX ok" in done.stdout, done.stderr[-2000:]


# --- real-valued inputs: the band, its candidates and float64 settling ----------------------------


def bf16_values(*shape, seed: int, scale: float = 1.0) -> torch.Tensor:
    """Random float32 values that bfloat16 holds exactly (what a bfloat16 body would give)."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).bfloat16().float().to(DEVICE)


@pytest.mark.parametrize(("near", "softcap"), [(20, None), (20, 30.0), (fused_head.MAX_CANDIDATES + 6, None)])
def test_near_ties_are_settled_and_rank_as_float64(near, softcap, monkeypatch):
    """`near` head rows equal to a target's row, or to it but for 2**-20 in one coordinate: their
    logits lie within float32's error bound of the target's (a third of them tie it exactly), so
    the kernel lists them and they are settled in float64. A row with more than MAX_CANDIDATES of
    them is ranked again by the fp32 head (exact too)."""
    vocab, d, n = 700, 64, 150
    weight = bf16_values(vocab, d, seed=11, scale=d**-0.5)
    g = torch.Generator().manual_seed(12)
    for j in range(near):
        k = int(torch.randint(0, d, (1,), generator=g))
        weight[vocab - 1 - j] = weight[5]
        weight[vocab - 1 - j, k] += (j % 3 - 1) * 2.0**-20
    head = nn.Linear(d, vocab, bias=False).to(DEVICE)
    with torch.no_grad():
        head.weight.copy_(weight)
    hidden = bf16_values(n, d, seed=13, scale=2.0)
    targets = torch.randint(0, vocab, (n,), generator=g).to(DEVICE)
    targets[:60] = 5
    tally = Tally()
    again = []

    def fp32_head(h, *args, **kwargs):
        again.append(len(h))
        return rank_stats(h, *args, **kwargs)

    monkeypatch.setattr(fused_head, "rank_stats", fp32_head)
    greater, equal, nll = fused_rank_stats(
        hidden, head, targets, vocab_size=vocab, softcap=softcap, tally=tally
    )
    ref_g, ref_e, ref_nll, _ = float64_reference(hidden, head, targets, vocab, softcap)
    assert torch.equal(greater.cpu().long(), ref_g.cpu()) and torch.equal(equal.cpu().long(), ref_e.cpu())
    assert torch.allclose(nll.cpu().double(), ref_nll.cpu(), atol=1e-5, rtol=0)
    assert tally.settled >= 60 and tally.rows == n
    # the 60 rows of token 5, and the rows whose target is one of its near copies
    assert sum(again) >= 60 if near > fused_head.MAX_CANDIDATES else again == []


def test_the_fused_and_fp32_heads_agree_on_real_valued_rows():
    """No integer inputs: both heads' counts are float64's whatever order the interpreter's numpy
    sums in (OPENBLAS_CORETYPE changes it by column), and batch invariance follows."""
    vocab, d, n = 1000, 96, 260
    head = nn.Linear(d, vocab, bias=True).to(DEVICE)
    with torch.no_grad():
        head.weight.copy_(bf16_values(vocab, d, seed=14, scale=d**-0.5))
        head.bias.copy_(bf16_values(vocab, seed=15))
    hidden = bf16_values(n, d, seed=16, scale=3.0)
    targets = torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(17)).to(DEVICE)
    greater, equal, nll = assert_exact(hidden, head, targets, vocab)
    fp32 = rank_stats(hidden, head, targets, vocab_size=vocab)
    assert torch.equal(greater, fp32[0]) and torch.equal(equal, fp32[1])
    part = fused_rank_stats(hidden[100:229], head, targets[100:229], vocab_size=vocab)
    assert torch.equal(part[0], greater[100:229]) and torch.equal(part[1], equal[100:229])


def test_the_kernel_tanh_is_within_8u_of_float64():
    """The softcap's tanh (fused_head._tanh) on a dense grid through 0.6, where its two formulas
    meet, and on tiny and saturating arguments: within 8u relative of float64's tanh, so a capped
    head's nll stays within 1e-5 (the counts never see the cap)."""
    import numpy as np
    import triton.language as tl

    @triton.jit
    def tanh_kernel(X, Y, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        ok = offsets < n
        tl.store(Y + offsets, fused_head._tanh(tl.load(X + offsets, mask=ok)), mask=ok)

    x = torch.cat([
        torch.linspace(-3, 3, 200_001), torch.linspace(0.59, 0.61, 20_001), torch.logspace(-30, 1, 20_000),
        -torch.logspace(-30, 1, 20_000), torch.tensor([0.0, 9.0, 20.0, 88.0]),
    ]).float().to(DEVICE)  # fmt: skip
    y = torch.empty_like(x)
    tanh_kernel[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), BLOCK=4096)
    want = np.tanh(x.cpu().double().numpy())
    got = y.cpu().double().numpy()
    relative = np.abs(got - want) / np.maximum(np.abs(want), np.finfo(np.float64).tiny)
    assert float(relative.max()) <= 8 * 2.0**-24


def test_the_certificate_names_the_first_of_two_failing_rows():
    head = integer_head(300, 16, bias=False)
    hidden = integer_hidden(200, 16)
    targets = torch.randint(0, 300, (200,), generator=torch.Generator().manual_seed(18)).to(DEVICE)
    z = float64_reference(hidden, head, targets, 300)[3]
    gathered = targets.clone()
    for row in (150, 40):  # the second program's row first: the error names row 40 all the same
        gathered[row] = int(torch.nonzero((z[row] - z[row, targets[row]]).abs() > 1)[0, 0])
    with pytest.raises(HeadCertificateError, match=r"2 target logit\(s\).*first at row 40 of the call"):
        fused_rank_stats(hidden, head, targets, vocab_size=300, gathered=gathered)


def test_a_target_logit_of_minus_inf_is_refused():
    """A target whose logit is -inf (a masked token) has no rank: refused, not counted as last."""
    head = integer_head(300, 8, bias=True)
    with torch.no_grad():
        head.bias[9] = float("-inf")
    hidden = integer_hidden(20, 8)
    targets = torch.full((20,), 4, dtype=torch.long, device=DEVICE)
    targets[13] = 9
    with pytest.raises(NonFiniteLogitsError) as err:
        fused_rank_stats(hidden, head, targets, vocab_size=300)
    assert err.value.row == 13 and err.value.rows == 1


@pytest.mark.parametrize("rows", [[2], [0, 4], [1, 2, 3]])
def test_the_error_counts_every_non_finite_logit_of_its_row(rows):
    """A NaN state component reaches all 300 logits of its row (the padded columns past V are not
    counted); the error names the first such row and how many rows there are."""
    head = integer_head(300, 8, bias=True)
    hidden = integer_hidden(5, 8)
    hidden[rows, 3] = float("nan")
    with pytest.raises(NonFiniteLogitsError) as err:
        fused_rank_stats(hidden, head, torch.zeros(5, dtype=torch.long, device=DEVICE), vocab_size=300)
    assert (err.value.row, err.value.rows, err.value.values) == (rows[0], len(rows), 300)


def test_half_states_with_a_float32_head_reach_the_kernel_as_one_dtype(monkeypatch):
    """The kernel multiplies one dtype: float16 states with a float32 head are ranked in float32
    (the states converted, exactly), and the counts are float64's."""
    seen = []
    kernel = fused_head._rank_kernel

    class Spy:
        def __getitem__(self, grid):
            def launch(h, w, *args, **kwargs):
                seen.append((h.dtype, w.dtype, kwargs["IEEE"]))
                return kernel[grid](h, w, *args, **kwargs)

            return launch

    monkeypatch.setattr(fused_head, "_rank_kernel", Spy())
    head = integer_head(200, 16, bias=False)
    hidden = integer_hidden(30, 16).half()
    targets = torch.randint(0, 200, (30,), generator=torch.Generator().manual_seed(19)).to(DEVICE)
    assert_exact(hidden, head, targets, 200)
    assert seen == [(torch.float32, torch.float32, True)]


def test_a_transposed_head_weight_is_ranked():
    """A head weight stored transposed (stride 1 along the vocabulary) is made contiguous once."""
    base = integer_head(200, 16, bias=False)
    head = nn.Linear(16, 200, bias=False).to(DEVICE)
    head.weight = nn.Parameter(base.weight.detach().t().contiguous().t(), requires_grad=False)
    assert head.weight.stride(1) != 1
    hidden = integer_hidden(40, 16)
    targets = torch.randint(0, 200, (40,), generator=torch.Generator().manual_seed(20)).to(DEVICE)
    assert_exact(hidden, head, targets, 200)


def test_softcapped_logits_near_zero_rank_as_float64():
    """Capped logits near 0 (cap 30), 1e-6 of the cap apart or closer: tanh as (1 - e) / (1 + e)
    puts them on a grid of ~1e-6 of the cap and misranks them; the kernel's tanh does not."""
    vocab, d, n = 512, 16, 64
    g = torch.Generator().manual_seed(21)
    weight = torch.zeros(vocab, d)
    weight[:, 0] = torch.linspace(-3e-5, 3e-5, vocab)
    weight[:, 1:] = torch.randn(vocab, d - 1, generator=g) * 1e-7
    head = nn.Linear(d, vocab, bias=False).to(DEVICE)
    with torch.no_grad():
        head.weight.copy_(weight)
    hidden = (torch.ones(n, d) + torch.rand(n, d, generator=g)).to(DEVICE)
    targets = torch.randint(0, vocab, (n,), generator=g).to(DEVICE)
    greater, equal, _ = fused_rank_stats(hidden, head, targets, vocab_size=vocab, softcap=30.0)
    ref_g, ref_e, _, _ = float64_reference(hidden, head, targets, vocab, softcap=30.0)
    assert torch.equal(greater.cpu().long(), ref_g.cpu()) and torch.equal(equal.cpu().long(), ref_e.cpu())


@pytest.mark.parametrize(
    ("copies", "again"), [(fused_head.MAX_CANDIDATES, False), (fused_head.MAX_CANDIDATES + 1, True)]
)
def test_a_row_of_exactly_max_candidates_is_settled_from_the_list(copies, again, monkeypatch):
    """Every other logit lies far below the target's, and `copies` head rows duplicate the target's:
    a row with exactly MAX_CANDIDATES candidates is settled from the kernel's list, one more sends it
    to the fp32 head. Both are exact (n_equal = copies + 1)."""
    vocab, d, n = 300, 8, 20
    weight = torch.full((vocab, d), -3.0)
    weight[5] = 1.0
    weight[vocab - copies :] = 1.0
    head = nn.Linear(d, vocab, bias=False).to(DEVICE)
    with torch.no_grad():
        head.weight.copy_(weight)
    hidden = integer_hidden(n, d).abs() + 1
    targets = torch.full((n,), 5, device=DEVICE)
    calls = []

    def fp32_head(h, *args, **kwargs):
        calls.append(len(h))
        return rank_stats(h, *args, **kwargs)

    monkeypatch.setattr(fused_head, "rank_stats", fp32_head)
    tally = Tally()
    greater, equal, _ = fused_rank_stats(hidden, head, targets, vocab_size=vocab, tally=tally)
    assert greater.tolist() == [0] * n and equal.tolist() == [copies + 1] * n
    assert calls == ([n] if again else []) and tally.settled == n


@pytest.mark.parametrize(("dtype", "unit"), [(torch.float16, 6 * 2.0**-24), (torch.float32, 2.0**-24)])
def test_the_half_path_bounds_with_the_tensor_core_unit(dtype, unit, monkeypatch):
    """Half states and head go to tensor cores: the band and the run-time check use u' of the
    device's family (off a GPU the worst case, 6u); float32 goes through the IEEE dot (u)."""
    seen = {}
    bounds, ratios = fused_head.row_bounds, fused_head.target_logit_ratios

    def spy_bounds(h, w_norm, b_max, u):
        seen["bounds"] = u
        return bounds(h, w_norm, b_max, u)

    def spy_ratios(*args):
        seen["ratios"] = args[-1]
        return ratios(*args)

    monkeypatch.setattr(fused_head, "row_bounds", spy_bounds)
    monkeypatch.setattr(fused_head, "target_logit_ratios", spy_ratios)
    head = integer_head(300, 16, bias=True).to(dtype)
    hidden = integer_hidden(40, 16).to(dtype)
    targets = torch.randint(0, 300, (40,), generator=torch.Generator().manual_seed(3)).to(DEVICE)
    fused_rank_stats(hidden, head, targets, vocab_size=300)
    want = (
        unit
        if DEVICE == "cpu" or dtype == torch.float32
        else fused_head.accumulation_unit(True, hidden.device)
    )
    assert seen == {"bounds": want, "ratios": want}
