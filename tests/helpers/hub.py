"""A local stand-in of the Hugging Face hub: a hub cache directory built from code, nothing downloaded.

`build_hub(root)` writes the layout `huggingface_hub` reads under ``HF_HUB_OFFLINE=1``
(``models--org--name/refs/<branch>`` holding a commit, ``snapshots/<commit>/<files>``; the same
under ``datasets--org--name``) with tiny random models and tiny datasets under the real repo ids,
configs, splits and columns:

- ``EleutherAI/pythia-14m`` (GPT-NeoX, padded head): branches ``main`` and ``step1000``,
  different weights in each;
- ``facebook/opt-125m``: an OPT-style tokenizer whose post-processor prepends ``</s>``;
- ``Qwen/Qwen2.5-0.5B``: a Qwen2-style tokenizer with no bos_token whose eos is ``<|im_end|>``,
  the config's bos_token_id naming ``<|endoftext|>``, and a head padded beyond the vocabulary;
- ``wikimedia/wikipedia`` ``20231101.en/train-*.parquet``, ``openai/openai_humaneval``
  ``openai_humaneval/test-*.parquet``, ``hotpotqa/hotpot_qa`` ``distractor/validation-*.parquet``
  (and a train file that must never be read), ``isaacus/open-australian-legal-corpus`` ``corpus.jsonl``.

Commits are made-up 40-hex strings derived from the content (test values, not real hub commits).
`move_branch` re-points a branch at a new snapshot, as a push to the hub would.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from helpers.models import DOCUMENTS, PAD_ROWS, TEXT, save_tiny

PYTHIA = "EleutherAI/pythia-14m"
OPT = "facebook/opt-125m"
QWEN = "Qwen/Qwen2.5-0.5B"

QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def fake_commit(*parts: object) -> str:
    """A 40-hex commit id for the stand-in (sha1 of the parts; not a real hub commit)."""
    return hashlib.sha1("\0".join(map(str, parts)).encode()).hexdigest()


def repo_dir(root: Path, repo: str, kind: str = "models") -> Path:
    return Path(root) / f"{kind}--{repo.replace('/', '--')}"


def write_snapshot(
    root: Path, repo: str, commit: str, source: Path, branch: str | None, kind="models"
) -> Path:
    """Copy the files of `source` into snapshots/<commit>/ and point refs/<branch> at it."""
    base = repo_dir(root, repo, kind)
    snapshot = base / "snapshots" / commit
    if snapshot.exists():
        shutil.rmtree(snapshot)
    shutil.copytree(source, snapshot)
    if branch is not None:
        (base / "refs").mkdir(parents=True, exist_ok=True)
        (base / "refs" / branch).write_text(commit)
    return snapshot


def move_branch(root: Path, repo: str, branch: str, commit: str, kind: str = "models") -> None:
    (repo_dir(root, repo, kind) / "refs" / branch).write_text(commit)


def _bpe(specials: list[str], vocab_size: int = 360):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([TEXT] + [text for _, text in DOCUMENTS], trainer=trainer)
    return tok


def pythia_tokenizer():
    from transformers import PreTrainedTokenizerFast

    special = "<|endoftext|>"
    return PreTrainedTokenizerFast(
        tokenizer_object=_bpe([special]), bos_token=special, eos_token=special, unk_token=special
    )


def opt_tokenizer():
    """OPT style: specials <s> <pad> </s> <unk>; every input is prefixed with </s> (its BOS)."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    tok = _bpe(["<s>", "<pad>", "</s>", "<unk>"])
    tok.post_processor = processors.TemplateProcessing(
        single="</s> $A", pair="</s> $A </s> $B", special_tokens=[("</s>", tok.token_to_id("</s>"))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="</s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )


def qwen_tokenizer():
    """Qwen2.5 base as some checkpoints shipped it: no bos_token, eos <|im_end|>, pad <|endoftext|>."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=_bpe(QWEN_SPECIALS), eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )


def _save_neox(path: Path, tokenizer, seed: int) -> Path:
    return save_tiny(path, tokenizer, "gpt_neox", seed=seed, vocab_size=len(tokenizer) + PAD_ROWS)


def _save_opt(path: Path, tokenizer) -> Path:
    return save_tiny(path, tokenizer, "opt", seed=3, pad_token_id=tokenizer.pad_token_id)


def _save_qwen(path: Path, tokenizer) -> Path:
    endoftext = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    # A padded head, as Qwen2.5's 151,936 rows for 151,665 tokens; no bos token of its own.
    return save_tiny(
        path,
        tokenizer,
        "qwen2",
        seed=4,
        vocab_size=len(tokenizer) + PAD_ROWS,
        bos_token_id=endoftext,
        eos_token_id=endoftext,
    )


# ---------------------------------------------------------------------------------------------
# Datasets: the real ids, configs, splits and columns, a few rows each.

WIKIPEDIA_ROWS = [
    {"id": "12", "url": "https://en.wikipedia.org/wiki/Anarchism", "title": "Anarchism",
     "text": "Anarchism is a political philosophy. " * 4},
    {"id": "25", "url": "https://en.wikipedia.org/wiki/Autism", "title": "Autism",
     "text": "Autism is a neurodevelopmental condition. " * 3},
    {"id": "39", "url": "https://en.wikipedia.org/wiki/Albedo", "title": "Albedo",
     "text": "Albedo is the fraction of sunlight that is diffusely reflected. " * 2},
]  # fmt: skip

HUMANEVAL_ROWS = [
    {"task_id": f"HumanEval/{i}", "prompt": f"def f{i}(a, b):\n    \"\"\"Add.\"\"\"\n",
     "canonical_solution": "    return a + b\n", "test": "def check(c):\n    pass\n", "entry_point": f"f{i}"}
    for i in range(3)
]  # fmt: skip

HOTPOT_ROWS = [
    {
        "id": "5a8b57f25542995d1e6f1371",
        "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
        "answer": "yes",
        "type": "comparison",
        "level": "hard",
        "supporting_facts": {"title": ["Scott Derrickson", "Ed Wood"], "sent_id": [0, 0]},
        "context": {
            "title": ["Scott Derrickson", "Ed Wood"],
            "sentences": [
                ["Scott Derrickson is an American director.", " He lives in Los Angeles. "],
                ["Edward Davis Wood Jr. was an American filmmaker."],
            ],
        },
    },
    {
        "id": "5a8c7595554299585d9e36b6",
        "question": "What government position was held by the woman who portrayed Corliss Archer?",
        "answer": "Chief of Protocol",
        "type": "bridge",
        "level": "hard",
        "supporting_facts": {"title": ["Kiss and Tell"], "sent_id": [0]},
        "context": {"title": ["Kiss and Tell"], "sentences": [["Kiss and Tell is a 1945 comedy film."]]},
    },
]

LEGAL_ROWS = [
    {"version_id": "nsw_caselaw:54a63a", "type": "decision", "jurisdiction": "new_south_wales",
     "source": "nsw_caselaw", "citation": "Smith v Jones [2001] NSWSC 1", "url": "https://example.invalid/1",
     "when_scraped": "2024-01-01", "text": "The plaintiff claims damages for negligence. " * 3},
    {"version_id": "federal_register:2010L0", "type": "secondary_legislation", "jurisdiction": "commonwealth",
     "source": "federal_register_of_legislation", "citation": "Example Rules 2010 (Cth)",
     "url": "https://example.invalid/2", "when_scraped": "2024-01-01",
     "text": "These rules commence on the day after registration. " * 2},
]  # fmt: skip


@dataclass
class Hub:
    """Where the stand-in lives and the commits it holds (test values)."""

    root: Path
    commits: dict[str, dict[str, str]] = field(default_factory=dict)  # repo -> branch -> commit

    def commit(self, repo: str, branch: str = "main") -> str:
        return self.commits[repo][branch]


def _parquet(path: Path, rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def build_datasets(root: Path, work: Path, hub: Hub) -> None:
    files = {
        "wikimedia/wikipedia": [("20231101.en/train-00000-of-00001.parquet", WIKIPEDIA_ROWS)],
        "openai/openai_humaneval": [("openai_humaneval/test-00000-of-00001.parquet", HUMANEVAL_ROWS)],
        "hotpotqa/hotpot_qa": [
            ("distractor/validation-00000-of-00001.parquet", HOTPOT_ROWS),
            # Not valid parquet: reading the train split (as a non-streaming load does) fails the test.
            ("distractor/train-00000-of-00002.parquet", None),
        ],
        "isaacus/open-australian-legal-corpus": [("corpus.jsonl", LEGAL_ROWS)],
    }
    for repo, entries in files.items():
        folder = work / repo.replace("/", "--")
        for name, rows in entries:
            target = folder / name
            if rows is None:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(b"not parquet: this split must never be read")
            elif name.endswith(".parquet"):
                _parquet(target, rows)
            else:
                _jsonl(target, rows)
        (folder / "README.md").write_text(f"# {repo} (test stand-in)\n")
        commit = fake_commit("dataset", repo)
        write_snapshot(root, repo, commit, folder, "main", kind="datasets")
        hub.commits[repo] = {"main": commit}


def build_hub(root: Path) -> Hub:
    """The whole stand-in under `root` (use as HF_HUB_CACHE)."""
    root = Path(root)
    work = root.parent / (root.name + "-work")
    hub = Hub(root)
    pythia = pythia_tokenizer()
    for branch, seed in (("main", 10), ("step1000", 11)):
        folder = _save_neox(work / f"pythia-{branch}", pythia, seed)
        commit = fake_commit(PYTHIA, branch)
        write_snapshot(root, PYTHIA, commit, folder, branch)
        hub.commits.setdefault(PYTHIA, {})[branch] = commit
    for repo, save, tokenizer in ((OPT, _save_opt, opt_tokenizer()), (QWEN, _save_qwen, qwen_tokenizer())):
        folder = save(work / repo.replace("/", "--"), tokenizer)
        commit = fake_commit(repo, "main")
        write_snapshot(root, repo, commit, folder, "main")
        hub.commits[repo] = {"main": commit}
    build_datasets(root, work, hub)
    return hub


def push_new_pythia_main(hub: Hub, seed: int = 12) -> str:
    """A new commit on pythia-14m's main branch (different weights), as a push to the hub would make."""
    work = hub.root.parent / (hub.root.name + "-work")
    folder = _save_neox(work / f"pythia-main-{seed}", pythia_tokenizer(), seed)
    commit = fake_commit(PYTHIA, "main", seed)
    write_snapshot(hub.root, PYTHIA, commit, folder, "main")
    hub.commits[PYTHIA]["main"] = commit
    return commit
