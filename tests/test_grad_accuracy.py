"""The accuracy contract on training: every gradient of every model of models.py, two SGD steps through ember, is
at most 3x as far from a float64 run's as eager float32's is (ARCHITECTURE.md), at 1 and at 2 threads.

`ember_core.testing.gradient_errors` measures it (benchmarks/grad_accuracy.py prints the same numbers for the model
zoo): errors are RMS over each gradient; a gradient that is zero in exact arithmetic, or one where eager lands well
under its own error level on the model, counts at that floor (`ember_core.testing._grad_accuracy.floor`); each
step starts from the float64 run's parameters, so that two trainings drifting apart across a ReLU kink are not
counted as arithmetic (see `gradient_errors`). Block and RMSNorm are inside TinyGPT and HandAttentionBlock."""

from __future__ import annotations

import ember
import pytest
import torch
from ember_core.testing import gradient_errors, too_far
from models import MLP, HandAttentionBlock, MobileNetV3, ResNet18, SmallCNN, TinyGPT

MODELS = {  # a model and its inputs: small, and batch norms over at least 16 values a channel
    "mlp": (MLP, lambda: [torch.randn(4, 16)]),
    "small_cnn": (SmallCNN, lambda: [torch.randn(4, 3, 8, 8)]),
    "tiny_gpt": (lambda: TinyGPT(n_blocks=1), lambda: [torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16))]),
    "hand_attention_block": (lambda: HandAttentionBlock(causal=True), lambda: [torch.randn(2, 16, 32)]),
    "resnet18": (lambda: ResNet18(blocks=1), lambda: [torch.randn(4, 3, 64, 64)]),
    "mobilenetv3": (MobileNetV3, lambda: [torch.randn(4, 3, 32, 32)]),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_every_training_gradient_is_within_3x_eagers_error_against_float64(name):
    build, inputs = MODELS[name]
    threads = torch.get_num_threads()
    with ember.record_events() as rec:
        errors = gradient_errors(build(), inputs(), ember.compile, threads=(1, 2))
    assert torch.get_num_threads() == threads
    assert rec.kinds("joint_traced") and not rec.kinds("fallback"), "the gradients must be ember's own"
    assert {e.threads for e in errors} == {1, 2} and {e.step for e in errors} == {0, 1}
    bad = too_far(errors)
    assert not bad, f"{name}: {len(bad)} gradients more than 3x eager's error:\n" + "\n".join(map(str, bad))
