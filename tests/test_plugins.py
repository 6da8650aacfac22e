"""The example third-party plugin (examples/ember-fold-mul-one) is found, used and blockable with no change to ember."""

from __future__ import annotations

import os
import subprocess
import sys

import ember
import pytest
import torch
from ember_core import PluginError, get_plugin_manager, hookimpl, reset_plugin_manager


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
    assert "pass" not in [ln.split()[0] for ln in result.stdout.splitlines()[1:] if ln.strip()]
    assert "blocked by EMBER_DISABLE_PLUGINS: fold-mul-one" in result.stdout


@pytest.mark.parametrize("frontend", ["dynamo", "trace"])
def test_the_example_pass_rewrites_captured_graphs(frontend):
    with ember.record_events() as rec:
        out = ember.compile(f, options={"frontend": frontend})(torch.randn(5))
    applied = [e for e in rec.events if e.kind == "pass_applied"]
    assert applied and "fold-mul-one" in applied[0].message
    assert not any(n.op.startswith("aten.mul") and n.args[1] == 1 for n in applied[0].graph.nodes)
    assert out.shape == (5,)


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
