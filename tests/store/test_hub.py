"""Whether the hub can be reached (`rbplab.store.hub`), and hub corpora resolved under each answer:
out of reach is "the hub cannot be reached (offline?)", at once and without retries; "has no
revision" only when the hub answers 404."""

from __future__ import annotations

import time

import pytest
from helpers.hub_server import closed_port, serve, use_endpoint

from rbplab.catalog.corpora import CorpusError, open_corpus
from rbplab.store import hub as hub_reach
from rbplab.store.hub import HubUnreachableError

HUMANEVAL = "openai/openai_humaneval"


pytestmark = pytest.mark.usefixtures("fresh_verdict")  # fixtures: helpers/hub_fixtures.py


def _open(corpus: str) -> tuple[BaseException, float]:
    started = time.perf_counter()
    with pytest.raises(Exception) as caught:
        open_corpus(corpus)
    return caught.value, time.perf_counter() - started


def _offline(error: BaseException, what: str) -> str:
    message = str(error)
    assert isinstance(error, HubUnreachableError), message
    assert message.startswith("the hub cannot be reached (offline?"), message
    assert "\n" not in message and what in message and "no revision" not in message
    return message


def test_verdicts(monkeypatch, connections):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert hub_reach.offline_reason() == "HF_HUB_OFFLINE is set" and connections == []
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    endpoint = closed_port()
    use_endpoint(monkeypatch, endpoint)
    reason = hub_reach.offline_reason()
    assert reason.startswith(endpoint.split("//")[1] + ": ") and "refused" in reason.lower()
    assert hub_reach.offline_reason() == reason and len(connections) == 1  # decided once
    monkeypatch.setattr(hub_reach, "VERDICT_TTL_S", 0.0)  # ... for a while
    hub_reach.offline_reason()
    assert len(connections) == 2
    with serve({}) as fake:
        use_endpoint(monkeypatch, fake.url)
        assert hub_reach.offline_reason() is None  # anything answering is reachable
        assert fake.requests == ["HEAD /"]


def test_offline_setting_is_not_a_missing_dataset_revision(hub, connections):
    """HF_HUB_OFFLINE=1 (the `hub` fixture): a revision the local cache lacks is the offline error;
    the pinned one, cached, still opens."""
    error, seconds = _open("hub:humaneval@v2")
    message = _offline(error, f"dataset {HUMANEVAL}@v2")
    assert "HF_HUB_OFFLINE is set" in message and "hub:<name>@<commit sha>" in message
    with pytest.warns(UserWarning, match="not pinned"):
        assert open_corpus("hub:humaneval").source["revision"] == hub.commit(HUMANEVAL)
    assert connections == []
    print(f"offline corpus (HF_HUB_OFFLINE): {seconds:.3f} s")


def test_unreachable_network_fails_at_once_without_retries(empty_hub_cache, monkeypatch, connections):
    use_endpoint(monkeypatch, closed_port())
    error, seconds = _open("hub:humaneval")
    assert "refused" in _offline(error, f"dataset {HUMANEVAL}@main").lower()
    assert len(connections) == 1, connections  # the probe; huggingface_hub would retry 5 times
    _offline(_open("hub:wikipedia")[0], "dataset wikimedia/wikipedia@main")
    assert len(connections) == 1, connections
    monkeypatch.setattr(hub_reach, "_probe", lambda endpoint: None)  # lost after the probe
    monkeypatch.setattr(hub_reach, "_verdicts", {})
    _offline(_open("hub:humaneval")[0], f"dataset {HUMANEVAL}@main")
    assert len(connections) == 2, connections
    print(f"unreachable corpus: {seconds:.3f} s (old code: ~25 s)")


def test_files_of_a_cached_card_are_not_fetched_offline(hub, monkeypatch):
    """The card resolves the commit offline but the split's files are not cached: the offline error,
    before `datasets` is asked (it would retry the hub)."""
    import shutil

    import datasets
    from helpers.hub import repo_dir

    snapshot = repo_dir(hub.root, HUMANEVAL, "datasets") / "snapshots" / hub.commit(HUMANEVAL)
    for child in snapshot.iterdir():
        if child.name != "README.md":
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("datasets was asked"))
    with pytest.warns(UserWarning, match="not pinned"):
        lazy = open_corpus("hub:humaneval")
    with pytest.raises(HubUnreachableError, match=f"files of dataset {HUMANEVAL}@{hub.commit(HUMANEVAL)}"):
        lazy.load()


def test_missing_dataset_revision_only_when_the_hub_says_so(empty_hub_cache, monkeypatch):
    with serve({("dataset", HUMANEVAL): {"main": "c" * 40}}) as fake:
        use_endpoint(monkeypatch, fake.url)
        error, _ = _open("hub:humaneval@v2")
        assert isinstance(error, CorpusError) and not isinstance(error, HubUnreachableError)
        assert str(error) == f"dataset {HUMANEVAL} has no revision 'v2' on the hub; branches: main"
        error, _ = _open("hub:wikipedia")
        assert str(error) == "the hub has no dataset 'wikimedia/wikipedia' (or it is private or gated)"
        with pytest.warns(UserWarning, match="not pinned"):
            assert open_corpus("hub:humaneval@main").source["revision"] == "c" * 40


def test_one_conversation_resolves_models_and_datasets(empty_hub_cache, monkeypatch, connections):
    """`hub.resolve_commit`: a commit id as is, without a connection; else the commit the hub names,
    or, when it names none, the snapshot folder the downloaded file is kept under."""
    assert hub_reach.resolve_commit("org/model", "d" * 40, "config.json") == "d" * 40 and connections == []
    with serve(
        {("model", "org/model"): {"main": "a" * 40}, ("dataset", "org/data"): {"v1": "c" * 40}}
    ) as fake:
        use_endpoint(monkeypatch, fake.url)
        assert hub_reach.resolve_commit("org/model", "main", "config.json") == "a" * 40
        monkeypatch.setattr(hub_reach, "_remote_commit", lambda *args: None)
        assert hub_reach.resolve_commit("org/data", "v1", "README.md", repo_type="dataset") == "c" * 40
        with pytest.raises(hub_reach.NoSuchRevisionError) as missing:
            hub_reach.resolve_commit("org/data", "v2", "README.md", repo_type="dataset")
        assert missing.value.branches == ["v1"]
