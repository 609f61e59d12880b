"""Connection failures on the way to the Hugging Face Hub: how to recognise them, what to say.

:mod:`tangentlab.empirical.hub` asks the Hub for a repository's refs and snapshots. When the Hub
cannot be reached (no network, a refused connection, a timeout, a proxy refusing, the Hub
answering 5xx) and ``HF_HUB_OFFLINE`` is unset, it reads the cache instead when the cache holds
what is needed (:func:`fallback_note` is the one line it prints), and otherwise raises a
:class:`HubConnectionError` whose one line names ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tangentlab.errors import TangentlabError

__all__ = [
    "HubConnectionError",
    "network_errors",
    "unreachable",
    "describe_failure",
    "endpoint_name",
    "fallback_note",
    "cannot_list",
    "cannot_download",
]

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


def _first_line(exc: BaseException) -> str:
    s = str(exc).strip()
    return s.splitlines()[0][:200] if s else type(exc).__name__


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
