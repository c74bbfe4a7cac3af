"""Fixtures for tests of hub reachability (a pytest plugin: tests/conftest.py loads it).

`fresh_verdict` is not autouse: a module that needs every test to decide reachability anew says
`pytestmark = pytest.mark.usefixtures("fresh_verdict")`.
"""

from __future__ import annotations

import socket

import pytest

from rbplab.store import hub as hub_reach


@pytest.fixture
def fresh_verdict(monkeypatch):
    """Each test decides reachability anew (the verdict is otherwise kept for a minute)."""
    monkeypatch.setattr(hub_reach, "_verdicts", {})


@pytest.fixture
def connections(monkeypatch) -> list:
    """Every socket the hub client opens. huggingface_hub fetches an agent registry from the
    endpoint once a day for its user agent (not a retry): given an empty one, it fetches none."""
    from huggingface_hub.utils import _detect_agent

    monkeypatch.setattr(_detect_agent, "_registry", {"standardEnvVars": [], "harnesses": {}}, raising=False)
    made: list = []
    real = socket.create_connection

    def counting(address, *args, **kwargs):
        made.append(address)
        return real(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", counting)
    return made


@pytest.fixture
def empty_hub_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
