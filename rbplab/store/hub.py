"""The Hugging Face hub: whether it can be reached, decided once before anything is asked of it,
and the commit a revision points at there.

huggingface_hub meets a failed connection with five retries and backoff (about 25 s) and then
reports the file as "not in the local cache", so asked offline it is slow and says nothing true
about the revision or dataset that was asked for. rbplab asks `offline_reason()` first: a set
HF_HUB_OFFLINE, or one request to the endpoint that cannot connect within `PROBE_TIMEOUT_S`,
means offline, and the caller answers from the local hub cache alone or raises
`HubUnreachableError`. A hub that answers at all (any HTTP status) is reachable, and only what it
says (404: no such revision or repository) is reported as not existing.

`resolve_commit` is the one conversation that turns a revision into a commit, for models and
datasets alike; it raises the typed errors below, and each caller (a model, a corpus) words them
for its users.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from urllib.parse import urlsplit

from rbplab.core.errors import RbplabError, natural_sorted

# A reachable endpoint connects in well under a second; a network that drops packets would
# otherwise hold the probe until the OS gives up (minutes).
PROBE_TIMEOUT_S = 3.0
# The verdict holds this long, so a command that resolves many runs probes once, while a
# notebook kernel left open sees the network come back.
VERDICT_TTL_S = 60.0

_verdicts: dict[str, tuple[float, str | None]] = {}  # endpoint -> (monotonic time, reason or None)

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")  # a commit id: names one snapshot, resolved without asking
# huggingface_hub keeps a commit's files under snapshots/<commit>/, whatever revision fetched them
_SNAPSHOT_RE = re.compile(r"/snapshots/([0-9a-f]{40})/")


class HubUnreachableError(RbplabError, ConnectionError):
    """The hub cannot be reached (offline, no network) and the local hub cache lacks what was asked."""


class NoSuchRevisionError(RbplabError, LookupError):
    """`resolve_commit`: the hub says `repo` has no branch, tag or commit `revision`; `branches` are
    the repo's branches as the hub lists them."""

    def __init__(self, repo: str, revision: str, branches: list[str]) -> None:
        super().__init__(f"{repo} has no revision {revision!r} on the hub")
        self.repo, self.revision, self.branches = repo, revision, branches


class NoSuchRepositoryError(RbplabError, LookupError):
    """`resolve_commit`: the hub has no repository `repo` (or it is private or gated)."""

    def __init__(self, repo: str) -> None:
        super().__init__(f"the hub has no repository {repo!r} (or it is private or gated)")
        self.repo = repo


class HubAnswerError(RbplabError, RuntimeError):
    """`resolve_commit`: the hub answered something else; `kind` is the error's type and `text` its
    message on one line."""

    def __init__(self, repo: str, revision: str, kind: str, text: str) -> None:
        super().__init__(f"cannot resolve {repo}@{revision} to a commit: {kind}: {text}")
        self.repo, self.revision, self.kind, self.text = repo, revision, kind, text


class NoCommitError(RbplabError, RuntimeError):
    """`resolve_commit`: the hub served the file (downloaded to `path`) but named no commit, and the
    file is not kept under a commit's snapshot folder either."""

    def __init__(self, repo: str, revision: str, path: str) -> None:
        super().__init__(f"cannot resolve {repo}@{revision} to a commit (the hub named none)")
        self.repo, self.revision, self.path = repo, revision, path


class NotCachedError(HubUnreachableError):
    """`resolve_commit`: the hub is out of reach for `reason` and the local hub cache does not hold
    `revision` of `repo`; `cached` are the branches it does hold."""

    def __init__(self, repo: str, revision: str, reason: str, cached: list[str]) -> None:
        super().__init__(*unreachable(f"{repo}@{revision}", reason).args)
        self.repo, self.revision, self.reason, self.cached = repo, revision, reason, cached


def branch_listing(branches: list[str]) -> str:
    """A repo's branches for a one-line message: the first 12, then how many there are."""
    return ", ".join(branches[:12]) + (f", ... ({len(branches)} branches)" if len(branches) > 12 else "")


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


def resolve_commit(repo: str, revision: str, filename: str, repo_type: str = "model") -> str:
    """The commit `revision` (branch, tag or commit) of `repo` points at now: a commit as is (no
    network); else asked of the hub when `offline_reason` says it answers, never retried, and read
    from the local hub cache when it does not. `filename`, a file of the repo, is downloaded too:
    that records refs/<revision> in the cache, so the same revision resolves offline later.

    Raises NoSuchRevisionError or NoSuchRepositoryError only when the hub says so (404),
    HubAnswerError or NoCommitError for its other answers, and NotCachedError when it is out of
    reach and the cache lacks the revision."""
    if COMMIT_RE.match(revision):
        return revision
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    reason = offline_reason()
    if reason is None:
        try:
            named = _remote_commit(repo, filename, revision, repo_type)
            path = hf_hub_download(repo, filename, repo_type=repo_type, revision=revision)
        except RevisionNotFoundError:
            raise NoSuchRevisionError(repo, revision, branches(repo, repo_type)) from None
        except RepositoryNotFoundError:
            raise NoSuchRepositoryError(repo) from None
        except Exception as err:  # noqa: BLE001 - classified: out of reach, or the hub's answer
            if not _is_connection_error(err):
                raise HubAnswerError(repo, revision, type(err).__name__, " ".join(str(err).split())) from None
            reason = _mark_unreachable(err)
        else:
            # the commit the hub named; when it named none (not a hub, say), hf_hub_download served
            # the cached copy, whose snapshot folder is its commit
            commit = named or _snapshot_commit(path)
            if commit is None:
                raise NoCommitError(repo, revision, path)
            return commit
    return _cached_commit(repo, revision, filename, repo_type, reason)


def _remote_commit(repo: str, filename: str, revision: str, repo_type: str) -> str | None:
    """The commit the hub names for `revision` of `repo`, from one metadata request for `filename`
    that is never retried (huggingface_hub's downloads retry a refused connection for ~25 s)."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(repo, filename, repo_type=repo_type, revision=revision)
    return get_hf_file_metadata(url, timeout=PROBE_TIMEOUT_S * 3).commit_hash


def _cached_commit(repo: str, revision: str, filename: str, repo_type: str, reason: str) -> str:
    """The commit the local hub cache records for `revision` when it also holds `filename` at that
    commit (no network); else NotCachedError, the hub being out of reach for `reason`."""
    from huggingface_hub import try_to_load_from_cache

    commit = _snapshot_commit(try_to_load_from_cache(repo, filename, revision=revision, repo_type=repo_type))
    if commit is None:
        raise NotCachedError(repo, revision, reason, cached_branches(repo, repo_type))
    return commit


def _snapshot_commit(path: object) -> str | None:
    """The commit whose snapshot folder holds `path` (a cached file), or None."""
    match = _SNAPSHOT_RE.search(Path(path).as_posix()) if isinstance(path, str) else None
    return match.group(1) if match else None


def _mark_unreachable(error: BaseException) -> str:
    """Record that a hub call could not connect (the network went away after the probe), so the
    calls after it do not try again; the reason, for the caller's message."""
    from huggingface_hub import constants

    reason = f"{_host(constants.ENDPOINT)}: {_describe(error)}"
    _verdicts[constants.ENDPOINT] = (time.monotonic(), reason)
    return reason


def _is_connection_error(error: BaseException) -> bool:
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
            if _is_connection_error(err):
                _mark_unreachable(err)
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
