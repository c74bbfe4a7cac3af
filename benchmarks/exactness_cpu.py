"""Are `rbplab extract`'s ranks exact arithmetic's on a CPU? Every micro-suite model and a random
GPT-2-shaped model, extracted with the fp32 head and with the fused head (Triton's interpreter,
float32), against exact logits of the same hidden states.

    TRITON_INTERPRET=1 PYTHONPATH=. .venv/bin/python benchmarks/exactness_cpu.py --tokens 2048

Per model and head it prints the tokens compared, the % whose (n_greater, n_equal) equal exact
arithmetic's, the largest |nll - nll_64|, and the rows with a band candidate (from the entry's
manifest). The reference: each window's final hidden states from the model's body (as the
extraction scores them, at context 256, the micro-suite's limit), times the head rows in float64;
a comparison float64 cannot decide (|z_v - z_t| within twice its own error bound) is decided in
Python's rationals, from the float32 values themselves. Counts on raw logits (a softcap changes no
rank); the nll's reference applies the softcap in float64.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
MICRO = ("micro-1-25K", "micro-2-85K", "micro-3-200K", "micro-4-559K", "micro-5-1.2M", "micro-6-2.7M")


def random_gpt2(folder: Path) -> Path:
    """GPT-2 small's shape (|V| 50,257, d 768) with random weights and the micro-suite's tokenizer."""
    import shutil

    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config()).save_pretrained(folder)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ROOT / "data" / "models" / "micro-1-25K" / file, folder / file)
    return folder


def exact_counts(hidden, weight, bias, targets) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(n_greater, n_equal, pairs decided in rationals) of real arithmetic over float32 inputs."""
    from fractions import Fraction

    h = hidden.float().double()
    z = h @ weight.T + (0 if bias is None else bias)
    size = h.abs() @ weight.abs().T + (0 if bias is None else bias.abs())
    z_t, size_t = z.gather(1, targets[:, None]), size.gather(1, targets[:, None])
    n = h.shape[1] + 2
    doubt = 2 * (n * 2.0**-53 / (1 - n * 2.0**-53)) * (size + size_t)
    sign = torch.sign(z - z_t)
    undecided = ((z - z_t).abs() <= doubt).nonzero().tolist()
    for i, v in undecided:
        t = int(targets[i])
        gap = Fraction(0) if bias is None else Fraction(float(bias[v])) - Fraction(float(bias[t]))
        for hk, a, b in zip(h[i].tolist(), weight[v].tolist(), weight[t].tolist(), strict=True):
            gap += Fraction(hk) * (Fraction(a) - Fraction(b))
        sign[i, v] = (gap > 0) - (gap < 0)
    return (sign > 0).sum(1), (sign == 0).sum(1), len(undecided)


def exact_stats(plan, scorer) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n_greater, n_equal, nll) of every scored token of `plan`, in the order `shard_frame` sorts
    them (document, position): exact counts and a float64 nll of the body's hidden states."""
    from rbplab.extraction.scoring import batches

    windows = [w for shard in plan.shards for w in shard]
    head = scorer.head.module
    weight = head.weight[: plan.vocab_size].double()
    bias = None if head.bias is None else head.bias[: plan.vocab_size].double()
    rows = []
    with torch.inference_mode():
        for length, group in batches(windows, 2048, plan.policy.context_length):
            hidden, targets = scorer.hidden_states(length, group)
            greater, equal, _ = exact_counts(hidden, weight, bias, targets)
            z = hidden.float().double() @ weight.T + (0 if bias is None else bias)
            if scorer.softcap:
                z = torch.tanh(z / scorer.softcap) * scorer.softcap
            stats = (greater, equal, torch.logsumexp(z, 1) - z.gather(1, targets[:, None])[:, 0])
            doc = np.concatenate([np.full(w.n_scored, w.doc_index) for w in group])
            pos = np.concatenate([w.positions() for w in group])
            rows.append((doc, pos, *[s.numpy() for s in stats]))
    doc, pos, greater, equal, nll = (np.concatenate(c) for c in zip(*rows, strict=True))
    order = np.lexsort((pos, doc))
    return greater[order], equal[order], nll[order]


def check(model: str, head: str, tokens: int, cache: Path) -> str:
    from rbplab.extraction.pipeline import extract
    from rbplab.extraction.plan import plan_extraction
    from rbplab.extraction.reading import load_stats
    from rbplab.extraction.scoring import make_scorer
    from rbplab.extraction.weights import load_weights
    from rbplab.grid import Grid
    from rbplab.store.cache.entry import CacheEntry

    settings = dict(max_tokens=tokens, dtype="float32", device="cpu", head=head, context_length=256)
    (result,) = extract(Grid.from_names([model], ["prose"], **settings), cache_dir=cache, progress=False)
    stats = load_stats(model, "prose", cache_dir=cache, progress=False, **settings)
    plan = plan_extraction(model, "prose", **settings)
    scorer = make_scorer(plan, load_weights(plan.described))
    greater, equal, nll = exact_stats(plan, scorer)
    same = (np.asarray(stats.n_greater) == greater) & (np.asarray(stats.n_equal) == equal)
    provenance = CacheEntry.open(result.key, cache).manifest()["provenance"]
    label = Path(model).name
    return (
        f"{label:<16}{head:<7}{len(same):>8,}{100 * same.mean():>10.4f}%{int((~same).sum()):>8}"
        f"{float(np.abs(np.asarray(stats.nll) - nll).max()):>12.2e}"
        f"{provenance['settled_rows']:>9,} ({100 * provenance['settled_rows'] / len(same):.2f}%)"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=2048, help="scored tokens per model")
    p.add_argument("--heads", nargs="+", default=["fp32", "fused"], choices=["fp32", "fused"])
    p.add_argument("--models", nargs="*", default=[*MICRO, "gpt2-random"])
    args = p.parse_args()
    if "fused" in args.heads and os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("the fused head runs on this CPU through Triton's interpreter: set TRITON_INTERPRET=1")
    print(f"# OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; torch {torch.__version__}")
    print(
        f"{'model':<16}{'head':<7}{'tokens':>8}{'exact':>11}{'differ':>8}{'max |dnll|':>12}"
        f"{'settled rows':>18}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            model = (
                str(random_gpt2(Path(tmp) / "gpt2-random"))
                if name == "gpt2-random"
                else str(ROOT / "data" / "models" / name)
            )
            for head in args.heads:
                print(check(model, head, args.tokens, Path(tmp) / f"cache-{head}"), flush=True)


if __name__ == "__main__":
    main()
