"""A minimal Hugging Face Hub API on the loopback address, serving a local Hub cache read-only.

It answers the requests ``huggingface_hub`` makes for ``list_repo_refs``, ``repo_info`` (by
revision), ``list_repo_tree`` and file downloads (``HEAD``/``GET .../resolve/<commit>/<path>``),
with the ``X-Error-Code`` headers the client turns into ``RepositoryNotFoundError`` and
``RevisionNotFoundError``. Started and stopped by the tests; binds 127.0.0.1 only.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

_REPO = r"(?P<repo>[^/]+/[^/]+)"


class _Handler(BaseHTTPRequestHandler):
    cache: Path
    requests: list

    def log_message(self, *args) -> None:  # quiet
        pass

    def _repo_dir(self, repo: str) -> Path | None:
        d = self.cache / ("models--" + repo.replace("/", "--"))
        return d if d.is_dir() else None

    def _refs(self, d: Path) -> dict[str, str]:
        refs = d / "refs"
        return {str(p.relative_to(refs)): p.read_text().strip() for p in refs.rglob("*")
                if p.is_file()}

    def _send(self, code: int, body: bytes = b"", headers: dict | None = None,
              ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, obj, headers=None) -> None:
        self._send(200, json.dumps(obj).encode(), headers)

    def _error(self, code: str) -> None:
        self._send(404, json.dumps({"error": code}).encode(), {"X-Error-Code": code})

    def _resolve(self, d: Path, rev: str) -> str | None:
        if re.fullmatch(r"[0-9a-f]{40}", rev) and (d / "snapshots" / rev).is_dir():
            return rev
        return self._refs(d).get(rev)

    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        url = urlparse(self.path)
        path = unquote(url.path)
        self.requests.append((self.command, path))
        m = re.fullmatch(rf"/api/models/{_REPO}(?P<rest>/.*)?", path)
        if m:
            d = self._repo_dir(m["repo"])
            if d is None:
                return self._error("RepoNotFound")
            rest = m["rest"] or ""
            if rest == "/refs":
                branches = [{"name": n, "ref": f"refs/heads/{n}", "targetCommit": c}
                            for n, c in sorted(self._refs(d).items())]
                return self._json({"branches": branches, "tags": [], "converts": []})
            r = re.fullmatch(r"/revision/(?P<rev>.+)", rest)
            if r:
                commit = self._resolve(d, r["rev"])
                if commit is None:
                    return self._error("RevisionNotFound")
                files = [p for p in (d / "snapshots" / commit).rglob("*") if p.is_file()]
                sib = [{"rfilename": str(p.relative_to(d / "snapshots" / commit))} for p in files]
                return self._json({"id": m["repo"], "modelId": m["repo"], "sha": commit,
                                   "siblings": sib, "private": False})
            t = re.fullmatch(r"/tree/(?P<rev>[^/]+)(?P<sub>/.*)?", rest)
            if t:
                commit = self._resolve(d, t["rev"])
                if commit is None:
                    return self._error("RevisionNotFound")
                snap = d / "snapshots" / commit
                out = []
                for p in sorted(snap.rglob("*")):
                    if p.is_file():
                        data = p.read_bytes()
                        out.append({"type": "file", "path": str(p.relative_to(snap)),
                                    "size": len(data), "oid": hashlib.sha1(data).hexdigest()})
                return self._json(out)
            return self._error("EntryNotFound")
        m = re.fullmatch(rf"/{_REPO}/resolve/(?P<rev>[^/]+)/(?P<file>.+)", path)
        if m:
            d = self._repo_dir(m["repo"])
            if d is None:
                return self._error("RepoNotFound")
            commit = self._resolve(d, m["rev"])
            if commit is None:
                return self._error("RevisionNotFound")
            f = d / "snapshots" / commit / m["file"]
            if not f.is_file():
                return self._error("EntryNotFound")
            data = f.read_bytes()
            etag = '"' + hashlib.sha256(data).hexdigest() + '"'
            return self._send(200, data, {"X-Repo-Commit": commit, "ETag": etag},
                              ctype="application/octet-stream")
        self._send(404, b"{}")


class HubServer:
    """``with HubServer(cache) as url:`` serves ``cache`` at ``url`` (``http://127.0.0.1:PORT``)."""

    def __init__(self, cache: Path):
        handler = type("Handler", (_Handler,), {"cache": Path(cache), "requests": []})
        self.requests = handler.requests
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self._thread.start()
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
