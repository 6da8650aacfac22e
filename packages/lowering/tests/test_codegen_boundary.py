"""The shared codegen layer (`ember_lowering.codegen`) is what a codegen builds on, ember's two and a third party's
alike: it reads the loop IR through `ember_lowering`'s public names only, never a private module of lowering, so a
codegen that depends on it depends on nothing lowering may change without notice."""

import ast
from pathlib import Path

import ember_lowering
import ember_lowering.codegen

CODEGEN = Path(ember_lowering.codegen.__file__).parent


def private_imports(path: Path) -> list[str]:
    """Imports in `path` that reach into lowering past its public names: `from .. import`, `from .._x import`,
    `from ember_lowering._x import`, `from ember_lowering.loop_passes import` ..."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level >= 2 or node.level == 0 and module.startswith("ember_lowering.") \
                    and not module.startswith("ember_lowering.codegen"):
                found.append(f"{path.name}:{node.lineno} {'.' * node.level}{module}")
        elif isinstance(node, ast.Import):
            found += [f"{path.name}:{node.lineno} {a.name}" for a in node.names
                      if a.name.startswith("ember_lowering.") and not a.name.startswith("ember_lowering.codegen")]
    return found


def test_the_codegen_layer_reads_only_lowerings_public_names():
    assert [f for path in sorted(CODEGEN.glob("*.py")) for f in private_imports(path)] == []


def test_every_name_it_imports_from_lowering_is_public():
    wanted = {a.name for path in CODEGEN.glob("*.py") for node in ast.walk(ast.parse(path.read_text()))
              if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "ember_lowering"
              for a in node.names}
    assert wanted and wanted <= set(ember_lowering.__all__)


def test_the_check_sees_a_private_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from .._loop_ir import Kernel\nfrom ember_lowering._scheduler import x\nfrom . import _exprs\n")
    assert private_imports(bad) == ["bad.py:1 .._loop_ir", "bad.py:2 ember_lowering._scheduler"]
