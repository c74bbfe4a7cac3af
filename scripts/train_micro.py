"""Train the micro-suite: GPT-NeoX (Pythia-architecture) causal LMs that differ only in width/depth.

Every model sees the same tokens in the same order (seeded data stream, one epoch, no repetition), the
same token budget and the same schedule (linear warmup + cosine decay, AdamW). The peak learning rate
follows one rule, lr = LR_CONST / d_model (Adam's hidden-weight learning rate scales ~1/width), with
LR_CONST chosen by `pilot` on the held-out validation split of the training sources (never on the
evaluation corpora). Models are trained smallest first and each is saved as soon as it finishes.

  python scripts/train_micro.py pilot [--tokens 400000] [--only 0,3,5] [--lr-mults 0.5,1,2,4]
  python scripts/train_micro.py train [--tokens 3200000] [--lr-const 0.5] [--only i,j] [--threads 1]
                                     [--checkpoints 4] [--out data/models] [--progress FILE]

Checkpoints (issue 13): besides the final model (float32, in <out>/<name>/), `train` saves
--checkpoints intermediate checkpoints at log-spaced steps (rbplab.catalog.registry.log_checkpoint_steps:
geometric from total/2^n to the final step) in bfloat16 as <out>/<name>/checkpoints/step-<n>/ (config and
weights; they share the model's tokenizer) and writes <out>/<name>/checkpoints/schedule.json (steps,
tokens per step = SEQ x BATCH), so `rbplab` loads them with revision="step-<n>" and knows D and C.
Progress goes to --progress (JSON: per model state, step, checkpoints saved, loss), and the full
training state (model, optimiser, step) is kept under --resume-dir every --resume-every steps and at
each checkpoint: rerunning the same command continues where a killed run stopped (same data stream,
same seed), and the state is deleted once the model is saved.

The committed suite was trained with the defaults (3.2M tokens, lr_const 0.5, chosen by the pilot) as
single-threaded processes in parallel (--only 0,2,3 / --only 1,5 / --only 4, each --threads 1): one
thread per process is robust to CPU contention, and results do not depend on the split because every
process builds the identical seeded data stream and each model is seeded the same way.

Needs build/train/{train,valid}.jsonl (scripts/build_corpora.py; another folder with $RBPLAB_TRAIN_DIR)
and data/tokenizer (scripts/train_tokenizer.py).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from filelock import FileLock
from transformers import AutoTokenizer, GPTNeoXConfig, GPTNeoXForCausalLM

from rbplab.catalog.registry import checkpoint_revision, log_checkpoint_steps, write_local_schedule

ROOT = Path(__file__).resolve().parent.parent
TRAIN_DIR = ROOT / "build" / "train"
MODELS = ROOT / "data" / "models"
TOKENIZER = ROOT / "data" / "tokenizer"
SEED = 1234
SEQ = 256
BATCH = 8
# Share of the token budget per training source; the evaluation corpora are Wikipedia-like prose,
# Python code, licence text and held-out prose, so every kind is represented in training.
MIX = {"prose": 0.35, "code": 0.30, "legal": 0.20, "pydocs": 0.15}
VALID_TOKENS_PER_SOURCE = 40_000


@dataclass(frozen=True)
class Size:
    d_model: int
    n_layers: int
    n_heads: int


SIZES = [Size(32, 2, 2), Size(48, 3, 3), Size(64, 4, 4), Size(96, 5, 4), Size(128, 6, 4), Size(192, 6, 6)]


def make_config(size: Size, vocab_size: int, bos: int, tie: bool = False) -> GPTNeoXConfig:
    return GPTNeoXConfig(
        vocab_size=vocab_size,
        hidden_size=size.d_model,
        num_hidden_layers=size.n_layers,
        num_attention_heads=size.n_heads,
        intermediate_size=4 * size.d_model,
        max_position_embeddings=SEQ,
        rotary_pct=0.25,
        rotary_emb_base=10000,
        use_parallel_residual=True,
        hidden_act="gelu",
        attention_dropout=0.0,
        hidden_dropout=0.0,
        tie_word_embeddings=tie,
        initializer_range=0.02,
        bos_token_id=bos,
        eos_token_id=bos,
    )


def nonembedding(model: GPTNeoXForCausalLM) -> int:
    skip = {model.get_input_embeddings().weight.data_ptr(), model.get_output_embeddings().weight.data_ptr()}
    return sum(p.numel() for p in model.parameters() if p.data_ptr() not in skip)


# ---------------------------------------------------------------------------------------------- data
def load_split(name: str) -> list[dict]:
    path = Path(os.environ.get("RBPLAB_TRAIN_DIR", TRAIN_DIR)) / f"{name}.jsonl"
    if not path.exists():
        raise SystemExit(f"{path} not found: run scripts/build_corpora.py first")
    with open(path) as f:
        return [json.loads(line) for line in f]


def training_stream(tok, budget: int, seed: int = SEED) -> tuple[torch.Tensor, dict]:
    """Token budget as [n_seq, SEQ+1] rows; each document is <eos> + its tokens, mix shares per source.

    Rows overlap by one token so every token of the stream is a target exactly once.
    """
    rng = random.Random(seed)
    docs = load_split("train")
    eos = tok.eos_token_id
    n_rows = budget // SEQ
    picked: list[tuple[str, list[int]]] = []
    used: dict[str, dict] = {}
    for source, share in MIX.items():
        pool = sorted((d for d in docs if d["source"] == source), key=lambda d: d["id"])
        rng.shuffle(pool)
        want, have, n_docs = int(round(budget * share)) + 1, 0, 0
        for d in pool:
            if have >= want:
                break
            ids = [eos] + tok(d["text"])["input_ids"]
            # Long files (big stdlib modules, long speeches) are cut into ~2k-token pieces so one
            # document cannot dominate a source's share.
            for start in range(0, len(ids), 2048):
                picked.append((source, ids[start : start + 2048]))
                have += len(ids[start : start + 2048])
            n_docs += 1
        used[source] = {"documents": n_docs, "tokens_available": have}
    rng.shuffle(picked)
    flat = np.fromiter((t for _, ids in picked for t in ids), dtype=np.int64)
    need = n_rows * SEQ + 1
    if len(flat) < need:
        raise SystemExit(f"not enough training text: {len(flat)} tokens < budget {need}")
    flat = torch.from_numpy(flat[:need])
    rows = torch.stack([flat[i * SEQ : i * SEQ + SEQ + 1] for i in range(n_rows)])
    order = torch.randperm(n_rows, generator=torch.Generator().manual_seed(seed))
    return rows[order], {"mix": MIX, "sources": used, "rows": n_rows, "tokens": n_rows * SEQ}


def validation_rows(tok) -> dict[str, torch.Tensor]:
    """Per-source validation rows (first VALID_TOKENS_PER_SOURCE tokens of each source's valid docs)."""
    eos = tok.eos_token_id
    out: dict[str, list[int]] = {}
    for d in sorted(load_split("valid"), key=lambda d: d["id"]):
        ids = out.setdefault(d["source"], [])
        if len(ids) < VALID_TOKENS_PER_SOURCE:
            ids.extend([eos] + tok(d["text"])["input_ids"])
    rows = {}
    for source, ids in sorted(out.items()):
        n = min(len(ids) - 1, VALID_TOKENS_PER_SOURCE) // SEQ
        t = torch.tensor(ids[: n * SEQ + 1])
        rows[source] = torch.stack([t[i * SEQ : i * SEQ + SEQ + 1] for i in range(n)])
    return rows


# ------------------------------------------------------------------------------------------ training
def lr_at(step: int, total: int, peak: float) -> float:
    warm = max(1, int(0.05 * total))
    if step < warm:
        return peak * (step + 1) / warm
    frac = (step - warm) / max(1, total - warm)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


@torch.no_grad()
def evaluate(model, rows: dict[str, torch.Tensor]) -> dict[str, dict[str, float]]:
    model.eval()
    res = {}
    for source, r in rows.items():
        nll_sum, top1, n = 0.0, 0, 0
        for b in range(0, len(r), 16):
            x = r[b : b + 16]
            logits = model(input_ids=x[:, :-1]).logits.float()
            y = x[:, 1:]
            nll_sum += torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), y.flatten(), reduction="sum"
            ).item()
            top1 += (logits.argmax(-1) == y).sum().item()
            n += y.numel()
        res[source] = {"ce": nll_sum / n, "rbp1": top1 / n, "tokens": n}
    res["mean"] = {k: float(np.mean([v[k] for v in res.values()])) for k in ("ce", "rbp1")}
    model.train()
    return res


