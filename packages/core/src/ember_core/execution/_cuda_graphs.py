"""`mode="reduce-overhead"` on CUDA: a compiled graph recorded once as a CUDA graph, then replayed.

A compiled graph launches its kernels one by one from Python; on a GPU a small graph's time is mostly those launches.
`cuda_graphed(compiled)` returns a compiled graph that, for each kind of call, runs normally once (a warm-up: lazy
builds finish, cuBLAS and Triton initialise), records the launches of the second call into a CUDA graph, and from
then on copies the call's inputs into the recording's static input buffers and replays it: one launch.

What each call may change, and what happens:
- tensor shapes, dtypes, strides and the int/float inputs: the kind of call; each kind gets its own recordings (a
  dynamic-shape graph is recorded per size), up to `MAX_RECORDINGS` per graph, then calls of new kinds run
  unrecorded (`fallback`, cause `cudagraphs`, reported once);
- parameters and buffers (inputs of kind `param`/`buffer`) are not copied: the recording reads them where they
  live, and a call whose parameter is another tensor (a new `.data`) records again;
- outputs: a replay writes the recording's own output buffers, which the previous replay returned. A recording is
  replayed only when nothing holds the outputs it returned last (their storages are referenced by it alone);
  otherwise another recording of the same kind is used or made (`out = model(x)` in a loop holds the previous `out`
  while the next call runs: two recordings alternate). With `MAX_RECORDINGS` all held, the call runs unrecorded;
- a CPU tensor among the inputs, or a graph with random ops (a replay would draw the recorded numbers again): never
  recorded, reported once. Inputs the graph writes are not a concern here: ember's compiled graphs are functional
  and return new values, which the frontend writes back.
- a recording that fails (the graph synchronises with the host, allocates pinned memory, ...): the graph runs
  unrecorded from then on, with the error as the reason.

A codegen applies it when `options["mode"] == "reduce-overhead"` and the graph runs on CUDA (the shared
`ember_lowering.codegen` flow does, for every codegen built on it); anyone else's codegen can call it too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..events._events import Event
from ..graph._op_set import is_random
from ..plugins._plugins import emit
from ..plugins._stages import CompiledGraph

log = logging.getLogger("ember.cudagraphs")

MAX_RECORDINGS = 8  # per compiled graph: kinds of call x output sets held at once
WARMUP_CALLS = 1  # unrecorded calls of each kind before it is recorded


class CudaBackend:
    """The CUDA graph calls, one place (tests substitute a stand-in that works on the CPU)."""

    def record(self, fn: Callable[[list], list], inputs: list) -> tuple[Any, list]:
        """Run `fn(inputs)` once more on a side stream (memory for the capture settles there), then record it.
        Returns the graph and the outputs it writes on each replay."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn(inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = fn(inputs)
        return graph, list(outputs)

    def replay(self, graph: Any) -> None:
        graph.replay()

    def references(self, t: torch.Tensor) -> int:
        """How many tensors hold `t`'s storage."""
        return torch._C._storage_Use_Count(t.untyped_storage()._cdata)

    def serves(self, t: torch.Tensor) -> bool:
        return t.device.type == "cuda"


@dataclass
class _Recording:
    graph: Any
    inputs: list  # the static inputs: buffers the replay reads (parameters: the caller's own tensors)
    outputs: list
    param_ptrs: dict[int, int]  # input index -> data_ptr the recording read it at
    own_refs: list[int] = field(default_factory=list)  # per tensor output: references when nobody else holds it

    def free(self, backend: CudaBackend) -> bool:
        """Nobody holds what the last replay returned (so a replay may overwrite it)."""
        outs = [o for o in self.outputs if isinstance(o, torch.Tensor)]
        return all(backend.references(o) <= n for o, n in zip(outs, self.own_refs))


