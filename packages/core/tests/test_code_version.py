"""code_version(): a package's version plus a digest of its sources, so that results of other code never match."""

import sys

import ember_core
from ember_core import Graph, code_version
from ember_core.caches._code_version import _versions


def make_package(root, name: str, body: str) -> None:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").write_text(f'__version__ = "1.2.3"\n{body}\n')


def test_it_is_the_version_and_a_digest_of_the_sources(tmp_path, monkeypatch):
    make_package(tmp_path, "cv_pkg_a", "X = 1")
    monkeypatch.syspath_prepend(str(tmp_path))
    version = code_version("cv_pkg_a")
    assert version.startswith("1.2.3+") and len(version.split("+")[1]) == 16


def test_an_edit_with_the_same_version_changes_it(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    make_package(tmp_path / "one", "cv_pkg_b", "X = 1")
    make_package(tmp_path / "two", "cv_pkg_b", "X = 2")
    monkeypatch.syspath_prepend(str(tmp_path / "one"))
    first = code_version("cv_pkg_b")
    del sys.modules["cv_pkg_b"], _versions["cv_pkg_b"]
    monkeypatch.syspath_prepend(str(tmp_path / "two"))
    assert code_version("cv_pkg_b") != first


def test_a_module_an_object_or_a_submodule_name_gives_their_top_level_package():
    want = code_version("ember_core")
    assert code_version(ember_core) == code_version(Graph) == code_version("ember_core.graph._schema") == want
    assert code_version(Graph(name="g")) == want
