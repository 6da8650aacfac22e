"""Lowering's disk cache of kernel plans: `lower_cached(graph)` is `lower(graph)` for a graph this or an earlier
process has lowered already, read back from its loop-IR text instead of lowered and fused again.

It lives here, not in a codegen, so that every codegen of the loop IR (codegen-cpp, codegen-triton, a third
party's `PlanCodegen`) gets it; the codegens' build caches, keyed by their generated source, then find the
binaries. An entry is an `ember_core.ResultCache` entry (cache `plans`, files `<key>.plan`) holding the plan's
canonical text (`format_plan`). Its facts: the graph with its names (`fingerprint(graph, names=True)`: a plan
names the graph's values and the graph itself), the code versions of ember-lowering and ember-core, and torch's
version. Reading it back parses the text with `parse_plan` (ember's own grammar, nothing evaluated), runs
`verify_plan`, and checks that the plan is the graph's (name, inputs, outputs, symbols, device); a failure of
any kind is a logged miss, and the graph is lowered again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
from ember_core import Graph, ResultCache, code_version, fingerprint, get_plugin_manager, graph_device

from ._capabilities import Capabilities, select_passes
from ._errors import PlanError
from ._loop_ir import KernelPlan
from ._lowering import lower_with_text, plan_steps
from ._parser import parse_plan
from ._scheduler import default_passes
from ._verify import verify_plan

log = logging.getLogger("ember.cache")

FORMAT = "ember loop-IR text 1"
PLANS: ResultCache[KernelPlan] = ResultCache("plans", "plan", "lowering", "kernel plan")


def lower_cached(graph: Graph, *, cache: bool = True, capabilities: Capabilities | None = None,
                 graph_passes: Sequence[str] | None = None) -> KernelPlan:
    """`lower(graph)` through the disk cache of plans (`cache=False`: lowered, nothing read or stored), with the
    passes and the split of long reductions that a codegen's `capabilities` select, and the graph passes
    `graph_passes` names at `pre_lowering` (None: the registered defaults); all part of the entry's facts."""
    capabilities = capabilities or Capabilities()

    def lowered() -> tuple[KernelPlan, str]:
        return lower_with_text(graph, passes=select_passes(default_passes(), capabilities),
                               split=capabilities.split_reductions, graph_passes=graph_passes)

    if not cache:
        return lowered()[0]
    default = capabilities.fact() == Capabilities().fact()
    facts = plan_facts(graph, graph_passes) | ({} if default else {"capabilities": capabilities.fact()})
    plan = PLANS.load(facts, graph, lambda text: read_plan(text, graph), lambda plan: {"steps": plan_steps(plan)})
    if plan is not None:
        return plan
    plan, text = lowered()  # the text its event carried: printed once
    if parse_plan(text) == plan:
        PLANS.store(facts, graph, text)
    else:  # a plan its text cannot hold exactly is lowered again by every process
        log.info("plan cache: the plan of %r does not round-trip through its text; not stored", graph.name)
    return plan


def plan_facts(graph: Graph, graph_passes: Sequence[str] | None = None) -> dict[str, str]:
    """Everything that decides `lower(graph)`, as strings: the graph passes at `pre_lowering` among them (their
    ids and their plugins' versions)."""
    passes = get_plugin_manager().registry.passes("pre_lowering", graph_passes)
    return {
        "format": FORMAT,
        "graph": fingerprint(graph, names=True),
        "ember": f"ember-lowering {code_version('ember_lowering')}, ember-core {code_version('ember_core')}",
        "torch": f"torch {torch.__version__}",
        "graph passes": ", ".join(f"{p.name} ({p.dist} {p.version})" for p in passes),
    }


def read_plan(text: str, graph: Graph) -> KernelPlan:
    """The plan a cache entry's text holds, verified and checked to be `graph`'s; `PlanError` otherwise."""
    plan = parse_plan(text)
    verify_plan(plan)
    if plan.name != graph.name:
        raise PlanError(f"plan {plan.name!r} is not the plan of graph {graph.name!r}")
    if plan.inputs != graph.input_names:
        raise PlanError(f"plan inputs {list(plan.inputs)[:8]} are not the inputs of graph {graph.name!r}")
    if len(plan.outputs) != len(graph.outputs):
        raise PlanError(f"plan has {len(plan.outputs)} outputs, graph {graph.name!r} has {len(graph.outputs)}")
    if plan.symbols != graph.symbols:
        raise PlanError(f"plan symbols are not those of graph {graph.name!r}")
    if plan.device != graph_device(graph):
        raise PlanError(f"plan is for device {plan.device!r}, graph {graph.name!r} is on {graph_device(graph)!r}")
    return plan
