"""Redis as a blob store for the remote cache, through the `redis` client library (the `ember-core[redis]` extra:
a maintained client that speaks the protocol, TLS and authentication, which hand-written socket code would not).

Every call has a bounded timeout (connect and each command: the remote cache's timeout) and no retries; any error
of the client is `BackendUnavailable`. Entries are written with a time to live (`EMBER_REMOTE_CACHE_TTL` seconds,
default 30 days; 0 for none); the server's own eviction policy (`maxmemory-policy allkeys-lru`) bounds its memory.
"""

from __future__ import annotations

import os

from ._backends import BackendUnavailable

DEFAULT_TTL = 30 * 24 * 3600


class RedisBlobs:
    def __init__(self, url: str, timeout: float):
        try:
            import redis
        except ImportError as e:
            raise ImportError("the redis client library is not installed (pip install 'ember-core[redis]')") from e
        self._errors = (redis.RedisError, OSError)
        try:
            self.client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                               retry_on_timeout=False, retry=None)
        except ValueError as e:
            raise ValueError(f"not a Redis URL: {e}") from None
        self.ttl = int(os.environ.get("EMBER_REMOTE_CACHE_TTL", DEFAULT_TTL))

    def get(self, name: str) -> bytes | None:
        try:
            return self.client.get(name)
        except self._errors as e:
            raise BackendUnavailable(f"{type(e).__name__}: {e}") from None

    def put(self, name: str, data: bytes) -> None:
        try:
            self.client.set(name, data, ex=self.ttl if self.ttl > 0 else None)
        except self._errors as e:
            raise BackendUnavailable(f"{type(e).__name__}: {e}") from None

    def close(self) -> None:
        try:
            self.client.close()
        except self._errors:
            pass
