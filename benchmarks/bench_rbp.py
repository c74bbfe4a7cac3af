"""Timings of the analysis hot paths, each next to the naive way of computing the same thing.

    .venv/bin/python benchmarks/bench_rbp.py [--tokens 10000000] [--vocab 50257] [--boot 1000]

Prints: RBP_k for all k over 10^7 tokens (target: well under a second, so notebook sliders
respond instantly) per tie convention vs a per-k scan; RBPCurve queries; the document bootstrap
(per-document sufficient statistics + weighted sums) vs re-scanning tokens per replicate;
bootstrap_fits for a family; lognormal fits from the rank histogram vs per-token likelihoods;
and the emergence window scan.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from rbplab.analysis import emergence, fit_bootstrap, lognormal, metrics
from rbplab.core.runs import Run
from rbplab.core.stats import TIES, TokenStats


def best_of(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def synthetic_stats(n: int, vocab: int, n_docs: int, seed: int = 0) -> TokenStats:
    rng = np.random.default_rng(seed)
    ranks = lognormal.sample_lognormal_ranks(0.8, 2.2, vocab, n, seed=seed)
    e = np.where(rng.random(n) < 1e-3, rng.integers(2, 5, n), 1)  # a few ties, as in bf16 logits
    g = np.maximum(np.minimum(ranks, vocab - e + 1) - 1, 0)
    doc = np.sort(rng.integers(0, n_docs, n))
    pos = np.arange(n) - np.searchsorted(doc, doc)
    nll = (0.3 + 0.9 * np.log(ranks) + rng.exponential(0.3, n)).astype(np.float64)
    return TokenStats(doc, pos, g, e, nll, vocab)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=10_000_000)
    ap.add_argument("--vocab", type=int, default=50_257)
    ap.add_argument("--docs", type=int, default=10_000)
    ap.add_argument("--boot", type=int, default=1000)
    args = ap.parse_args()
    n, vocab = args.tokens, args.vocab
    print(f"synthetic data: {n:,} tokens, |V| = {vocab:,}, {args.docs:,} documents")
    stats = synthetic_stats(n, vocab, args.docs)

    print("\n== RBP_k for all k (rank histogram + cumsum) ==")
    for ties in TIES:
        t = best_of(lambda ties=ties: metrics.rbp_curve(stats, ties))
        print(f"  rbp_curve(ties={ties!r:14}) all {vocab:,} k: {t * 1e3:8.1f} ms")
    rank = stats.rank("pessimistic")
    ks40 = metrics.log_spaced_ks(vocab, 40)
    t_scan = best_of(lambda: [np.mean(rank <= k) for k in ks40], repeat=1) / len(ks40)
    t_curve = best_of(lambda: metrics.rbp_curve(stats))
    print(f"  naive scan, one k: {t_scan * 1e3:.1f} ms -> all k would take {t_scan * vocab:,.0f} s")
    speedup = t_scan * vocab / t_curve
    print(f"  ratio all-k curve / one-k scan: {t_curve / t_scan:.2f} (all-k speed-up: {speedup:,.0f}x)")
    curve = metrics.rbp_curve(stats)
    queries = np.random.default_rng(1).integers(1, vocab + 1, 100_000)
    t = best_of(lambda: [curve.rbp(int(k)) for k in queries[:10_000]], repeat=1) / 10_000
    print(f"  RBPCurve.rbp(k) single query (slider): {t * 1e6:.1f} us")

    print(f"\n== document bootstrap, {args.boot} replicates, {len(ks40)} k values ==")
    t_doc = best_of(lambda: metrics.doc_stats(stats, ks40, "pessimistic"), repeat=1)
    docs = metrics.doc_stats(stats, ks40, "pessimistic")
    t_rep = best_of(lambda: metrics.replicate_arrays([docs], args.boot, seed=0), repeat=1)
    print(f"  per-document statistics (once): {t_doc:.2f} s; {args.boot} replicates: {t_rep:.2f} s")
    starts = np.searchsorted(stats.doc, np.arange(args.docs))
    ends = np.r_[starts[1:], n]

    def rescan_replicate(rng):  # the naive way: gather the resampled documents' tokens
        pick = rng.integers(0, args.docs, args.docs)
        idx = np.concatenate([np.arange(starts[d], ends[d]) for d in pick])
        r = rank[idx]
        return [np.mean(r <= k) for k in ks40]

    rng = np.random.default_rng(0)
    t_naive = best_of(lambda: [rescan_replicate(rng) for _ in range(3)], repeat=1) / 3
    print(f"  naive re-scan: {t_naive:.2f} s per replicate -> {t_naive * args.boot:,.0f} s for {args.boot}")
    print(f"  ratio naive / sufficient statistics: {t_naive * args.boot / (t_doc + t_rep):,.0f}x")

    n_models, per_model = 6, max(n // 5, 1000)
    runs = [
        Run("fam", f"m{i}", "corpus", 10.0 ** (7 + i / 2), synthetic_stats(per_model, vocab, args.docs, i))
        for i in range(n_models)
    ]
    t = best_of(lambda: fit_bootstrap.bootstrap_fits(runs, ks=ks40, n_boot=args.boot), repeat=1)
    shape = f"{n_models} models x {per_model:,} tokens, {len(ks40)} k, {args.boot} reps"
    print(f"  bootstrap_fits ({shape}): {t:.2f} s")

    print("\n== lognormal fit (weighted by the rank histogram) ==")
    hist = metrics.rank_histogram(stats)
    t_hist = best_of(lambda: lognormal.fit_lognormal(hist))
    t_comp = best_of(lambda: lognormal.compare_rank_distributions(hist), repeat=1)
    f = lognormal.fit_lognormal(hist)
    fitted = f"mu={f.params['mu']:.3f}, sigma={f.params['sigma']:.3f}; true 0.8, 2.2"
    print(f"  fit_lognormal on {n:,} tokens: {t_hist * 1e3:.0f} ms ({fitted})")
    print(f"  compare_rank_distributions (3 families): {t_comp:.2f} s")
    pmf_log = np.log(lognormal.lognormal_pmf(0.8, 2.2, vocab))
    t_tok = best_of(lambda: pmf_log[rank - 1].sum(), repeat=1)
    t_h = best_of(lambda: np.einsum("i,i->", hist[1:], pmf_log), repeat=3)
    print(f"  one likelihood evaluation: per token {t_tok * 1e3:.1f} ms, histogram {t_h * 1e3:.2f} ms")
    print(f"  ratio per token / histogram: {t_tok / t_h:,.0f}x")
    t = best_of(lambda: lognormal.appendix_b(np.linspace(-1, 2, 20), np.full(20, 2.0)), repeat=1)
    print(f"  appendix_b, 20 (mu, sigma) pairs, infinite sums: {t * 1e3:.0f} ms")

    print("\n== emergence (sliding windows via cumulative sums) ==")
    t = best_of(lambda: emergence.sequence_success(stats, ns=(1, 2, 4, 8, 16, 32), ks=(1, 10, 100)), repeat=1)
    print(f"  sequence_success, 6 N x 3 k over {n:,} tokens: {t:.2f} s")


if __name__ == "__main__":
    main()
