"""View lowerings: index arithmetic, never copies; views as outputs become view buffers."""

import pytest
import torch
from lowering_checks import check, plan_of

torch.manual_seed(0)
X = torch.randn(4, 6, 5)

VIEWS = {
    "permute": lambda x: x.permute(2, 0, 1), "transpose": lambda x: x.transpose(0, 2), "t": lambda x: x[0].t(),
    "expand": lambda x: x[:, :1].expand(4, 3, 5), "expand_new_dims": lambda x: x[0, 0].expand(2, 3, 5),
    "unsqueeze": lambda x: x.unsqueeze(1), "squeeze": lambda x: x[:, :1].squeeze(1),
    "squeeze_all": lambda x: x[:1, :, :1].squeeze(), "slice": lambda x: x[1:3, ::2, -2:],
    "slice_negative_start": lambda x: x[:, -4:-1], "select": lambda x: x[:, 2], "select_negative": lambda x: x[-1],
    "view_flatten": lambda x: x.view(-1), "view_split": lambda x: x.view(2, 2, 30),
    "view_regroup": lambda x: x.view(8, 15),
    "reshape_of_permute": lambda x: x.permute(1, 0, 2).reshape(6, 20), "flatten": lambda x: x.flatten(1),
    "as_strided": lambda x: x.as_strided((3, 4), (2, 7), 3), "diagonal": lambda x: x.diagonal(0, 1, 2),
    "diagonal_offset": lambda x: x.diagonal(1, 0, 2), "split": lambda x: x.split(2, 1),
    "split_sizes": lambda x: x.split([1, 4], 2), "unbind": lambda x: x.unbind(1), "flip": lambda x: x.flip(0, 2),
    "chunk": lambda x: x.chunk(3, 1), "narrow": lambda x: x.narrow(2, 1, 3), "movedim": lambda x: x.movedim(0, -1),
    "unflatten": lambda x: x.unflatten(1, (2, 3)),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_view_as_output_and_as_input_of_a_kernel(name):
    fn = VIEWS[name]
    check(lambda x: (fn(x), *(v * 2 for v in (fn(x) if isinstance(fn(x), tuple) else (fn(x),)))), X)


@pytest.mark.parametrize("name", ["permute", "slice", "select", "expand", "view_flatten", "t", "unsqueeze"])
def test_views_of_inputs_copy_nothing(name):
    plan = plan_of(VIEWS[name], X)
    assert not plan.steps and all(b.kind in ("input", "view") for b in plan.buffers)


def test_views_compose_into_one_load():
    plan = check(lambda x: x.permute(2, 0, 1)[1:, 2].unsqueeze(0) + 1, X)
    (kernel,) = plan.kernels
    (load,) = [i for i in kernel.instrs() if i.op.value == "load"]
    assert load.buffer == "x_1" or load.buffer.startswith("arg")


def test_views_of_non_contiguous_inputs():
    check(lambda x: (x.reshape(-1) * 1, x.t().reshape(-1) + 1, x[::2].sum(0), x.reshape(2, 12)), torch.randn(6, 4).t())


def test_views_of_intermediates_are_fused_through():
    plan = check(lambda x: ((x * 2).permute(1, 0, 2).reshape(6, 20) + 1).exp(), X)
    assert len(plan.kernels) == 1


def test_view_with_symbolic_sizes():
    check(lambda x: (x.view(-1) * 2, x.reshape(x.shape[0], -1, 2) + 1, x[1:].t() * 3, x.unsqueeze(0).expand(2, -1, -1)),
          torch.randn(6, 8), mode="symbolic", others=[(torch.randn(3, 4),)])
