"""Hub corpora: the paper's four datasets (``hub:wikipedia``, ``hub:humaneval``, ``hub:hotpotqa``,
``hub:auslegal``) read through the `datasets` library, always streamed; they need the Hugging Face
hub or its local cache.

Each is read at a pinned revision (``hub:<name>@<revision>`` overrides it), resolved to a commit
that is recorded in the corpus source and the cache key. A document cap keeps the *first* N rows in
the dataset's own (dump) order: a fixed, reproducible slice, not a random sample.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from rbplab.catalog.corpora.corpus import Corpus, CorpusError, LazyCorpus, build_corpus
from rbplab.core.names import did_you_mean
from rbplab.store import hub

# The revision each hub corpus is read at; overridable per load (``hub:wikipedia@<revision>`` or
# load_corpus(..., revision=...)). THESE MUST BE SET TO REAL COMMIT SHAS of the dataset repos
# (`huggingface_hub.HfApi().dataset_info(repo).sha`, or the repo's history on the hub), checked
# together with the `data_files` layout below. They could not be looked up where this was written
# (no hub access), so they still name the branch `main`: each load resolves the branch to the
# commit it points at, records that commit (corpus source and cache key) and warns that the corpus
# is unpinned. With a commit here, a study whose every run is cached needs no network at all.
WIKIPEDIA_REVISION = "main"
HUMANEVAL_REVISION = "main"
HOTPOTQA_REVISION = "main"
AUSLEGAL_REVISION = "main"

# Bump when the text assembled from a hub row changes: with a pinned commit the cache key is the
# dataset's identity (no content hash), so this number is what tells old texts from new.
HUB_TEXT_SCHEME = 1

# Each entry of HUB_CORPORA turns the rows of one split into (id, text), in the dataset's order.


def _wikipedia(row: dict) -> tuple[str, str]:
    return str(row["id"]), f"{row['title']}\n\n{row['text']}"


def _humaneval(row: dict) -> tuple[str, str]:
    return row["task_id"], row["prompt"] + row["canonical_solution"]


def _hotpotqa(row: dict) -> tuple[str, str]:
    """The question, then each context paragraph as its title on one line and its sentences joined
    (stripped) on the next, then ``Answer: <answer>``; blocks separated by blank lines."""
    context = row["context"]
    paragraphs = [
        f"{title}\n{''.join(sentences).strip()}"
        for title, sentences in zip(context["title"], context["sentences"], strict=True)
    ]
    return row["id"], "\n\n".join([row["question"], *paragraphs, f"Answer: {row['answer']}"])


def _auslegal(row: dict) -> tuple[str, str]:
    return row["version_id"], row["text"]


@dataclass(frozen=True)
class HubCorpus:
    document: Callable[[dict], tuple[str, str]]  # row -> (id, text)
    repo: str
    config: str | None
    split: str
    data_files: str  # the split's files inside the repo at `revision` (read directly when cached)
    revision: str  # pinned commit (see the *_REVISION constants)
    description: str
    licence: str
    default_max_documents: int | None  # large streams are capped unless the caller asks for more

    @property
    def dataset(self) -> str:
        return f"{self.repo}:{self.config}/{self.split}" if self.config else f"{self.repo}/{self.split}"


HUB_CORPORA: dict[str, HubCorpus] = {
    # ~1000 articles is ~0.7M tokens, above the paper's 5e5 tokens per point.
    "wikipedia": HubCorpus(
        _wikipedia,
        "wikimedia/wikipedia",
        "20231101.en",
        "train",
        "20231101.en/train-*.parquet",
        WIKIPEDIA_REVISION,
        "English Wikipedia articles",
        "CC BY-SA 4.0",
        1000,
    ),
    "humaneval": HubCorpus(
        _humaneval,
        "openai/openai_humaneval",
        None,
        "test",
        "openai_humaneval/test-*.parquet",
        HUMANEVAL_REVISION,
        "HumanEval: prompt + canonical solution",
        "MIT",
        None,
    ),
    "hotpotqa": HubCorpus(
        _hotpotqa,
        "hotpotqa/hotpot_qa",
        "distractor",
        "validation",
        "distractor/validation-*.parquet",
        HOTPOTQA_REVISION,
        "HotpotQA: question, context paragraphs, answer",
        "CC BY-SA 4.0",
        None,
    ),
    "auslegal": HubCorpus(
        _auslegal,
        "isaacus/open-australian-legal-corpus",
        None,
        "corpus",
        "corpus.jsonl",
        AUSLEGAL_REVISION,
        "Open Australian Legal Corpus documents",
        "Open Australian Legal Corpus Licence",
        1000,
    ),
}


def _repo_cache(repo: str) -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE) / f"datasets--{repo.replace('/', '--')}"


def resolve_dataset_revision(repo: str, revision: str) -> str:
    """The commit a dataset revision (branch, tag or commit) points at: a commit as is (no network);
    otherwise asked of the hub, or read from the local hub cache's refs/ when the hub cannot be
    reached (`rbplab.store.hub`: decided once, never retried). "has no revision" only when the hub
    says so; out of reach and not cached is `HubUnreachableError`."""
    what, pin = f"dataset {repo}@{revision}", "pin a commit: hub:<name>@<commit sha>"
    try:  # the dataset card: small, and cached with it the revision resolves offline later
        return hub.resolve_commit(repo, revision, "README.md", repo_type="dataset")
    except hub.NoSuchRevisionError as err:
        listed = ", ".join(err.branches) or "none listed"
        raise CorpusError(
            f"dataset {repo} has no revision {revision!r} on the hub; branches: {listed}"
        ) from None
    except hub.NoSuchRepositoryError:
        raise CorpusError(f"the hub has no dataset {repo!r} (or it is private or gated)") from None
    except hub.HubAnswerError as err:
        raise CorpusError(f"cannot resolve {what} to a commit ({err.kind}); {pin}") from None
    except hub.NoCommitError as err:
        raise CorpusError(f"cannot resolve {what} to a commit (got {err.path})") from None
    except hub.NotCachedError as err:
        raise hub.unreachable(what, err.reason, f", or {pin}") from None


def _hub_rows(entry: HubCorpus, commit: str) -> Iterable[dict]:
    """The split's rows, streamed (never a whole-dataset download): from the split's files when the
    commit's snapshot holds them in the local hub cache (works offline), else from the hub."""
    import datasets

    snapshot = _repo_cache(entry.repo) / "snapshots" / commit
    files = sorted(str(p) for p in snapshot.glob(entry.data_files) if p.is_file())
    if files:
        builder = "parquet" if files[0].endswith(".parquet") else "json"
        return datasets.load_dataset(builder, data_files=files, split="train", streaming=True)
    reason = hub.offline_reason()
    if reason is not None:  # datasets would retry the hub before saying so
        raise hub.unreachable(f"the files of dataset {entry.repo}@{commit}", reason)
    return datasets.load_dataset(entry.repo, entry.config, split=entry.split, revision=commit, streaming=True)


