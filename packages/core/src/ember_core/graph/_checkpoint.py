"""Activation checkpointing's marks on a graph's nodes.

`torch.utils.checkpoint.checkpoint(fn, ...)` under Dynamo becomes a higher-order op whose trace marks every ATen node
`fn` records with the region it belongs to (fx meta `ac_graph_id`, one number per checkpoint call, increasing in
program order) and a `CheckpointPolicy` (fx meta `recompute`): recompute for plain checkpointing, and whatever the
policy function says under selective checkpointing (`context_fn=create_selective_checkpoint_contexts(...)`).
`from_fx` keeps both as node meta, in the graph's own terms, so that the marks survive every stage that copies a
node's meta (the joint trace gives them to the forward nodes it records for a marked node, and the partitioner
reads them):

- `checkpoint`: the region, a decimal number;
- `checkpoint_policy`: one of `POLICIES` (the enum's names in lower case).

A partitioner that honours them does not save a value computed in a region marked for recompute (the backward
computes it again) unless the value crosses into a later region, and saves the values marked for saving.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._schema import Node

REGION = "checkpoint"
POLICY = "checkpoint_policy"
POLICIES = ("must_save", "prefer_save", "must_recompute", "prefer_recompute", "must_cpu_offload",
            "prefer_cpu_offload")
RECOMPUTE = frozenset({"must_recompute", "prefer_recompute"})
CHECKPOINT_META = (REGION, POLICY)  # the meta keys, for stages that copy them to the nodes they make


def checkpoint_meta(fx_meta: Mapping[str, Any]) -> dict[str, str]:
    """The marks of an fx node's meta in the graph's terms (empty for a node outside any checkpointed region).
    Only the enum's own members and integers are read: anything else in those keys is left behind."""
    try:
        from torch.utils.checkpoint import CheckpointPolicy
    except ImportError:  # a torch without selective checkpointing: nothing is marked
        return {}
    policy = fx_meta.get("recompute")
    if not isinstance(policy, CheckpointPolicy):
        return {}
    meta = {POLICY: policy.name.lower()}
    region = fx_meta.get("ac_graph_id")
    if isinstance(region, int) and not isinstance(region, bool) and region >= 0:
        meta[REGION] = str(region)
    return meta


def number_regions(nodes: list[Node], read: set[int]) -> list[Node]:
    """The nodes with the regions of those whose marks were read from torch's meta (`read`: their indices)
    numbered 1, 2, ... in the order the graph first meets them. torch numbers checkpoint calls with a counter for
    the whole process, so the same program traced twice would otherwise give two graphs (and miss every cache keyed
    by the graph). Marks that come from an ember graph (`to_fx`) stay as they are."""
    dense: dict[str, str] = {}
    out = []
    for k, node in enumerate(nodes):
        region = node.meta.get(REGION) if k in read else None
        if region is not None:
            number = dense.setdefault(region, str(len(dense) + 1))
            if number != region:
                node = node.replace(meta={**node.meta, REGION: number})
        out.append(node)
    return out


def checkpoint_problem(meta: Mapping[str, str]) -> tuple[str, str] | None:
    """(key, what is wrong) when a node's marks are malformed (a graph file says so), else None."""
    policy = meta.get(POLICY)
    if policy is not None and policy not in POLICIES:
        return POLICY, f"unknown checkpoint policy {policy!r}; expected one of {POLICIES}"
    region = meta.get(REGION)
    if region is not None and not (region.isascii() and region.isdigit()):
        return REGION, f"checkpoint region must be a non-negative decimal number, got {region!r}"
    if region is not None and policy is None:
        return REGION, "a checkpoint region needs a checkpoint_policy"
    return None


def checkpoint_region(meta: Mapping[str, str]) -> int | None:
    region = meta.get(REGION)
    return int(region) if region is not None else None


def marked_for_recompute(meta: Mapping[str, str]) -> bool:
    return meta.get(POLICY) in RECOMPUTE


def marked_for_saving(meta: Mapping[str, str]) -> bool:
    """Saved rather than recomputed: `*_save`, and `*_cpu_offload` (ember saves such values where they are)."""
    policy = meta.get(POLICY)
    return policy is not None and policy not in RECOMPUTE
