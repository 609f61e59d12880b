"""What counts as an unreachable Hub, and the one-line messages that say so (the connection
failures of :mod:`tangentlab.empirical.loading.hub`)."""

from __future__ import annotations

from pathlib import Path

from tangentlab.empirical.loading.hub import (
    HubConnectionError,
    cannot_download,
    cannot_list,
    describe_failure,
    fallback_note,
    unreachable,
)
from tangentlab.errors import TangentlabError


class _Answer(Exception):
    def __init__(self, status: int):
        super().__init__(f"HTTP {status}")
        self.response = type("R", (), {"status_code": status})()


def _chained(outer: BaseException, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as e:
            raise outer from e
    except BaseException as e:
        return e


def test_unreachable_means_a_connection_failure_or_a_hub_down():
    import httpx2  # huggingface_hub's HTTP client here
    from huggingface_hub.errors import LocalEntryNotFoundError

    refused = httpx2.ConnectError("[Errno 111] Connection refused")
    assert unreachable(refused) and unreachable(ConnectionRefusedError()) and unreachable(TimeoutError())
    assert unreachable(httpx2.ReadTimeout("timed out"))
    assert unreachable(_Answer(503)) and not unreachable(_Answer(404))
    assert not unreachable(ValueError("bad")) and not unreachable(None)
    # snapshot_download wraps the cause: it is found through the chain
    wrapped = _chained(LocalEntryNotFoundError("cannot find the snapshot"), refused)
    assert unreachable(wrapped)
    assert describe_failure(wrapped) == "ConnectError: [Errno 111] Connection refused"
    assert not unreachable(LocalEntryNotFoundError("offline and not cached"))


def test_messages_are_one_typed_line_naming_hf_hub_offline():
    exc = ConnectionRefusedError(111, "Connection refused")
    cache = Path("/cache/hub")
    errs = [cannot_list("org/name", cache, "http://127.0.0.1:9", exc),
            cannot_download("org/name", "step5", cache, "http://127.0.0.1:9", exc, "main, step0"),
            cannot_download("org/name", "main", cache, None, exc, None)]
    for err in errs:
        assert isinstance(err, HubConnectionError) and isinstance(err, TangentlabError)
        assert isinstance(err, ConnectionError) and err.exit_code == 2
        msg = str(err)
        assert "HF_HUB_OFFLINE=1" in msg and "org/name" in msg and "\n" not in msg
    assert "http://127.0.0.1:9" in str(errs[0]) and "cached refs: main, step0" in str(errs[1])
    assert "holds nothing of 'org/name'" in str(errs[2])
    from huggingface_hub import constants

    assert constants.ENDPOINT in str(errs[2])  # the library's endpoint when none is given
    note = fallback_note("org/name", 3, cache, "http://127.0.0.1:9", exc)
    assert "3 refs of org/name" in note and "HF_HUB_OFFLINE=1" in note and "\n" not in note
