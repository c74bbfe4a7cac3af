"""Resolving a hub model's revision: out of reach is "the hub cannot be reached (offline?)", at once
and without huggingface_hub's retries; "has no revision" only when the hub answers 404.

Connections are counted at `socket.create_connection` (what the hub client opens sockets with), so
a retry shows as a second connection whatever library makes it.
"""

from __future__ import annotations

import time

import pytest
from helpers.hub import PYTHIA
from helpers.hub_server import closed_port, serve, use_endpoint

from rbplab.catalog.models import ModelLoadError, ModelSpec, resolve
from rbplab.extraction.fingerprints import resolve_commit
from rbplab.store import hub as hub_reach
from rbplab.store.hub import HubUnreachableError

BRANCHES = {"main": "a" * 40, "step1000": "b" * 40}


pytestmark = pytest.mark.usefixtures("fresh_verdict")  # fixtures: helpers/hub_fixtures.py


def _resolve(name: str, revision: str | None) -> tuple[BaseException, float]:
    started = time.perf_counter()
    with pytest.raises(Exception) as caught:
        resolve_commit(resolve(ModelSpec(name, revision=revision)))
    return caught.value, time.perf_counter() - started


def _offline(error: BaseException, name: str, revision: str) -> str:
    message = str(error)
    assert isinstance(error, HubUnreachableError), message
    assert message.startswith("the hub cannot be reached (offline?"), message
    assert "\n" not in message and f"{name}@{revision}" in message
    assert "no revision" not in message and "use revision='main'" not in message
    return message


def test_offline_setting_is_not_a_missing_revision(hub, connections):
    """HF_HUB_OFFLINE=1 (the `hub` fixture) and a revision the local cache lacks: the offline error,
    naming the branches cached here, never "has no revision ... use 'main'"."""
    error, seconds = _resolve(PYTHIA, "step143000")
    message = _offline(error, PYTHIA, "step143000")
    assert "HF_HUB_OFFLINE is set" in message and "cached here: main, step1000" in message
    error, seconds_main = _resolve("EleutherAI/pythia-70m", None)  # nothing of it cached
    assert "cached here" not in _offline(error, "EleutherAI/pythia-70m", "main")
    assert connections == []
    print(f"offline (HF_HUB_OFFLINE): {seconds:.3f} s and {seconds_main:.3f} s")
    # what is cached still resolves offline
    assert resolve_commit(resolve(ModelSpec(PYTHIA, revision="step1000"))) == hub.commit(PYTHIA, "step1000")


def test_unreachable_network_fails_at_once_without_retries(empty_hub_cache, monkeypatch, connections):
    """No network (an endpoint where nothing listens): one connection, refused, then the offline
    error; the next model in the same process does not try again."""
    use_endpoint(monkeypatch, closed_port())
    error, seconds = _resolve("EleutherAI/pythia-160m", "step143000")
    message = _offline(error, "EleutherAI/pythia-160m", "step143000")
    assert "refused" in message.lower()
    assert len(connections) == 1, connections  # the probe; huggingface_hub would retry 5 times
    error, seconds_next = _resolve("EleutherAI/pythia-70m", None)
    _offline(error, "EleutherAI/pythia-70m", "main")
    assert len(connections) == 1, connections
    print(f"unreachable: {seconds:.3f} s, then {seconds_next:.3f} s (old code: ~25 s each)")


def test_network_lost_after_the_probe_is_offline_too(empty_hub_cache, monkeypatch, connections):
    """The probe answered but the download cannot connect: the offline error, not a missing
    revision, and no retries."""
    use_endpoint(monkeypatch, closed_port())
    monkeypatch.setattr(hub_reach, "_probe", lambda endpoint: None)
    _offline(_resolve(PYTHIA, "step1000")[0], PYTHIA, "step1000")
    assert len(connections) == 1, connections


def test_missing_revision_only_when_the_hub_says_so(empty_hub_cache, monkeypatch):
    """A hub that answers 404 RevisionNotFound: "has no revision", listing its branches (and
    `main` for Pythia's final step); 404 RepoNotFound: no such repository."""
    with serve({("model", PYTHIA): BRANCHES}) as fake:
        use_endpoint(monkeypatch, fake.url)
        error, _ = _resolve(PYTHIA, "step143000")
        message = str(error)
        assert isinstance(error, ModelLoadError) and not isinstance(error, HubUnreachableError), message
        assert "\n" not in message
        assert "has no revision 'step143000' on the hub; available branches: main, step1000." in message
        assert "use revision='main'" in message
        error, _ = _resolve(PYTHIA, "step7")
        assert str(error).endswith("available branches: main, step1000.")
        error, _ = _resolve("EleutherAI/not-a-model", None)
        assert isinstance(
            error, ModelLoadError
        ) and "has no model repository 'EleutherAI/not-a-model'" in str(error)
        assert "no revision" not in str(error)
        # a revision that exists resolves to the commit the hub names, and records it for offline use
        assert resolve_commit(resolve(ModelSpec(PYTHIA, revision="step1000"))) == BRANCHES["step1000"]
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert resolve_commit(resolve(ModelSpec(PYTHIA, revision="step1000"))) == BRANCHES["step1000"]
