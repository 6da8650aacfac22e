"""ember-core is in parts, each with one concern, and each part imports only the parts below it: the graph IR reads
nothing else, events read graphs (a dump writes them), plugins read graphs and events, caches and execution read
those three. A part that needs something of a part above it is a sign the thing is in the wrong place."""

import ast
import subprocess
import sys
from pathlib import Path

import ember_core

ROOT = Path(ember_core.__file__).parent
BASE = {"_errors", "_patching", "_python_ast", "_regular_file"}
# each part → the parts it may import at run time (imports under TYPE_CHECKING are annotations, not dependencies)
ALLOWED = {
    "base": set(),
    "graph": {"base"},
    "events": {"base", "graph"},
    "plugins": {"base", "graph", "events"},
    "caches": {"base", "graph", "events", "plugins"},
    "execution": {"base", "graph", "events", "plugins"},
    "report": {"base", "graph", "events", "plugins", "caches", "execution", "core"},
    "testing": {"base", "graph", "events", "plugins", "caches", "execution", "core"},
}


def part_of(module: str) -> str:
    """The part of ember_core a module (`ember_core.graph._json`) belongs to."""
    first = module.split(".")[1] if "." in module else ""
    if first in BASE:
        return "base"
    if first in ALLOWED:
        return first
    return "core"  # the package itself and its own plugin (`_builtin`), which assemble the parts


def runtime_imports(path: Path, module: str) -> set[str]:
    """The ember_core modules `path` imports outside `if TYPE_CHECKING:` blocks."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("ember_core"):
                found.update(f"{target}.{a.name}" if not node.module else target for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("ember_core"))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def modules():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        yield path, ".".join(parts)


def test_each_part_imports_only_the_parts_below_it():
    wrong = []
    for path, module in modules():
        part = part_of(module)
        if part == "core":
            continue
        for target in runtime_imports(path, module):
            other = part_of(target)
            if other != part and other not in ALLOWED[part]:
                wrong.append(f"{module} ({part}) imports {target} ({other})")
    assert wrong == []


def test_every_module_is_in_a_part():
    loose = [m for _, m in modules() if part_of(m) == "core" and m not in ("ember_core", "ember_core._builtin")]
    assert loose == []


def test_the_checker_sees_a_wrong_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from ..caches import DiskCache\nif TYPE_CHECKING:\n    from ..execution import interpret\n")
    assert runtime_imports(bad, "ember_core.graph.bad") == {"ember_core.caches"}


def loaded_after(statement: str) -> set[str]:
    """Top-level modules loaded by a fresh interpreter that runs `statement`."""
    code = f"import sys; {statement}; print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_the_report_and_the_test_kits_bring_their_own_dependencies():
    """ember_core imports none of its optional parts' dependencies; each part imports where it is used."""
    optional = {"networkx", "pytest", "hypothesis", "jsonschema"}
    assert loaded_after("import ember_core") & optional == set()
    assert loaded_after("import ember_core.report; ember_core.report.ReportWriter") & optional <= {"networkx"}
    assert "ember_core" in loaded_after("import ember_core.testing")  # imports alone, with the test extra
