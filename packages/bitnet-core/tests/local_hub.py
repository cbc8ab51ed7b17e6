"""A Hugging Face Hub on loopback for tests: the endpoints huggingface_hub calls, over real HTTP.

Serves repos held in memory with the hub's layout and headers:

- ``GET /api/models/ORG/NAME[/revision/REV]``: model info (``id``, ``sha``, ``siblings``);
- ``GET /api/models/ORG/NAME/tree/REV[/PATH]``: the file listing (``snapshot_download``);
- ``HEAD|GET /ORG/NAME/resolve/REV/FILE``: the file, with ``X-Repo-Commit``, ``ETag``,
  ``Content-Length``, ``Accept-Ranges`` and ``Range`` requests (206 + ``Content-Range``);
- 404s with the ``X-Error-Code`` huggingface_hub maps to its errors (``RepoNotFound``,
  ``RevisionNotFound``, ``EntryNotFound``), and 401 ``RepoNotFound`` for a private repo
  without the right ``Authorization: Bearer`` token;
- ``drop_once[file] = n``: the next GET of ``file`` sends ``n`` bytes and closes the
  connection, as a network failure would.

Every request is logged (method, path, headers) so tests can count downloads.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


@dataclass
class Repo:
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # sha -> files
    refs: dict[str, str] = field(default_factory=dict)  # branch/tag -> sha
    token: str | None = None  # private: this bearer token is needed


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names in lower case


class LocalHub:
    """``with LocalHub() as hub: hub.add(...); os.environ["HF_ENDPOINT"] = hub.url``."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[Request] = []
        self.drop_once: dict[str, int] = {}  # file -> bytes sent before the connection drops
        self._lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                hub._serve(self, body=False)

            def do_GET(self) -> None:
                hub._serve(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LocalHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(
        self,
        repo_id: str,
        files: dict[str, bytes],
        *,
        branch: str = "main",
        tags: tuple[str, ...] = (),
        token: str | None = None,
    ) -> str:
        """Commit ``files`` (the whole tree) to ``repo_id`` on ``branch``; return the commit sha."""
        h = hashlib.sha1(repo_id.encode())
        for name in sorted(files):
            h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
        repo = self.repos.setdefault(repo_id, Repo())
        h.update(str(len(repo.commits)).encode())
        sha = h.hexdigest()
        repo.commits[sha] = dict(files)
        repo.refs[branch] = sha
        for t in tags:
            repo.refs[t] = sha
        repo.token = token
        return sha

    def count(self, method: str, fragment: str) -> int:
        """How many ``method`` requests had ``fragment`` in their path."""
        with self._lock:
            return sum(1 for r in self.requests if r.method == method and fragment in r.path)

    # --- serving -------------------------------------------------------------

    def _serve(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        path = urlsplit(h.path).path
        with self._lock:
            self.requests.append(
                Request(h.command, path, {k.lower(): v for k, v in h.headers.items()})
            )
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            self._api(h, parts[2] + "/" + parts[3], parts[4:], body)
        elif len(parts) >= 5 and parts[2] == "resolve":
            self._resolve(h, parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]), body)
        else:
            self._error(h, 404, "RepoNotFound", "not a hub endpoint")

    def _lookup(
        self, h: BaseHTTPRequestHandler, repo_id: str, rev: str
    ) -> tuple[str, dict[str, bytes]] | None:
        repo = self.repos.get(repo_id)
        auth = h.headers.get("Authorization", "")
        if repo is None or (repo.token and auth != f"Bearer {repo.token}"):
            self._error(h, 401, "RepoNotFound", "Repository not found")
            return None
        sha = repo.refs.get(rev, rev if rev in repo.commits else None)
        if sha is None:
            self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return None
        return sha, repo.commits[sha]

    def _api(self, h: BaseHTTPRequestHandler, repo_id: str, rest: list[str], body: bool) -> None:
        if not rest or rest[0] == "revision":
            rev = rest[1] if len(rest) > 1 else "main"
            found = self._lookup(h, repo_id, rev)
            if found:
                sha, files = found
                info = {
                    "id": repo_id,
                    "modelId": repo_id,
                    "sha": sha,
                    "private": False,
                    "siblings": [{"rfilename": f} for f in sorted(files)],
                }
                self._json(h, info, body)
        elif rest[0] == "tree" and len(rest) >= 2:
            found = self._lookup(h, repo_id, rest[1])
            if found:
                prefix = "/".join(rest[2:])
                _, files = found
                tree = [
                    {
                        "type": "file",
                        "path": f,
                        "size": len(data),
                        "oid": hashlib.sha1(data).hexdigest(),
                    }
                    for f, data in sorted(files.items())
                    if not prefix or f.startswith(prefix + "/")
                ]
                self._json(h, tree, body)
        else:
            self._error(h, 404, None, "unknown API route")

    def _resolve(
        self, h: BaseHTTPRequestHandler, repo_id: str, rev: str, filename: str, body: bool
    ) -> None:
        found = self._lookup(h, repo_id, rev)
        if not found:
            return
        sha, files = found
        if filename not in files:
            self._error(h, 404, "EntryNotFound", f"{filename} does not exist", commit=sha)
            return
        data = files[filename]
        start, status = 0, 200
        rng = h.headers.get("Range")
        if rng and rng.startswith("bytes=") and body:
            first = rng[len("bytes=") :].split("-")[0]
            start = min(int(first or 0), len(data))
            status = 206
        h.send_response(status)
        h.send_header("X-Repo-Commit", sha)
        h.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        h.send_header("Accept-Ranges", "bytes")
        h.send_header("Content-Type", "application/octet-stream")
        h.send_header("Content-Length", str(len(data) - start))
        if status == 206:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.end_headers()
        if not body:
            return
        with self._lock:
            cut = self.drop_once.pop(filename, None)
        if cut is not None and status == 200:  # a network failure mid-download
            h.wfile.write(data[:cut])
            h.wfile.flush()
            h.close_connection = True
            return
        h.wfile.write(data[start:])

    def _json(self, h: BaseHTTPRequestHandler, obj: object, body: bool) -> None:
        data = json.dumps(obj).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if body:
            h.wfile.write(data)

    def _error(
        self,
        h: BaseHTTPRequestHandler,
        status: int,
        code: str | None,
        message: str,
        commit: str | None = None,
    ) -> None:
        data = json.dumps({"error": message}).encode()
        h.send_response(status)
        if code:
            h.send_header("X-Error-Code", code)
        h.send_header("X-Error-Message", message)
        if commit:
            h.send_header("X-Repo-Commit", commit)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)
