"""One case of the sweep: one sample of one OpInfo, compiled, run and compared with eager, forward or backward.

The rules, in one place:
- forward: the sample's inputs without grad (the inference path); outputs against eager's with
  torch.testing.assert_close at the op's tolerances (the loosest toleranceOverride / precisionOverride its OpInfo
  declares for the dtype on CPU, never tighter than torch's defaults), NaNs equal;
- backward: the inputs that require grad as leaves (the training path); outputs, then the gradients of
  `sum(out * w)` over every floating output (w a fixed random tensor per output) with respect to every input that
  requires grad, against eager's; an input autograd leaves without a gradient counts as a zero gradient;
- inputs: in both phases the sample's tensors after the call are compared with eager's like outputs, so an op that
  writes into its inputs (batch norm's running statistics, `zero_`) is checked for what it wrote;
- bfloat16 and float16: a value that misses the tolerance still passes when it is no further from a float32
  reference (the op on the inputs cast to float32) than eager's own 16-bit value is:
  max |ember - ref32| <= 1.1 max |eager - ref32|;
- float32: likewise against a float64 reference, and only when the value also matches that reference at the op's
  tolerances: a result that is the rounding residue of much larger terms (layer norm's input gradient over one
  element, mathematically 0, comes out as 0 or as 3e-5 in eager depending on ATen's vector kernels) compares with
  eager's residue beyond float32's tolerance although both are right; random ops get no float64 reference;
- random ops: ember reproduces eager's random stream (dropout, bernoulli, rand_like and the like draw the same
  values under the same seed), so every run starts from the same seed and random ops are compared like any other.
  An op is marked random when two eager runs under different seeds disagree; a mismatch of such an op is classed
  `random-mismatch`.
- uninitialized outputs (`empty`, `new_empty_strided`, ...): their values are whatever memory held, so only the
  outputs' shapes, dtypes and devices are compared.
A case where eager itself raises (or computes no gradient) is `skipped-by-eager`; an exception from the compiled run
is `error`, with its class and first line. A case that matches eager but whose graph did not compile (a `fallback`
event of a cause in `STRICT_FALLBACKS`: generated code that did not build, a graph that could not be lowered or
printed) is `fallback`, a failure like the others: the interpreter codegen gave the right numbers, ember's codegen
none, so it fails the sweep unless the expected-failures list names it with its reason (as ember's own tests fail
on a build failure: ember-core's `no_build_failures`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PHASES = ("forward", "backward")
STATUSES = ("pass", "fail-mismatch", "error", "fallback", "skipped-by-eager")
FAILURES = ("fail-mismatch", "error", "fallback")
# Fallback causes (ember_core.FALLBACK_CAUSES) that fail a case: each means a codegen could not handle the graph it
# was given, so the graph (or a kernel of it) ran in an interpreter instead. The others are by design (a graph
# break runs eagerly, a gradient the joint trace cannot follow runs under eager autograd) and are only reported.
STRICT_FALLBACKS = ("build", "lowering", "print", "kernel")
COMPILERS = ("ember", "inductor", "eager")  # inductor: reference only; eager: checks the harness itself
SEED = 1234
SAMPLES = 3
# Ops whose outputs are uninitialized memory: values are never comparable, only metadata.
UNINITIALIZED = frozenset({"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided"})
SLACK = 1.1  # how much further from the wider reference than eager a value may be
# the reference's dtype for a case's dtype
WIDER = {"bfloat16": torch.float32, "float16": torch.float32, "float32": torch.float64}
# Where samples are made and run: `cpu` (the sweep, CI's subset), or `cuda` (`run --device cuda`, on a GPU machine:
# `./dev gpu`). Set once per process, before any case runs; tolerance overrides are the OpInfo's for this device type.
DEVICE = "cpu"
GRID = 0.0  # `run --grid STEP`: float inputs rounded to multiples of STEP (`on_grid`); 0 leaves them as made
# `run --layout L`: every copy of a sample's tensors gets layout L, the same values in other memory (`relaid`);
# "" leaves them as torch's samples make them (mostly contiguous)
LAYOUTS = ("noncontiguous", "transposed")
LAYOUT = ""
# `run --dynamic`: each op compiled once with dynamic=True for all its samples (a phase's compiled function takes
# the sample's args and kwargs), so a graph made with symbolic sizes from one sample runs the next samples' sizes
DYNAMIC = False


@dataclasses.dataclass
class CaseResult:
    op: str
    variant: str
    sample: int
    dtype: str
    phase: str
    status: str
    error: str = ""  # the error's or the mismatch's first line
    error_type: str = ""
    klass: str = ""  # the failure class (`classify`); empty for a pass or a skip
    fallbacks: list[list[str]] = dataclasses.field(default_factory=list)  # [stage, cause, reason] of each fallback
    breaks: list[str] = dataclasses.field(default_factory=list)  # graph-break reasons (fullgraph is False)
    graphs: int = 0  # graphs ember captured: a pass with none ran wholly in eager
    random: bool = False
    seconds: float = 0.0
    compiler: str = "ember"

    @property
    def key(self) -> tuple[str, str, str, str, int]:
        return (self.op, self.variant, self.dtype, self.phase, self.sample)

    @property
    def failed(self) -> bool:
        return self.status in FAILURES

    def strict_fallbacks(self) -> list[list[str]]:
        """The fallbacks (`[stage, cause, reason]`) of causes that fail the case (`STRICT_FALLBACKS`)."""
        return [f for f in self.fallbacks if len(f) == 3 and f[1] in STRICT_FALLBACKS]


# ---------------------------------------------------------------------------------------------------- the op table


@functools.cache
def op_db() -> tuple[Any, ...]:
    """torch's OpInfos sorted by (name, variant); importing them takes a few seconds, so only on first use."""
    import sys

    from torch.testing._internal.common_methods_invocations import op_db as db

    # Random ops' OpInfos call `wrapper_set_seed(fn, ...)`, which reseeds inside a freeze_rng_state block: Dynamo
    # breaks the graph there and ember would never see the op. The sweep seeds every run itself, so the wrapper
    # only has to call the function (torch's Inductor OpInfo tests make the same substitution).
    for name, module in list(sys.modules.items()):
        if name.startswith("torch.testing._internal") and hasattr(module, "wrapper_set_seed"):
            module.wrapper_set_seed = _call_unseeded
    return tuple(sorted(db, key=lambda op: (op.name, op.variant_test_name)))


