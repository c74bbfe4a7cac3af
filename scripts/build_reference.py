"""Bundle the paper's own GPT-2 measurements as a small reference table (data/reference/).

The paper's code repository (github.com/ybq22/relative-based-scaling-law) published, at one
commit, its GPT-2-family results on Wikipedia: one `metrics.json` per model and k under
`eval_N/wikimedia/wikipedia/openai-community/<model>/top<k>/`, with `indicator` = RBP_k and
`mean_ce_loss` = CE (nats). Later commits deleted those files, so the commit is pinned here. Only
the numbers are taken (facts, no code); S is the non-embedding parameter count the repository
lists in `assets/param_count.json` at the same commit (equal to rbplab's registry).

Usage (a local clone or mirror of the repository; nothing else is read):

    git clone https://github.com/ybq22/relative-based-scaling-law /tmp/rbsl
    python scripts/build_reference.py --git-dir /tmp/rbsl/.git

writes data/reference/paper_gpt2_wikipedia.csv and its .meta.json (source, commit, paths, setup).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
from pathlib import Path

REPOSITORY = "https://github.com/ybq22/relative-based-scaling-law"
COMMIT = "6cdfd151c9f291963dfa4adfd064fb4d91347352"  # "updata content", 2025-10-20: the eval_N results
MODELS = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")
KS = (1, 10, 100, 1000, 10000)
METRICS_PATH = "eval_N/wikimedia/wikipedia/openai-community/{model}/top{k}/metrics.json"
SIZES_PATH = "assets/param_count.json"
OUT = Path(__file__).resolve().parents[1] / "data" / "reference"
NAME = "paper_gpt2_wikipedia"


def _show(git_dir: Path, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(git_dir), "show", f"{COMMIT}:{path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def build(git_dir: Path, out: Path = OUT) -> list[dict]:
    sizes = json.loads(_show(git_dir, SIZES_PATH))
    rows = []
    for model in MODELS:
        entry = sizes[f"openai-community/{model}"]
        for k in KS:
            path = METRICS_PATH.format(model=model, k=k)
            metrics = json.loads(_show(git_dir, path))
            rows.append(
                {
                    "family": "gpt2",
                    "model": model,
                    "corpus": "wikipedia",
                    "S": int(entry["non_embedding_params"]),
                    "vocab_size": int(entry["vocab_size"]),
                    "k": k,
                    "rbp": float(metrics["indicator"]),
                    "ce": float(metrics["mean_ce_loss"]),
                    "source_path": path,
                }
            )
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{NAME}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    commit_date = subprocess.run(
        ["git", "--git-dir", str(git_dir), "log", "-1", "--format=%cI", COMMIT],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    meta = {
        "what": "RBP_k (k = 1, 10, 100, 1,000, 10,000) and cross-entropy of GPT-2 small/medium/large/xl "
        "on Wikipedia, as published by the paper's code repository",
        "repository": REPOSITORY,
        "commit": COMMIT,
        "commit_date": commit_date,
        "paths": [METRICS_PATH.format(model="<model>", k="<k>"), SIZES_PATH],
        "fields": {"rbp": "indicator", "ce": "mean_ce_loss", "S": "non_embedding_params"},
        "ties": "optimistic",
        "setup": "ranks (logits > logits[target]).sum() + 1 (the optimistic tie convention); fp32 model "
        "(from_pretrained without a dtype); 1,000 Wikipedia (wikimedia/wikipedia) sequences of 512 tokens "
        "(prep.sh: num_sequences=1000, seq_len=512), each model's own tokenizer; positions whose input or "
        "label is a special token (and padding) dropped",
        "licence": "the repository carries no licence file; only measured values (facts) are bundled, no "
        "code or text of the repository",
        "produced_by": "scripts/build_reference.py",
    }
    (out / f"{NAME}.meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--git-dir", type=Path, required=True, help="git directory of a clone of the repository"
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    rows = build(args.git_dir, args.out)
    print(f"wrote {len(rows)} rows to {args.out / (NAME + '.csv')}")


if __name__ == "__main__":
    main()
