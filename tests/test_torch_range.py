"""The torch range ember declares is the range CI tests: every package declares the same lowest torch (`torch>=`),
and it is the torch that the `lowest` nox session installs and `./dev test` runs."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tools_packages():
    spec = importlib.util.spec_from_file_location("tools_packages", ROOT / "tools" / "packages.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def noxfile_constant(name: str) -> object:
    for node in ast.parse((ROOT / "noxfile.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"noxfile.py defines no {name}")


def test_every_package_declares_the_lowest_torch_that_ci_tests():
    lowest = {}
    for folder, package in tools_packages().load().items():
        pins = [m.group(1) for r in package.requires if (m := re.fullmatch(r"torch\s*>=\s*([0-9.]+)", r.strip()))]
        assert len(pins) == 1, f"packages/{folder} should declare torch as `torch>=X.Y`: {package.requires}"
        lowest[folder] = pins[0]
    assert len(set(lowest.values())) == 1, f"the packages declare different lowest torch versions: {lowest}"
    declared = next(iter(lowest.values()))
    assert str(noxfile_constant("TORCH_LOWEST")).removesuffix(".0") == declared.removesuffix(".0")


def test_the_test_command_runs_the_lowest_session_on_files_that_exist():
    assert re.search(r"test\) shift; set -- -s [a-z ]*\blowest\b", (ROOT / "dev").read_text()), \
        "./dev test does not run the lowest session"
    for path in noxfile_constant("LOWEST_TESTS"):
        assert (ROOT / path).is_file(), path
