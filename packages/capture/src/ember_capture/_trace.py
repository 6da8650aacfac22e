"""The `trace` frontend: ember's own guard-and-trace JIT, without Dynamo.

Each wrapped function keeps a list of entries, each a generated guard plus a compiled graph. A call flattens its
arguments, runs the guards in order and calls the first entry that passes. A miss traces the function with
make_fx under a fresh `FakeTensorMode`/`ShapeEnv` (sizes symbolic where the dynamic policy says so), compiles the
graph with `compile_graph`, and adds an entry. Python scalars are specialized by value, except a float argument
that changed between calls under automatic dynamic (a learning rate, a temperature), which becomes a graph input
read by the kernels, so later values do not recompile (`_inputs.py`); `.item()` of a computed tensor is traced
(an unbacked symbol) and read by the kernels too. What the function reads
besides its arguments (globals, closure cells, attributes) is guarded or made graph inputs (`_reads.py`), module
parameters and buffers become graph inputs (`_state.py`), and arguments that are one tensor or share memory are
traced and guarded as such (`_inputs.py`). A function that cannot be one graph (a branch on a tensor's value,
`.item()`, `print`) raises `CaptureError` under `fullgraph=True`, else runs eagerly from then on. A call under a
functorch transform (`torch.func.vmap`, `grad`) runs eagerly, that call only (`_under_transform`).
"""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from ember_core import EmberError, FallbackWarning, Stopwatch, autocast_state, tracing_lock, warn_fallback
from torch._dynamo.source import LocalSource
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
    UnsupportedOperatorException,
)
from torch._subclasses.functional_tensor import FunctionalTensor
from torch.fx.experimental.symbolic_shapes import (
    DimDynamic,
    GuardOnDataDependentSymNode,
    ShapeEnv,
    StatelessSymbolicContext,
)
from torch.utils._pytree import tree_flatten, tree_flatten_with_path, tree_unflatten

from ._aten import capture_graph, readable_name
from ._checkpoints import checkpoints_marked
from ._errors import CaptureError, located
from ._guards import (
    GuardBuilder,
    Live,
    Metadata,
    autocast_text,
    shape_env_checks,
    static_ints,
    tensor_checks,
    value_check,
)
from ._inputs import InputLayout, check_inputs
from ._options import options_of
from ._outputs import OutputLayout
from ._patches import anchor_stack_traces, forgetting_failed_compiles
from ._reads import find_reads
from ._report import qualname, report
from ._runner import GraphRunner
from ._side_effects import SideEffect, side_effects_forbidden
from ._stand_ins import StandIns
from ._state import ModuleState

PRODUCER = "ember-capture 0.1.0 trace"
# the innermost active functorch transform (vmap, grad, jvp ...), or None: about 55 ns a call
_functorch_transform = torch._C._functorch.peek_interpreter_stack
_DATA_DEPENDENT = (DataDependentOutputException, GuardOnDataDependentSymNode, DynamicOutputShapeException)


@dataclass
class Entry:
    """One compiled specialization: its guard, its graph and how to call it."""

    check: Callable[[list, Any], bool]
    explain: Callable[[list, Any], str | None]
    guard_source: str
    graph: Any  # ember_core.Graph
    run: Callable[[list], Any]
    spec: Any  # the arguments' structure, as `flatten_args` gives it
    tensor_leaves: list[int]
    static_sizes: list[list[int | None]]  # per tensor leaf: its sizes, None where symbolic
    floats: dict[int, float]  # per float leaf traced as a constant: its value
    read_floats: list[tuple[Any, float]]  # per float global or attribute traced as a constant: (its Read, value)


class TraceFrontend:
    """Frontend `trace`: `wrap(fn, compile_graph, options) -> TracedFunction`."""

    name = "trace"

    def wrap(self, fn: Callable, compile_graph: Callable, options: Mapping[str, Any] | None = None) -> TracedFunction:
        return TracedFunction(fn, compile_graph, options)


