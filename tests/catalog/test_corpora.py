"""Corpus loading: local files, bundled corpora, hub corpora (from the hub stand-in), errors."""

from __future__ import annotations

import gzip
import json
import warnings

import datasets
import pytest

from rbplab.catalog.corpora import (
    HUB_CORPORA,
    HUB_TEXT_SCHEME,
    Corpus,
    CorpusError,
    Document,
    LazyCorpus,
    list_corpora,
    load_corpus,
    open_corpus,
)
from rbplab.store.hub import HubUnreachableError
from rbplab.store.paths import data_dir


def write_jsonl(path, rows, compress=False):
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if compress:
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text)
    return path


def test_txt_file_is_one_document(tmp_path):
    path = tmp_path / "essay.txt"
    path.write_text("Hello world.\n")
    corpus = load_corpus(path)
    assert corpus.name == "essay"
    assert corpus.documents == (Document("essay.txt", "Hello world.\n"),)
    assert corpus.source["origin"] == "local"


@pytest.mark.parametrize("compress", [False, True])
def test_jsonl_keeps_ids_and_order(tmp_path, compress):
    rows = [{"id": "b", "text": "second"}, {"id": 7, "text": "third"}, {"id": "a", "text": "first"}]
    path = write_jsonl(tmp_path / ("c.jsonl.gz" if compress else "c.jsonl"), rows, compress)
    corpus = load_corpus(str(path))
    assert [d.id for d in corpus.documents] == ["b", "7", "a"]
    assert [d.text for d in corpus.documents] == ["second", "third", "first"]
    assert load_corpus(path, max_documents=2).documents == corpus.documents[:2]


def test_directory_ids_are_relative_paths(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "z.txt").write_text("zed")
    (tmp_path / "a.txt").write_text("ay")
    (tmp_path / "notes.md").write_text("ignored: not a corpus file")
    write_jsonl(tmp_path / "m.jsonl", [{"id": "1", "text": "one"}])
    corpus = load_corpus(tmp_path)
    assert [d.id for d in corpus.documents] == ["a.txt", "m.jsonl:1", "sub/z.txt"]
    assert corpus.name == tmp_path.name


def test_content_hash_covers_ids_and_text():
    base = Corpus("x", (Document("a", "bc"),), {})
    assert base.content_hash() == Corpus("y", (Document("a", "bc"),), {"other": 1}).content_hash()
    assert base.content_hash() != Corpus("x", (Document("a", "bd"),), {}).content_hash()
    assert base.content_hash() != Corpus("x", (Document("b", "bc"),), {}).content_hash()
    # boundaries matter: ("ab", "c") is not ("a", "bc")
    assert base.content_hash() != Corpus("x", (Document("ab", "c"),), {}).content_hash()
    two = Corpus("x", (Document("a", "bc"), Document("d", "e")), {})
    assert two.content_hash() != Corpus("x", (Document("d", "e"), Document("a", "bc")), {}).content_hash()


def test_content_hash_is_stable_across_loads(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "1", "text": "x"}, {"id": "2", "text": "y"}])
    assert load_corpus(path).content_hash() == load_corpus(path).content_hash()


def test_missing_fields_and_bad_json(tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"id": "1", "text": "ok"}, {"title": "no text"}])
    with pytest.raises(CorpusError, match=r"bad.jsonl:2: .*'id' and 'text'"):
        load_corpus(bad)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"id": "1", "text": "ok"}\n{not json\n')
    with pytest.raises(CorpusError, match=r"broken.jsonl:2 is not JSON"):
        load_corpus(broken)
    notgz = tmp_path / "fake.jsonl.gz"
    notgz.write_text("plain text")
    with pytest.raises(CorpusError, match="cannot read"):
        load_corpus(notgz)


def test_empty_corpus_and_empty_documents(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    with pytest.raises(CorpusError, match="no non-empty documents"):
        load_corpus(empty)
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "1", "text": ""}, {"id": "2", "text": "kept"}])
    with pytest.warns(UserWarning, match="skipped 1 empty document"):
        corpus = load_corpus(path)
    assert [d.id for d in corpus.documents] == ["2"]
    (tmp_path / "nothing").mkdir()
    with pytest.raises(CorpusError, match="holds no"):
        load_corpus(tmp_path / "nothing")


def test_duplicate_ids_are_refused(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "1", "text": "a"}, {"id": "1", "text": "b"}])
    with pytest.raises(CorpusError, match="duplicate document id '1'"):
        load_corpus(path)


