"""Inference with freezing: eager, ember unfrozen, ember frozen without and with oneDNN prepacking, on a
conv-bn-relu stack, an MLP and (when timm imports) resnet18. Run: `python benchmarks/freezing.py [threads]`
(default 2 threads). Medians and minimums of timed calls, the variants taking turns in each repeat (on a shared
machine the minimum is the better estimate)."""

from __future__ import annotations

import importlib
import statistics
import sys
import time
from contextlib import contextmanager

import ember
import torch

prepack = importlib.import_module("ember_runtime.freezing.prepack_weights")  # the module, not its function


@contextmanager
def no_prepack():
    saved = prepack.available
    prepack.available = lambda graph: False
    try:
        yield
    finally:
        prepack.available = saved


def conv_bn_relu(width: int = 64, depth: int = 4) -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Conv2d(width, width, 3, padding=1), torch.nn.BatchNorm2d(width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(768, 3072), torch.nn.GELU(), torch.nn.Linear(3072, 768))


def resnet18() -> torch.nn.Module | None:
    try:
        lib = torch.library.Library("torchvision", "DEF")
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        import timm
    except Exception as e:  # noqa: BLE001 - timm is optional here
        print(f"resnet18 skipped: {e}")
        return None
    return timm.create_model("resnet18", pretrained=False)


def variants(model: torch.nn.Module, x: torch.Tensor) -> dict:
    torch._dynamo.reset()
    out = {"eager": model}
    out["ember, freezing off"] = ember.compile(model, options={"freezing": False})
    with no_prepack():
        out["ember, frozen, no prepack"] = ember.compile(model, options={"freezing": True})
        out["ember, frozen, no prepack"](x)  # freezes now, without oneDNN
    out["ember, frozen"] = ember.compile(model, options={"freezing": True})
    for f in out.values():
        torch.testing.assert_close(f(x), model(x), rtol=1e-3, atol=1e-3)
    return out


def measure(name: str, model: torch.nn.Module, x: torch.Tensor, repeats: int = 30) -> None:
    model.eval()
    with torch.no_grad():
        fns = variants(model, x)
        times: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(repeats):
            for k, f in fns.items():
                t0 = time.perf_counter()
                f(x)
                times[k].append(time.perf_counter() - t0)
    base, base_min = statistics.median(times["eager"]), min(times["eager"])
    for k, ts in times.items():
        med = statistics.median(ts)
        print(f"| {name} | {k} | {med * 1e3:.2f} | {min(ts) * 1e3:.2f} | {base / med:.2f}x "
              f"| {base_min / min(ts):.2f}x |", flush=True)


def main() -> None:
    torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| model | variant | ms (median) | ms (min) | speed-up (medians) | speed-up (mins) |")
    print("|---|---|---|---|---|---|")
    measure("conv-bn-relu x4, 1x64x56x56", conv_bn_relu(), torch.randn(1, 64, 56, 56))
    measure("MLP 768-3072-768, batch 8", mlp(), torch.randn(8, 768))
    model = resnet18()
    if model is not None:
        measure("resnet18, 1x3x224x224", model, torch.randn(1, 3, 224, 224), repeats=20)


if __name__ == "__main__":
    main()
