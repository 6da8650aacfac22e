"""ember's nine package folders as their pyproject.toml files describe them, for the commands that work from a clone.

    python tools/packages.py install [--editable] [--print] [FOLDER ...] [-- PIP-ARGS]
        one `pip install` of the folders and every ember package they depend on (all nine without FOLDER), into
        the Python that runs this (`./dev install` is this with python3 or $EMBER_PYTHON)
    python tools/packages.py source-env DIR
        makes the checkout importable without installing anything: writes each package's dist-info (name, version,
        entry points) into DIR and prints the PYTHONPATH to use (DIR, then every packages/*/src)

Standard library only (tomllib; on Python 3.10 pip's vendored tomli), so it runs on a bare Python.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pip has carried tomli since 21.2
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "packages"


@dataclasses.dataclass(frozen=True)
class Package:
    folder: str  # `codegen-cpp`: packages/<folder>
    name: str  # distribution: `ember-codegen-cpp`
    version: str
    requires: tuple[str, ...]  # the pyproject's dependency strings, as written
    siblings: tuple[str, ...]  # folders of the ember packages it depends on directly
    entry_points: dict[str, dict[str, str]]  # group → name → `module:attr`; console scripts as `console_scripts`
    src: Path


def _dist_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def load() -> dict[str, Package]:
    """Every folder under packages/ with a pyproject.toml, by folder name, in sorted order."""
    raw = {p.parent.name: tomllib.loads(p.read_text()) for p in sorted(PACKAGES.glob("*/pyproject.toml"))}
    folder_of = {data["project"]["name"].lower(): folder for folder, data in raw.items()}
    out = {}
    for folder, data in raw.items():
        project = data["project"]
        requires = tuple(project.get("dependencies", []))
        siblings = tuple(folder_of[d] for d in map(_dist_name, requires) if d in folder_of)
        groups = {g: dict(eps) for g, eps in project.get("entry-points", {}).items()}
        if project.get("scripts"):
            groups["console_scripts"] = dict(project["scripts"])
        out[folder] = Package(folder, project["name"], project["version"], requires, siblings, groups,
                              PACKAGES / folder / "src")
    return out


def closure(folders: list[str], packages: dict[str, Package] | None = None) -> list[str]:
    """The folders and every ember package they need, dependencies first."""
    packages = packages or load()
    unknown = [f for f in folders if f not in packages]
    if unknown:
        raise SystemExit(f"no package folder {', '.join(unknown)} under packages/; there are {', '.join(packages)}")
    order: list[str] = []

    def visit(folder: str) -> None:
        if folder in order:
            return
        for dep in packages[folder].siblings:
            visit(dep)
        order.append(folder)

    for folder in folders:
        visit(folder)
    return order


def pip_args(folders: list[str], editable: bool = False) -> list[str]:
    """`install` and the folders as paths relative to the repository root (`./packages/core`: a path, never a
    name pip would look up on an index)."""
    paths = [f"./packages/{f}" for f in folders]
    return ["install", *([a for p in paths for a in ("-e", p)] if editable else paths)]


# ---------------------------------------------------------------------------------------------- source-env


def write_dist_info(dest: Path, packages: dict[str, Package] | None = None) -> list[Path]:
    """A minimal dist-info per package in `dest` (METADATA with name and version, entry_points.txt), so that
    importlib.metadata finds ember's entry points (its plugins, the pytest plugin, the Dynamo backend) and versions
    when `dest` is on sys.path, with no pip, build backend or index involved. Returns the folders' src paths."""
    packages = packages or load()
    dest.mkdir(parents=True, exist_ok=True)
    for p in packages.values():
        info = dest / f"{p.name.replace('-', '_')}-{p.version}.dist-info"
        info.mkdir(exist_ok=True)
        requires = "".join(f"Requires-Dist: {r}\n" for r in p.requires)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {p.name}\nVersion: {p.version}\n{requires}")
        groups = "".join(f"[{g}]\n" + "".join(f"{n} = {v}\n" for n, v in eps.items()) + "\n"
                         for g, eps in p.entry_points.items())
        (info / "entry_points.txt").write_text(groups)
        (info / "INSTALLER").write_text("ember-source-env\n")
    return [p.src for p in packages.values()]


def source_pythonpath(dest: Path) -> str:
    """PYTHONPATH that imports ember from this checkout: `dest` (the dist-info) and every package's src."""
    return os.pathsep.join([str(dest), *map(str, write_dist_info(dest))])


# ---------------------------------------------------------------------------------------------- command line


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "source-env" and len(rest) == 1:
        print(source_pythonpath(Path(rest[0]).resolve()))
        return 0
    if command != "install":
        print(f"packages.py: unknown command {' '.join(argv)!r}\n{__doc__}", file=sys.stderr)
        return 2
    extra = rest[rest.index("--") + 1:] if "--" in rest else []
    rest = rest[:rest.index("--")] if "--" in rest else rest
    flags = {a for a in rest if a.startswith("-")}
    if flags - {"--editable", "-e", "--print"}:
        print(f"packages.py install: unknown option {', '.join(sorted(flags))} (pip's own go after --)",
              file=sys.stderr)
        return 2
    packages = load()
    asked = [a.removeprefix("./").removeprefix("packages/").strip("/") for a in rest if not a.startswith("-")]
    folders = closure(asked or ["ember", *packages], packages)  # all: in the meta-package's order, the pipeline's
    cmd = [sys.executable, "-m", "pip", *pip_args(folders, editable=bool(flags & {"--editable", "-e"})), *extra]
    shown = " ".join(["pip", *cmd[3:]])
    print(shown)
    if "--print" in flags:
        return 0
    return subprocess.call(cmd, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
