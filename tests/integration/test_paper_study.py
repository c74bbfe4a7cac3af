"""studies/paper.toml planned offline: stand-in configs and tokenizers for the paper's 24 models in a
local hub cache (pythia-70m with its real architecture and vocabulary, the others tiny), no
datasets. The grid expands to the paper's models, every entry says its corpus is not reachable and
counts max_tokens as an upper bound, and pythia-70m's FLOPs, memory and time are right by hand."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import torch
from helpers.hub import fake_commit, pythia_tokenizer, write_snapshot

from rbplab.catalog.registry import registry_path
from rbplab.cli.app import main
from rbplab.grid import Grid
from rbplab.runner.costs import estimate_costs

PAPER = Path(__file__).resolve().parents[2] / "studies" / "paper.toml"

# The paper's models (appendix A; OPT as in its code repository's parameter table).
MODELS = {
    "gpt2": "openai-community/gpt2",
    "gpt2-medium": "openai-community/gpt2-medium",
    "gpt2-large": "openai-community/gpt2-large",
    "gpt2-xl": "openai-community/gpt2-xl",
    "opt-125m": "facebook/opt-125m",
    "opt-350m": "facebook/opt-350m",
    "opt-1.3b": "facebook/opt-1.3b",
    "opt-2.7b": "facebook/opt-2.7b",
    "opt-6.7b": "facebook/opt-6.7b",
    "pythia-14m": "EleutherAI/pythia-14m",
    "pythia-31m": "EleutherAI/pythia-31m",
    "pythia-70m": "EleutherAI/pythia-70m",
    "pythia-160m": "EleutherAI/pythia-160m",
    "pythia-410m": "EleutherAI/pythia-410m",
    "pythia-1b": "EleutherAI/pythia-1b",
    "pythia-1.4b": "EleutherAI/pythia-1.4b",
    "pythia-2.8b": "EleutherAI/pythia-2.8b",
    "pythia-6.9b": "EleutherAI/pythia-6.9b",
    "pythia-12b": "EleutherAI/pythia-12b",
    "qwen2.5-0.5b": "Qwen/Qwen2.5-0.5B",
    "qwen2.5-1.5b": "Qwen/Qwen2.5-1.5B",
    "qwen2.5-3b": "Qwen/Qwen2.5-3B",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B",
    "qwen2.5-14b": "Qwen/Qwen2.5-14B",
}

# EleutherAI/pythia-70m's config.json (hidden 512, 6 layers, 8 heads, MLP 2048, 50,304 output rows
# for a 50,277-token tokenizer, untied head); S = 18,915,328 and 70,426,624 parameters in the registry.
PYTHIA_70M = {
    "hidden_size": 512,
    "num_hidden_layers": 6,
    "num_attention_heads": 8,
    "intermediate_size": 2048,
    "vocab_size": 50304,
    "max_position_embeddings": 2048,
    "rotary_pct": 0.25,
    "use_parallel_residual": True,
    "tie_word_embeddings": False,
    "bos_token_id": 0,
    "eos_token_id": 0,
}
PYTHIA_VOCAB = 50277


def _big_tokenizer():
    """A word-level tokenizer with pythia's 50,277 tokens (token 0 its <|endoftext|>)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<|endoftext|>": 0, **{f"w{i}": i for i in range(1, PYTHIA_VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    special = "<|endoftext|>"
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=special, eos_token=special, unk_token=special
    )


