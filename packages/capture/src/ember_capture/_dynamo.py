"""The `dynamo` frontend: torch._dynamo captures FX graphs (guards, graph breaks, recompiles); ember does the rest.

Each FX graph Dynamo hands over is made a functional ATen `Graph` (`capture_graph`), compiled once with
`compile_graph`, and wrapped in a `GraphRunner`, which Dynamo then calls with the flat real inputs.

Dynamo guards that two arguments are the same tensor (and passes it once), but not that two different tensors share
memory: the graph is traced with every input its own. That is right unless the graph writes an input that shares
memory with another (`f(x, x.view(2, 3))` with `x.add_(1)` inside). A graph that writes an argument therefore
checks, on each call, whether that argument shares its storage with another argument; when one does, the call goes
to Dynamo's FX graph wrapped by the `trace` frontend, whose guards and inputs handle memory shared between
arguments (see `_inputs.py`). Parameters and buffers are left out of the check, as in the trace frontend.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx as fx
from ember_core import EmberError, Graph, Stopwatch, warn_fallback
from torch._guards import CompileContext, TracingContext, detect_fake_mode
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.experimental._backward_state import BackwardState

from ._aten import _source_of, capture_graph
from ._dynamo_fixes import prepare_dynamo
from ._eager_inputs import checking_inputs
from ._guards import storage_of
from ._options import options_of
from ._report import qualname, report
from ._runner import GraphRunner
from ._trace import TraceFrontend

PRODUCER = "ember-capture 0.1.0 dynamo"


def _fake_inputs(gm: fx.GraphModule, example_inputs: Sequence[Any], fake_mode) -> list[Any]:
    """The graph's inputs as fakes of the backend's fake mode, with the symbolic sizes Dynamo gave them."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    context = TracingContext.try_get()
    known = context.tensor_to_context if context is not None else {}  # tensor → Dynamo's symbolic context
    fakes = []
    with fake_mode:
        for node, x in zip(placeholders, example_inputs):
            dynamo_value = node.meta.get("example_value")
            if isinstance(x, FakeTensor):
                fakes.append(x if x.fake_mode is fake_mode else fake_mode.from_tensor(x))
            elif isinstance(x, torch.Tensor):
                sym = known.get(x)
                fakes.append(fake_mode.from_tensor(x, symbolic_context=sym, source=getattr(sym, "tensor_source", None),
                                                   trace=sym is None))
            elif isinstance(dynamo_value, torch.SymInt) and dynamo_value.node.shape_env is fake_mode.shape_env:
                fakes.append(dynamo_value)
            else:
                fakes.append(x)
    return fakes


def _lift_attributes(gm: fx.GraphModule) -> tuple[fx.GraphModule, list[str]]:
    """Dynamo installs some tensors on the graph module and reads them with `get_attr` (an optimizer's
    parameters and state, when `optimizer.step()` is compiled), and the graph may update them in place. In a copy
    of the graph (Dynamo goes on using its own), each one becomes a placeholder after Dynamo's, so that capture
    sees an input it can write (functionalization cannot write a tensor it does not wrap) and the runner passes
    the live tensor. Returns the graph module to capture and the attributes it takes, in order."""
    if not any(n.op == "get_attr" and isinstance(_attribute(gm, n.target), torch.Tensor) for n in gm.graph.nodes):
        return gm, []
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    gm = fx.GraphModule(gm, graph)
    reads = [n for n in gm.graph.nodes if n.op == "get_attr" and isinstance(_attribute(gm, n.target), torch.Tensor)]
    last = [n for n in gm.graph.nodes if n.op == "placeholder"]
    lifted: dict[str, fx.Node] = {}
    for node in reads:
        if node.target not in lifted:
            with gm.graph.inserting_after(last[-1]) if last else gm.graph.inserting_before(None):
                lifted[node.target] = gm.graph.placeholder(f"attr_{node.name}")
            lifted[node.target].meta.update(node.meta)
            last.append(lifted[node.target])
        node.replace_all_uses_with(lifted[node.target])
        gm.graph.erase_node(node)
    gm.recompile()
    return gm, list(lifted)


def _attribute(gm: fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part, None)
    return obj


def _graph_source(gm: fx.GraphModule) -> str | None:
    """`file:line` of the user's line where Dynamo's graph starts (the first node that has one)."""
    return next((where for where in map(_source_of, gm.graph.nodes) if where), None)