def _call_unseeded(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


def op_key(op: Any) -> str:
    """`name` or `name.variant`: how the sweep, its lists and its reports name an OpInfo."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def find_op(key: str) -> Any:
    for op in op_db():
        if op_key(op) == key:
            return op
    raise KeyError(f"no OpInfo named {key!r} in op_db")


def ops_for(dtype: str) -> list[Any]:
    """The OpInfos that support `dtype` on the sweep's device."""
    return [op for op in op_db() if op.supports_dtype(DTYPES[dtype], DEVICE)]


def wants_backward(op: Any, dtype: str) -> bool:
    return bool(op.supports_autograd) and DTYPES[dtype] in op.supported_backward_dtypes(DEVICE)


def samples(op: Any, dtype: str, requires_grad: bool, count: int = SAMPLES) -> list[Any]:
    torch.manual_seed(SEED)
    chosen = list(itertools.islice(op.sample_inputs(DEVICE, DTYPES[dtype], requires_grad=requires_grad), count))
    return [on_grid(s, GRID) for s in chosen] if GRID else chosen


def on_grid(sample: Any, step: float) -> Any:
    """The sample with each floating tensor rounded to a multiple of `step`: margins met exactly, ties, zeros and
    probabilities of exactly 0 or 1 become common (as in quantized or integer-valued data), where a gradient
    differentiated through a decomposition can differ from eager's formula."""
    def snap(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            return t
        return (t.detach() / step).round().mul(step).to(t.dtype).requires_grad_(t.requires_grad)

    return sample.transform(snap)


def relaid(t: torch.Tensor, layout: str) -> torch.Tensor:
    """`t`'s values in the memory of `layout`: `noncontiguous`, every element one slot apart in a storage twice the
    size, from offset 1, the gaps NaN in a float tensor (torch's `noncontiguous_like`: every stride doubled, a
    storage offset); or `transposed`, a tensor of two or more dims stored column-major (its last two dims swapped in
    memory). Eager and the compiled run both get such copies, so a kernel that assumes contiguous memory, or forgets
    the offset, reads the gaps or the wrong elements. Sparse tensors keep their layout."""
    if layout not in ("", *LAYOUTS):
        raise ValueError(f"unknown layout {layout!r}; one of {LAYOUTS}")
    if t.layout != torch.strided:
        return t
    if layout == "noncontiguous" and t.numel():
        from torch.testing._internal.common_utils import noncontiguous_like

        return noncontiguous_like(t)
    if layout == "transposed" and t.dim() >= 2:
        return t.mT.contiguous().mT
    return t


def tolerances(op: Any, dtype: str) -> tuple[float, float]:
    """(atol, rtol): torch's defaults for the dtype, loosened by any override the OpInfo declares for it on the
    sweep's device type."""
    from torch.testing._comparison import default_tolerances
    from torch.testing._internal.common_device_type import precisionOverride, toleranceOverride

    torch_dtype = DTYPES[dtype]
    rtol, atol = default_tolerances(torch_dtype)
    for info in op.decorators:
        if getattr(info, "device_type", None) not in (None, torch.device(DEVICE).type):
            continue
        for dec in getattr(info, "decorators", [info]):
            if isinstance(dec, toleranceOverride) and torch_dtype in dec.d:
                atol, rtol = max(atol, dec.d[torch_dtype].atol), max(rtol, dec.d[torch_dtype].rtol)
            elif isinstance(dec, precisionOverride) and torch_dtype in dec.d:
                atol = max(atol, dec.d[torch_dtype])
    return atol, rtol


# ---------------------------------------------------------------------------------------------------- running


def compile_with(compiler: str, fn: Callable, dynamic: bool | None = None) -> Callable:
    if compiler == "ember":
        import ember

        return ember.compile(fn, dynamic=dynamic)
    if compiler == "inductor":
        return torch.compile(fn, dynamic=dynamic)
    if compiler == "eager":
        return fn
    raise ValueError(f"unknown compiler {compiler!r}; one of {COMPILERS}")


def copy_inputs(tree: Any, grad: bool, upcast: str | None = None) -> Any:
    """Fresh leaf copies of a sample's tensors; `grad` keeps requires_grad, `upcast` (a case's dtype) turns its
    tensors into the wider reference dtype (`WIDER`: bfloat16 and float16 into float32, float32 into float64)."""

    def copy(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        c = t.detach().clone()
        if upcast and c.dtype == DTYPES[upcast]:
            c = c.to(WIDER[upcast])
        return relaid(c, LAYOUT).requires_grad_(grad and t.requires_grad)

    return tree_map(copy, tree)


def weight_like(out: torch.Tensor, index: int, dtype: torch.dtype) -> torch.Tensor:
    """The fixed random `w` of output `index`: float32 values rounded through the sample's dtype, as `out`'s dtype."""
    g = torch.Generator().manual_seed(SEED + index)
    return torch.randn(out.shape, generator=g).to(dtype).to(out.device, out.dtype)


@dataclasses.dataclass
class Run:
    outputs: Any
    grads: list[torch.Tensor] | None = None
    inputs: list[torch.Tensor] | None = None  # the sample's tensors right after the call (what a mutation wrote)


def after_call(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """Copies of the call's tensor arguments as they are after the call."""
    return [t.detach().clone() for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]


def execute(fn: Callable, args: tuple, kwargs: dict, sample: Any, dtype: torch.dtype, backward: bool) -> Run:
    """Call `fn(*args)` from the fixed seed; for backward, also the gradients of sum(out * w) over the grad inputs."""
    torch.manual_seed(SEED)
    out = fn(*args)
    written = after_call(args, kwargs)
    if not backward:
        return Run(out, inputs=written)
    out = sample.output_process_fn_grad(out)
    leaves = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.is_floating_point()]
    terms = [(o * weight_like(o, i, dtype)).sum() for i, o in enumerate(leaves) if o.requires_grad]
    inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor) and t.requires_grad]
    if not terms or not inputs:
        raise NoGradient("no floating output requires grad" if not terms else "no input requires grad")
    grads = torch.autograd.grad(sum(terms), inputs, allow_unused=True)
    return Run(out, [torch.zeros_like(i) if g is None else g for g, i in zip(grads, inputs)], written)


class NoGradient(Exception):
    """Eager's run has nothing to differentiate: the backward case is skipped."""


def call_op(op: Any, kwargs: dict) -> Callable:
    return lambda *args: op(*args, **kwargs)


# run --dynamic: (op key, phase, compiler) → the op compiled once, `fn(args, kwargs)`, for every sample of the op
_SHARED: dict[tuple[str, str, str], Callable] = {}


def compiled_op(op: Any, kwargs: dict, phase: str, compiler: str) -> Callable:
    """The op compiled for one sample: its own compiled function, or under `DYNAMIC` the one compiled function of
    the op and phase (dynamic=True), the sample's kwargs passed to it, so that Dynamo reuses a graph across samples
    where its guards let it."""
    if not DYNAMIC:
        torch._dynamo.reset()
        return compile_with(compiler, call_op(op, kwargs))
    key = (op_key(op), phase, compiler)
    if key not in _SHARED:

        def apply(args: tuple, kwargs: dict) -> Any:
            return op(*args, **kwargs)

        _SHARED[key] = compile_with(compiler, apply, dynamic=True)
    shared = _SHARED[key]
    return lambda *args: shared(args, kwargs)


def run_phase(op: Any, sample: Any, dtype: str, phase: str, compiler: str) -> tuple[Run | None, Any, Exception | None]:
    """Eager's run of the phase, then the compiled one: (eager, (compiled run or error), eager's error)."""
    backward = phase == "backward"
    torch_dtype = DTYPES[dtype]
    args, kwargs = copy_inputs(((sample.input, *sample.args), sample.kwargs), backward)
    try:
        eager = execute(call_op(op, kwargs), args, kwargs, sample, torch_dtype, backward)
    except Exception as e:  # noqa: BLE001 - eager's own refusal of the sample
        return None, None, e
    args, kwargs = copy_inputs(((sample.input, *sample.args), sample.kwargs), backward)
    try:
        compiled = compiled_op(op, kwargs, phase, compiler)
        return eager, execute(compiled, args, kwargs, sample, torch_dtype, backward), None
    except Exception as e:  # noqa: BLE001 - recorded, never raised: one op's failure must not stop the sweep
        return eager, e, None


def reference(op: Any, sample: Any, dtype: str, phase: str) -> Run | None:
    """The op on the inputs cast to the wider dtype (float32 for bfloat16 and float16, float64 for float32), for
    judging a result that misses eager's at the tolerances; None where that run fails."""
    backward = phase == "backward"
    args, kwargs = copy_inputs(((sample.input, *sample.args), sample.kwargs), backward, upcast=dtype)
    try:
        return execute(call_op(op, kwargs), args, kwargs, sample, DTYPES[dtype], backward)
    except Exception:  # noqa: BLE001
        return None


def is_random(op: Any, sample: Any) -> bool:
    """Whether two eager runs under different seeds disagree (dropout, bernoulli, randn_like, ...)."""
    runs = []
    for seed in (SEED, SEED + 1):
        args, kwargs = copy_inputs(((sample.input, *sample.args), sample.kwargs), False)
        torch.manual_seed(seed)
        try:
            runs.append(op(*args, **kwargs))
        except Exception:  # noqa: BLE001 - eager's refusal shows up in the case itself
            return False
    try:
        torch.testing.assert_close(runs[0], runs[1], rtol=0, atol=0, equal_nan=True)
        return False
    except AssertionError:
        return True


# ---------------------------------------------------------------------------------------------------- comparing


def mismatch_text(e: AssertionError, where: str) -> str:
    """A one-line account of an assert_close failure: what differed, and by how much."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    keep = [line for line in lines if not line.startswith(("Tensor-likes are not", "Scalars are not"))] or lines[:1]
    return f"{where}: " + "; ".join(keep[:3])


def max_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    if x.numel() == 0:
        return 0.0
    d = (x.double() - ref.double()).abs()
    d = torch.where(torch.isnan(x) & torch.isnan(ref), torch.zeros_like(d), d)
    return float(torch.nan_to_num(d, nan=float("inf")).max())


def compare(actual: Any, expected: Any, atol: float, rtol: float, where: str, ref: Any = None) -> str | None:
    """None when `actual` matches `expected`, else the mismatch's one line. With `ref` (the run in the wider dtype),
    a floating value that misses the tolerance passes when it is no further from `ref` than `expected` is; against a
    float64 `ref` (a float32 case) it must also match `ref` itself at the tolerances."""
    try:
        torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, equal_nan=True)
        return None
    except AssertionError as e:
        whole = mismatch_text(e, where)
    if ref is None:
        return whole
    flat_a, spec_a = tree_flatten(actual)
    flat_e, spec_e = tree_flatten(expected)
    flat_r, spec_r = tree_flatten(ref)
    if not (spec_a == spec_e == spec_r):
        return whole
    for i, (a, x, r) in enumerate(zip(flat_a, flat_e, flat_r)):
        try:
            torch.testing.assert_close(a, x, atol=atol, rtol=rtol, equal_nan=True)
            continue
        except AssertionError as e:
            leaf = mismatch_text(e, f"{where}[{i}]" if len(flat_a) > 1 else where)
        usable = all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in (a, x, r)) and \
            a.shape == x.shape == r.shape and a.dtype == x.dtype
        if not usable:
            return leaf
        ours, eagers = max_error(a, r), max_error(x, r)
        wider = str(r.dtype).removeprefix("torch.")
        if ours > SLACK * eagers + atol:
            return f"{leaf}; max error against {wider}: {ours:.3g} (eager's {eagers:.3g})"
        if r.dtype == torch.float64 and not torch.allclose(a.double(), r, rtol=rtol, atol=atol, equal_nan=True):
            return f"{leaf}; max error against {wider}: {ours:.3g}, beyond the tolerances (eager's {eagers:.3g})"
    return None


def metadata(tree: Any) -> list[Any]:
    return [(tuple(t.shape), t.dtype, t.device) if isinstance(t, torch.Tensor) else type(t).__name__
            for t in tree_flatten(tree)[0]]


def judge(op: Any, dtype: str, phase: str, eager: Run, compiled: Run, ref: Run | None) -> str | None:
    if op.name in UNINITIALIZED:
        ours, theirs = metadata(compiled.outputs), metadata(eager.outputs)
        return None if ours == theirs else f"output metadata: {ours} != eager's {theirs}"
    atol, rtol = tolerances(op, dtype)
    bad = compare(compiled.outputs, eager.outputs, atol, rtol, "output", ref.outputs if ref else None) or \
        compare(compiled.inputs, eager.inputs, atol, rtol, "input after the call", ref.inputs if ref else None)
    if bad or phase == "forward":
        return bad
    if len(compiled.grads) != len(eager.grads):
        return f"grads: {len(compiled.grads)} gradients, eager has {len(eager.grads)}"
    for i, (c, e) in enumerate(zip(compiled.grads, eager.grads)):
        r = ref.grads[i] if ref and ref.grads and len(ref.grads) == len(eager.grads) else None
        bad = compare(c, e, atol, rtol, f"grad of input {i}", r)
        if bad:
            return bad
    return None


# ---------------------------------------------------------------------------------------------------- one case


def error_parts(e: BaseException) -> tuple[str, str]:
    """(class, first line) of an error; a Dynamo wrapper (BackendCompilerFailed) is unwrapped to what it wraps."""
    inner = getattr(e, "inner_exception", None)
    kind = type(e).__name__
    if isinstance(inner, BaseException):
        kind, e = f"{kind}:{type(inner).__name__}", inner
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return kind, (lines[0] if lines else "")[:300]


# Failure classes of errors: the first rule whose pattern matches "ErrorType: first line" names the class. A new kind
# of error falls to `error-<type>`; give it a rule here when it names a cause worth its own line in the report.
CLASS_RULES: list[tuple[str, str]] = [
    (r"Could not find a token for effect", "effect-token"),  # ops with side effects (aten._linalg_check_errors)
    (r"derivative for aten::copy is not implemented", "copy-derivative"),
    (r"has no name in the ember schema", "dtype-unsupported"),
    (r"backward through prims\.\w+.* no autograd formula", "prims-no-autograd"),
    (r"PendingUnbackedSymbolNotFound|unbacked symbol", "unbacked-symbol"),
    (r"^NoGradient:", "grad-lost"),  # eager's output requires grad, the compiled one's does not
    (r"^WorkerTimeout", "worker-timeout"),
    (r"^WorkerCrashed", "worker-crashed"),
]
ROUNDING = 1e-3  # a value mismatch whose greatest relative difference is below this is classed `rounding`


def classify(result: CaseResult) -> str:
    """The failure's class: what the report groups by and the expected-failures list records."""
    if result.status == "fallback":
        causes = [cause for _, cause, _ in result.strict_fallbacks()]
        return f"{causes[0] if causes else 'unspecified'}-fallback"  # build-fallback, lowering-fallback ...
    if result.status == "fail-mismatch":
        if result.random:
            return "random-mismatch"
        if "The values for attribute" in result.error or "metadata" in result.error:
            return "metadata-mismatch"  # dtype, shape, device or stride of an output
        rel = re.search(r"[Rr]elative difference: ([-+0-9.e]+)", result.error)
        if rel and float(rel.group(1)) < ROUNDING:
            return "rounding"
        return "grad-mismatch" if result.error.startswith("grad") else "mismatch"
    text = f"{result.error_type}: {result.error}"
    for pattern, name in CLASS_RULES:
        if re.search(pattern, text):
            return name
    kind = result.error_type.rsplit(":", 1)[-1]
    return "error-" + re.sub(r"(?<!^)(?=[A-Z])", "-", kind).lower()


def fallback_reason(event: Any) -> str:
    """The event's reason in one line, without graph names or build paths, so that one reason counts once across
    cases; for a failed build, the compiler's first error."""
    reason = str(event.get("reason") or event.message)
    lines = reason.splitlines() or [""]
    head = lines[0]
    if "the build failed" in head:
        errors = [line.split("error:", 1)[1].strip() for line in lines if "error:" in line]
        head = head.split(":", 1)[0] + (f": error: {errors[0]}" if errors else "")
    head = re.sub(r"\bgraph '?dynamo_\w+'?:? ?", "graph ", head)
    return re.sub(r"(/[\w.+-]+)+/?", "<path>", head).strip()[:300]


def dynamo_breaks() -> list[str]:
    """The graph-break reasons Dynamo counted since the last call (first lines), then the count cleared. Dynamo's
    own count, because a break before any op leaves ember no graph to report it with."""
    from torch._dynamo.utils import counters

    reasons = [str(r).strip().splitlines()[0][:200] for r in counters["graph_break"] if str(r).strip()]
    counters["graph_break"].clear()
    return reasons


def fail_on_fallbacks(result: CaseResult) -> None:
    """A case that matched eager although its graph did not compile (a fallback of a `STRICT_FALLBACKS` cause: the
    interpreter ran it) is a `fallback` failure, its first such fallback the error."""
    strict = result.strict_fallbacks()
    if result.status == "pass" and strict:
        stage, cause, reason = strict[0]
        result.status, result.error = "fallback", f"{stage} ({cause}): {reason}"[:300]


def run_sample(op: Any, sample: Any, index: int, dtype: str, phases: Sequence[str],
               compiler: str = "ember") -> list[CaseResult]:
    """Every requested phase of one sample; never raises for the op's sake."""
    import ember_core
    from ember_core.testing import fallback_cause

    random = is_random(op, sample) if "forward" in phases else False
    results = []
    for phase in phases:
        start = time.perf_counter()
        result = CaseResult(op.name, op.variant_test_name, index, dtype, phase, "pass", random=random,
                            compiler=compiler)
        dynamo_breaks()
        with ember_core.record_events() as rec:
            eager, compiled, refused = run_phase(op, sample, dtype, phase, compiler)
        result.fallbacks = [[e.stage, fallback_cause(e), fallback_reason(e)] for e in rec.kinds("fallback")]
        result.graphs = len(rec.kinds("graph_captured"))
        result.breaks = dynamo_breaks()
        if refused is not None:
            result.status = "skipped-by-eager"
            result.error_type, result.error = error_parts(refused)
        elif isinstance(compiled, Exception):
            result.status = "error"
            result.error_type, result.error = error_parts(compiled)
        else:
            ref = reference(op, sample, dtype, phase) if WIDER[dtype] == torch.float32 else None
            try:
                bad = judge(op, dtype, phase, eager, compiled, ref)
                if bad and dtype == "float32" and not random:  # judged again against float64, only on a miss
                    ref = reference(op, sample, dtype, phase)
                    bad = bad if ref is None else judge(op, dtype, phase, eager, compiled, ref)
            except Exception as e:  # noqa: BLE001 - outputs of a shape assert_close cannot even pair up
                bad = "compare: " + " ".join(error_parts(e))
            if bad:
                result.status, result.error = "fail-mismatch", bad[:300]
        fail_on_fallbacks(result)
        if result.failed:
            result.klass = classify(result)
        result.seconds = round(time.perf_counter() - start, 3)
        results.append(result)
    if not DYNAMIC:
        torch._dynamo.reset()
    return results


def run_op(op: Any, dtype: str, phases: Sequence[str], compiler: str = "ember", count: int = SAMPLES,
           skip: int = -1, on_begin: Callable[[int], None] | None = None) -> Any:
    """Yield the CaseResults of an op's first `count` samples, after sample `skip` (a resumed worker's place)."""
    phases = [p for p in phases if p == "forward" or wants_backward(op, dtype)]
    torch._dynamo.reset()
    _SHARED.clear()
    try:
        chosen = samples(op, dtype, "backward" in phases, count)
    except Exception as e:  # noqa: BLE001
        kind, first = error_parts(e)
        for phase in phases:
            yield CaseResult(op.name, op.variant_test_name, 0, dtype, phase, "skipped-by-eager",
                             f"sample inputs: {first}", kind, compiler=compiler)
        return
    for index, sample in enumerate(chosen):
        if index <= skip:
            continue
        if on_begin is not None:
            on_begin(index)
        yield from run_sample(op, sample, index, dtype, phases, compiler)
