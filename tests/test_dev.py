"""A first day that works: the README's install commands name every folder they need (by the pyprojects'
dependencies), `./dev install` runs that very command, `./dev` stops when EMBER_PYTHON names no Python, and a nox run
that skipped a session fails."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def tool(name: str):
    spec = importlib.util.spec_from_file_location(f"tools_{name}", ROOT / "tools" / f"{name}.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def direct_siblings() -> dict[str, set[str]]:
    """Each package folder → the folders of the ember packages its pyproject's dependencies name."""
    tomllib = tool("packages").tomllib
    projects = {p.parent.name: tomllib.loads(p.read_text())["project"]
                for p in (ROOT / "packages").glob("*/pyproject.toml")}
    folder_of = {project["name"]: folder for folder, project in projects.items()}
    names = {folder: {re.match(r"[A-Za-z0-9_.-]+", d).group(0) for d in project.get("dependencies", [])}
             for folder, project in projects.items()}
    return {folder: {folder_of[n] for n in deps if n in folder_of} for folder, deps in names.items()}


def documented_pip_lines() -> list[list[str]]:
    """The folders of every `pip install ./packages/...` command in the README (code blocks and inline code)."""
    lines = re.findall(r"pip install((?: +(?:-e +)?'?\./packages/[\w-]+(?:\[\w+\])?'?)+)", README)
    return [re.findall(r"\./packages/([\w-]+)", line) for line in lines]


def run_dev(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "dev"), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env}, cwd=ROOT)


def test_the_readme_install_command_names_all_nine_folders_and_each_line_what_it_needs():
    siblings = direct_siblings()
    lines = documented_pip_lines()
    assert lines, "the README documents no pip install of the package folders"
    assert sorted(lines[0]) == sorted(siblings) and len(siblings) == 9, lines[0]
    for folders in lines:
        missing = {dep for f in folders for dep in siblings[f]} - set(folders)
        assert not missing, f"`pip install {' '.join(folders)}` lacks {sorted(missing)}: pip looks them up on an index"


def test_dev_install_prints_the_readme_command_and_single_packages_with_their_ember_dependencies():
    done = run_dev("install", "--print")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "pip install " + " ".join(f"./packages/{f}" for f in documented_pip_lines()[0])
    siblings = direct_siblings()
    for folder in siblings:
        done = run_dev("install", "--print", folder)
        shown = re.findall(r"\./packages/([\w-]+)", done.stdout)
        needed, todo = set(), [folder]
        while todo:
            f = todo.pop()
            needed.add(f)
            todo += siblings[f] - needed
        assert set(shown) == needed and shown[-1] == folder, (folder, done.stdout)
    assert run_dev("install", "--print", "-e", "partition").stdout.split() == \
        ["pip", "install", "-e", "./packages/core", "-e", "./packages/partition"]
    assert run_dev("install", "--print", "nonesuch").returncode != 0


def test_noxfile_package_table_matches_the_pyprojects():
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    table = next(ast.literal_eval(n.value) for n in tree.body
                 if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "PACKAGES")
    assert {k: set(v) for k, v in table.items()} == direct_siblings()


@pytest.mark.parametrize("value", ["python3.99", "3.99", "/nonexistent/bin/python3"])
def test_dev_stops_when_ember_python_names_no_python(value):
    for command in ("test", "install", "gpu"):
        done = run_dev(command, "--print", EMBER_PYTHON=value)
        assert done.returncode == 1, done.stdout
        assert f"dev: EMBER_PYTHON={value} names no Python 3.10 or newer" in done.stderr


def test_a_skipped_session_is_read_from_nox_reports():
    nox_run = tool("nox_run")
    report = {"sessions": [{"name": "lint", "result": "success"},
                           {"name": "tests", "result": "skipped", "reason": "Python interpreter 3.12 not found"}]}
    assert nox_run.skipped_sessions(report) == ["tests (Python interpreter 3.12 not found)"]
    assert nox_run.report_path(["-s", "lint", "--report", "r.json"]) == "r.json"
    assert nox_run.report_path(["--report=r.json"]) == "r.json"
    assert nox_run.report_path(["-s", "lint"]) is None


NOXFILE = textwrap.dedent("""
    import nox
    nox.options.default_venv_backend = "none"

    @nox.session
    def runs(session):
        pass

    @nox.session
    def skips(session):
        session.skip("nothing to do")
""")


def test_nox_runs_fail_when_a_session_is_skipped_or_its_python_is_missing(tmp_path):
    tools = ROOT / ".tools"
    if not (tools / "nox").is_dir():
        pytest.skip("no nox in .tools/ (./dev puts it there before it runs any session)")
    (tmp_path / "noxfile.py").write_text(NOXFILE)
    runner = [sys.executable, str(ROOT / "tools" / "nox_run.py"), str(tools)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOX")}
    done = subprocess.run([*runner, "-f", str(tmp_path / "noxfile.py")], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 1 and "dev: nox skipped 1 session(s), which fails the run: skips (nothing to do)" \
        in done.stderr, done.stderr
    report = tmp_path / "report.json"
    done = subprocess.run([*runner, "-f", str(tmp_path / "noxfile.py"), "-s", "runs", "--report", str(report)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(report.read_text())["sessions"][0]["result"] == "success"
    # ember's own noxfile: a session whose Python is missing fails (it used to be skipped, and the run exit 0)
    done = subprocess.run([*runner, "-f", str(ROOT / "noxfile.py"), "-s", "lint"], capture_output=True, text=True,
                          env={**env, "EMBER_PYTHON": "3.99"}, timeout=300)
    assert done.returncode == 1 and "Python interpreter 3.99 not found" in done.stderr, done.stderr


def test_every_third_party_import_of_a_package_is_declared_by_it():
    """A package's source imports only the standard library, ember packages, and what its pyproject declares (its
    dependencies, or an extra for an optional path: numpy for Triton's interpreter, graphviz for SVG diagrams)."""
    tomllib = tool("packages").tomllib
    undeclared = []
    for pyproject in sorted((ROOT / "packages").glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text())["project"]
        wanted = [*project.get("dependencies", []), *sum(project.get("optional-dependencies", {}).values(), [])]
        declared = {re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower().replace("-", "_") for d in wanted}
        for source in sorted((pyproject.parent / "src").rglob("*.py")):
            for node in ast.walk(ast.parse(source.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names = [node.module]
                else:
                    continue
                for top in {n.split(".")[0] for n in names}:
                    if top not in sys.stdlib_module_names and not top.startswith("ember") and \
                            top not in ("__future__", *declared):
                        undeclared.append(f"{source.relative_to(ROOT)} imports {top}")
    assert not undeclared, undeclared