class TracedFunction:
    """`fn`, compiled per guarded specialization. `entries`, `compiles` and `fallback_reason` are for inspection."""

    def __init__(self, fn: Callable, compile_graph: Callable, options: Mapping[str, Any] | None = None):
        self.fn, self.compile_graph, self.options = fn, compile_graph, options_of(options)
        self.__wrapped__ = fn
        self.name = qualname(fn)
        self.entries: list[Entry] = []
        self._hot: tuple[tuple[Callable, Callable], ...] = ()  # (check, run) per entry: what a call walks
        self.compiles = 0
        self.fallback_reason: str | None = None  # set once the function runs eagerly for good
        self._limit_warned = False
        self._transform_told = False  # a call under a functorch transform was reported
        self._dynamic_dims: set[tuple[int, int]] = set()  # (leaf, dim) pairs made symbolic by automatic dynamic
        self._dynamic_floats: set[int] = set()  # float leaves made graph inputs by automatic dynamic
        self._dynamic_reads: set[str] = set()  # labels of float globals and attributes made graph inputs
        self._floats_constant = False  # set once a trace branched on a float input: floats stay constants

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.fallback_reason is not None:
            return self.fn(*args, **kwargs)
        if _functorch_transform() is not None:
            return self._under_transform(args, kwargs)
        flat, spec = flatten_args(args, kwargs)
        for check, run in self._hot:
            if check(flat, spec):
                return run(flat)
        return self._miss(args, kwargs, flat, spec)

    def _under_transform(self, args: tuple, kwargs: dict) -> Any:
        """A call inside `torch.func.vmap`, `grad` and the like gets wrapped tensors, which a trace cannot take and
        kernels cannot read (a compiled entry's guards pass them): it runs eagerly, where the transform applies;
        told once per function."""
        if not self._transform_told:
            self._transform_told = True
            why = "a functorch transform (vmap, grad, ...) is active: its wrapped tensors run eagerly"
            report("fallback", f"{self.name} runs eagerly under a functorch transform", function=self.name,
                   reason=why, cause="eager")
            warn_fallback(f"ember: {self.name} runs eagerly under a functorch transform (vmap, grad, ...), in "
                          "each such call", "eager", stacklevel=3)
        return self.fn(*args, **kwargs)

    # ------------------------------------------------------------------------------------------ misses

    def _miss(self, args: tuple, kwargs: dict, flat: list, spec: Any) -> Any:
        if any(isinstance(x, (FakeTensor, FunctionalTensor)) for x in flat):
            return self.fn(*args, **kwargs)  # called while another function is traced: inline it
        with tracing_lock():  # one trace at a time in the process; eager fallbacks run after it is released
            run = self._hit(flat, spec) or self._compile_or_fallback(args, kwargs, flat, spec)
        return self.fn(*args, **kwargs) if run is None else run(flat)

    def _hit(self, flat: list, spec: Any) -> Callable[[list], Any] | None:
        """The entry that takes the call, if another thread compiled one while this one waited for the lock."""
        return next((run for check, run in self._hot if check(flat, spec)), None)

    def _compile_or_fallback(self, args: tuple, kwargs: dict, flat: list, spec: Any) -> Callable[[list], Any] | None:
        """A new entry's runner; None when the call must run eagerly (recompile limit, or not one graph)."""
        if self.fallback_reason is not None:
            return None
        reason = self._explain(flat, spec)
        if reason is not None:
            report("guard_failed", f"{self.name}: {reason}", function=self.name, reason=reason)
        if len(self.entries) >= self.options["recompile_limit"]:
            self._over_limit(reason)
            return None
        self._grow_dynamic(flat, spec)
        try:
            entry, kept = self._compile_keeping_floats_if_branched_on(args, kwargs, flat, spec)
        except CaptureError as e:
            if self.options["fullgraph"]:
                raise
            self.fallback_reason = str(e)
            # `break_reason`, `where` and `code`: the construct that stopped the trace, as a graph break is told
            report("fallback", f"{self.name} runs eagerly from now on: {e}", function=self.name, reason=str(e),
                   cause="eager", break_reason=e.reason, where=e.where, code=e.code)
            # once per function: it runs eagerly from now on, and no later call comes here
            warn_fallback(f"ember: {self.name} runs eagerly (the trace frontend cannot capture it): {e}", "eager",
                          e.where, stacklevel=3)
            return None
        if kept is not None:
            reason = f"{reason}; float arguments stay constant from now on, compiled per value: {kept}"
        if reason is not None:
            report("recompiled", f"{self.name}: {reason}", function=self.name, reason=reason,
                   entries=len(self.entries) + 1)
        self.entries.append(entry)
        self._hot = (*self._hot, (entry.check, entry.run))  # a new tuple: calls in other threads walk a snapshot
        return entry.run

    def _compile_keeping_floats_if_branched_on(self, args: tuple, kwargs: dict, flat: list,
                                               spec: Any) -> tuple[Entry, str | None]:
        """`_compile`, and why float arguments were kept constant, if they were. A trace with float arguments as
        inputs (automatic dynamic made those that changed inputs) can stop at a branch on one (hardtanh checks its
        bounds are in order, addmm's decomposition asks whether beta is 0), whose way it cannot know for every
        value. The function is then traced again with every float a constant, as before they changed, and from
        then on compiles once per value up to the recompile limit, instead of running eagerly for good."""
        try:
            return self._compile(args, kwargs, flat, spec), None
        except CaptureError as e:
            if self._floats_constant or not (self._dynamic_floats or self._dynamic_reads) or \
                    not e.reason.startswith("data-dependent"):
                raise
            self._floats_constant = True
            self._dynamic_floats.clear()
            self._dynamic_reads.clear()
            return self._compile(args, kwargs, flat, spec), e.reason

    def _explain(self, flat: list, spec: Any) -> str | None:
        """Why no entry took the call, in words: one reason, or one per entry."""
        reasons = [e.explain(flat, spec) for e in self.entries]
        if len(reasons) <= 1:
            return reasons[0] if reasons else None
        return "; ".join(f"entry {k}: {r}" for k, r in enumerate(reasons))

    def _over_limit(self, reason: str | None) -> None:
        if not self._limit_warned:
            self._limit_warned = True
            message = (f"ember: {self.name} reached recompile_limit ({self.options['recompile_limit']}); calls that "
                       f"miss every guard run eagerly. Last guard failure: {reason}")
            warnings.warn(message, FallbackWarning, stacklevel=5)
            report("fallback", message, function=self.name, reason=message, cause="eager")

    def _grow_dynamic(self, flat: list, spec: Any) -> None:
        """Automatic dynamic (dynamic=None): a static dim whose size changed since the last entry becomes symbolic,
        a float argument whose value changed becomes a graph input."""
        if self.options["dynamic"] is not None or not self.entries or self.entries[-1].spec != spec:
            return
        last = self.entries[-1]
        if not self._floats_constant:
            self._grow_dynamic_floats(last, flat)
        for i, sizes in zip(last.tensor_leaves, last.static_sizes):
            x = flat[i]
            if isinstance(x, torch.Tensor) and x.dim() == len(sizes):
                self._dynamic_dims |= {(i, d) for d, n in enumerate(sizes) if n is not None and x.size(d) != n}

    def _grow_dynamic_floats(self, last: Entry, flat: list) -> None:
        self._dynamic_floats |= {i for i, v in last.floats.items() if type(flat[i]) is float and flat[i] != v}
        for r, v in last.read_floats:
            try:
                now = r.fetch()
            except Exception:  # noqa: BLE001 - the path to it changed: the guard has said so already
                continue
            if type(now) is float and now != v:
                self._dynamic_reads.add(r.label)

    def _is_dynamic(self, leaf: int, dim: int) -> bool:
        dynamic = self.options["dynamic"]
        return bool(dynamic) if dynamic is not None else (leaf, dim) in self._dynamic_dims

    # ------------------------------------------------------------------------------------------ compiling

    def _compile(self, args: tuple, kwargs: dict, flat: list, spec: Any) -> Entry:
        clock = Stopwatch()  # capture: tracing the function into an ember graph
        labels = leaf_labels(self.fn, args, kwargs)
        leaves = [i for i, x in enumerate(flat) if isinstance(x, torch.Tensor)]
        reads = find_reads(self.fn)
        reads.dynamic = reads.dynamic_floats(frozenset(self._dynamic_reads))
        state = ModuleState(reads.owners)
        name = re.sub(r"\W", "_", self.name) + f"_{self.compiles}"
        anchor_stack_traces(self.fn)
        floats = sorted(i for i in self._dynamic_floats if type(flat[i]) is float)
        layout = InputLayout(state, reads, flat, leaves, labels, float_leaves=floats)
        check_inputs(layout, flat)
        graph, fakes, shape_env, outputs = self._trace(layout, flat, spec, name)
        mutated = {k for k, inp in enumerate(graph.inputs) if inp.mutated}
        if layout.needs_bases(mutated):  # it writes an argument that shares memory with another: trace again
            layout = InputLayout(state, reads, flat, leaves, labels, bases=True, float_leaves=floats)
            graph, fakes, shape_env, outputs = self._trace(layout, flat, spec, name)
            mutated = {k for k, inp in enumerate(graph.inputs) if inp.mutated}
            layout.needs_bases(mutated)
        self.compiles += 1
        report("graph_captured", f"captured graph {name} ({len(graph.nodes)} nodes)", graph=graph,
               seconds=clock.seconds)
        user_fakes = [fakes[layout.leaf_input[i]] for i in layout.user]
        (check, explain, source), readable = self._guard(flat, spec, labels, layout, user_fakes, shape_env, mutated)
        report("guards_built", f"guards of {self.name}, entry {len(self.entries)}", source=source, function=self.name,
               entry=len(self.entries), guards=readable)
        runner = GraphRunner(graph, self.compile_graph(graph, fakes))
        sizes = {i: static_ints(fakes[k].shape) for i, k in layout.leaf_input.items()}
        constant_floats = {i: x for i, x in enumerate(flat) if type(x) is float and i not in floats}
        return Entry(check, explain, source, graph, outputs.caller(runner, layout.gather()), spec, leaves,
                     [sizes.get(i, list(flat[i].shape)) for i in leaves], constant_floats,
                     [(r, r.value) for r in reads.constant_floats()])

    def _trace(self, layout: InputLayout, flat: list, spec: Any, name: str) -> tuple[Any, list, ShapeEnv, Any]:
        """(graph, fake inputs, shape environment, output layout) of one trace with `layout`'s inputs."""
        shape_env = ShapeEnv(allow_scalar_outputs=True, allow_dynamic_output_shape_ops=False)
        fake_mode = FakeTensorMode(shape_env=shape_env, allow_non_fake_inputs=True)
        fakes = _fakes(layout, fake_mode, lambda i, k: self._fake(fake_mode, flat[i], i, k))
        outputs = OutputLayout()
        traced = _flat_function(self.fn, layout, flat, spec, outputs)
        graph = _capture(traced, fakes, name=name, producer=PRODUCER, fake_mode=fake_mode,
                         input_names=[_ident(n) for n in layout.names], input_kinds=layout.kinds)
        return graph, fakes, shape_env, outputs

    def _fake(self, fake_mode: FakeTensorMode, x: torch.Tensor, leaf: int, k: int) -> torch.Tensor:
        rank = len(Metadata(x).sizes)
        dims = [DimDynamic.DYNAMIC if self._is_dynamic(leaf, d) else DimDynamic.STATIC for d in range(rank)]
        return fake_mode.from_tensor(x, source=LocalSource(f"t{k}"),
                                     symbolic_context=StatelessSymbolicContext(dynamic_sizes=dims))

    def _guard(self, flat: list, spec: Any, labels: list[str], layout: InputLayout, user_fakes: list,
               shape_env: ShapeEnv, mutated: set[int]) -> tuple[tuple[Callable, Callable, str], list[str]]:
        """((check, explain, source), the checks for people)."""
        g = GuardBuilder()
        g.check(f"spec != {g.const('SPEC', spec)}", "argument structure changed (pytree of {old} leaves, now {new})",
                old=len(flat), new=Live("len(flat)"))
        grad = torch.is_grad_enabled()
        g.check(f"is_grad_enabled() is not {g.literal('B', grad)}", "grad mode changed from {old} to {new}", old=grad,
                new=not grad)
        for what, value in (("dtype", torch.get_default_dtype()), ("device", torch.get_default_device())):
            # factory calls without a dtype or device (`torch.ones(3)`) are traced with the default's
            g.check(f"get_default_{what}() != {g.const('F', value)}", "default {what} changed from {old} to {new}",
                    what=what, old=value, new=Live(f"get_default_{what}()"))
        autocast = autocast_state()  # the graph holds the casts of this autocast (see ember_core.execution._autocast)
        g.check(f"autocast_state() != {g.const('A', autocast)}", "autocast changed from {old} to {new}",
                old=autocast_text(autocast), new=Live("_autocast_text(autocast_state())"))
        fakes = dict(zip(layout.user, user_fakes))
        fakes.update((i, fakes[j]) for i, j in layout.same_leaf if j in fakes)
        floats = set(layout.float_leaves)
        for i, x in enumerate(flat):
            g.let(f"a{i}", f"flat[{i}]", labels[i])
            if isinstance(x, torch.Tensor):  # an argument of its own by its fake, the others as they are now
                tensor_checks(g, f"a{i}", labels[i], fakes.get(i, x), type(x))
            elif i in floats:  # a graph input: any float
                g.check(f"type(a{i}) is not float", "{label}: is no longer a float", label=labels[i])
            else:
                value_check(g, f"a{i}", labels[i], x)
        sources = [LocalSource(f"t{k}") for k in range(len(user_fakes))]
        names = {f"t{k}": (f"a{i}", labels[i]) for k, i in enumerate(layout.user)}
        shape_env_checks(g, shape_env.produce_guards(user_fakes, sources) if user_fakes else [], names)
        layout.reads.add_checks(g)
        layout.state.add_checks(g)
        layout.add_checks(g, mutated)
        return g.build(), g.readable()


