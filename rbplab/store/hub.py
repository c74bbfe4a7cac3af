"""Whether the Hugging Face hub can be reached, decided once, before anything is asked of it.

huggingface_hub meets a failed connection with five retries and backoff (about 25 s) and then
reports the file as "not in the local cache", so asked offline it is slow and says nothing true
about the revision or dataset that was asked for. rbplab asks `offline_reason()` first: a set
HF_HUB_OFFLINE, or one request to the endpoint that cannot connect within `PROBE_TIMEOUT_S`,
means offline, and the caller answers from the local hub cache alone or raises
`HubUnreachableError`. A hub that answers at all (any HTTP status) is reachable, and only what it
says (404: no such revision or repository) is reported as not existing.
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlsplit

from rbplab.core.errors import RbplabError
from rbplab.core.names import natural_sorted

# A reachable endpoint connects in well under a second; a network that drops packets would
# otherwise hold the probe until the OS gives up (minutes).
PROBE_TIMEOUT_S = 3.0
# The verdict holds this long, so a command that resolves many runs probes once, while a
# notebook kernel left open sees the network come back.
VERDICT_TTL_S = 60.0

_verdicts: dict[str, tuple[float, str | None]] = {}  # endpoint -> (monotonic time, reason or None)


class HubUnreachableError(RbplabError, ConnectionError):
    """The hub cannot be reached (offline, no network) and the local hub cache lacks what was asked."""


def offline_reason() -> str | None:
    """Why the hub cannot be reached now ("HF_HUB_OFFLINE is set", or the failed connection), or
    None when it answers. The endpoint is probed at most once per `VERDICT_TTL_S`."""
    from huggingface_hub import constants

    if constants.is_offline_mode():
        return "HF_HUB_OFFLINE is set"
    endpoint = constants.ENDPOINT
    known = _verdicts.get(endpoint)
    if known is not None and time.monotonic() - known[0] < VERDICT_TTL_S:
        return known[1]
    reason = _probe(endpoint)
    _verdicts[endpoint] = (time.monotonic(), reason)
    return reason


def remote_commit(repo: str, filename: str, revision: str, repo_type: str = "model") -> str | None:
    """The commit the hub names for `revision` of `repo`, from one metadata request for `filename`
    that is never retried (huggingface_hub's downloads retry a refused connection for ~25 s). Its
    typed errors propagate: RevisionNotFoundError, RepositoryNotFoundError, RemoteEntryNotFoundError,
    and a connection error (`is_connection_error`) when the hub went out of reach."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(repo, filename, repo_type=repo_type, revision=revision)
    return get_hf_file_metadata(url, timeout=PROBE_TIMEOUT_S * 3).commit_hash


def mark_unreachable(error: BaseException) -> str:
    """Record that a hub call could not connect (the network went away after the probe), so the
    calls after it do not try again; the reason, for the caller's message."""
    from huggingface_hub import constants

    reason = f"{_host(constants.ENDPOINT)}: {_describe(error)}"
    _verdicts[constants.ENDPOINT] = (time.monotonic(), reason)
    return reason


def is_connection_error(error: BaseException) -> bool:
    """Whether `error`, or an error it was raised from, is a failure to reach the endpoint (as
    opposed to an answer from it)."""
    import httpx2
    from huggingface_hub.errors import OfflineModeIsEnabled

    seen: BaseException | None = error
    for _ in range(8):  # a cause chain is short; a cycle must not hang
        if seen is None:
            return False
        if isinstance(seen, (httpx2.TransportError, OfflineModeIsEnabled, ConnectionError, TimeoutError)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def unreachable(what: str, reason: str, advice: str = "") -> HubUnreachableError:
    """The one-line error for `what` (e.g. "EleutherAI/pythia-70m@main"), which the local hub cache
    does not hold while the hub is out of reach for `reason`; `advice` ends the sentence."""
    return HubUnreachableError(
        f"the hub cannot be reached (offline?: {reason}) and the local Hugging Face cache does not hold "
        f"{what}; run once with hub access to cache it{advice}"
    )


def branches(repo: str, repo_type: str = "model") -> list[str]:
    """Branches of a hub repo (a model's, or a dataset's), in natural order (step2 before step10):
    from the hub when it can be reached, else those the local hub cache has refs/ for."""
    if offline_reason() is None:
        try:
            from huggingface_hub import HfApi

            refs = HfApi().list_repo_refs(repo, repo_type=repo_type)
            return natural_sorted([ref.name for ref in refs.branches])
        except Exception as err:  # noqa: BLE001 - any hub failure falls back to what is cached
            if is_connection_error(err):
                mark_unreachable(err)
    return cached_branches(repo, repo_type)


def cached_branches(repo: str, repo_type: str = "model") -> list[str]:
    """The branches the local hub cache has refs/ for (no network), in natural order."""
    from huggingface_hub import constants

    refs = Path(constants.HF_HUB_CACHE) / f"{repo_type}s--{repo.replace('/', '--')}" / "refs"
    return natural_sorted([p.name for p in refs.iterdir() if p.is_file()]) if refs.is_dir() else []


def _probe(endpoint: str) -> str | None:
    """One request to `endpoint` through huggingface_hub's own client (its proxies and
    certificates), never retried: the failure, or None when anything answered."""
    import httpx2
    from huggingface_hub.utils import get_session

    try:
        get_session().head(endpoint, timeout=PROBE_TIMEOUT_S, follow_redirects=False)
    except (httpx2.TransportError, OSError) as err:
        return f"{_host(endpoint)}: {_describe(err)}"
    return None


def _host(endpoint: str) -> str:
    return urlsplit(endpoint).netloc or endpoint


def _describe(error: BaseException) -> str:
    """The first line of the innermost error's message (e.g. "[Errno 111] Connection refused")."""
    inner = error
    for _ in range(8):  # a cause chain is short; a cycle must not hang
        deeper = inner.__cause__ or inner.__context__
        if deeper is None:
            break
        inner = deeper
    text = str(inner).strip().splitlines()
    return text[0] if text else type(inner).__name__
