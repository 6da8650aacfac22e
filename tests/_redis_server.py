"""A real Redis server for the remote-cache tests: Debian's `redis-server`, started on 127.0.0.1 on a free port,
with no persistence, stopped after.

`.ci/run` installs the package and sets EMBER_REQUIRE_REDIS=1: a missing `redis-server` (or `redis` client) then
fails the tests that need one instead of skipping them, so CI cannot pass having tested nothing remote.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time

import pytest


def need(what: str) -> None:
    message = f"{what} (on Debian: apt-get install redis-server; pip install 'ember-core[redis]')"
    if os.environ.get("EMBER_REQUIRE_REDIS") == "1":
        pytest.fail(message + "; EMBER_REQUIRE_REDIS=1 requires it")
    pytest.skip(message)


class RedisServer:
    def __init__(self, folder):
        if shutil.which("redis-server") is None:
            need("no redis-server on PATH")
        try:
            import redis
        except ImportError:
            need("the redis client library is not installed")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--dir", str(folder), "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client = redis.Redis.from_url(self.url, socket_timeout=5)
        deadline = time.monotonic() + 20
        while True:
            try:
                self.client.ping()
                break
            except redis.RedisError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    pytest.fail(f"redis-server on port {self.port} did not start")
                time.sleep(0.05)

    def keys(self) -> list[bytes]:
        return sorted(self.client.keys("ember:*"))

    def pause(self) -> None:
        """Freeze the server: connections are accepted by the kernel, nothing answers (a slow server)."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
        self.process.wait(timeout=10)
