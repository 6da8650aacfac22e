"""A differential fuzzer for training: random small programs, ember against eager, both judged against float64.

`python -m tests.training_fuzz run --seeds 0:300` (from the repository root) generates one program per seed
(`programs.generate`: 3-12 steps over one to three inputs, drawn from pointwise ops, reductions over either dim,
views, in-place updates of clones, matmuls, norms, gathers and scatters, pools, convolutions, losses, attention,
autocast), runs it in float64, in eager float32 and compiled by ember, and reports each seed whose compiled loss,
output or gradients break the accuracy contract (`judge.check`): more than 3x eager's error against float64
(`ember_core.testing.too_far`), a non-finite value where eager's is finite or the other way round, a missing
gradient, a compile error, or (`--dynamic`) a second batch size that disagrees with eager. `--floats` adds steps that
read a float argument (as an op's alpha, a bound, an exponent, in arithmetic) and changes it every training step,
so that the frontends make it an input read with `.item()`; `--edges` adds steps that give ops int arguments at
the edges of their ranges (starts counted from the end and from before the start, splits and shifts past the
width). A seed names its program: `--seeds 5017:5018 --show`
prints it.

`tests/test_training_fuzz.py` runs a few seeds in CI; the wide runs are by hand (`nox -s training_fuzz`, or the command
above), and what they find becomes a test where the bug lives.
"""
