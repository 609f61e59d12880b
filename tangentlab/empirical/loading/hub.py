"""Hugging Face Hub model ids and revisions → a checkpoint trajectory, through ``huggingface_hub``.

A model id ``ORG/NAME`` and a revision selection resolve to local snapshot directories with
``huggingface_hub.snapshot_download(repo_id, revision=..., cache_dir=..., local_files_only=...)``:
its cache (``$HF_HUB_CACHE``, default ``$HF_HOME/hub``), its offline mode (``HF_HUB_OFFLINE=1``:
only what the cache holds), its ``revision=``, its endpoint (``$HF_ENDPOINT``). These variables
are read when a function is called, not when ``huggingface_hub`` was imported. Nothing is
mocked and nothing bypasses it: a user online downloads exactly what a user offline reads back
from the cache.

Revision selections (``main``, ``step0,step1000``, ``REV=STEP``, ``all``, ``log:K``) and the steps
read from revision names live in :mod:`tangentlab.empirical.loading.revisions` (re-exported here).

The repository's refs are listed online with ``HfApi.list_repo_refs`` (branches and tags) and
offline from the cache's ``refs/`` folder (one file per ref, holding its commit).

When the Hub cannot be reached (no network, a refused connection, a timeout, a proxy refusing,
the Hub answering 5xx: :func:`unreachable`) and ``HF_HUB_OFFLINE`` is unset, the refs come from
the cache's ``refs/`` folder if it holds any (one line on stderr says so, :func:`fallback_note`,
and the revisions then load from the cache); otherwise a :class:`HubConnectionError` says, in one
line, to check the network or set ``HF_HUB_OFFLINE=1`` (the CLI exits 2).

Each :class:`~tangentlab.empirical.loading.trajectory.Checkpoint` records ``repo_id``, ``revision`` and
``commit`` (the snapshot's commit hash).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from tangentlab.empirical.loading.revisions import (
    log_spaced_indices,
    parse_revision_spec,
    parse_step,
    sample_names,
    select_revisions,
)
from tangentlab.errors import CheckpointError, ConfigError, TangentlabError, UnknownNameError

__all__ = ["WEIGHT_PATTERNS", "looks_like_repo_id", "split_model_spec", "parse_step",
           "parse_revision_spec", "hub_cache_dir", "hub_offline", "hub_endpoint", "list_revisions",
           "select_revisions", "log_spaced_indices", "download_revision", "resolve_hub_trajectory",
           # connection failures
           "HubConnectionError", "network_errors", "unreachable", "describe_failure",
           "endpoint_name", "fallback_note", "cannot_list", "cannot_download"]

#: files fetched for a checkpoint: configs, tokenizer files and safetensors weights. ``*.bin``
#: weights are fetched only for a revision that has no safetensors.
WEIGHT_PATTERNS = ("*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "tokenizer*",
                   "vocab*", "merges*")
_BIN_PATTERNS = ("*.json", "pytorch_model*.bin", "*.txt", "*.model", "tokenizer*", "vocab*",
                 "merges*")

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[A-Za-z0-9][\w.\-]*$")


def looks_like_repo_id(text: str) -> bool:
    """Whether ``text`` has the shape of a Hub model id ``ORG/NAME``.

    An ``hf:`` prefix and an ``@REVISIONS`` suffix are allowed. This says nothing about whether the
    model exists.
    """
    t = str(text)
    if t.startswith("hf:"):
        return True
    return bool(_REPO_ID.match(t.split("@", 1)[0]))


def split_model_spec(text: str) -> tuple[str, str | None]:
    """``"ORG/NAME@log:12"`` → ``("ORG/NAME", "log:12")``; ``"hf:gpt2"`` → ``("gpt2", None)``."""
    t = str(text)
    if t.startswith("hf:"):
        t = t[3:]
    repo, _, spec = t.partition("@")
    return repo, (spec or None)


def hub_cache_dir(cache_dir: str | Path | None = None) -> Path:
    """The Hub cache folder in use.

    ``cache_dir`` if given, else ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
    ``huggingface_hub``'s default (read at call time, so a changed environment is honoured).
    """
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def hub_offline(offline: bool | None = None) -> bool:
    """Whether to read only the Hub cache.

    ``offline`` if given; else whether ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set now,
    or was set when ``huggingface_hub`` was imported (it then refuses every request).
    """
    if offline is not None:
        return bool(offline)
    v = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    if v.strip().upper() in {"1", "ON", "YES", "TRUE"}:
        return True
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def hub_endpoint() -> str | None:
    """``$HF_ENDPOINT`` at call time (a mirror, or a local server), else None (the library's)."""
    v = os.environ.get("HF_ENDPOINT", "").strip()
    return v.rstrip("/") or None


def _repo_folder(repo_id: str, cache: Path) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


def _not_cached(repo_id: str, cache: Path) -> UnknownNameError:
    return UnknownNameError(
        f"model id {repo_id!r} is neither a local path nor in the Hub cache {str(cache)!r}, and "
        "offline mode (HF_HUB_OFFLINE=1) forbids downloading it; go online once, or point "
        "HF_HUB_CACHE / HF_HOME at the cache that holds it"
    )


def _cached_refs(repo_id: str, cache: Path) -> list[str]:
    folder = _repo_folder(repo_id, cache)
    refs = folder / "refs"
    if not folder.is_dir():
        raise _not_cached(repo_id, cache)
    if not refs.is_dir():
        return []
    return sorted(str(p.relative_to(refs)) for p in refs.rglob("*") if p.is_file())


def _refs_when_unreachable(repo_id: str, cache: Path, exc: BaseException) -> list[str]:
    """The cached refs of ``repo_id`` (saying so in one line on stderr), else a HubConnectionError.

    The line is a warning, printed even under ``TANGENTLAB_QUIET``: the refs may be stale.
    """
    cached = _cached_refs(repo_id, cache) if _repo_folder(repo_id, cache).is_dir() else []
    if not cached:
        raise cannot_list(repo_id, cache, hub_endpoint(), exc) from None
    print(f"tangentlab: warning: {fallback_note(repo_id, len(cached), cache, hub_endpoint(), exc)}",
          file=sys.stderr, flush=True)
    return cached


def _list_refs(repo_id: str, cache: Path, off: bool, token) -> tuple[list[str], bool]:
    """``(refs, offline)``: offline is True when they came from the cache (asked, or forced)."""
    if off:
        return _cached_refs(repo_id, cache), True
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (
        HFValidationError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
    )

    try:
        refs = HfApi(token=token, endpoint=hub_endpoint()).list_repo_refs(repo_id)
    except OfflineModeIsEnabled:
        return _cached_refs(repo_id, cache), True
    except RepositoryNotFoundError:
        raise UnknownNameError(
            f"model id {repo_id!r} is not a local path and was not found on the Hub (or it is "
            "private or gated: log in with `hf auth login`)"
        ) from None
    except HFValidationError as exc:
        raise UnknownNameError(f"{repo_id!r} is not a valid model id ({_first_line(exc)})") from None
    except Exception as exc:  # no network, refused, timed out, the Hub down: the cache, if it can
        if not unreachable(exc):
            raise
        return _refs_when_unreachable(repo_id, cache, exc), True
    return sorted({r.name for r in list(refs.branches) + list(refs.tags)}), False


def list_revisions(repo_id: str, *, cache_dir: str | Path | None = None,
                   offline: bool | None = None, token: str | bool | None = None) -> list[str]:
    """Every ref (branch and tag) of ``repo_id``.

    Online through ``HfApi.list_repo_refs``, offline from the cache's ``refs/`` folder; online
    with the Hub unreachable, from the cache's ``refs/`` when it holds some (one line on stderr
    says so).

    Raises:
        UnknownNameError: the id is not on the Hub (online) or not in the cache (offline).
        HubConnectionError: the Hub cannot be reached and the cache holds no ref of the id.
    """
    return _list_refs(repo_id, hub_cache_dir(cache_dir), hub_offline(offline), token)[0]


def _first_line(exc: BaseException) -> str:
    s = str(exc).strip()
    return s.splitlines()[0][:200] if s else type(exc).__name__


def _has_weights(folder: Path) -> bool:
    return any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))