def _fakes(layout: InputLayout, fake_mode: FakeTensorMode, user_fake: Callable[[int, int], Any]) -> list:
    """`layout.fakes`, with a tensor torch cannot make a fake of (a subclass whose Python-level metadata is not a
    tensor's: a `requires_grad` that is no bool) turned into a `CaptureError`: the function then runs eagerly."""
    try:
        return layout.fakes(fake_mode, user_fake)
    except CaptureError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever torch raised, the call must not fail where eager would not
        raise CaptureError(f"torch cannot make a fake tensor of an input ({type(e).__name__}: {_first_line(e)})") \
            from e


def _capture(traced: Callable, fakes: list, **kwargs: Any) -> Any:
    """`capture_graph`, with every reason a function cannot be one graph turned into a `CaptureError`."""
    try:
        with side_effects_forbidden(), checkpoints_marked(), forgetting_failed_compiles():
            return capture_graph(traced, fakes, **kwargs)
    except SideEffect as e:
        raise located(f"{e.args[0]} while tracing: the trace frontend cannot capture Python side effects", e) from None
    except _DATA_DEPENDENT as e:
        raise located(f"data-dependent Python control flow or value ({_first_line(e)})", e) from None
    except UnsupportedOperatorException as e:
        raise located(f"operator {e.func} cannot run on fake tensors", e) from None
    except torch._dynamo.exc.Unsupported as e:  # torch.cond, while_loop, flex_attention compile themselves
        raise located(f"the function runs Dynamo (torch.cond ...), which a trace cannot follow ({_first_line(e)})",
                      e) from None
    except CaptureError as e:
        if e.where is not None:
            raise
        raise located(e.reason, e) from None  # refused at dispatch (`_functionalize._Uncapturable`): the user's line
    except EmberError as e:  # a GraphError: a construct the schema cannot hold
        raise CaptureError(str(e)) from e


