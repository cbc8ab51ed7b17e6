"""Run the server in a background thread on a free loopback port (tests, tools, notebooks)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class LiveServer:
    """``with LiveServer(app) as live: ... live.url``: uvicorn serving ``app`` until the block ends."""

    def __init__(
        self, app: Any, host: str = "127.0.0.1", port: int | None = None, timeout: float = 30
    ) -> None:
        import uvicorn

        self.host, self.port, self.timeout = host, port or free_port(host), timeout
        self.server = uvicorn.Server(
            uvicorn.Config(app, host=host, port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, name="bitnet-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> LiveServer:
        self.thread.start()
        deadline = time.time() + self.timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.time() > deadline:
                raise RuntimeError(f"the server did not start on {self.url}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
