"""The secret that a team's machines sign shared cache entries with: `EMBER_CACHE_KEY` (the secret itself) or
`EMBER_CACHE_KEY_FILE` (a file holding it).

A local cache is signed with a key only its user can read (`_root.signing_key`). A shared cache (a Redis server,
an artifact shipped with a model) is written by many machines, so the key that makes an entry trustworthy there is
one the user gave every machine they trust. Code from a shared cache (a C++ library, a Triton module) is used only
when it carries a valid signature of this key; without one configured, only entries that are parsed, never run,
travel (see `_remote`, `_artifacts`).

The file must be a regular file of the user's that no other user may read or write; the secret is at least
`MIN_BYTES` bytes (surrounding whitespace is dropped). A problem is a `TeamKeyError` naming it: a key the user meant
to set and that cannot be used is an error, not a silent downgrade.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from .._errors import EmberError
from .._regular_file import FileRefused, read_at_most, regular_file

MIN_BYTES = 16
MAX_BYTES = 4096


class TeamKeyError(EmberError):
    """EMBER_CACHE_KEY or EMBER_CACHE_KEY_FILE is set but cannot be used."""


@dataclass(frozen=True)
class TeamKey:
    secret: bytes
    origin: str  # "EMBER_CACHE_KEY" or the file's path, for messages

    @property
    def id(self) -> str:
        """A public name of the key (16 hex digits), recorded beside each signature so that a mismatch can say
        "signed with another key"; it reveals nothing of the secret."""
        return hashlib.sha256(b"ember team key\0" + self.secret).hexdigest()[:16]


def team_key() -> TeamKey | None:
    """The configured key, None when neither variable is set; TeamKeyError when one is set and unusable."""
    value, path = os.environ.get("EMBER_CACHE_KEY"), os.environ.get("EMBER_CACHE_KEY_FILE")
    if value and path:
        raise TeamKeyError("both EMBER_CACHE_KEY and EMBER_CACHE_KEY_FILE are set; set one")
    if value:
        return TeamKey(_checked(value.strip().encode(), "EMBER_CACHE_KEY"), "EMBER_CACHE_KEY")
    if path:
        return TeamKey(_checked(_read_secret(path).strip(), f"EMBER_CACHE_KEY_FILE {path}"), path)
    return None


def _read_secret(path: str) -> bytes:
    try:
        with regular_file(path) as (fd, st):
            if st.st_uid != os.getuid():
                raise TeamKeyError(f"EMBER_CACHE_KEY_FILE {path} is owned by uid {st.st_uid}, not by this user")
            if st.st_mode & 0o077:
                raise TeamKeyError(f"EMBER_CACHE_KEY_FILE {path} has mode {oct(st.st_mode & 0o777)}: other users "
                                   "may read or write it (chmod 600)")
            data = read_at_most(fd, MAX_BYTES + 1)
    except FileRefused as e:
        raise TeamKeyError(f"EMBER_CACHE_KEY_FILE {path}: {e}") from None
    if len(data) > MAX_BYTES:
        raise TeamKeyError(f"EMBER_CACHE_KEY_FILE {path} holds more than {MAX_BYTES} bytes")
    return data


def _checked(secret: bytes, where: str) -> bytes:
    if len(secret) < MIN_BYTES:
        raise TeamKeyError(f"{where} is {len(secret)} bytes; a signing secret needs at least {MIN_BYTES} "
                           "(for example: python -c 'import secrets; print(secrets.token_hex(32))')")
    return secret