def _stand_in(name: str, repo: str):
    """(config, tokenizer) for one model: pythia-70m's real ones, else a tiny one of its family."""
    from transformers import GPT2Config, GPTNeoXConfig, OPTConfig, Qwen2Config

    if name == "pythia-70m":
        return GPTNeoXConfig(**PYTHIA_70M), _big_tokenizer()
    tokenizer = pythia_tokenizer()
    small = {"vocab_size": len(tokenizer), "num_hidden_layers": 1, "num_attention_heads": 2}
    if name.startswith("gpt2"):
        return GPT2Config(
            n_embd=16, n_layer=1, n_head=2, vocab_size=len(tokenizer), n_positions=1024
        ), tokenizer
    if name.startswith("opt"):
        return OPTConfig(
            hidden_size=16, ffn_dim=32, word_embed_proj_dim=16, max_position_embeddings=2048, **small
        ), tokenizer
    if name.startswith("pythia"):
        return GPTNeoXConfig(
            hidden_size=16, intermediate_size=32, max_position_embeddings=2048, **small
        ), tokenizer
    return Qwen2Config(
        hidden_size=16, intermediate_size=32, num_key_value_heads=1, max_position_embeddings=32768, **small
    ), tokenizer


@pytest.fixture(scope="module")
def paper_hub(tmp_path_factory) -> Path:
    """A hub cache holding config and tokenizer (no weights, no datasets) of the paper's models."""
    root = tmp_path_factory.mktemp("paper-hub") / "hub"
    for name, repo in MODELS.items():
        config, tokenizer = _stand_in(name, repo)
        files = tmp_path_factory.mktemp(name)
        config.save_pretrained(files)
        tokenizer.save_pretrained(files)
        write_snapshot(root, repo, fake_commit(repo, "paper stand-in"), files, "main")
    return root


@pytest.fixture
def offline(paper_hub, monkeypatch):
    import datasets
    from huggingface_hub import constants

    for name, value in (
        ("HF_HUB_CACHE", str(paper_hub)),
        ("HF_HUB_OFFLINE", "1"),
        ("HF_DATASETS_OFFLINE", "1"),
    ):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(paper_hub))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the hand numbers are the CPU's
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def test_paper_grid_expands_to_the_papers_models():
    grid = Grid.read(PAPER)
    assert {m.model: m.source for m in grid.members} == MODELS
    assert grid.corpora == ("hub:wikipedia", "hub:humaneval", "hub:hotpotqa", "hub:auslegal")
    assert (grid.settings.context_length, grid.settings.max_tokens, grid.settings.dtype) == (
        512,
        512_000,
        "float32",
    )
    families = {
        line.split(",")[2]: line.split(",")[0] for line in registry_path().read_text().splitlines()[1:]
    }
    assert {families[m.source] for m in grid.members} == {"gpt2", "opt", "pythia", "qwen2.5"}


def test_paper_plan_offline_by_hand_for_pythia_70m(offline, tmp_path):
    tps = 1000.0
    plan = estimate_costs(Grid.read(PAPER), tmp_path / "cache", tokens_per_second=tps, workers=8)
    table = plan.table
    assert len(table) == 24 * 4 and list(dict.fromkeys(table["model"])) == list(MODELS)
    # No dataset here: no key, no count; each entry counts the token budget as an upper bound.
    assert (table["state"] == "unknown").all() and table["key"].isna().all()
    assert (~table["tokens_exact"]).all() and (table["tokens_to_score"] == 512_000).all()
    assert table["note"].str.contains("corpus not reachable").all()
    assert table["note"].str.contains("max_tokens bound").all()
    assert set(plan.totals.unreachable) == set(Grid.read(PAPER).corpora)

    rows = table[table["model"] == "pythia-70m"]
    S, d, V, rows_out, n_params = 18_915_328, 512, PYTHIA_VOCAB, 50_304, 70_426_624
    per_token = 2 * S + 2 * d * V
    assert per_token == 89_314_304
    assert (rows["S"] == S).all() and (rows["flops_per_token"] == per_token).all()
    assert rows["flops"].sum() == 4 * 512_000 * per_token
    # float32 weights, plus the float32 copy of the head's 50,277 ranked rows (the head has 50,304)
    weights = 4 * n_params + 4 * V * d
    windows, length, heads, mlp = 2_048 // 512, 512, 8, 2048  # the CPU default batch_tokens
    tokens = windows * length
    activations = 4 * (tokens * (2 * d + mlp) + windows * heads * length**2)
    # CPU head: a work block of 16 rows (2**19 // 50,277 = 10, at least 16), chunks of 512 rows
    head = 4 * (V * (512 + 16) + 512 * d + tokens * d)
    assert rows_out > V
    assert (rows["weight_bytes"] == weights).all() and (rows["activation_bytes"] == activations).all()
    assert (rows["head_chunk_bytes"] == head).all()
    assert (rows["memory_bytes"] == weights + activations + head).all()
    # Time: the given tok/s is the cheapest model's; pythia-70m scales by its FLOPs per token.
    cheapest = table["flops_per_token"].min()
    assert rows["seconds"].sum() == pytest.approx(4 * 512_000 * per_token / (tps * cheapest))

    t = plan.totals
    assert (t.entries, t.unknown, t.cached, t.partial, t.missing) == (96, 96, 0, 0, 0)
    assert t.tokens_to_score == 96 * 512_000 and not t.tokens_exact
    assert t.workers == 8 and t.seconds / 8 <= t.wall_seconds <= t.seconds


