"""Corpus loading: local files, bundled corpora, hub loaders (with a fake `datasets`), errors."""

from __future__ import annotations

import gzip
import json
import warnings

import datasets
import pytest

from rbplab.store.corpora import HUB_CORPORA, Corpus, CorpusError, Document, list_corpora, load_corpus
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
    with pytest.raises(CorpusError, match=r"broken.jsonl:2: not valid JSON"):
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


class FakeHub:
    """Stands in for datasets.load_dataset: records calls, serves in-memory rows."""

    def __init__(self, rows):
        self.rows = rows
        self.calls = []

    def __call__(self, path, name=None, split=None, streaming=False):
        self.calls.append({"path": path, "name": name, "split": split, "streaming": streaming})
        table = datasets.Dataset.from_list(self.rows)
        return table.to_iterable_dataset() if streaming else table


def test_hub_wikipedia(monkeypatch):
    fake = FakeHub([{"id": str(i), "url": "u", "title": f"T{i}", "text": f"body {i}"} for i in range(1500)])
    monkeypatch.setattr(datasets, "load_dataset", fake)
    corpus = load_corpus("hub:wikipedia")
    assert fake.calls == [
        {"path": "wikimedia/wikipedia", "name": "20231101.en", "split": "train", "streaming": True}
    ]
    assert len(corpus) == HUB_CORPORA["wikipedia"].default_max_documents  # capped stream
    assert corpus.documents[0] == Document("0", "T0\n\nbody 0")
    assert corpus.source["origin"] == "hub" and corpus.source["dataset"].startswith("wikimedia/wikipedia")
    assert len(load_corpus("hub:wikipedia", max_documents=3)) == 3


def test_hub_humaneval(monkeypatch):
    rows = [
        {
            "task_id": f"HumanEval/{i}",
            "prompt": f"def f{i}():\n",
            "canonical_solution": "    return 1\n",
            "test": "",
            "entry_point": f"f{i}",
        }
        for i in range(4)
    ]
    fake = FakeHub(rows)
    monkeypatch.setattr(datasets, "load_dataset", fake)
    corpus = load_corpus("hub:humaneval")
    assert fake.calls[0]["path"] == "openai/openai_humaneval" and fake.calls[0]["split"] == "test"
    assert [d.id for d in corpus.documents] == [f"HumanEval/{i}" for i in range(4)]
    assert corpus.documents[1].text == "def f1():\n    return 1\n"


def test_hub_hotpotqa(monkeypatch):
    row = {
        "id": "q1",
        "question": "Who?",
        "answer": "Ann",
        "type": "bridge",
        "level": "hard",
        "supporting_facts": {"title": ["A"], "sent_id": [0]},
        "context": {"title": ["A", "B"], "sentences": [["Ann was.", " Here."], ["B is."]]},
    }
    fake = FakeHub([row])
    monkeypatch.setattr(datasets, "load_dataset", fake)
    corpus = load_corpus("hub:hotpotqa")
    call = fake.calls[0]
    assert (call["path"], call["name"], call["split"]) == ("hotpotqa/hotpot_qa", "distractor", "validation")
    assert corpus.documents == (Document("q1", "Who?\n\nA\nAnn was. Here.\n\nB\nB is.\n\nAnswer: Ann"),)


def test_hub_auslegal(monkeypatch):
    rows = [
        {
            "version_id": f"v{i}",
            "type": "decision",
            "jurisdiction": "nsw",
            "source": "s",
            "citation": "c",
            "url": "u",
            "when_scraped": "w",
            "text": f"Judgment {i}.",
        }
        for i in range(3)
    ]
    fake = FakeHub(rows)
    monkeypatch.setattr(datasets, "load_dataset", fake)
    corpus = load_corpus("hub:auslegal", max_documents=2)
    assert fake.calls[0]["path"] == "umarbutler/open-australian-legal-corpus" and fake.calls[0]["streaming"]
    assert corpus.documents == (Document("v0", "Judgment 0."), Document("v1", "Judgment 1."))
