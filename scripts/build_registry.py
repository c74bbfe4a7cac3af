"""Regenerate rbplab/catalog/families.csv: the paper's model families with hub ids and size S.

The hub is not needed: each model's published config.json hyperparameters are
written out below, and S, n_params, head_rows and tying are computed by
rbplab.catalog.registry from those configs on the meta device (no weights). Models trained in
this repository (data/models/micro-*/) are added from their own config.json.

    .venv/bin/python scripts/build_registry.py            # writes rbplab/catalog/families.csv
    .venv/bin/python scripts/build_registry.py --check    # exit 1 if the CSV is out of date
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import pandas as pd

from rbplab.catalog.registry import COLUMNS, parameter_counts, registry_path
from rbplab.runner.cost_model import architecture
from rbplab.store.paths import data_dir

# Tokenizer vocabulary sizes |V| (len(tokenizer)): what ranks are taken over. The output
# layer of most of these models is padded beyond it (head_rows, computed from the config).
GPT2_VOCAB = 50257  # GPT-2 BPE
NEOX_VOCAB = 50277  # GPT-NeoX-20B tokenizer used by every Pythia model
OPT_VOCAB = 50265  # GPT-2 BPE in OPT's fairseq dictionary order
QWEN_VOCAB = 151665  # Qwen2.5: 151,643 BPE tokens + 22 special tokens


def _gpt2(n_layer: int, n_embd: int, n_head: int) -> dict:
    return dict(
        model_type="gpt2",
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_positions=1024,
        n_ctx=1024,
        vocab_size=50257,
        tie_word_embeddings=True,
    )


def _pythia(layers: int, hidden: int, heads: int, vocab: int = 50304) -> dict:
    return dict(
        model_type="gpt_neox",
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        vocab_size=vocab,
        max_position_embeddings=2048,
        rotary_pct=0.25,
        rotary_emb_base=10000,
        use_parallel_residual=True,
        tie_word_embeddings=False,
    )


def _opt(layers: int, hidden: int, heads: int, proj_dim: int | None = None, pre_ln: bool = True) -> dict:
    return dict(
        model_type="opt",
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        ffn_dim=4 * hidden,
        word_embed_proj_dim=proj_dim or hidden,
        do_layer_norm_before=pre_ln,
        max_position_embeddings=2048,
        vocab_size=50272,
        enable_bias=True,
        tie_word_embeddings=True,
    )


def _qwen(layers: int, hidden: int, heads: int, kv: int, inter: int, tied: bool, ctx: int) -> dict:
    return dict(
        model_type="qwen2",
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        intermediate_size=inter,
        tie_word_embeddings=tied,
        vocab_size=151936 if tied else 152064,
        max_position_embeddings=ctx,
        rope_theta=1000000.0,
    )


# (family, short name, hub id, config, tokenizer |V|), from the models' published config.json files.
HUB_MODELS: list[tuple[str, str, str, dict, int]] = [
    ("pythia", "pythia-14m", "EleutherAI/pythia-14m", _pythia(6, 128, 4), NEOX_VOCAB),
    ("pythia", "pythia-31m", "EleutherAI/pythia-31m", _pythia(6, 256, 8), NEOX_VOCAB),
    ("pythia", "pythia-70m", "EleutherAI/pythia-70m", _pythia(6, 512, 8), NEOX_VOCAB),
    ("pythia", "pythia-160m", "EleutherAI/pythia-160m", _pythia(12, 768, 12), NEOX_VOCAB),
    ("pythia", "pythia-410m", "EleutherAI/pythia-410m", _pythia(24, 1024, 16), NEOX_VOCAB),
    ("pythia", "pythia-1b", "EleutherAI/pythia-1b", _pythia(16, 2048, 8), NEOX_VOCAB),
    ("pythia", "pythia-1.4b", "EleutherAI/pythia-1.4b", _pythia(24, 2048, 16), NEOX_VOCAB),
    ("pythia", "pythia-2.8b", "EleutherAI/pythia-2.8b", _pythia(32, 2560, 32), NEOX_VOCAB),
    ("pythia", "pythia-6.9b", "EleutherAI/pythia-6.9b", _pythia(32, 4096, 32, vocab=50432), NEOX_VOCAB),
    ("pythia", "pythia-12b", "EleutherAI/pythia-12b", _pythia(36, 5120, 40, vocab=50688), NEOX_VOCAB),
    ("gpt2", "gpt2", "openai-community/gpt2", _gpt2(12, 768, 12), GPT2_VOCAB),
    ("gpt2", "gpt2-medium", "openai-community/gpt2-medium", _gpt2(24, 1024, 16), GPT2_VOCAB),
    ("gpt2", "gpt2-large", "openai-community/gpt2-large", _gpt2(36, 1280, 20), GPT2_VOCAB),
    ("gpt2", "gpt2-xl", "openai-community/gpt2-xl", _gpt2(48, 1600, 25), GPT2_VOCAB),
    ("opt", "opt-125m", "facebook/opt-125m", _opt(12, 768, 12), OPT_VOCAB),
    ("opt", "opt-350m", "facebook/opt-350m", _opt(24, 1024, 16, proj_dim=512, pre_ln=False), OPT_VOCAB),
    ("opt", "opt-1.3b", "facebook/opt-1.3b", _opt(24, 2048, 32), OPT_VOCAB),
    ("opt", "opt-2.7b", "facebook/opt-2.7b", _opt(32, 2560, 32), OPT_VOCAB),
    ("opt", "opt-6.7b", "facebook/opt-6.7b", _opt(32, 4096, 32), OPT_VOCAB),
    ("opt", "opt-13b", "facebook/opt-13b", _opt(40, 5120, 40), OPT_VOCAB),
    ("qwen2.5", "qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B", _qwen(24, 896, 14, 2, 4864, True, 32768), QWEN_VOCAB),
    ("qwen2.5", "qwen2.5-1.5b", "Qwen/Qwen2.5-1.5B", _qwen(28, 1536, 12, 2, 8960, True, 131072), QWEN_VOCAB),
    ("qwen2.5", "qwen2.5-3b", "Qwen/Qwen2.5-3B", _qwen(36, 2048, 16, 2, 11008, True, 32768), QWEN_VOCAB),
    ("qwen2.5", "qwen2.5-7b", "Qwen/Qwen2.5-7B", _qwen(28, 3584, 28, 4, 18944, False, 131072), QWEN_VOCAB),
    ("qwen2.5", "qwen2.5-14b", "Qwen/Qwen2.5-14B", _qwen(48, 5120, 40, 8, 13824, False, 131072), QWEN_VOCAB),
]


def _max_context(config: dict) -> int | None:
    for key in ("max_position_embeddings", "n_positions", "n_ctx"):
        if config.get(key):
            return int(config[key])
    return None


def _row(family: str, model: str, source: str, config: dict, vocab_size: int) -> dict:
    counts = parameter_counts(config)
    # The shapes `rbplab plan` needs for FLOPs and memory, so a catalogued model is planned
    # without its config (offline, nothing cached): the head's width d, the body's hidden size, the
    # widest projection of a layer and the attention heads.
    shapes = architecture(config)
    return {
        "family": family,
        "model": model,
        "source": source,
        "S": counts.n_nonembedding,
        "n_params": counts.n_params,
        "vocab_size": vocab_size,
        "head_rows": counts.head_rows,
        "max_context": _max_context(config),
        "tied": counts.tied,
        "architecture": counts.architecture,
        "d": shapes.d,
        "hidden": shapes.hidden,
        "widest": shapes.widest,
        "heads": shapes.heads,
    }


def _tokenizer_size(model_dir: Path, config: dict) -> int:
    # The real vocabulary is the tokenizer's; fall back to the config when no tokenizer is shipped
    # (asked for one anyway, transformers would build an empty tokenizer with only special tokens).
    if not any((model_dir / name).is_file() for name in ("tokenizer.json", "vocab.json", "tokenizer.model")):
        return int(config["vocab_size"])
    try:
        from transformers import AutoTokenizer

        return len(AutoTokenizer.from_pretrained(model_dir))
    except (OSError, ValueError):
        return int(config["vocab_size"])


def local_models(root: Path) -> list[dict]:
    """Rows for in-repo models: every data/models/micro-*/ directory holding a config.json."""
    rows = []
    for model_dir in sorted((root / "models").glob("micro-*")):
        config_file = model_dir / "config.json"
        if not config_file.is_file():
            continue
        config = json.loads(config_file.read_text())
        source = model_dir.relative_to(root.parent).as_posix()
        rows.append(_row("micro", model_dir.name, source, config, _tokenizer_size(model_dir, config)))
    return rows


def build() -> pd.DataFrame:
    rows = [_row(*entry) for entry in HUB_MODELS] + local_models(data_dir())
    table = pd.DataFrame(rows)
    assert tuple(table.columns[: len(COLUMNS)]) == COLUMNS
    return table.sort_values(["family", "S"], kind="stable").reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--output", type=Path, default=None, help="CSV to write (default rbplab/catalog/families.csv)"
    )
    parser.add_argument("--check", action="store_true", help="only compare with the existing CSV")
    args = parser.parse_args(argv)
    output = args.output or registry_path()
    buffer = io.StringIO()
    build().to_csv(buffer, index=False, lineterminator="\n")
    text = buffer.getvalue()
    if args.check:
        current = output.read_text() if output.is_file() else ""
        if current != text:
            print(f"{output} is out of date: run scripts/build_registry.py", file=sys.stderr)
            return 1
        print(f"{output} is up to date")
        return 0
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    print(f"wrote {output} ({text.count(chr(10)) - 1} models)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