def test_paper_plan_command_says_counts_are_bounds(offline, tmp_path):
    out = io.StringIO()
    with redirect_stdout(out):
        status = main(
            ["plan", str(PAPER), "--cache-dir", str(tmp_path / "cache"), "--tokens-per-second", "500"]
        )
    text = out.getvalue()
    assert status == 0
    assert "96 entries: 0 cached, 0 partial, 0 missing, 96 unknown (corpus not reachable)" in text
    assert "to score: 49,152,000 tokens (an upper bound" in text
    assert "<=512,000" in text
    assert "hub:auslegal: not readable here (the hub cannot be reached (offline?" in text
    assert "does not hold dataset isaacus/open-australian-legal-corpus" in text


def test_paper_plan_offline_with_nothing_cached_sizes_models_from_the_registry(tmp_path):
    """HF_HUB_OFFLINE=1 and an empty HF_HOME: no config, tokenizer or dataset of the paper's models
    here. Every model is planned from families.csv (S, parameters, vocabulary, head rows and the
    shapes the cost model needs), marked as such; FLOPs and memory are those its config gives."""
    import json
    import os
    import subprocess
    import sys

    home = tmp_path / "hf"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env |= {"HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    command = [sys.executable, "-m", "rbplab", "plan", str(PAPER), "--cache-dir", str(tmp_path / "cache")]
    command += ["--tokens-per-second", "500", "--device", "cpu"]
    done = subprocess.run(
        [*command, "--format", "json"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    plan = json.loads(done.stdout)
    entries, totals = plan["entries"], plan["totals"]
    assert len(entries) == 96 and {e["sized_from"] for e in entries} == {"families.csv"}
    assert totals["registry_sized"] == list(MODELS)
    assert all(
        e["state"] == "unknown" and e["key"] is None and e["tokens_to_score"] == 512_000 for e in entries
    )
    gpt2 = next(e for e in entries if e["model"] == "gpt2")
    S, n_params, d, V, heads, mlp = 85_056_000, 124_439_808, 768, 50_257, 12, 3072
    assert gpt2["flops_per_token"] == 2 * S + 2 * d * V
    windows, length = 2_048 // 512, 512  # one CPU batch at the paper's 512-token windows
    tokens = windows * length
    assert gpt2["weight_bytes"] == 4 * n_params  # float32, tied head of exactly |V| rows: no copy
    assert gpt2["activation_bytes"] == 4 * (tokens * (2 * d + mlp) + windows * heads * length**2)
    assert gpt2["head_chunk_bytes"] == 4 * (V * (512 + 16) + 512 * d + tokens * d)
    opt = next(e for e in entries if e["model"] == "opt-350m")
    assert opt["d"] == 512 and opt["vocab"] == 50_265  # its head reads word_embed_proj_dim
    text = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path).stdout
    assert "sized from families.csv (config not here, offline?): gpt2, gpt2-medium" in text
    assert "85.1M" in text  # S as people say it
