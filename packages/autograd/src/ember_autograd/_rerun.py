"""The forward graph run again from the function's inputs, where the backward needs what the forward's compiled
kernels cannot give: gradients that are differentiable themselves (a backward with create_graph=True), or saved
values a consuming backward let go (see `_wrapper`'s docstring). Random ops draw what the forward drew
(`rng_states`, `same_draws`), and an input modified in place since the forward is refused as eager's autograd
refuses a modified saved tensor (`unchanged_inputs`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
from ember_core import autocast_disabled

if TYPE_CHECKING:
    from ._wrapper import Plan


def rng_states(inputs: Sequence[Any]) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """The CPU generator's state and that of each CUDA device an input is on."""
    cuda = {x.device.index or 0 for x in inputs if isinstance(x, torch.Tensor) and x.device.type == "cuda"}
    return torch.get_rng_state(), {d: torch.cuda.get_rng_state(d) for d in sorted(cuda)}


def differentiable_grads(ctx: Any, grad_outputs: Sequence[Any]) -> list[Any]:
    """The forward graph again through ATen with grad mode on, from the function's inputs (random ops draw what they
    drew the first time), and the gradients of its outputs with respect to the inputs that require grad, by eager's
    autograd with create_graph=True: differentiable themselves, as far as eager's are."""
    plan: Plan = ctx.plan
    inputs = unchanged_inputs(ctx)
    with same_draws(ctx):
        outs = plan.differentiable_forward().run(list(inputs))[:plan.num_outputs]
    pairs = [(o, g) for o, g, d in zip(outs, grad_outputs, plan.differentiable)
             if d and g is not None and isinstance(o, torch.Tensor) and o.requires_grad]
    wrt = [k for k, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.requires_grad]
    grads: list[Any] = [None] * plan.num_primals
    if pairs and wrt:
        found = torch.autograd.grad([o for o, _ in pairs], [inputs[k] for k in wrt], [g for _, g in pairs],
                                    create_graph=True, allow_unused=True)
        for k, g in zip(wrt, found):
            grads[k] = g
    return grads


def prepare_for_dynamo(plan: Plan) -> None:
    """What Dynamo, tracing `CompiledFunction.backward` into a backward compiled autograd captures, cannot make
    itself: made before, outside Dynamo. The node's key, which the engine asks for before each capture, does it;
    so does the forward while the engine is on (a backward started inside Dynamo's trace of a step asks for the key
    inside that trace)."""
    plan.backward_module()
    grads_outside_dynamo()


def _differentiable_grads_eagerly(ctx: Any, grad_outputs: Sequence[Any]) -> list[Any]:
    with autocast_disabled():
        return differentiable_grads(ctx, grad_outputs)


_outside_dynamo: Callable | None = None


def grads_outside_dynamo() -> Callable:
    """`differentiable_grads` for a backward with create_graph=True that compiled autograd captures: Dynamo breaks
    its graph at the call and runs it as it comes (it cannot trace `torch.autograd.grad`), and the gradients it
    hands on carry their history to the function's inputs. Made outside Dynamo (`prepare_for_dynamo`), not at
    import: importing Dynamo takes a second."""
    global _outside_dynamo
    if _outside_dynamo is None:
        _outside_dynamo = torch._dynamo.disable(_differentiable_grads_eagerly, recursive=True)
    return _outside_dynamo


@contextlib.contextmanager
def same_draws(ctx: Any) -> Iterator[None]:
    """Random ops inside draw what the forward drew (its generators' states, kept in `ctx.rng`)."""
    rng = ctx.rng
    with torch.random.fork_rng(devices=list(rng[1]) if rng else [], enabled=rng is not None):
        if rng is not None:
            torch.set_rng_state(rng[0])
            for device, state in rng[1].items():
                torch.cuda.set_rng_state(state, device)
        yield


def unchanged_inputs(ctx: Any) -> Sequence[Any]:
    """The function's inputs, to run the forward on again. One the saved values are computed from that was modified
    in place since the forward (its version moved) would give other values: that raises, as eager's autograd does
    for a modified saved tensor. So does a forward that itself writes one of them (`Plan.rereads`: its write may
    not move the version; batch norm's running stats are written through `.data`)."""
    plan: Plan = ctx.plan
    name = plan.partition.forward.name
    if plan.rereads is not None:
        raise RuntimeError(f"graph {name!r} writes its input {plan.rereads} in place and computes values its "
                           "backward needs from it, so its backward cannot run the forward again (which a backward "
                           "with create_graph=True does)")
    for k, version in ctx.versions.items():
        x = ctx.inputs[k]
        if x._version != version:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an inplace operation: "
                f"input {k} of graph {name!r} (a tensor of shape {list(x.shape)}, {x.dtype}) is at version "
                f"{x._version}; expected version {version} instead (the backward runs the compiled forward again "
                "on its inputs)")
    return ctx.inputs