def test_unknown_corpus_lists_known_ones(tmp_path, monkeypatch):
    with pytest.raises(CorpusError, match="hub:wikipedia") as err:
        load_corpus("no-such-corpus")
    assert "no-such-corpus" in str(err.value)
    with pytest.raises(CorpusError, match="hub:humaneval"):
        load_corpus("hub:nope")
    odd = tmp_path / "c.csv"
    odd.write_text("a,b")
    with pytest.raises(CorpusError, match="unsupported corpus file"):
        load_corpus(odd)
    with pytest.raises(CorpusError, match="positive"):
        load_corpus(write_jsonl(tmp_path / "c.jsonl", [{"id": "1", "text": "a"}]), max_documents=0)


def test_bundled_corpus_from_data_dir(tmp_path, monkeypatch):
    corpora = tmp_path / "corpora"
    corpora.mkdir()
    write_jsonl(corpora / "tiny.jsonl.gz", [{"id": "d1", "text": "one"}, {"id": "d2", "text": "two"}], True)
    (corpora / "tiny.meta.json").write_text(json.dumps({"licence": "CC0", "description": "test corpus"}))
    monkeypatch.setenv("RBPLAB_DATA", str(tmp_path))
    corpus = load_corpus("tiny")
    assert corpus.name == "tiny" and len(corpus) == 2
    assert corpus.source["origin"] == "bundled" and corpus.source["licence"] == "CC0"
    table = list_corpora()
    row = table.set_index("name").loc["tiny"]
    assert row["documents"] == 2 and row["licence"] == "CC0" and row["origin"] == "bundled"
    assert {f"hub:{n}" for n in HUB_CORPORA} <= set(table["name"])
    with pytest.raises(CorpusError, match="tiny"):  # the known list names the bundled corpus
        load_corpus("tinny")


def test_every_bundled_corpus_of_the_repo_loads():
    folder = data_dir() / "corpora"
    names = sorted(p.name[: -len(".jsonl.gz")] for p in folder.glob("*.jsonl.gz"))
    if not names:
        pytest.skip("no bundled corpora in data/corpora yet")
    table = list_corpora().set_index("name")
    for name in names:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # bundled corpora must have no empty documents
            corpus = load_corpus(name)
        assert len(corpus) == table.loc[name, "documents"]
        assert len({d.id for d in corpus.documents}) == len(corpus)


class RecordingLoad:
    """Wraps datasets.load_dataset: records every call (path, config, split, revision, streaming)."""

    def __init__(self, real, rows=None):
        self.real, self.rows, self.calls = real, rows, []

    def __call__(self, path, name=None, *, split=None, revision=None, streaming=False, **kwargs):
        self.calls.append((path, name, split, revision, streaming))
        if self.rows is None:
            return self.real(path, name, split=split, revision=revision, streaming=streaming, **kwargs)
        return iter(self.rows)


@pytest.fixture
def loads(monkeypatch):
    recorder = RecordingLoad(datasets.load_dataset)
    monkeypatch.setattr(datasets, "load_dataset", recorder)
    return recorder


def test_hub_wikipedia_from_the_stand_in(hub, loads):
    from helpers.hub import WIKIPEDIA_ROWS

    with pytest.warns(UserWarning, match="not pinned to a commit"):
        corpus = load_corpus("hub:wikipedia")
    commit = hub.commit("wikimedia/wikipedia")
    assert [d.id for d in corpus.documents] == [r["id"] for r in WIKIPEDIA_ROWS]  # dump order
    assert corpus.documents[0].text == f"{WIKIPEDIA_ROWS[0]['title']}\n\n{WIKIPEDIA_ROWS[0]['text']}"
    source = corpus.source
    assert (source["dataset"], source["config"], source["split"]) == (
        "wikimedia/wikipedia",
        "20231101.en",
        "train",
    )
    assert source["revision"] == commit and source["requested_revision"] == "main"
    assert source["max_documents"] == HUB_CORPORA["wikipedia"].default_max_documents
    # Read from the commit's cached parquet, streamed: one call, no download of the dump.
    assert len(loads.calls) == 1 and loads.calls[0][0] == "parquet" and loads.calls[0][4] is True
    assert len(load_corpus("hub:wikipedia", max_documents=2)) == 2


def test_hub_humaneval_and_auslegal(hub):
    from helpers.hub import HUMANEVAL_ROWS, LEGAL_ROWS

    humaneval = load_corpus("hub:humaneval")
    assert [d.id for d in humaneval.documents] == [r["task_id"] for r in HUMANEVAL_ROWS]
    assert (
        humaneval.documents[1].text == HUMANEVAL_ROWS[1]["prompt"] + HUMANEVAL_ROWS[1]["canonical_solution"]
    )
    legal = load_corpus("hub:auslegal", max_documents=1)
    assert (
        legal.source["dataset"] == "isaacus/open-australian-legal-corpus"
        and legal.source["split"] == "corpus"
    )
    assert legal.documents == (Document(LEGAL_ROWS[0]["version_id"], LEGAL_ROWS[0]["text"]),)


