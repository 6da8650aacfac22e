"""The options ember-runtime reads: which implementation each stage uses, and how the pipeline runs.

`OPTIONS` is the table; the runtime's plugin declares each with the registry (`ember plugins --options` lists them,
`ember.compile` checks and defaults them). A codegen is chosen per device of a graph: `codegen.<device>`, for the
devices ember's codegens serve.
"""

from __future__ import annotations

from typing import Any

from ember_core import OptionSpec

OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("frontend", str, "dynamo", "capture frontend: 'dynamo' (torch._dynamo) or 'trace' (ember's own JIT)",
               stage="frontend"),
    OptionSpec("passes", (list, tuple), None,
               "graph pass ids to run, in order (default: every pass registered as default)", stage="pass"),
    OptionSpec("autograd", str, None, "autograd implementation for training (default: the highest priority installed; "
               "'eager': run the forward graph under eager autograd)", stage="autograd", also=("eager",)),
    OptionSpec("partition", str, None, "partitioner of joint graphs (default: the highest priority installed)",
               stage="partition"),
    OptionSpec("codegen.cpu", str, None, "codegen for CPU graphs (default: the highest priority for 'cpu')",
               stage="codegen", device="cpu"),
    OptionSpec("codegen.cuda", str, None, "codegen for CUDA graphs (default: the highest priority for 'cuda')",
               stage="codegen", device="cuda"),
    OptionSpec("cache", bool, True,
               "reuse a compiled graph when the same graph is compiled again with the same options, and a "
               "partition or kernel plan an earlier process stored in the disk caches (EMBER_CACHE_DIR)"),
    OptionSpec("dump", str, None, "folder to write every stage's graph and source to (as EMBER_DUMP)"),
    OptionSpec("freezing", bool, None,
               "inference graphs read parameters and buffers as constants: weight-only work folded once, batch norm "
               "folded into the convolution or linear before it, CPU weights pre-packed for oneDNN with the "
               "activation fused; a parameter changed in place or replaced is seen at the next call and refrozen. "
               "Default (None): on under torch.no_grad() / inference mode when no parameter or buffer the graph "
               "reads requires grad; True: on for every graph that needs no grad; False: off"),
    OptionSpec("compiled_autograd", bool, False,
               "capture every backward the compiled function runs whole, hooks included, and compile it with ember "
               "(ember.compiled_autograd)"),
)


def register_options(registry: Any) -> None:
    for s in OPTIONS:
        registry.add_option(s.key, s.type, s.default, s.doc, stage=s.stage, device=s.device, also=s.also,
                            choices=s.choices)