class CudaGraphed:
    """`CudaGraphed(compiled)(inputs)`: the compiled graph through CUDA graph replays (see the module docstring)."""

    def __init__(self, compiled: CompiledGraph, backend: CudaBackend | None = None):
        self.compiled, self.backend = compiled, backend or CudaBackend()
        graph = compiled.graph
        self.static = [inp.kind in ("param", "buffer") for inp in graph.inputs]
        self.refusal = "the graph draws random numbers (a replay would draw the recorded ones again)" \
            if any(is_random(n.op) for n in graph.nodes) else None
        self.calls: dict[tuple, int] = {}  # kind of call -> unrecorded calls so far
        self.recordings: dict[tuple, list[_Recording]] = {}
        self.reported: set[str] = set()
        self.replays = 0
        self._lock = threading.Lock()

    def __call__(self, inputs: Sequence[Any]) -> list:
        inputs = list(inputs)
        if self.refusal is not None:
            return self._unrecorded(inputs, self.refusal)
        key = _call_kind(inputs, self.backend)
        if isinstance(key, str):
            return self._unrecorded(inputs, key)
        with self._lock:
            recording = self._free_recording(key, inputs)
            if recording is None:
                recording = self._record(key, inputs)
            if recording is None:
                return self.compiled(inputs)
            for static, x in zip(recording.inputs, inputs):
                if static is not x and isinstance(x, torch.Tensor):
                    static.copy_(x)
            self.backend.replay(recording.graph)
            self.replays += 1
            # new tensors over the recording's buffers: the caller holding one is what `_Recording.free` sees
            return [o.detach() if isinstance(o, torch.Tensor) else o for o in recording.outputs]

    # ------------------------------------------------------------------ recordings

    def _free_recording(self, key: tuple, inputs: list) -> _Recording | None:
        kept = []
        found = None
        for r in self.recordings.get(key, []):
            if any(inputs[k].data_ptr() != ptr for k, ptr in r.param_ptrs.items()):
                continue  # a parameter is another tensor now: this recording reads the old one
            kept.append(r)
            if found is None and r.free(self.backend):
                found = r
        self.recordings[key] = kept
        return found

    def _record(self, key: tuple, inputs: list) -> _Recording | None:
        """A new recording of this kind of call, or None: the call runs unrecorded (a warm-up call, or no room)."""
        seen = self.calls.get(key, 0)
        if seen < WARMUP_CALLS:
            self.calls[key] = seen + 1
            return None
        if sum(len(rs) for rs in self.recordings.values()) >= MAX_RECORDINGS:
            self._report(f"{MAX_RECORDINGS} recordings of this graph exist and each one's outputs are still held "
                         "(outputs kept across calls, or many input shapes): this call runs unrecorded")
            return None
        static_inputs = [x if (s or not isinstance(x, torch.Tensor)) else _buffer_like(x)
                         for x, s in zip(inputs, self.static)]
        for buffer, x in zip(static_inputs, inputs):
            if buffer is not x:
                buffer.copy_(x)
        try:
            graph, outputs = self.backend.record(self.compiled.fn, static_inputs)
        except Exception as e:  # noqa: BLE001 - any failure to record: run as launched kernels from now on
            self.refusal = f"recording failed: {type(e).__name__}: {str(e)[:200]}"
            self._report(self.refusal)
            return None
        recording = _Recording(graph, static_inputs, outputs,
                               {k: x.data_ptr() for k, x in enumerate(inputs) if self.static[k] and
                                isinstance(x, torch.Tensor)})
        recording.own_refs = [self.backend.references(o) for o in outputs if isinstance(o, torch.Tensor)]
        self.recordings.setdefault(key, []).append(recording)
        emit(Event("cuda_graph_recorded", "cudagraphs",
                   f"graph {self.compiled.graph.name!r}: recording {sum(map(len, self.recordings.values()))} "
                   f"({len(self.recordings)} kinds of call)", graph=self.compiled.graph,
                   data={"kinds": len(self.recordings), "recordings": sum(map(len, self.recordings.values()))}))
        return recording

    def _unrecorded(self, inputs: list, reason: str) -> list:
        self._report(reason)
        return self.compiled(inputs)

    def _report(self, reason: str) -> None:
        if reason in self.reported:
            return
        self.reported.add(reason)
        name = self.compiled.graph.name
        log.info("cudagraphs: graph %r: %s", name, reason)
        emit(Event("fallback", "cudagraphs", f"graph {name!r} runs without a CUDA graph: {reason}",
                   graph=self.compiled.graph, data={"reason": reason, "cause": "cudagraphs"}))


def _call_kind(inputs: Sequence[Any], backend: CudaBackend) -> tuple | str:
    """What a recording depends on: each tensor's shape, stride, dtype and device, each other input's value. A
    string instead when the call cannot be recorded: why."""
    kind = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            if not backend.serves(x):
                return "an input is a CPU tensor (a CUDA graph replays device work only)"
            if x.numel() > 1 and 0 in x.stride():
                return "an input is an expanded tensor (a static buffer with its strides would overlap itself)"
            kind.append((tuple(x.shape), x.stride(), x.dtype, x.device))
        elif isinstance(x, (int, float, bool)) or x is None:
            kind.append((type(x), x))
        else:
            return f"an input is a {type(x).__name__}, which a recording cannot take as it changes"
    return tuple(kind)


def _buffer_like(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)


def cuda_graphed(compiled: CompiledGraph, backend: CudaBackend | None = None) -> CompiledGraph:
    """`compiled` replayed through CUDA graphs (see the module docstring), labelled `<codegen>+cudagraphs`."""
    runner = CudaGraphed(compiled, backend)
    return CompiledGraph(runner, compiled.graph, f"{compiled.codegen}+cudagraphs", compiled.source)