def test_hub_hotpotqa_text_is_assembled_as_documented(hub, loads):
    from helpers.hub import HOTPOT_ROWS

    corpus = load_corpus("hub:hotpotqa")  # the stand-in's train file is not parquet: reading it would fail
    assert corpus.documents[0] == Document(
        "5a8b57f25542995d1e6f1371",
        "Were Scott Derrickson and Ed Wood of the same nationality?\n\n"
        "Scott Derrickson\nScott Derrickson is an American director. He lives in Los Angeles.\n\n"
        "Ed Wood\nEdward Davis Wood Jr. was an American filmmaker.\n\n"
        "Answer: yes",
    )
    assert [d.id for d in corpus.documents] == [r["id"] for r in HOTPOT_ROWS]
    assert all(call[4] is True for call in loads.calls)  # streamed


def test_hub_corpora_stream_from_the_hub_at_the_resolved_commit(hub, monkeypatch):
    """Without the split's files in the local cache, every hub corpus streams from the hub at its commit
    (the commit resolved offline from the cached card, the hub reachable when the rows are read)."""
    import shutil

    from helpers.hub import repo_dir

    from rbplab.store import hub as hub_reach

    recorder = RecordingLoad(None, rows=[])
    monkeypatch.setattr(datasets, "load_dataset", recorder)
    expected = {
        "wikipedia": ("wikimedia/wikipedia", "20231101.en", "train"),
        "humaneval": ("openai/openai_humaneval", None, "test"),
        "hotpotqa": ("hotpotqa/hotpot_qa", "distractor", "validation"),
        "auslegal": ("isaacus/open-australian-legal-corpus", None, "corpus"),
    }
    for name, (repo, config, split) in expected.items():
        snapshot = repo_dir(hub.root, repo, "datasets") / "snapshots" / hub.commit(repo)
        for child in snapshot.iterdir():  # keep only the card: refs resolve, data is not cached
            if child.name != "README.md":
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        lazy = open_corpus(f"hub:{name}")
        with monkeypatch.context() as online, pytest.raises(CorpusError, match="no non-empty documents"):
            online.setattr(hub_reach, "offline_reason", lambda: None)
            lazy.load()
        assert recorder.calls[-1] == (repo, config, split, hub.commit(repo), True)


def test_hub_revision_override_and_errors(hub):
    commit = hub.commit("openai/openai_humaneval")
    pinned = load_corpus(f"hub:humaneval@{commit}")
    assert pinned.source["revision"] == commit == pinned.source["requested_revision"]
    assert load_corpus("hub:humaneval", revision=commit).key() == pinned.key()
    with pytest.raises(HubUnreachableError, match="does not hold dataset openai/openai_humaneval@v2;"):
        load_corpus("hub:humaneval@v2")  # offline and not cached: one line, what to do
    with pytest.raises(CorpusError, match="hub corpora only"):
        open_corpus("humaneval", revision=commit)


def test_hub_corpus_key_is_its_identity_and_needs_no_documents(hub):
    commit = hub.commit("wikimedia/wikipedia")
    lazy = open_corpus(f"hub:wikipedia@{commit}", max_documents=2)
    assert isinstance(lazy, LazyCorpus)
    key = lazy.key()
    assert not lazy.loaded  # the key did not read the dataset
    assert key == {
        "name": "hub:wikipedia",
        "dataset": "wikimedia/wikipedia",
        "config": "20231101.en",
        "split": "train",
        "revision": commit,
        "max_documents": 2,
        "text_scheme": HUB_TEXT_SCHEME,
    }
    assert load_corpus(f"hub:wikipedia@{commit}", max_documents=2).key() == key  # loaded or not
    assert len(lazy) == 2 and lazy.loaded and lazy.load() is lazy.load()


def test_lazy_hub_corpus_travels_to_other_processes(hub):
    # Work units carry their corpus to worker processes (Ray, --workers): it must pickle, unread.
    import pickle

    from rbplab.catalog.corpora import open_corpus

    lazy = open_corpus("hub:humaneval")
    clone = pickle.loads(pickle.dumps(lazy))
    assert not clone.loaded and clone.key() == lazy.key()
    assert [d.id for d in clone.documents] == [d.id for d in lazy.documents]