def _flat_function(fn: Callable, layout: InputLayout, flat: list, spec: Any,
                   outputs: OutputLayout) -> Callable[..., list]:
    """`fn` as a function of the graph's inputs (see `InputLayout`) returning the graph's outputs as a flat list."""
    n_state = len(layout.state)

    def traced(*inputs: Any) -> list:
        values = list(flat)
        for i, v in layout.leaf_values(inputs).items():
            values[i] = v
        args, kwargs = unflatten_args(values, spec)
        stand_ins = StandIns(layout.state.pairs(list(inputs[:n_state])) +
                             layout.reads.pairs(layout.read_values(inputs)))
        target = layout.reads.with_floats(fn, layout.read_floats(inputs))
        with layout.state.kept(), layout.reads.kept(), stand_ins:
            result = target(*args, **kwargs)
        return outputs.record(stand_ins.to_stand_ins(result))  # `return self.weight` returns the graph's input

    return traced


_LEAF_TYPES = frozenset({torch.Tensor, torch.nn.Parameter, int, float, bool})


def flatten_args(args: tuple, kwargs: dict) -> tuple[Any, Any]:
    """(leaves, structure). Positional tensors and scalars alone skip pytree, whose flatten costs microseconds:
    the leaves are `args` itself and the structure is their count."""
    if not kwargs and all(type(a) in _LEAF_TYPES for a in args):
        return args, len(args)
    return tree_flatten((args, kwargs))


def unflatten_args(leaves: list, spec: Any) -> tuple[tuple, dict]:
    if isinstance(spec, int):
        return tuple(leaves), {}
    return tree_unflatten(leaves, spec)


def leaf_labels(fn: Callable, args: tuple, kwargs: dict) -> list[str]:
    """A readable name per argument leaf, from the function's signature: `x`, `xs[1]`, `batch['ids']`."""
    try:
        params = list(inspect.signature(fn.forward if isinstance(fn, torch.nn.Module) else fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if isinstance(fn, torch.fx.GraphModule):  # Dynamo's: `forward(self, *args)`, its placeholders name them
        positional = [readable_name(n.name) for n in fn.graph.nodes if n.op == "placeholder"]
    star = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), "args")
    labels = []
    for path, _ in tree_flatten_with_path((args, kwargs))[0]:
        top, first, *rest = path
        if top.idx == 0:
            i = first.idx
            head = positional[i] if i < len(positional) else f"{star}[{i - len(positional)}]"
        else:
            head = str(first.key)
        labels.append(head + "".join(str(k) for k in rest))
    return labels


def _ident(label: str) -> str:
    name = re.sub(r"\W+", "_", label).strip("_")
    return name if name and not name[0].isdigit() else f"in_{name}"


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
