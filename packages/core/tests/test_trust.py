"""Who could have written a cache file: the root, the directories above it and the file itself are checked for
owner and mode on what was opened; a root others may write to is refused for a temporary cache, with a warning."""

from __future__ import annotations

import logging
import os
import tempfile

import pytest
from ember_core import DiskCache
from ember_core.caches import _directory as _cache_dir
from ember_core.caches._trust import Untrusted, _private_group, open_directory, open_file, unsafe_root
from ember_core.testing import restamp

as_root = pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
NOBODY = 65534


@pytest.fixture
def base(tmp_path, monkeypatch):
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setattr(_cache_dir, "_swept_temp", True)
    _cache_dir.forget_opened()
    yield tmp_path
    _cache_dir.forget_opened()


def use_root(root, monkeypatch) -> DiskCache:
    monkeypatch.setenv("EMBER_CACHE_DIR", str(root))
    _cache_dir.forget_opened()
    return DiskCache("unit", ("so", "src"), loaded=("so",))


def stored(cache: DiskCache) -> None:
    cache.store("k1", {"so": b"library bytes", "src": b"source"}, {"source_sha256": "k1"})


def shared_group(path) -> None:
    """Give path a group other users are in (as root; other users cannot)."""
    if os.getuid() != 0:
        pytest.skip("giving a folder to another group needs root")
    os.chown(path, -1, NOBODY)


@pytest.mark.parametrize("mode, group", [(0o777, "own"), (0o775, "shared"), (0o757, "own"), (0o1777, "own")])
def test_a_root_group_or_others_may_write_to_is_refused_for_a_temporary_cache(base, monkeypatch, caplog, mode,
                                                                               group):
    root = base / "root"
    root.mkdir()
    root.chmod(mode)
    if group == "shared":
        shared_group(root)
    cache = use_root(root, monkeypatch)
    with caplog.at_level(logging.WARNING, logger="ember.cache"):
        directory = cache.directory
    assert directory.parent == base / "tmp" and not (root / "unit").exists()
    assert f"ember cache root {root} is not safe to use" in caplog.text and "other users may write" in caplog.text
    stored(cache)
    assert cache.lookup("k1").hit  # the temporary cache works as any other


def test_a_root_only_the_users_private_group_may_write_to_is_used(base, monkeypatch):
    if not _private_group(os.getgid()):
        pytest.skip("this user's primary group is not a private group")
    root = base / "root"
    root.mkdir()
    root.chmod(0o775)  # umask 002, with a group of the user's own
    assert unsafe_root(root) is None and use_root(root, monkeypatch).directory == root / "unit"


def test_a_root_below_a_folder_others_may_rename_in_is_refused_and_below_a_sticky_one_is_not(base, monkeypatch):
    shared = base / "shared"
    (shared / "root").mkdir(parents=True, mode=0o700)
    shared.chmod(0o777)
    assert "above it" in unsafe_root(shared / "root")
    shared.chmod(0o1777)  # /tmp: others may add names, not rename ours
    assert unsafe_root(shared / "root") is None
    assert use_root(shared / "root", monkeypatch).directory == shared / "root" / "unit"


@as_root
def test_a_root_another_user_owns_is_refused(base, monkeypatch):
    root = base / "root"
    root.mkdir(mode=0o755)
    os.chown(root, NOBODY, NOBODY)
    assert "owned by uid 65534" in unsafe_root(root)
    assert use_root(root, monkeypatch).directory.parent == base / "tmp"


@as_root
def test_an_entry_file_another_user_owns_is_refused_and_removed_even_signed(base, monkeypatch):
    cache = use_root(base / "root", monkeypatch)
    stored(cache)
    restamp(cache.path("k1", "so"), b"their library")  # consistent, signed: only the owner tells
    os.chown(cache.path("k1", "so"), NOBODY, NOBODY)
    found = cache.lookup("k1")
    assert not found.hit and "owned by uid 65534" in found.reason and not cache.path("k1", "so").exists()


@pytest.mark.parametrize("mode, group", [(0o664, "shared"), (0o646, "own")])
def test_an_entry_file_group_or_others_may_write_is_refused(base, monkeypatch, mode, group):
    cache = use_root(base / "root", monkeypatch)
    stored(cache)
    cache.path("k1", "src").chmod(mode)
    if group == "shared":
        shared_group(cache.path("k1", "src"))
    found = cache.lookup("k1")
    assert not found.hit and "other users may write" in found.reason


def test_what_a_lookup_hands_over_is_what_it_verified(base, monkeypatch):
    cache = use_root(base / "root", monkeypatch)
    stored(cache)
    found = cache.lookup("k1")
    swapped = cache.path("k1", "so").with_name("other")
    swapped.write_bytes(b"swapped in after the check")
    swapped.replace(cache.path("k1", "so"))
    assert found.data == {"src": b"source"} and set(found.opened) == {"so"}
    assert os.pread(found.opened["so"].fd, 100, 0) == b"library bytes"
    with open(found.opened["so"].loadable, "rb") as f:
        assert f.read() == b"library bytes"


def test_open_file_refuses_symlinks_and_fifos(base):
    folder = base / "folder"
    folder.mkdir(mode=0o700)
    (folder / "real").write_bytes(b"x")
    (folder / "link").symlink_to(folder / "real")
    os.mkfifo(folder / "fifo")
    fd = open_directory(folder)
    try:
        with pytest.raises(OSError):
            open_file(fd, "link")
        with pytest.raises(Untrusted, match="not a regular file"):
            open_file(fd, "fifo")
        os.close(open_file(fd, "real"))
    finally:
        os.close(fd)


def test_a_signing_key_others_may_read_is_not_used(base, monkeypatch, caplog):
    cache = use_root(base / "root", monkeypatch)
    stored(cache)
    (base / "root" / "signing.key").chmod(0o644)
    _cache_dir.forget_opened()
    with caplog.at_level(logging.WARNING, logger="ember.cache"):
        found = cache.lookup("k1")
    assert not found.hit and "other users may read it" in caplog.text
