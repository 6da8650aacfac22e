"""A loop-IR op added outside ember, end to end: `python tests/_new_op.py CODEGEN` compiles a model that calls a
custom torch op lowered to a new loop-IR op `softsign` (its semantics and default given once, here, and no rule in
any codegen), compares with eager, and prints one line: `ok <codegen> kernels=<n> fallbacks=<n>` or the error.
`tests/test_new_op.py` runs it in-process for the C++ codegen and in a process under Triton's interpreter."""

from __future__ import annotations

import sys

import torch


@torch.library.custom_op("ember_test::softsign", mutates_args=())
def softsign(x: torch.Tensor) -> torch.Tensor:
    return x / (1 + x.abs())


@softsign.register_fake
def _(x):
    return torch.empty_like(x)


def add_softsign():
    """The whole of what the op needs: its meaning once, and a lowering rule that emits it."""
    from ember_lowering import define_op, elementwise, lowering_rules

    op = define_op("softsign", arity=1, kinds={"float"}, reference=lambda x: x / (1 + x.abs()),
                   default=lambda b, x: x / (1.0 + b.abs(x)))
    lowering_rules["ember_test.softsign.default"] = elementwise(("x",), lambda b, x, a: b.softsign(x))
    return op


def model(x, y):
    return torch.ops.ember_test.softsign(x * 2.0) + y.sigmoid()


def run(codegen: str) -> str:
    import ember
    from ember_core import record_events
    from ember_lowering import lower, run_plan

    x, y = torch.randn(64, 33), torch.randn(64, 33)
    with record_events() as rec:
        got = ember.compile(model, options={"codegen.cpu": codegen, "cache": False})(x, y)
    torch.testing.assert_close(got, model(x, y))
    graphs = rec.kinds("graph_captured")
    plan = lower(graphs[0].graph)
    assert "softsign" in str(plan), str(plan)  # the plan holds the new op ...
    torch.testing.assert_close(run_plan(plan, [x, y])[0], model(x, y))  # ... which the loop-IR interpreter runs
    kernels = rec.kinds("kernels_generated")
    return f"ok {codegen} kernels={len(kernels)} fallbacks={len(rec.kinds('fallback'))}"


if __name__ == "__main__":
    add_softsign()
    try:
        print(run(sys.argv[1]))
    except Exception as e:  # noqa: BLE001 - the one line says what failed
        print(f"failed {sys.argv[1]}: {type(e).__name__}: {e}")