def train_one(
    size: Size,
    rows: torch.Tensor,
    lr: float,
    vocab: int,
    bos: int,
    log,
    save_at: tuple[int, ...] = (),
    on_checkpoint=None,
    resume_path: Path | None = None,
    resume_every: int = 200,
    on_progress=None,
    tie: bool = False,
) -> tuple:
    """Train one size; `on_checkpoint(step, model)` after each step count in `save_at` (steps done),
    `on_progress(step, steps, ema)` every 50 steps; with `resume_path`, the training state is saved
    there every `resume_every` steps and at checkpoints, and a matching saved state is resumed."""
    torch.manual_seed(SEED)
    model = GPTNeoXForCausalLM(make_config(size, vocab, bos, tie))
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    steps = len(rows) // BATCH
    t0, ema, losses, start = time.time(), None, [], 0
    identity = {"size": asdict(size), "lr": lr, "steps": steps, "rows": len(rows), "seed": SEED, "tie": tie}
    if resume_path is not None and resume_path.exists():
        state = torch.load(resume_path, weights_only=True)
        if state["identity"] == identity:
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            start, ema, losses = int(state["step"]), state["ema"], list(state["losses"])
            log(f"  resumed d={size.d_model} L={size.n_layers} at step {start}/{steps} from {resume_path}")
        else:
            log(f"  {resume_path} belongs to another run ({state['identity']}); starting over")

    def keep_state(done: int) -> None:
        if resume_path is None:
            return
        resume_path.parent.mkdir(parents=True, exist_ok=True)
        state = {"identity": identity, "step": done, "ema": ema, "losses": losses}
        state |= {"model": model.state_dict(), "opt": opt.state_dict()}
        torch.save(state, resume_path.with_suffix(".tmp"))
        os.replace(resume_path.with_suffix(".tmp"), resume_path)

    model.train()
    for step in range(start, steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr)
        x = rows[step * BATCH : (step + 1) * BATCH]
        logits = model(input_ids=x[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        if step % 50 == 0 or step == steps - 1:
            log(f"  d={size.d_model} L={size.n_layers} step {step + 1}/{steps} loss {loss.item():.3f} "
                f"ema {ema:.3f} lr {g['lr']:.2e} {time.time() - t0:.0f}s")  # fmt: skip
            if on_progress is not None:
                on_progress(step + 1, steps, ema)
        done = step + 1
        if done in save_at and on_checkpoint is not None:
            on_checkpoint(done, model)
        if done < steps and (done in save_at or done % resume_every == 0):
            keep_state(done)
    final_train = float(np.mean(losses[-max(1, steps // 20) :]))
    return model, time.time() - t0, final_train, steps


# -------------------------------------------------------------------------------------------- saving
def model_card(entry: dict, config: GPTNeoXConfig) -> str:
    val = "\n".join(
        f"| {src} | {v['ce']:.4f} | {v['rbp1']:.4f} | {v.get('tokens', '')} |"
        for src, v in entry["val"].items()
    )
    heads, tied = config.num_attention_heads, config.tie_word_embeddings
    saved = entry.get("checkpoints") or [entry["steps"]]
    checkpoints = (
        ", ".join(f"step-{s}" for s in saved[:-1]) + " (bfloat16, checkpoints/); final"
        if len(saved) > 1
        else "final model only"
    )
    rot = (getattr(config, "rope_parameters", None) or {}).get("partial_rotary_factor", 0.25)
    before = entry.get("val_ce_float32", entry["val_ce"])
    return f"""# {entry["name"]}

Tiny causal language model of the rbplab **micro** suite (GPT-NeoX / Pythia architecture), trained from
scratch on CPU by `scripts/train_micro.py` (seed {SEED}). Part of a family that differs only in width and
depth, so its members can be used to measure scaling laws offline. Not useful for anything else.

| | |
|---|---|
| non-embedding parameters S | {entry["S"]:,} |
| total parameters | {entry["n_params"]:,} |
| d_model / layers / heads | {config.hidden_size} / {config.num_hidden_layers} / {heads} |
| MLP width | {config.intermediate_size} |
| context length | {config.max_position_embeddings} |
| vocabulary | {config.vocab_size} (shared byte-level BPE, `<\\|endoftext\\|>` = BOS/EOS) |
| rotary_pct / parallel residual / tied embeddings | {rot} / {config.use_parallel_residual} / {tied} |
| tokens seen | {entry["tokens"]:,} (one epoch, same order for every member) |
| optimiser | AdamW (0.9, 0.95), wd 0.1 on matrices, clip 1.0, batch {BATCH}x{SEQ} |
| peak LR | {entry["lr"]:.3e} = {entry["lr_const"]} / d_model, 5% warmup, cosine to 10% |
| steps | {entry["steps"]} |
| training time | {entry["train_seconds"]:.0f} s, {entry["threads"]} thread(s), torch {torch.__version__} |
| checkpoints | {checkpoints} |
| final weights | {entry.get("weights_dtype", "float32")} (validation CE before rounding: {before:.4f}) |
| final training loss | {entry["final_train_loss"]:.4f} (mean of last 5% of steps) |

## Validation (held-out documents of the training sources)

| source | cross-entropy (nats/token) | RBP_1 (top-1 accuracy) | tokens |
|---|---|---|---|
{val}

## Data recipe

Training mix by tokens: {", ".join(f"{k} {v:.0%}" for k, v in MIX.items())}. Sources (see data/SOURCES.md):
Python {entry["python"]} standard-library code (`code`), State of the Union addresses, Brown corpus and
Moby-Dick chapters (`prose`), ScanCode licence texts with the SPDX-listed ones and non-held-out rare ones
(`legal`), Python 3.11 reST documentation (`pydocs`). Documents in the bundled evaluation corpora
(data/corpora) are excluded from training at the document level; the document ids and hashes used are
listed in data/models/micro.training-docs.json.gz.
"""


def save_checkpoint(model, directory: Path) -> Path:
    """An intermediate checkpoint in bfloat16 (config + safetensors, no tokenizer: it shares the model's)."""
    half = copy.deepcopy(model).to(torch.bfloat16)
    half.save_pretrained(directory, safe_serialization=True)
    return directory


class Progress:
    """Training progress as JSON in `path` (shared by parallel processes: read-modify-write under a lock)."""

    def __init__(self, path: Path, run: dict):
        self.path, self.run = path, run
        path.parent.mkdir(parents=True, exist_ok=True)

    def update(self, name: str, **fields) -> None:
        with FileLock(str(self.path) + ".lock"):
            data = json.loads(self.path.read_text()) if self.path.exists() else {"models": {}}
            data["run"] = self.run
            data["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S")
            data["models"].setdefault(name, {}).update(fields)
            self.path.with_suffix(".tmp").write_text(json.dumps(data, indent=2) + "\n")
            os.replace(self.path.with_suffix(".tmp"), self.path)


def save(model, tok, entry: dict, root: Path) -> Path:
    out = root / entry["name"]
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    (out / "README.md").write_text(model_card(entry, model.config))
    return out


def size_name(i: int, s: int) -> str:
    label = f"{s / 1e6:.1f}M" if s >= 1e6 else f"{round(s / 1e3)}K"
    return f"micro-{i}-{label}"


# ---------------------------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["pilot", "train"])
    ap.add_argument("--tokens", type=int, default=None, help="token budget per model")
    ap.add_argument("--lr-const", type=float, default=0.5, help="peak lr = lr_const / d_model")
    ap.add_argument("--lr-mults", default="0.5,1,2", help="pilot: multipliers of --lr-const")
    ap.add_argument("--only", default=None, help="comma-separated size indices (0-based)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--final-dtype",
        choices=["bfloat16", "float32"],
        default="bfloat16",
        help="dtype of the saved final weights (bfloat16 keeps the suite with checkpoints under 60 MB)",
    )
    ap.add_argument(
        "--tie", action="store_true", help="tie input/output embeddings (the pilot found it worse)"
    )
    ap.add_argument("--out", type=Path, default=MODELS, help="directory for model dirs and micro.json")
    ap.add_argument("--checkpoints", type=int, default=4, help="intermediate checkpoints (log-spaced)")
    ap.add_argument("--progress", type=Path, default=None, help="progress JSON (default build/...)")
    ap.add_argument("--resume-dir", type=Path, default=None, help="training states (default build/...)")
    ap.add_argument("--resume-every", type=int, default=200, help="steps between saved training states")
    args = ap.parse_args()
    (ROOT / "build").mkdir(exist_ok=True)
    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    vocab, bos = len(tok), tok.eos_token_id
    log_path = ROOT / "build" / f"train_micro_{args.mode}.log"
    log_file = open(log_path, "a")

    def log(msg: str) -> None:
        print(msg, flush=True)
        log_file.write(msg + "\n")
        log_file.flush()

    budget = args.tokens or (400_000 if args.mode == "pilot" else 3_200_000)
    rows, data_info = training_stream(tok, budget)
    valid = validation_rows(tok)
    log(
        f"== {args.mode} {time.strftime('%H:%M:%S')} tokens={data_info['tokens']} data={data_info['sources']}"
    )
    idx = [int(i) for i in args.only.split(",")] if args.only else list(range(len(SIZES)))
    tie = args.tie
    if args.mode == "pilot":
        for i in idx:
            for m in (float(x) for x in args.lr_mults.split(",")):
                c = args.lr_const * m
                model, secs, tr, _ = train_one(
                    SIZES[i], rows, c / SIZES[i].d_model, vocab, bos, lambda s: None, tie=tie
                )
                ev = evaluate(model, valid)
                log(f"pilot size={i} {asdict(SIZES[i])} tie={tie} S={nonembedding(model)} lr_const={c:.3g} "
                    f"train={tr:.4f} val_ce={ev['mean']['ce']:.4f} val_rbp1={ev['mean']['rbp1']:.4f} "
                    f"{ {k: round(v['ce'], 3) for k, v in ev.items()} } {secs:.0f}s")  # fmt: skip
        return
    summary_path = args.out / "micro.json"
    args.out.mkdir(parents=True, exist_ok=True)
    run = {"tokens": data_info["tokens"], "lr_const": args.lr_const, "checkpoints": args.checkpoints}
    run |= {"tie_word_embeddings": tie, "final_dtype": args.final_dtype}
    run |= {"out": str(args.out), "tokens_per_step": SEQ * BATCH}
    progress = Progress(args.progress or ROOT / "build" / "train_micro_progress.json", run)
    resume_dir = args.resume_dir or ROOT / "build" / "train_micro_resume"

    for i in idx:
        size = SIZES[i]
        lr = args.lr_const / size.d_model
        torch.manual_seed(SEED)
        name = size_name(i + 1, nonembedding(GPTNeoXForCausalLM(make_config(size, vocab, bos, tie))))
        out_dir = args.out / name
        total = len(rows) // BATCH
        schedule = log_checkpoint_steps(total, args.checkpoints)
        saved: list[int] = []

        def checkpoint(step: int, model, out_dir=out_dir, name=name, saved=saved) -> None:
            save_checkpoint(model, out_dir / "checkpoints" / checkpoint_revision(step))
            saved.append(step)
            progress.update(name, checkpoints_saved=list(saved))
            log(f"  checkpoint {name} {checkpoint_revision(step)}")

        def report(step: int, steps: int, ema: float, name=name) -> None:
            progress.update(name, state="training", step=step, steps=steps, loss_ema=round(ema, 4))

        progress.update(name, state="training", step=0, steps=total, schedule=schedule)
        model, secs, tr, steps = train_one(
            size,
            rows,
            lr,
            vocab,
            bos,
            log,
            save_at=tuple(schedule[:-1]),
            on_checkpoint=checkpoint,
            resume_path=resume_dir / f"{name}.pt",
            resume_every=args.resume_every,
            on_progress=report,
            tie=tie,
        )
        saved[:] = sorted(
            {s for s in schedule[:-1] if (out_dir / "checkpoints" / checkpoint_revision(s)).is_dir()}
        )
        ev_float32 = evaluate(model, valid)
        if args.final_dtype == "bfloat16":
            # Evaluate the weights as they are saved (and as rbplab loads them: upcast to float32).
            model = model.to(torch.bfloat16).to(torch.float32)
        ev = evaluate(model, valid) if args.final_dtype != "float32" else ev_float32
        s = nonembedding(model)
        entry = {
            "name": name,
            "S": s,
            "n_params": sum(p.numel() for p in model.parameters()),
            **asdict(size),
            "lr": lr,
            "lr_const": args.lr_const,
            "tokens": data_info["tokens"],
            "steps": steps,
            "seed": SEED,
            "threads": args.threads,
            "train_seconds": round(secs, 1),
            "final_train_loss": tr,
            "val_ce": ev["mean"]["ce"],
            "val_rbp1": ev["mean"]["rbp1"],
            "val": ev,
            "val_ce_float32": ev_float32["mean"]["ce"],
            "weights_dtype": args.final_dtype,
            "python": sys.version.split()[0],
            "checkpoints": [*saved, steps],
            "tokens_per_step": SEQ * BATCH,
        }
        out = save(model.to(getattr(torch, args.final_dtype)), tok, entry, args.out)
        write_local_schedule(out, [*saved, steps], SEQ * BATCH)
        (resume_dir / f"{name}.pt").unlink(missing_ok=True)
        progress.update(
            name, state="done", step=steps, checkpoints_saved=[*saved, steps], val_ce=ev["mean"]["ce"]
        )
        # Two processes may train different sizes at once (one thread each): re-read under a lock.
        with FileLock(str(ROOT / "build" / "micro.json.lock")):
            summary = json.loads(summary_path.read_text()) if summary_path.exists() else {"models": []}
            summary["models"] = [m for m in summary["models"] if m["name"] != entry["name"]] + [entry]
            summary["models"].sort(key=lambda m: m["S"])
            summary["data"] = data_info
            summary_path.write_text(json.dumps(summary, indent=2) + "\n")
        log(f"saved {out.name} S={s} {secs:.0f}s train={tr:.4f} val_ce={ev['mean']['ce']:.4f} "
            f"val_rbp1={ev['mean']['rbp1']:.4f} at {time.strftime('%H:%M:%S')}")  # fmt: skip


if __name__ == "__main__":
    main()
