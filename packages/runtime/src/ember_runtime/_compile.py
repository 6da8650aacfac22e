"""`compile()`: torch.compile's signature and meaning, with ember's stages assembled through the plugin manager."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping
from typing import Any

import torch
from ember_core import BackendFrontend, OptionError, PluginError

from . import _compiled_autograd as compiled_autograd
from ._compiled_marks import mark_compiled
from ._pipeline import Pipeline

MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compile(  # noqa: A001 - the name is torch.compile's
    model: Callable | None = None,
    *,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    backend: str | Callable = "ember",
    mode: str | None = None,
    options: Mapping[str, Any] | None = None,
    disable: bool = False,
) -> Any:
    """Compile `model` (a function or nn.Module) with ember; as a decorator when `model` is None.

    `backend` other than "ember" hands the call to `torch.compile` unchanged. `options` are ember's
    (see `ember plugins --options`), checked here: an unknown key, a wrong type or a stage name that is not installed
    (`partition`, `codegen.cpu` ...) raises `OptionError`, as do bad `EMBER_OPTIONS`.
    """
    if model is None:
        return functools.partial(compile, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                                 options=options, disable=disable)
    if disable or _inside_a_trace():
        return model
    if backend != "ember":
        return torch.compile(model, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode, options=options)
    if mode not in MODES:
        raise OptionError(f"unknown mode {mode!r}; valid modes: {', '.join(repr(m) for m in MODES)}")
    pipeline = Pipeline.from_options(options, fullgraph=fullgraph, dynamic=dynamic, mode=mode)
    frontend = pipeline.frontend()
    compiled = frontend.wrap(model, pipeline.compile_graph, pipeline.frontend_options)
    if pipeline.options.get("dump"):
        compiled = _dumping(compiled, pipeline)
    if pipeline.options.get("compiled_autograd"):
        compiled = compiled_autograd.wrap(compiled, options, fullgraph=fullgraph, dynamic=dynamic)
    if isinstance(model, torch.nn.Module) and not isinstance(compiled, torch.nn.Module):
        remake = functools.partial(compile, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                                   options=options)
        return mark_compiled(CompiledModule(model, compiled, remake))
    if not isinstance(model, torch.nn.Module) and compiled is not model:
        functools.update_wrapper(compiled, model, updated=())
    return mark_compiled(compiled)


def _inside_a_trace() -> bool:
    """Whether Dynamo or make_fx (the trace frontend) is tracing the caller: `ember.compile(m)(x)` inside a compiled
    function. `m` then runs inline in the outer graph, as a nested torch.compile does; compiling it there failed in
    Dynamo ("already tracked for mutation") or in make_fx (which cannot trace a Dynamo-optimized function)."""
    # the flag fx's tracer (make_fx's too) sets; `is_fx_tracing()` reads it but logs a warning on its first call
    return torch.compiler.is_compiling() or bool(getattr(torch.fx._symbolic_trace, "_is_fx_tracing_flag", False))


class CompiledModule(torch.nn.Module):
    """An nn.Module whose calls go through the compiled callable; everything else is the original module's.

    `copy.deepcopy` copies the module and compiles the copy again with the same arguments (`remake`): the compiled
    callable reads the module it was made for, so a copy sharing it would compute with the original's parameters."""

    def __init__(self, module: torch.nn.Module, compiled: Callable,
                 remake: Callable[[torch.nn.Module], Any] | None = None):
        super().__init__()
        self._orig_mod = module
        self._compiled = compiled
        self._remake = remake

    def __deepcopy__(self, memo: dict) -> Any:
        if self._remake is None:
            raise TypeError("this compiled module cannot be copied: compile a copy of its module instead")
        twin = self._remake(copy.deepcopy(self._orig_mod, memo))
        memo[id(self)] = twin
        return twin

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._compiled(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._orig_mod, name)


def dynamo_backend(gm: torch.fx.GraphModule, example_inputs: list, *, mode: str | None = None,
                   options: Mapping[str, Any] | None = None) -> Callable:
    """The `torch_dynamo_backends` entry `ember`: `torch.compile(model, backend="ember", options={...})`.

    torch.compile hands a backend its options only with the first graph, so they are checked here, before anything
    runs: a bad one raises `OptionError` (which Dynamo reports as its `BackendCompilerFailed`)."""
    if mode not in MODES:
        raise OptionError(f"unknown mode {mode!r}; valid modes: {', '.join(repr(m) for m in MODES)}")
    pipeline = Pipeline.from_options(options, fullgraph=False, dynamic=None, mode=mode)
    frontend = pipeline.frontend("dynamo")
    if not isinstance(frontend, BackendFrontend):
        raise PluginError(f"frontend 'dynamo' ({type(frontend).__name__}) has no backend(compile_graph, options) "
                          "method: torch.compile(backend='ember') needs one (see ember_core.BackendFrontend)")
    with pipeline.dumping():
        return frontend.backend(pipeline.compile_graph, pipeline.frontend_options)(gm, example_inputs)


def _dumping(compiled: Callable, pipeline: Pipeline) -> Callable:
    """`compiled`, each call inside the `dump` option's block, so that what the frontend reports (captures, guards,
    recompiles) is dumped with the stages' events. Only when the option is set: a call costs a context switch."""
    @functools.wraps(compiled, updated=())
    def dumped(*args: Any, **kwargs: Any) -> Any:
        with pipeline.dumping():
            return compiled(*args, **kwargs)
    return dumped