def open_hub(name: str, max_documents: int | None, revision: str | None) -> LazyCorpus:
    if "@" in name and revision is None:
        name, revision = name.split("@", 1)
    if name not in HUB_CORPORA:
        raise unknown_hub_corpus(name)
    entry = HUB_CORPORA[name]
    requested = revision or entry.revision
    commit = resolve_dataset_revision(entry.repo, requested)
    if requested != commit:
        warnings.warn(
            f"hub:{name} is not pinned to a commit: {entry.repo}@{requested} is {commit[:12]} today; "
            f"pin it with hub:{name}@{commit} (or set the {name.upper()}_REVISION constant)",
            stacklevel=3,
        )
    limit = max_documents if max_documents is not None else entry.default_max_documents
    if limit is not None and limit < 1:
        raise CorpusError(f"max_documents must be a positive integer, got {limit}")
    source = {
        "origin": "hub",
        "dataset": entry.repo,
        "config": entry.config,
        "split": entry.split,
        "revision": commit,
        "requested_revision": requested,
        "max_documents": limit,
        "text_scheme": HUB_TEXT_SCHEME,
        "licence": entry.licence,
    }

    # A module-level function, not a closure: work units carry the corpus to other processes.
    return LazyCorpus(f"hub:{name}", source, functools.partial(_load_hub_corpus, name, commit, limit, source))


def _load_hub_corpus(name: str, commit: str, limit: int | None, source: dict) -> Corpus:
    import datasets

    entry = HUB_CORPORA[name]
    rows = (entry.document(row) for row in _hub_rows(entry, commit))
    return build_corpus(f"hub:{name}", rows, {**source, "datasets_version": datasets.__version__}, limit)


def unknown_hub_corpus(name: str) -> CorpusError:
    return CorpusError(
        f"unknown hub corpus 'hub:{name}'{did_you_mean('hub:' + name, ['hub:' + n for n in HUB_CORPORA])}; "
        f"known: {', '.join('hub:' + n for n in HUB_CORPORA)}"
    )


def hub_listing() -> list[dict]:
    """One row per hub corpus for `list_corpora`: name, origin, documents (unknown before loading),
    licence, description."""
    rows = []
    for name, entry in HUB_CORPORA.items():
        cap = (
            f", first {entry.default_max_documents} in dump order by default"
            if entry.default_max_documents
            else ""
        )
        rows.append(
            {
                "name": f"hub:{name}",
                "origin": "hub",
                "documents": None,
                "licence": entry.licence,
                "description": f"{entry.description} ({entry.dataset}{cap})",
            }
        )
    return rows
