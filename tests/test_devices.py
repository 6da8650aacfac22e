"""Every tensor a compiled call allocates names its device. On the CPU the default device is the right one, so a
missing `device=` cannot fail here; on a GPU every output landed on the CPU (seen on an H200 at 045a3fc: Triton
refused the pointers). `DeviceAudit` records factory calls that name no device, so the CPU suite sees the bug.
The suite's Triton pass (`EMBER_OPTIONS='{"codegen.cpu": "triton"}'`, interpreter) runs this file too; the codegen
kits audit every battery case the same way."""

from __future__ import annotations

import copy

import ember
import torch
from ember_core.testing import DeviceAudit
from models import SmallCNN, TinyGPT


def test_training_steps_allocate_on_the_graphs_device(frontend):
    torch.manual_seed(0)
    model = TinyGPT()
    compiled = ember.compile(copy.deepcopy(model), options={"frontend": frontend})
    idx, targets = (torch.randint(0, 64, (2, 16)) for _ in range(2))
    compiled(idx, targets).backward()  # compiles
    with DeviceAudit() as audit:
        loss = compiled(idx, targets)
        loss.backward()
    audit.check("TinyGPT training step")
    torch.testing.assert_close(loss, model(idx, targets))


def test_inference_allocates_on_the_graphs_device(frontend):
    model = SmallCNN().eval()
    compiled = ember.compile(copy.deepcopy(model), options={"frontend": frontend})
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        compiled(x)
        with DeviceAudit() as audit:
            got = compiled(x)
        audit.check("SmallCNN inference")
        torch.testing.assert_close(got, model(x))
