"""FX or Python → functional ATen `Graph`: the conversion both frontends share.

`capture_graph(fn, fake_inputs)` traces `fn` with make_fx under the fake mode of its inputs (Dynamo's own, when
the inputs come from Dynamo, so symbolic sizes and guards stay one story), functionalizes it, decomposes it to
`ember_core.capture_decompositions()`, and reads the result with `ember_core.from_fx`. Input mutations become
`Input(mutated=True)` + `Output(kind="mutation")`; outputs that share storage with an input become
`Output(kind="alias")`. Symbols are named `s0, s1, ...` in order of first appearance (`canonical_symbols`), whichever
frontend traced. Gradient facts that only eager autograd knows are written into `Value.requires_grad`, and
no_grad regions inside the function become `aten.detach` at their boundary. A custom autograd function that needs a
gradient becomes one `ember.custom_function` call with its forward and backward as subgraphs
(`_custom_functions.py`), so no detach cuts it off: its own backward is its gradient.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import ember_core
import torch
import torch.fx as fx
from ember_core import (
    Graph,
    Input,
    Output,
    capture_decompositions,
    custom_function_arguments,
    eager_derivatives,
    is_custom_function,
    iter_refs,
    tracing_lock,
    without_saved_tensor_hooks,
)
from torch._dispatch.python import enable_python_dispatcher
from torch._guards import detect_fake_mode
from torch._subclasses.fake_tensor import is_fake
from torch.fx.experimental.proxy_tensor import make_fx

from ._custom_functions import CustomFunctions, dynamo_body, function_name, needs_gradient
from ._errors import CaptureError, is_torch_file
from ._function_apply import intercepting_functions
from ._functionalize import TraceFacts, functionalized


def _kind_from_name(name: str) -> str:
    if "_parameters_" in name:
        return "param"
    if "_buffers_" in name:
        return "buffer"
    return "user"


def readable_name(name: str) -> str:
    """A Dynamo placeholder name made short: `L_x_` → `x`, `L_self_modules_fc_parameters_weight_` → `fc_weight`."""
    name = re.sub(r"^[LlGg]_", "", name).removeprefix("self_").rstrip("_")
    name = name.replace("modules_", "").replace("parameters_", "").replace("buffers_", "")
    name = re.sub(r"\W", "_", name)
    return name if name and not name[0].isdigit() else f"in_{name}"


def _rename(node: fx.Node, name: str) -> None:
    if node.name != name:
        node._rename(name)


def _is_hop(target: Any, name: str) -> bool:
    """Whether an fx target is the higher-order op of that name (Dynamo's ops for hooks, custom functions ...)."""
    return isinstance(target, torch._ops.HigherOrderOperator) and target.name() == name


def _check_python_effects(gm: fx.GraphModule) -> None:
    """Dynamo records a hook registered on an intermediate tensor as an op; make_fx would drop it silently."""
    for node in gm.graph.nodes:
        if _is_hop(node.target, "register_hook"):
            where = _source_of(node)
            raise CaptureError("a tensor hook registered inside the graph cannot be captured", where)


def _source_of(node: fx.Node) -> str | None:
    lines = (node.meta.get("stack_trace") or "").splitlines()
    frames = [m.group("path", "line") for m in map(_FRAME.match, lines) if m]
    return ":".join(frames[-1]) if frames else None


def _trace(fn: Callable, fake_inputs: Sequence[Any], fake_mode, facts: TraceFacts,
           custom: CustomFunctions) -> fx.GraphModule:
    """make_fx of `fn`, functional and decomposed. A GraphModule is re-run node by node so its meta survives;
    Python meets custom autograd functions through `Function.apply`, which the trace intercepts."""
    is_gm = isinstance(fn, fx.GraphModule)
    target = _DynamoReplay(fn, custom).run if is_gm else fn
    context = fx.traceback.preserve_node_meta() if is_gm else intercepting_functions(custom)
    depth = _functorch_depth()
    try:
        with fake_mode, enable_python_dispatcher(), context:
            gm = make_fx(functionalized(target, facts), decomposition_table=capture_decompositions(),
                         record_stack_traces=not is_gm)(*fake_inputs)
    except BaseException:
        _leave_functorch_levels(depth)
        raise
    return gm


_DECREMENTS = {"Vmap": "_vmap_decrement_nesting", "Grad": "_grad_decrement_nesting",
               "Jvp": "_jvp_decrement_nesting", "Functionalize": "_func_decrement_nesting"}


def _functorch_depth() -> int:
    return len(torch._C._functorch.get_interpreter_stack() or ())


def _leave_functorch_levels(depth: int) -> None:
    """Dynamo's graph of `torch.func.vmap`/`grad` enters each transform's level with one node and leaves it with
    another; a replay refused between the two (a backward with create_graph=True inside `grad`) left the level
    entered, and Dynamo's guards, checked next on the empty stack they were built for, failed with an internal
    error. The levels the replay entered are left again."""
    while _functorch_depth() > depth:
        leave = _DECREMENTS.get(torch._C._functorch.peek_interpreter_stack().key().name)
        if leave is None:  # a transform this torch added: left as it is (the refusal being raised stays the error)
            return
        getattr(torch._C._functorch, leave)()


class _DynamoReplay(fx.Interpreter):
    """Re-runs Dynamo's graph; a call of `autograd_function_apply` that needs a gradient becomes one
    `ember.custom_function` call (one that needs none runs inline, as eager would). A `nested_compile_region`
    (`invoke_subgraph`) runs its subgraph inline: it only asks to compile a repeated body once, and one graph with
    the body's ops at each call computes the same. A refusal without a source line gets the node's."""

    def __init__(self, gm: fx.GraphModule, custom: CustomFunctions):
        super().__init__(gm)
        self.custom = custom
        self._node: fx.Node | None = None  # the node being run, for the function's name

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        if _is_hop(target, "invoke_subgraph") and args and isinstance(args[0], fx.GraphModule) and not kwargs:
            return tuple(_DynamoReplay(args[0], self.custom).run(*args[2:]))
        if not _is_hop(target, "autograd_function_apply") or not needs_gradient(args[2:]):
            return super().call_function(target, args, kwargs)
        fwd, bwd, *operands = args
        body = dynamo_body(function_name(self._node), fwd, bwd, kwargs)
        return self.custom.call(body, operands)

    def run_node(self, n: fx.Node) -> Any:
        self._node = n
        try:
            return super().run_node(n)
        except CaptureError as e:
            where = _source_of(n)
            if e.where is not None or where is None:
                raise
            raise CaptureError(e.reason, where) from e


_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in .*$')


def _user_frames_only(gm: fx.GraphModule) -> None:
    """Drop torch's own frames from stack traces, so a node's source is the user's line, not `linear.py:134`."""
    for node in gm.graph.nodes:
        trace = node.meta.get("stack_trace")
        if not trace:
            continue
        kept, keep = [], True
        for line in trace.splitlines():
            m = _FRAME.match(line)
            if m:
                keep = not is_torch_file(m.group("path"))
            if keep:
                kept.append(line)
        node.meta["stack_trace"] = "\n".join(kept) if kept else None


def _insert_no_grad_detaches(gm: fx.GraphModule, facts: TraceFacts) -> None:
    """Values computed under no_grad and read where grad is on get an `aten.detach`, as eager would have it."""
    if not facts.grad_enabled:
        return
    for node in list(gm.graph.nodes):
        val = node.meta.get("val")
        if node.meta.get("ember_grad", True) or not isinstance(val, torch.Tensor) or not val.is_floating_point():
            continue
        readers = [u for u in node.users if u.op == "output" or u.meta.get("ember_grad", True)]
        if not readers:
            continue
        with gm.graph.inserting_after(node):
            detached = gm.graph.call_function(torch.ops.aten.detach.default, (node,))
        detached.meta.update(val=val, ember_grad=False, stack_trace=node.meta.get("stack_trace"))
        for user in readers:
            user.replace_input_with(node, detached)


def _check_constants(gm: fx.GraphModule) -> None:
    """Tensors the function closes over become graph constants; one that needs grad would silently lose it, and a
    fake one (a tensor of an enclosing trace, which a custom function's forward reached other than through its
    arguments, say inside a list) has no data at all."""
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        value = getattr(gm, node.target)
        if not isinstance(value, torch.Tensor):  # an object make_fx kept as a constant (a generator it reached)
            raise CaptureError(f"the function uses a {type(value).__name__} that a graph cannot hold as a value")
        if is_fake(value):
            raise CaptureError("the function reads a tensor of the traced program that it is not given as an "
                               "argument (inside a list or another container, say); pass it as an argument")
        if value.requires_grad:
            raise CaptureError("the function reads a tensor that requires grad but is neither an argument nor a "
                               "module parameter; pass it as an argument")


def _alias_views(gm: fx.GraphModule, facts: TraceFacts, fake_mode) -> None:
    """An alias output whose graph value lost the eager view's layout (the view was written through, so the
    functional graph computes fresh data) reads the input through `as_strided` instead: its `Value` then says how
    to rebuild the view, which is all an alias output is for."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    values = list(out.args[0])
    for j, k in enumerate(facts.aliases):
        val = values[j].meta.get("val") if k is not None else None
        layout = facts.layouts[j]
        if val is None or repr(layout) == repr((tuple(val.shape), tuple(val.stride()), val.storage_offset())):
            continue
        size, stride, offset = layout
        with gm.graph.inserting_before(out):
            view = gm.graph.call_function(torch.ops.aten.as_strided.default, (placeholders[k], size, stride, offset))
        with fake_mode:
            view.meta["val"] = torch.as_strided(placeholders[k].meta["val"], size, stride, offset)
        values[j] = view
    out.args = (values,)


def _stamp_io(gm: fx.GraphModule, facts: TraceFacts, names: Sequence[str], kinds: Sequence[str]) -> None:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for k, node in enumerate(placeholders):
        _rename(node, names[k])
    for k, node in enumerate(placeholders):
        node.meta["ember_input"] = Input(node.name, kinds[k], k in facts.mutated)
    out = next(n for n in gm.graph.nodes if n.op == "output")
    values = out.args[0]
    n_user = len(values) - len(facts.mutated)
    outputs = []
    for j, v in enumerate(values):
        if not isinstance(v, fx.Node):
            raise ember_core.GraphError(f"output {j} is the constant {v!r}, not a graph value")
        if j >= n_user:
            outputs.append(Output(v.name, "mutation", facts.mutated[j - n_user]))
        elif facts.aliases[j] is not None:
            outputs.append(Output(v.name, "alias", facts.aliases[j]))
        else:
            outputs.append(Output(v.name))
    out.meta["ember_outputs"] = outputs


def _requires_grad(graph: Graph, gm: fx.GraphModule, fake_inputs: Sequence[Any], facts: TraceFacts) -> Graph:
    """Values that need grad: inputs as given, then forward through the graph; outputs as eager autograd had them."""
    grad_of = {n.name: n.meta.get("ember_grad", True) and facts.grad_enabled for n in gm.graph.nodes}
    values = dict(graph.values)
    for inp, x in zip(graph.inputs, fake_inputs):
        values[inp.name] = values[inp.name].replace(requires_grad=isinstance(x, torch.Tensor) and x.requires_grad)
    for node in graph.nodes:
        reads = any(r in values and values[r].requires_grad for r in iter_refs((node.args, node.kwargs)))
        on = grad_of.get(node.outputs[0], True)
        marked = _marked_non_differentiable(node)
        for o in node.outputs:
            v = values[o]
            rg = reads and on and node.op != "aten.detach.default" and v.type == "tensor" and _differentiable(v.dtype)
            values[o] = v.replace(requires_grad=rg and o not in marked)
    n_user = len(graph.outputs) - len(facts.mutated)
    for j, out in enumerate(graph.outputs):
        rg = facts.out_requires_grad[j] if j < n_user else facts.mutated_requires_grad[j - n_user]
        values[out.name] = values[out.name].replace(requires_grad=rg)
    return graph.replace(values=values)


def _marked_non_differentiable(node: ember_core.Node) -> set[str]:
    """The outputs of a custom function call that its author marked non-differentiable."""
    if not is_custom_function(node.op):
        return set()
    return {node.outputs[i] for i in custom_function_arguments(node)["non_differentiable"]}


def _differentiable(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat", "complex"))


def capture_graph(fn: Callable, fake_inputs: Sequence[Any], *, input_names: Sequence[str] | None = None,
                  input_kinds: Sequence[str] | None = None, name: str = "graph", producer: str = "",
                  fake_mode=None) -> Graph:
    """The functional ATen graph of `fn(*fake_inputs)`; `fn` returns a tensor or a flat sequence of tensors/SymInts.

    `fn` may be a torch.fx.GraphModule (Dynamo's): its node meta (source lines, module paths) is kept.
    `fake_inputs` are fake tensors (or SymInts) of one fake mode; a placeholder's name and kind come from
    `input_names`/`input_kinds` (default: the GraphModule's placeholder names, kinds read from Dynamo's names).
    """
    fake_mode = fake_mode or detect_fake_mode(fake_inputs)
    if fake_mode is None:
        raise ember_core.GraphError("capture_graph needs fake inputs (or fake_mode=)")
    if input_names is None:
        source = [n.name for n in fn.graph.nodes if n.op == "placeholder"] if isinstance(fn, fx.GraphModule) else []
        input_names = source or [f"arg{i}" for i in range(len(fake_inputs))]
    if input_kinds is None:
        input_kinds = [_kind_from_name(n) for n in input_names]
    names = _unique([_input_name(n, x) for n, x in zip(input_names, fake_inputs)])
    if isinstance(fn, fx.GraphModule):
        _check_python_effects(fn)
    facts = TraceFacts()
    custom = CustomFunctions(fake_mode, producer, capture_graph)
    # make_fx's state is process-wide; a backward the traced function runs (a training step under the trace
    # frontend) is traced here, not handed to compiled autograd
    with tracing_lock(), eager_derivatives(), without_saved_tensor_hooks(), torch._dynamo.compiled_autograd._disable():
        gm = _trace(fn, fake_inputs, fake_mode, facts, custom)
    _dense_values_only(gm)
    _one_placeholder_per_symbol(gm)
    gm.graph.eliminate_dead_code(ember_core.is_impure_node)
    _check_constants(gm)
    _insert_no_grad_detaches(gm, facts)
    _user_frames_only(gm)
    _alias_views(gm, facts, fake_mode)
    _stamp_io(gm, facts, names, input_kinds)
    gm.recompile()
    graph = ember_core.from_fx(gm, name=name, producer=producer)
    graph = _requires_grad(graph.replace(subgraphs=custom.used_by(graph)), gm, fake_inputs, facts)
    # The ShapeEnv named the symbols (by hashes of their sources, which differ between frontends): name them s0,
    # s1 ... in order of first appearance, so every later stage, log and dump shows the same names.
    return ember_core.verify(ember_core.canonical_symbols(graph))


def _dense_values_only(gm: fx.GraphModule) -> None:
    """A graph's values are dense, strided tensors: a sparse, quantized or nested value the function makes
    (`x.to_sparse()`) is refused, named (the frontend then runs the function eagerly, saying why). Recorded as it
    was, its value read as a dense one with strides (0, 0), and the C++ codegen compiled a kernel over it that
    raised at run time."""
    for node in gm.graph.nodes:
        for v in torch.utils._pytree.tree_leaves(node.meta.get("val")):
            problem = ember_core.unsupported_tensor(v) if isinstance(v, torch.Tensor) else None
            if problem is not None:
                raise ember_core.GraphError(f"{node.name} ({node.target}) is {problem}: a graph's values are dense, "
                                            "strided tensors")


def _one_placeholder_per_symbol(gm: fx.GraphModule) -> None:
    """Dynamo passes a size placeholder per input that carries the size, so two placeholders may hold the same
    symbol, and the trace reads whichever came last. Every read of a later one is made a read of the first: the
    later placeholder stays (callers pass every argument) but nothing uses it, and the first names the symbol."""
    first: dict[Any, fx.Node] = {}
    for node in [n for n in gm.graph.nodes if n.op == "placeholder"]:
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt) and val.node.expr.is_symbol:
            earlier = first.setdefault(val.node.expr, node)
            if earlier is not node:
                node.replace_all_uses_with(earlier)


def _input_name(name: str, x: Any) -> str:
    """Symbolic-size inputs are named after their symbol, so a graph's symbols bind from its inputs by name."""
    if isinstance(x, torch.SymInt) and x.node.expr.is_symbol:
        return str(x.node.expr)
    return readable_name(name)


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        k = seen.get(n, 0)
        seen[n] = k + 1
        out.append(n if k == 0 else f"{n}_{k}")
    return out