def _break_source(reason: Any) -> tuple[str, str]:
    """(file:line, code) of the user's line where Dynamo broke the graph."""
    frames = getattr(reason, "user_stack", None) or []
    if not frames:
        return "?", ""
    return f"{frames[-1].filename}:{frames[-1].lineno}", (frames[-1].line or "").strip()


def _flatten_list_inputs(gm: fx.GraphModule, example_inputs: Sequence[Any]
                         ) -> tuple[fx.GraphModule, list[Any], Callable[[tuple], list] | None]:
    """A graph that takes a list argument (compiled autograd's graph takes its tensors as one list, `inputs`) as
    one placeholder per item, when the graph only indexes the list with constants. Returns the graph, its flat
    example inputs, and how to flatten a call's arguments (None when nothing was flattened)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    lists = [k for k, x in enumerate(example_inputs) if isinstance(x, list)]
    if not lists:
        return gm, list(example_inputs), None
    for k in lists:
        users = placeholders[k].users
        if any(u.op != "call_function" or u.target is not operator.getitem or not isinstance(u.args[1], int)
               for u in users):
            raise EmberError(f"graph input {placeholders[k].name!r} is a list the graph uses other than by index")
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    gm = fx.GraphModule(gm, graph)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    flat: list[Any] = []
    for k, (node, x) in enumerate(zip(placeholders, example_inputs)):
        if k not in lists:
            flat.append(x)
            continue
        items = []
        with gm.graph.inserting_before(node):
            for i, item in enumerate(x):
                p = gm.graph.placeholder(f"{node.name}_{i}")
                p.meta.update(node.meta)
                p.meta["example_value"] = item
                items.append(p)
        for user in list(node.users):
            user.replace_all_uses_with(items[user.args[1]])
            gm.graph.erase_node(user)
        gm.graph.erase_node(node)
        flat.extend(x)
    gm.recompile()
    is_list = [k in lists for k in range(len(example_inputs))]

    def flatten(args: tuple) -> list:
        out: list[Any] = []
        for a, listed in zip(args, is_list):
            if listed:
                out.extend(a)
                a.clear()  # compiled autograd hands its list over: its tensors are freed as the graph goes
            else:
                out.append(a)
        return out

    return gm, flat, flatten


def _graph_name(compile_id: Any) -> str:
    """`dynamo_0_1` for Dynamo's frame 0, compile 1; `backward_2_0_1` for a graph of compiled autograd's capture 2
    (its compile ids read `!2/0/1`)."""
    text = str(compile_id).replace("/", "_").replace("[", "").replace("]", "")
    return f"backward_{text[1:]}" if text.startswith("!") else f"dynamo_{text}"


def _captured_backward(compile_id: Any) -> bool:
    """Whether Dynamo is compiling a graph of a backward that compiled autograd captured (compile ids `!2/0/1`)."""
    if compile_id is None:
        return False
    if getattr(compile_id, "compiled_autograd_id", None) is not None:
        return True
    return str(compile_id).startswith("!")


def _in_backward_region(graph: Graph) -> Graph:
    """`graph` with every node in the backward region (`meta["region"]`): a captured backward computes again
    values its forward computed, and later stages (lowering's keep-float32) must know it is half of a training
    step, which its plain inputs do not say."""
    return graph.replace(nodes=tuple(n.replace(meta={**n.meta, "region": "backward"}) for n in graph.nodes))


def _guards_text(guards: Any) -> str:
    lines = []
    for g in guards:
        codes = getattr(g, "code_list", None)
        lines.extend(codes if codes else [f"{g.name}: {g.create_fn_name()}" if g.name else g.create_fn_name()])
    return "\n".join(lines)


class DynamoBackend:
    """A Dynamo backend, `backend(gm, example_inputs) -> callable`: what `torch.compile(backend='ember')` calls."""

    def __init__(self, compile_graph: Callable, options: Mapping[str, Any] | None = None):
        self.compile_graph = compile_graph
        self.options = options_of(options)
        self.failures: list[str] = []  # guard failures since the last compile (the guard_fail_fn of `wrap`)
        self.label: str | None = None  # the compiled function's name, when `DynamoFrontend.wrap` made this backend
        self._count = itertools.count()
        self._warned = False

    def __call__(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
        clock = Stopwatch()  # capture: Dynamo's FX graph to an ember graph
        compile_id = CompileContext.current_compile_id()
        name = _graph_name(compile_id) if compile_id else f"dynamo_{next(self._count)}"
        self._report_break(gm)
        if compile_id is not None and getattr(compile_id, "frame_compile_id", 0):
            reason = "; ".join(dict.fromkeys(self.failures)) or "Dynamo recompiled the frame"
            report("recompiled", reason, compile_id=str(compile_id), reason=reason)
        self.failures.clear()
        fake_mode = detect_fake_mode(example_inputs)
        dynamo_gm = gm  # what runs eagerly if capture refuses the graph
        if any(isinstance(x, BackwardState) for x in example_inputs):
            reason = ("the graph registers backward hooks through compiled autograd's BackwardState (a hook on an "
                      "intermediate tensor or a module's full backward hook); it runs eagerly, and compiled autograd "
                      "captures its backward and the hooks with the rest")
            return self._eager(dynamo_gm, name, reason)
        try:
            gm, example_inputs, flatten = _flatten_list_inputs(gm, example_inputs)
        except EmberError as e:
            return self._eager(dynamo_gm, name, e)
        fakes = _fake_inputs(gm, example_inputs, fake_mode)
        gm, lifted = _lift_attributes(gm)
        with fake_mode:
            fakes += [fake_mode.from_tensor(_attribute(gm, t), static_shapes=True) for t in lifted]
        try:
            graph = capture_graph(gm, fakes, name=name, producer=PRODUCER, fake_mode=fake_mode)
        except EmberError as e:  # a construct the graph cannot hold: this graph runs eagerly
            return self._eager(dynamo_gm, name, e)
        if _captured_backward(compile_id):
            graph = _in_backward_region(graph)
        report("graph_captured", f"captured graph {name} ({len(graph.nodes)} nodes)", graph=graph,
               seconds=clock.seconds)
        runner = GraphRunner(graph, self.compile_graph(graph, fakes))
        direct = runner.passthrough
        if lifted:  # the attributes' tensors as they are now: the graph reads and writes the live ones
            def run(*args: Any) -> list:
                return runner([*args, *(_attribute(gm, t) for t in lifted)])
        elif direct is not None:
            def run(*args: Any) -> list:
                return direct(args)
        else:
            def run(*args: Any) -> list:
                return runner(list(args))

        run = self._sharing_checked(run, gm, graph, lifted)
        if flatten is not None:
            flat_run = run

            def run(*args: Any) -> list:
                return flat_run(*flatten(args))

        run.graph = graph  # type: ignore[attr-defined]
        return run

    def _eager(self, gm: fx.GraphModule, name: str, why: str | EmberError) -> Callable:
        """Dynamo's graph `name` runs as Dynamo made it, reported as a fallback and warned about once per backend
        (one compiled function, or one graph of `torch.compile(backend="ember")`). The user's line is the
        construct's, when capture named it, else where the graph starts."""
        reason, where, code = str(why), getattr(why, "where", None), getattr(why, "code", None)
        where = where or _graph_source(gm)
        report("fallback", f"graph {name} runs eagerly: {reason}", graph_name=name, reason=reason, cause="eager",
               where=where, code=code)
        if not self._warned:
            self._warned = True
            of = f" of {self.label}" if self.label else ""
            at = f" (at {where})" if where and where not in reason else ""
            warn_fallback(f"ember: graph {name}{of} runs eagerly{at}: {reason}", "eager", where)
        return gm.forward

    def _sharing_checked(self, run: Callable, gm: fx.GraphModule, graph: Any, lifted: list[str]) -> Callable:
        """`run`, or, for a call in which an argument the graph writes shares memory with another argument, the FX
        graph through the trace frontend. Dynamo's arguments only: the lifted attributes come after them."""
        values, passed = graph.values, len(graph.inputs) - len(lifted)
        args = [k for k, inp in enumerate(graph.inputs[:passed])
                if inp.kind == "user" and values[inp.name].type == "tensor"]
        written = [k for k in args if graph.inputs[k].mutated]
        if not written:
            return run
        others = {w: [k for k in args if k != w] for w in written}
        shared = TraceFrontend().wrap(gm, self.compile_graph, {**self.options, "fullgraph": False})

        def checked(*inputs: Any) -> Any:
            storages = {k: storage_of(inputs[k]) for k in args}
            if len(set(storages.values())) == len(storages):  # no two arguments share memory: the usual call
                return run(*inputs)
            for w, rest in others.items():
                s = storages[w]
                if any(storages[k] == s for k in rest):
                    return shared(*inputs, *(_attribute(gm, t) for t in lifted))
            return run(*inputs)

        return checked

    @staticmethod
    def _report_break(gm: fx.GraphModule) -> None:
        reason = getattr(gm, "compile_subgraph_reason", None)
        if reason is None or not getattr(reason, "graph_break", False):
            return
        first = str(reason.reason).strip().splitlines()[0] if reason.reason else "graph break"
        where, code = _break_source(reason)
        report("graph_break", f"{where}: {first}" + (f"\n    {code}" if code else ""), reason=str(reason.reason),
               where=where, code=code)


class DynamoFrontend:
    """Frontend `dynamo`: `wrap(fn, compile_graph, options)` is `torch.compile(fn, backend=<ember>)`."""

    name = "dynamo"

    def backend(self, compile_graph: Callable, options: Mapping[str, Any] | None = None) -> DynamoBackend:
        prepare_dynamo()  # for the next frames: this one is traced (torch.compile(backend="ember") did it earlier)
        return DynamoBackend(compile_graph, options)

    def wrap(self, fn: Callable, compile_graph: Callable, options: Mapping[str, Any] | None = None) -> Callable:
        prepare_dynamo()
        opts = options_of(options)
        backend = self.backend(compile_graph, opts)
        label = backend.label = qualname(fn)

        def guards_built(guards: Any) -> None:
            compile_id = CompileContext.current_compile_id()
            frame = f", frame {compile_id}" if compile_id is not None else ""
            text = _guards_text(guards)
            report("guards_built", f"guards of {label}{frame}", source=text, function=label,
                   compile_id=str(compile_id) if compile_id is not None else None,
                   graph_name=_graph_name(compile_id) if compile_id is not None else None, guards=text.splitlines())

        def guard_failed(failure: Any) -> None:
            reason = f"{failure.orig_code.co_name}: {failure.reason}"
            backend.failures.append(reason)
            report("guard_failed", reason, function=label, reason=reason)

        settings = dict(nopython=opts["fullgraph"], dynamic=opts["dynamic"], guard_export_fn=guards_built,
                        guard_fail_fn=guard_failed)
        limit = opts["recompile_limit"]
        if isinstance(fn, fx.GraphModule):
            # compiled autograd's backward: it takes values its graph made, not a user's, so its inputs need no
            # check; and it is compiled while Dynamo may be tracing the step that runs it, where the Dynamo-made
            # module must be returned as it comes (Dynamo resumes this frame after the call)
            return _optimized(backend, settings, limit, fn)
        return checking_inputs(_optimized(backend, settings, limit, fn), fn, label)


def _optimized(backend: Callable, settings: dict, limit: int, fn: Callable) -> Callable:
    if _optimize_takes("recompile_limit"):
        return torch._dynamo.optimize(backend, recompile_limit=limit, **settings)(fn)
    return _with_recompile_limit(torch._dynamo.optimize(backend, **settings)(fn), limit)


def _optimize_takes(keyword: str) -> bool:
    """Does this torch's `torch._dynamo.optimize` take `keyword`? (`recompile_limit` came after torch 2.11.)"""
    try:
        return keyword in inspect.signature(torch._dynamo.eval_frame._optimize).parameters
    except (AttributeError, TypeError, ValueError):
        return False


def _with_recompile_limit(optimized: Callable, limit: int) -> Callable:
    """`optimized` under a recompile limit of `limit`, on a torch whose Dynamo takes the limit only from its config:
    the function itself where the config already says `limit`, else each call sets the config's limit for the call
    (Dynamo reads it when it compiles, which happens inside the call; about 10 us a call, and the process-wide
    value is what other threads compiling meanwhile see)."""
    config = torch._dynamo.config
    if config.recompile_limit == limit:
        return optimized

    @functools.wraps(optimized)
    def limited(*args: Any, **kwargs: Any) -> Any:
        before = config.recompile_limit
        config.recompile_limit = limit
        try:
            return optimized(*args, **kwargs)
        finally:
            config.recompile_limit = before

    return limited

