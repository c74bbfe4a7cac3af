"""Every block marked runnable in README.md and in the docs site's pages (docs/**/*.md) runs as
written on the cache `make demo` fills, from a clone's root: bash blocks through bash (stopping at
the first failing line) with this interpreter's `rbplab` and `papermill` first on PATH, python
blocks in a fresh interpreter. The hub is off (HF_HUB_OFFLINE=1): a block that needs it or a GPU
is not marked.

A block is marked by the line ``<!-- runnable -->`` right before its opening fence. A block whose
code is the same as one already collected (the docs pages carry the README's examples) runs once,
under the first file that holds it. The cache is a
copy of $RBPLAB_DEMO_CACHE when that names one `make demo` filled (copied: the examples write plan
records, and a demo's cache is not the test's to change), else one built the same way (`rbplab demo
--no-notebooks`: the micro-suite and its checkpoints through the runner) on a smaller data folder,
the bundled models and the first few documents, cut short, of the two corpora the examples name.

`.ci/run` runs the README's test command (`test_ci_runs_the_readme_test_command`).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import rbplab

ROOT = Path(rbplab.__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MARKER = "<!-- runnable -->"
# The smaller data folder: the corpora the runnable examples name, each cut to its first documents
# and characters (a few thousand tokens), so the demo's 6 models and 30 checkpoints score it in
# about a minute on two cores.
CORPORA = {"prose": 3, "humaneval": 12}
MAX_CHARACTERS = 4000
BLOCK_TIMEOUT_S = 600


@dataclass(frozen=True)
class Block:
    language: str
    line: int  # of the opening fence in its file
    code: str
    source: str = "README.md"  # the file, relative to the clone's root

    @property
    def id(self) -> str:
        return f"{self.source}:{self.line}-{self.language}"


def runnable_blocks(text: str, source: str = "README.md") -> list[Block]:
    """The fenced blocks right after a `MARKER` line (a blank line between is allowed)."""
    lines = text.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != MARKER:
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        fence = re.match(r"^```(\w+)\s*$", lines[j]) if j < len(lines) else None
        if fence is None:
            raise AssertionError(f"{source}:{i + 1}: {MARKER} is not followed by a fenced block")
        end = next(k for k in range(j + 1, len(lines)) if lines[k].startswith("```"))
        blocks.append(Block(fence.group(1), j + 1, "\n".join(lines[j + 1 : end]) + "\n", source))
    return blocks


def all_runnable_blocks() -> list[Block]:
    """README.md's runnable blocks, then the docs pages', each distinct block once."""
    pages = [README, *sorted(DOCS.rglob("*.md"))]
    seen: set[tuple[str, str]] = set()
    blocks = []
    for page in pages:
        for block in runnable_blocks(page.read_text(encoding="utf-8"), str(page.relative_to(ROOT))):
            if (block.language, block.code) not in seen:
                seen.add((block.language, block.code))
                blocks.append(block)
    return blocks


BLOCKS = all_runnable_blocks()


def test_runnable_blocks_are_marked_and_runnable_languages() -> None:
    assert {b.language for b in BLOCKS} == {"bash", "python"}, [b.id for b in BLOCKS]
    assert len(BLOCKS) >= 6


def test_docs_pages_have_runnable_blocks_and_repeats_run_once() -> None:
    docs_blocks = [
        b for page in sorted(DOCS.rglob("*.md")) for b in runnable_blocks(page.read_text(), str(page))
    ]
    assert len(docs_blocks) >= 6
    assert len({(b.language, b.code) for b in BLOCKS}) == len(BLOCKS)
    # every docs block runs, under the README's id while the README still carries it
    assert {(b.language, b.code) for b in docs_blocks} <= {(b.language, b.code) for b in BLOCKS}


def setup_commands(text: str) -> list[str]:
    """The commands of the README's first fenced bash block (its set-up), comments cut."""
    block = re.search(r"^```bash\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert block is not None, "README.md has no bash block"
    lines = (line.split("#", 1)[0].strip() for line in block.group(1).splitlines())
    return [line for line in lines if line]


def test_ci_runs_the_readme_test_command() -> None:
    """`.ci/run` ends by running the README's test command (the `make test` line of its set-up
    block), so CI checks exactly what the README tells a fresh clone to run."""
    commands = setup_commands(README.read_text(encoding="utf-8"))
    tests = [c for c in commands if c.split()[:2] == ["make", "test"]]
    assert len(tests) == 1, commands
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    ran = [line.strip() for line in script if line.strip() and not line.lstrip().startswith("#")]
    assert ran[-1] == tests[0], (ran, tests)


def _small_data(folder: Path) -> Path:
    """A data folder like data/: the bundled models, tokenizer and reference linked, and the
    corpora of `CORPORA` cut to their first documents and `MAX_CHARACTERS` each."""
    source = ROOT / "data"
    folder.mkdir(parents=True)
    for name in ("models", "tokenizer", "reference"):
        if (source / name).exists():
            (folder / name).symlink_to(source / name)
    (folder / "corpora").mkdir()
    for corpus, n_documents in CORPORA.items():
        with gzip.open(source / "corpora" / f"{corpus}.jsonl.gz", "rt", encoding="utf-8") as handle:
            rows = [json.loads(line) for _, line in zip(range(n_documents), handle, strict=False)]
        with gzip.open(folder / "corpora" / f"{corpus}.jsonl.gz", "wt", encoding="utf-8") as out:
            for row in rows:
                out.write(json.dumps({"id": row["id"], "text": row["text"][:MAX_CHARACTERS]}) + "\n")
        shutil.copy(source / "corpora" / f"{corpus}.meta.json", folder / "corpora")
    return folder


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """(the folder the blocks run in, their environment): a clone's root as the README assumes it
    after `make demo` (notebooks/ and studies/ linked; outputs land in this folder, not the repo)."""
    base = tmp_path_factory.mktemp("readme")
    work = base / "clone"
    work.mkdir()
    for name in ("notebooks", "studies"):
        (work / name).symlink_to(ROOT / name)
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "RBPLAB_CACHE": str(base / "cache"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    env.pop("RBPLAB_DATA", None)
    demo = os.environ.get("RBPLAB_DEMO_CACHE")
    started = time.perf_counter()
    if demo:
        shutil.copytree(demo, base / "cache", symlinks=True)
        print(f"\ncache: a copy of {demo} ({time.perf_counter() - started:.1f} s)")
    else:
        env["RBPLAB_DATA"] = str(_small_data(base / "data"))
        done = subprocess.run(
            ["rbplab", "demo", "--no-notebooks", "-o", str(base / "demo-out")],
            cwd=work, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        print(f"\ncache: `rbplab demo` on the smaller data, {time.perf_counter() - started:.1f} s")
    return work, env


@pytest.mark.slow
@pytest.mark.notebook  # the blocks run `rbplab report` and papermill
@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_readme_block_runs_as_written(
    block: Block, clone: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    work, env = clone
    if block.language == "bash":
        command = ["bash", "-e", "-o", "pipefail", "-x", "-c", block.code]
    else:
        script = tmp_path / "block.py"
        script.write_text(block.code)
        command = [sys.executable, str(script)]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
    print(f"{block.id}: {time.perf_counter() - started:.1f} s")
    assert done.returncode == 0, f"{block.id} failed:\n{done.stdout[-3000:]}\n{done.stderr[-4000:]}"