def download_revision(repo_id: str, revision: str, *, cache_dir: str | Path | None = None,
                      offline: bool | None = None, token: str | bool | None = None,
                      available: Sequence[str] | None = None) -> tuple[Path, str]:
    """Download one revision with ``snapshot_download``; returns (snapshot dir, commit hash).

    It fetches configs, the tokenizer and safetensors weights (``.bin`` weights only when the
    revision has no safetensors).

    Raises:
        UnknownNameError: unknown model id or revision (the message lists cached/known refs).
        CheckpointError: the snapshot holds no weights or is incomplete.
        HubConnectionError: the Hub cannot be reached and the cache does not hold the revision.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        from huggingface_hub.errors import IncompleteSnapshotError
    except ImportError:  # older huggingface_hub
        IncompleteSnapshotError = LocalEntryNotFoundError  # noqa: N806

    cache = hub_cache_dir(cache_dir)
    off = hub_offline(offline)

    def fetch(patterns) -> Path:
        try:
            return Path(snapshot_download(repo_id, revision=revision, cache_dir=str(cache),
                                          local_files_only=off, allow_patterns=list(patterns),
                                          token=token, endpoint=hub_endpoint()))
        except RevisionNotFoundError:
            known = available if available is not None else _safe_list(repo_id, cache, off, token)
            raise UnknownNameError(
                f"revision {revision!r} of {repo_id!r} does not exist on the Hub; refs: "
                f"{sample_names(known)}"
            ) from None
        except RepositoryNotFoundError:
            raise UnknownNameError(
                f"model id {repo_id!r} is not a local path and was not found on the Hub (or it "
                "is private or gated: log in with `hf auth login`)"
            ) from None
        except HFValidationError as exc:
            raise UnknownNameError(f"{repo_id!r} is not a valid model id ({_first_line(exc)})") from None
        except IncompleteSnapshotError as exc:
            raise CheckpointError(
                f"the cached snapshot of {repo_id}@{revision} is incomplete ({_first_line(exc)})"
            ) from None
        except LocalEntryNotFoundError as exc:
            if not off and unreachable(exc):
                raise _cannot_download(repo_id, revision, cache, exc) from None
            if not _repo_folder(repo_id, cache).is_dir():
                raise _not_cached(repo_id, cache) from None
            raise UnknownNameError(
                f"revision {revision!r} of {repo_id!r} is not in the Hub cache {str(cache)!r}"
                f"{' (offline mode)' if off else ''}; cached refs: "
                f"{sample_names(_cached_refs(repo_id, cache))}"
            ) from None
        except Exception as exc:  # a connection lost mid-download, a proxy refusing, ...
            if off or not unreachable(exc):
                raise
            raise _cannot_download(repo_id, revision, cache, exc) from None

    if off and not _repo_folder(repo_id, cache).is_dir():
        raise _not_cached(repo_id, cache)
    folder = fetch(WEIGHT_PATTERNS)
    if not _has_weights(folder) and not off:
        folder = fetch(_BIN_PATTERNS)
    if not _has_weights(folder):
        raise CheckpointError(
            f"{repo_id}@{revision} ({str(folder)!r}) holds no weights (*.safetensors or *.bin)"
        )
    commit = folder.name if folder.parent.name == "snapshots" else ""
    return folder, commit


def _cannot_download(repo_id: str, revision: str, cache: Path,
                     exc: BaseException) -> HubConnectionError:
    held = (sample_names(_cached_refs(repo_id, cache)) if _repo_folder(repo_id, cache).is_dir()
            else None)
    return cannot_download(repo_id, revision, cache, hub_endpoint(), exc, held)


def _safe_list(repo_id, cache, off, token) -> list[str]:
    try:
        return list_revisions(repo_id, cache_dir=cache, offline=off, token=token)
    except Exception:  # only used to enrich an error message
        return []


def resolve_hub_trajectory(repo_id: str, revisions: str | Sequence[str] | None = None, *,
                           steps: Sequence[int] | None = None,
                           cache_dir: str | Path | None = None, offline: bool | None = None,
                           token: str | bool | None = None):
    """Resolve a Hub model id and a revision selection into a trajectory.

    The result is a :class:`~tangentlab.empirical.loading.trajectory.Trajectory` of snapshot directories.

    Args:
        repo_id: ``ORG/NAME`` (``hf:`` prefix and ``@SPEC`` suffix accepted).
        revisions: see :func:`parse_revision_spec` (default ``main``).
        steps: optional explicit steps, one per listed revision.
        cache_dir: the Hub cache (default: :func:`hub_cache_dir`).
        offline: read only the cache (default: ``HF_HUB_OFFLINE``).
        token: a Hub token for gated or private repositories (``huggingface_hub``'s convention).

    Raises:
        UnknownNameError: unknown id or revision; CheckpointError: unreadable steps, missing
            weights, or revisions of different architectures; HubConnectionError: the Hub
            cannot be reached and the cache cannot stand in for it.
    """
    from tangentlab.empirical.loading.checkpoints import (
        Checkpoint,
        Trajectory,
        check_same_architecture,
    )

    repo, inline = split_model_spec(repo_id)
    if inline is not None:
        if revisions is not None:
            raise ConfigError(
                f"{repo_id!r} already selects revisions after '@'; do not also pass revisions="
            )
        revisions = inline
    if not looks_like_repo_id(repo) and "/" in repo:
        raise UnknownNameError(f"{repo!r} is not a valid model id; write ORG/NAME")
    mode, _ = parse_revision_spec(revisions)
    off = hub_offline(offline)
    cache = hub_cache_dir(cache_dir)
    available: list[str] = []
    if mode != "list" or off:  # an unreachable Hub whose refs are cached: read the cache only
        available, off = _list_refs(repo, cache, off, token)
    picked = select_revisions(available if mode != "list" else [], revisions, steps=steps,
                              repo_id=repo)
    cks = []
    for rev, step in picked:
        folder, commit = download_revision(repo, rev, cache_dir=cache, offline=off, token=token,
                                           available=available or None)
        cks.append(Checkpoint(path=folder, name=rev, step=step, repo_id=repo, revision=rev,
                              commit=commit))
    check_same_architecture(cks, repo)
    return Trajectory(cks, model_name=repo, source="hub")


# -- connection failures: how to recognise them, what to say -------------------------------------

_HINT = "check the network (or HF_ENDPOINT), or set HF_HUB_OFFLINE=1"


class HubConnectionError(TangentlabError, ConnectionError):
    """The Hub could not be reached, and the Hub cache cannot stand in for it.

    The message names the endpoint, the failure and the ways out (the network, ``HF_ENDPOINT``,
    or ``HF_HUB_OFFLINE=1`` with a cache that holds the model). The CLI exits 2.
    """


def network_errors() -> tuple[type[BaseException], ...]:
    """The exception types a failed connection raises through ``huggingface_hub``'s HTTP client.

    The built-in ``ConnectionError`` and ``TimeoutError`` (socket errors), and the transport
    errors of whichever HTTP library is already imported (``httpx2``/``httpx`` for
    huggingface_hub >= 1, ``requests`` before). Nothing is imported here.
    """
    types: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for mod, names in (("httpx2", ("TransportError",)), ("httpx", ("TransportError",)),
                       ("requests", ("ConnectionError", "Timeout"))):
        m = sys.modules.get(mod)
        if m is None:
            continue
        types += [t for t in (getattr(m, n, None) for n in names) if isinstance(t, type)]
    return tuple(types)


def unreachable(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an exception that caused it, means the Hub could not be reached.

    True for a connection error or timeout of the HTTP client, and for an HTTP answer of 500 or
    more (the Hub is down); False for anything else (an unknown repository, a bad token, ...).
    """
    kinds = network_errors()
    for _ in range(6):
        if exc is None:
            return False
        if isinstance(exc, kinds):
            return True
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if isinstance(status, int) and status >= 500:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def describe_failure(exc: BaseException) -> str:
    """``"ConnectError: [Errno 111] Connection refused"``: the innermost network error of ``exc``."""
    kinds = network_errors()
    for _ in range(6):
        if isinstance(exc, kinds) or exc.__cause__ is None:
            break
        exc = exc.__cause__
    return f"{type(exc).__name__}: {_first_line(exc)}"


def endpoint_name(endpoint: str | None) -> str:
    """``endpoint`` (``$HF_ENDPOINT``), else the endpoint ``huggingface_hub`` uses."""
    if endpoint:
        return endpoint
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def fallback_note(repo_id: str, n_refs: int, cache: Path, endpoint: str | None,
                  exc: BaseException) -> str:
    """The one stderr line printed when the cache's refs stand in for an unreachable Hub."""
    return (f"cannot reach the Hub at {endpoint_name(endpoint)} ({describe_failure(exc)}); using "
            f"the {n_refs} refs of {repo_id} in the Hub cache {str(cache)!r} (set HF_HUB_OFFLINE=1 "
            "to skip the network)")


def cannot_list(repo_id: str, cache: Path, endpoint: str | None,
                exc: BaseException) -> HubConnectionError:
    """The error when the refs of ``repo_id`` can be had neither from the Hub nor the cache."""
    return HubConnectionError(
        f"cannot reach the Hub at {endpoint_name(endpoint)} to list the refs of {repo_id!r} "
        f"({describe_failure(exc)}), and the Hub cache {str(cache)!r} holds none of them; "
        f"{_HINT} with HF_HUB_CACHE / HF_HOME pointing at a cache that holds the model"
    )


def cannot_download(repo_id: str, revision: str, cache: Path, endpoint: str | None,
                    exc: BaseException, cached_refs: str | None) -> HubConnectionError:
    """The error when revision ``revision`` can be had neither from the Hub nor the cache.

    ``cached_refs``: the refs the cache holds, as text (None when it holds no folder of the id).
    """
    held = (f"does not hold that revision (cached refs: {cached_refs})" if cached_refs is not None
            else f"holds nothing of {repo_id!r}")
    return HubConnectionError(
        f"cannot reach the Hub at {endpoint_name(endpoint)} to download {repo_id}@{revision} "
        f"({describe_failure(exc)}), and the Hub cache {str(cache)!r} {held}; {_HINT} and pick "
        "a cached revision"
    )
