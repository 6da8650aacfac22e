"""Event streams for the report's tests, built from ember-core's own test graphs (no other stage installed)."""

from __future__ import annotations

import dataclasses

from ember_core import CompiledGraph, Event, Graph, GraphCompiled, JointTraced, Partitioned
from ember_core.testing import RegionPartitioner, battery_case, joint_case


def with_sources(graph: Graph, file: str = "model.py", first_line: int = 10) -> Graph:
    """The graph with node k's meta saying it came from `file:first_line + k`, in module `layer<k>`."""
    nodes = tuple(dataclasses.replace(n, meta={**n.meta, "source": f"{file}:{first_line + k}", "module": f"layer{k}"})
                  for k, n in enumerate(graph.nodes))
    return graph.replace(nodes=nodes)


def steps_of(graph: Graph) -> tuple[dict, ...]:
    """A plan's steps as lowering's `kernels_planned` lists them: a kernel per node, the last one an extern."""
    steps = [{"kind": "kernel", "name": f"pointwise_{k}", "sizes": "6x7", "origins": list(n.outputs)}
             for k, n in enumerate(graph.nodes)]
    if steps:
        steps[-1] = {**steps[-1], "kind": "extern", "name": "aten.mm.default"}
    return tuple(steps)


def compile_events(graph: Graph, stage: str = "codegen-cpp") -> list[Event]:
    """What a codegen and the runtime send for one compiled graph."""
    compiled = CompiledGraph(lambda inputs: inputs, graph, "cpp", source="// kernels\n# wrapper")
    return [
        Event("kernels_planned", "lowering", f"graph {graph.name!r}: planned", source=f"# plan of {graph.name}\n"
              + "\n".join(f"  kernel pointwise_{k}[i0 < 6]:" for k in range(len(graph.nodes))),
              data={"graph": graph.name, "steps": steps_of(graph), "decisions": ("fuse-vertical: fused a",),
                    "seconds": 0.25}),
        Event("kernels_generated", stage, f"graph {graph.name!r}: generated", graph=graph, source="// all",
              data={"unit": "extern \"C\" void pointwise_0() {}", "wrapper": "def graph(inputs): ...",
                    "seconds": 0.125}),
        Event("build_cache_miss", stage, f"graph {graph.name!r}: building", graph=graph, data={"reason": "new"}),
        Event("graph_compiled", "codegen", f"graph {graph.name!r} compiled by cpp", graph=graph,
              source=compiled.source, data={"seconds": 0.5}, payload=GraphCompiled(compiled)),
        Event("kernels_built", stage, f"graph {graph.name!r}: built", graph=graph,
              data={"seconds": 2.0, "waited": 1.5}),
    ]


def inference_events(name: str = "softmax") -> list[Event]:
    graph = with_sources(battery_case(name).graph)
    return [Event("graph_captured", "capture", f"captured {graph.name}", graph=graph, data={"seconds": 0.75}),
            Event("guards_built", "capture", "guards of f", source="x.shape[0] == 4"),
            *compile_events(graph)]


def training_events() -> list[Event]:
    """Capture, joint trace, partition, then the forward's and the backward's compiles, a guard failure and a
    recompile."""
    captured = with_sources(battery_case("softmax").graph)
    joint = joint_case("softmax").joint
    part = RegionPartitioner().partition(joint)
    return [
        Event("graph_captured", "capture", "captured softmax", graph=captured, data={"seconds": 0.5}),
        Event("joint_traced", "autograd", "joint of softmax", graph=joint.graph, data={"seconds": 0.25},
              payload=JointTraced(joint, captured, "aot")),
        Event("partitioned", "partition", "softmax split", graph=part.forward, source=str(part.report),
              data={"seconds": 0.125}, payload=Partitioned(joint, part, "region")),
        *compile_events(part.forward),
        *compile_events(part.backward),
        Event("guard_failed", "capture", "x.shape[0] == 6 failed: 7"),
        Event("recompiled", "capture", "softmax: a new shape"),
        Event("fallback", "codegen-cpp", f"graph {part.backward.name!r}: kernel k runs in the loop-IR interpreter",
              graph=part.backward, data={"reason": "no rule", "cause": "kernel"}),
    ]
