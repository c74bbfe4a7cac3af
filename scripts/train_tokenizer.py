"""Train the micro-suite's shared byte-level BPE tokenizer on the training split only.

Reads build/train/train.jsonl (written by scripts/build_corpora.py) and writes a tokenizer that
`AutoTokenizer.from_pretrained` loads to data/tokenizer/. Byte-level BPE so every string is encodable;
`<|endoftext|>` is BOS, EOS and the document separator used in training (as in GPT-2 / Pythia).
Usage: python scripts/train_tokenizer.py [--vocab-size 4096]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parent.parent
TRAIN_FILE = ROOT / "build" / "train" / "train.jsonl"
OUT = ROOT / "data" / "tokenizer"
SPECIAL = "<|endoftext|>"


def iter_texts(path: Path) -> Iterator[str]:
    with open(path) as f:
        for line in f:
            yield json.loads(line)["text"]


def train_tokenizer(vocab_size: int, train_file: Path = TRAIN_FILE) -> PreTrainedTokenizerFast:
    if not train_file.exists():
        raise SystemExit(f"{train_file} not found: run scripts/build_corpora.py first")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[SPECIAL],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(iter_texts(train_file), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=SPECIAL, eos_token=SPECIAL, unk_token=SPECIAL, pad_token=SPECIAL
    )
    fast.model_max_length = 256
    return fast


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    fast = train_tokenizer(args.vocab_size)
    fast.save_pretrained(args.out)
    print(f"tokenizer: vocab {len(fast)} -> {args.out}")


if __name__ == "__main__":
    main()
