"""The example third-party plugin (examples/ember-fold-mul-one) is found, used and blockable with no change to ember."""

from __future__ import annotations

import os
import subprocess
import sys

import ember
import pytest
import torch
from ember_core import PluginError, format_graph, get_plugin_manager, hookimpl, parse_graph, reset_plugin_manager
from ember_fold_mul_one import FoldMulOne


def run_ember(*args, env=None):
    env = {**os.environ, **(env or {})}
    code = "import sys; from ember._cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=120)


def f(x):
    return (x * 1).sin() * 1 + 1


def test_ember_plugins_lists_the_example_pass():
    result = run_ember("plugins")
    assert result.returncode == 0, result.stderr
    line = next(ln for ln in result.stdout.splitlines() if "fold-mul-one" in ln)
    assert line.split()[:2] == ["pass", "fold-mul-one"]
    assert "ember-fold-mul-one 0.1.0" in line


def test_blocking_the_example_by_environment():
    result = run_ember("plugins", env={"EMBER_DISABLE_PLUGINS": "fold-mul-one"})
    assert result.returncode == 0, result.stderr
    passes = [ln.split()[1] for ln in result.stdout.splitlines()[1:] if ln.strip() and ln.split()[0] == "pass"]
    assert "fold-mul-one" not in passes and "pad-gemms" in passes  # blocked; codegen-triton's own still there
    assert "blocked by EMBER_DISABLE_PLUGINS: fold-mul-one" in result.stdout


F_LINE = f"test_plugins.py:{f.__code__.co_firstlineno + 1}"  # f's return line, where every node comes from
F_FOLDED = f"""\
def f(x: f32[5]):
  sin: f32[5] = aten.sin.default(x)  # {F_LINE}
  add: f32[5] = aten.add.Tensor(sin, 1)  # {F_LINE}
  return (add)"""


@pytest.mark.parametrize("frontend", ["dynamo", "trace"])
def test_the_example_pass_rewrites_captured_graphs(frontend):
    with ember.record_events() as rec:
        out = ember.compile(f, options={"frontend": frontend})(torch.randn(5))
    applied = [e for e in rec.events if e.kind == "pass_applied"]
    assert applied and applied[0].data["pass"] == "fold-mul-one" and applied[0].data["point"] == "post_capture"
    assert applied[0].data["nodes_before"] > applied[0].data["nodes_after"] == 2
    text = str(applied[0].graph.replace(name="f"))
    assert text.splitlines()[1:] == F_FOLDED.splitlines()  # the same text whichever frontend captured f
    assert out.shape == (5,)


# The pass on graphs written as text: (before, after). A multiplication by the int or float 1 goes; by True, into
# another dtype, or into a graph output it stays.
FOLDS = {
    "int_and_float_one": ("""\
def g(x: f32[s0]):
  a: f32[s0] = aten.mul.Tensor(x, 1)
  b: f32[s0] = aten.mul.Tensor(a, 1.0)
  c: f32[s0] = aten.sin.default(b)
  return (c)""", """\
def g(x: f32[s0]):
  c: f32[s0] = aten.sin.default(x)
  return (c)"""),
    "true_is_not_one": ("""\
def g(x: f32[s0]):
  a: f32[s0] = aten.mul.Tensor(x, True)
  c: f32[s0] = aten.sin.default(a)
  return (c)""", None),
    "dtype_changes": ("""\
def g(x: i64[s0]):
  a: f32[s0] = aten.mul.Tensor(x, 1.0)
  c: f32[s0] = aten.sin.default(a)
  return (c)""", None),
    "graph_output": ("""\
def g(x: f32[s0]):
  a: f32[s0] = aten.mul.Tensor(x, 1)
  return (a)""", None),
}


@pytest.mark.parametrize("case", FOLDS)
def test_the_example_pass_on_graph_text(case):
    header = "# ember graph v1.0\n# symbols: s0=5 in [2, inf]\n"
    before, after = FOLDS[case]
    graph = parse_graph(header + before)
    assert format_graph(FoldMulOne().run(graph)) == header + (after or before)


def test_results_are_unchanged_by_the_pass():
    x = torch.randn(7)
    torch.testing.assert_close(ember.compile(f)(x), f(x))


class Raising:
    id = "boom"

    def run(self, graph):
        raise ValueError("this pass always fails")


class RaisingPlugin:
    @hookimpl
    def ember_register(self, registry):
        registry.add("pass", "boom", Raising())


def test_a_pass_that_raises_is_named_in_the_error():
    reset_plugin_manager()
    try:
        get_plugin_manager().register(RaisingPlugin(), name="raising-plugin")
        compiled = ember.compile(f, options={"frontend": "trace", "passes": ["boom"]})
        expected = "pass 'boom' of plugin 'raising-plugin' raised ValueError: this pass always fails"
        with pytest.raises(PluginError, match=expected):
            compiled(torch.randn(3))
    finally:
        reset_plugin_manager()
