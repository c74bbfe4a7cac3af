"""A hub endpoint on loopback that answers as huggingface.co does, for the few requests rbplab makes
while resolving a revision: file metadata and downloads under ``/<repo>/resolve/<revision>/<file>``
(``/datasets/<repo>/...`` for datasets), a repo's refs under ``/api/<models|datasets>/<repo>/refs``,
and 404s carrying the hub's ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``) that
huggingface_hub turns into its typed errors. Every request is counted.

`serve(repos)` runs it in a thread; `use_endpoint(monkeypatch, url)` points huggingface_hub at an
endpoint (its URL template is fixed at import, so both are patched).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote


@dataclass
class FakeHub:
    url: str
    repos: dict[tuple[str, str], dict[str, str]]  # (kind, repo) -> branch -> commit
    requests: list[str] = field(default_factory=list)


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def _reply(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _answer(self) -> None:
            path = unquote(self.path.split("?", 1)[0])
            hub.requests.append(f"{self.command} {path}")
            parts = path.strip("/").split("/")
            if parts[:1] == ["api"] and parts[-1] == "refs" and len(parts) >= 4:
                kind = parts[1].rstrip("s")  # models -> model, datasets -> dataset
                branches = hub.repos.get((kind, "/".join(parts[2:-1])))
                if branches is None:
                    return self._reply(404, b"{}", {"X-Error-Code": "RepoNotFound"})
                refs = [{"name": b, "ref": f"refs/heads/{b}", "targetCommit": c} for b, c in branches.items()]
                body = json.dumps({"branches": refs, "tags": [], "converts": []}).encode()
                return self._reply(200, body, {"Content-Type": "application/json"})
            if "resolve" in parts:
                kind = "dataset" if parts[0] == "datasets" else "model"
                at = parts.index("resolve")
                repo = "/".join(parts[1 if kind == "dataset" else 0 : at])
                revision, filename = parts[at + 1], "/".join(parts[at + 2 :])
                branches = hub.repos.get((kind, repo))
                if branches is None:
                    return self._reply(404, b"", {"X-Error-Code": "RepoNotFound"})
                commit = branches.get(revision, revision if revision in branches.values() else None)
                if commit is None:
                    return self._reply(404, b"", {"X-Error-Code": "RevisionNotFound"})
                body = json.dumps({"repo": repo, "commit": commit, "file": filename}).encode()
                etag = hashlib.sha1(body).hexdigest()
                return self._reply(200, body, {"X-Repo-Commit": commit, "ETag": f'"{etag}"'})
            return self._reply(200, b"")  # the endpoint's root: anything answering is reachable

        do_GET = do_HEAD = _answer

    return Handler


@contextmanager
def serve(repos: dict[tuple[str, str], dict[str, str]]) -> Iterator[FakeHub]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), None)  # type: ignore[arg-type]
    hub = FakeHub(f"http://127.0.0.1:{server.server_address[1]}", repos)
    server.RequestHandlerClass = _handler(hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()


def use_endpoint(monkeypatch, url: str) -> None:
    """Point huggingface_hub at `url`, online (HF_HUB_OFFLINE unset)."""
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}"
    )


def closed_port() -> str:
    """An endpoint on loopback where nothing listens: every connection is refused at once."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"
