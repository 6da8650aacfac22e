"""The lean launchers (`_launcher.py`): the source made for each kind of kernel signature, which calls take the
compiled binary and which go to Triton's own path, and that ember's reading of Triton's specialization agrees with
Triton's own. Launching for real, against Triton's path, is `test_gpu_compile.py`'s `lean_launch_*` checks (a
stand-in sm_90 driver) and `./dev gpu` on a GPU."""

from __future__ import annotations

import types

import pytest
import torch
from ember_codegen_triton._launcher import ArgSpec, launch_signature, make_launcher, spec_of, stream_reader

POINTWISE = [("b_x", False), ("b_y", False), ("b_out", False), ("XBLOCK", True)]
REDUCTION = [("b_x", False), ("b_out", False), ("S_s0", False), ("S_s1", False), ("XBLOCK", True),
             ("RBLOCK", True)]
GATHER = [("b_t", False), ("b_i", False), ("b_out", False), ("err", False), ("XBLOCK", True)]


def test_a_pointwise_launcher_checks_alignment_and_passes_every_parameter_in_order():
    sig = launch_signature("k0", POINTWISE, [torch.float32] * 3, {"XBLOCK": 1024, "num_warps": 4})
    assert sig.source() == (
        "def launch_k0(grid, stream, a0, a1, a2):\n"
        "    if stream is None or (a0.data_ptr() | a1.data_ptr() | a2.data_ptr()) & 15:\n"
        "        return jit[(grid,)](a0, a1, a2, XBLOCK=1024, num_warps=4)\n"
        "    run(grid, 1, 1, stream, function, packed, None, None, None, a0, a1, a2, 1024)\n")


def test_symbols_are_checked_against_the_specialization_of_their_hints():
    sig = launch_signature("k1", REDUCTION, [torch.float32, torch.float32, 7, 32],
                           {"XBLOCK": 4, "RBLOCK": 64, "num_warps": 2})
    assert sig.source() == (
        "def launch_k1(grid, stream, a0, a1, a2, a3):\n"
        "    if stream is None or (a0.data_ptr() | a1.data_ptr()) & 15 or not -2147483648 <= a2 <= 2147483647 or "
        "not -2147483648 <= a3 <= 2147483647 or a3 & 15:\n"
        "        return jit[(grid,)](a0, a1, a2, a3, RBLOCK=64, XBLOCK=4, num_warps=2)\n"
        "    run(grid, 1, 1, stream, function, packed, None, None, None, a0, a1, a2, a3, 4, 64)\n")


def test_a_gather_without_an_error_flag_passes_none_and_launches_in_debug():
    sig = launch_signature("k2", GATHER, [torch.float32, torch.int64, torch.float32, None],
                           {"XBLOCK": 256, "num_warps": 4, "debug": True})
    assert sig.specs[3] == ArgSpec("none")
    assert "jit[(grid,)](a0, a1, a2, a3, XBLOCK=256, debug=True, num_warps=4)" in sig.source()
    assert sig.source().endswith("None, None, None, a0, a1, a2, a3, 256)\n")


def test_a_warm_up_that_does_not_match_the_parameters_is_refused():
    with pytest.raises(ValueError, match="takes 3 runtime arguments, the warm-up gave 2"):
        launch_signature("k0", POINTWISE, [torch.float32] * 2, {"XBLOCK": 1024})


class Recorder:
    """Stands for the compiled kernel (`run`) and for the jit function (Triton's path), recording each call."""

    def __init__(self):
        self.calls = []
        self.function, self.packed_metadata = "cufunction", "packed"

    def run(self, *args):
        self.calls.append(("lean", *args))

    def __getitem__(self, grid):
        return lambda *args, **meta: self.calls.append(("jit", grid, *args, meta))


def launcher_and_recorder(params, warmup, meta):
    rec = Recorder()
    return make_launcher(launch_signature("k", params, warmup, meta), rec, rec), rec


def test_calls_the_binary_fits_launch_lean_and_the_others_take_tritons_path():
    launch, rec = launcher_and_recorder(REDUCTION, [torch.float32, torch.float32, 7, 32], {"XBLOCK": 4, "RBLOCK": 64})
    x, out = torch.zeros(64), torch.zeros(64)
    launch(3, 5, x, out, 9, 48)
    assert rec.calls[-1] == ("lean", 3, 1, 1, 5, "cufunction", "packed", None, None, None, x, out, 9, 48, 4, 64)
    cases = {"unaligned view": (x[1:], out, 9, 48), "size not divisible by 16": (x, out, 9, 40),
             "size past int32": (x, out, 2**31, 48), "no stream": (x, out, 9, 48)}
    for what, args in cases.items():
        launch(3, None if what == "no stream" else 5, *args)
        assert rec.calls[-1][0] == "jit", what
        assert rec.calls[-1][1:-1] == ((3,), *args), what


def test_a_hint_of_one_is_a_constant_and_only_one_fits():
    launch, rec = launcher_and_recorder(REDUCTION, [torch.float32, torch.float32, 1, 2**40 + 3],
                                        {"XBLOCK": 4, "RBLOCK": 8})
    x = torch.zeros(8)
    launch(1, 0, x, x, 1, 2**40 + 5)
    assert rec.calls[-1][0] == "lean"
    launch(1, 0, x, x, 2, 5)
    assert rec.calls[-1][0] == "jit"


@pytest.mark.parametrize("value", [1, 0, 2, 16, 17, 48, -16, 2**31 - 16, 2**31, 2**40, 2**40 + 16, -(2**31) - 1])
def test_ints_are_specialized_as_triton_specializes_them(value):
    triton_spec = native_specialization(value)
    ours = spec_of(value)
    if triton_spec[0] == "constexpr":
        assert ours.one and triton_spec[1] == 1
        return
    assert not ours.one
    assert ours.wide == (triton_spec[0] != "i32"), triton_spec
    assert ours.aligned == (triton_spec[1] == "D"), triton_spec


def test_tensors_are_aligned_as_triton_reads_them():
    x = torch.zeros(64)
    assert native_specialization(x)[1] == "D" and spec_of(torch.float32).aligned
    assert native_specialization(x[1:])[1] != "D"  # which the launcher's data_ptr() & 15 sends to Triton's path


def native_specialization(value):
    """Triton's own (type, key) for a launch argument, as its JIT computes it."""
    jit = pytest.importorskip("triton.runtime.jit")
    from triton.backends.compiler import BaseBackend

    impl = getattr(jit, "native_specialize_impl", None)
    if impl is None:
        pytest.skip("this Triton computes specializations another way")
    return impl(BaseBackend, value, False, True, True)


def test_the_stream_is_read_only_while_the_lean_path_may_run():
    class Driver:
        device = 0

        def get_current_device(self):
            return self.device

        def get_current_stream(self, device):
            return 1000 + device

    class Runtime:
        launch_enter_hook = None
        launch_exit_hook = None

    driver, runtime = Driver(), Runtime()
    read = stream_reader(0, driver, runtime)
    assert read() == 1000
    driver.device = 1  # another device is current: its stream is not the kernels'
    assert read() is None
    driver.device, runtime.launch_enter_hook = 0, print  # a profiler hook sees launches through Triton only
    assert read() is None


def stand_in_launcher(signature: dict):
    from ember_codegen_triton.testing import StandInGPU

    src = types.SimpleNamespace(fn=types.SimpleNamespace(arg_names=["b_x", "b_y", "S_n", "XBLOCK"]),
                                signature=signature)
    return StandInGPU, StandInGPU.launcher_cls(src, types.SimpleNamespace(name="k"))


def test_the_stand_in_gpu_binds_arguments_to_the_signature_in_its_order_as_tritons_launcher_does():
    """What let a reordered signature (the binaries manifest's) pass the sm_90 checks and fail on an H100: the
    stand-in now hands each argument to the binary's parameter the real launcher would."""
    x, y = torch.zeros(4), torch.ones(4)
    gpu, launch = stand_in_launcher({"b_x": "*fp32", "b_y": "*fp32", "S_n": "i32", "XBLOCK": "constexpr"})
    del gpu.launches[:]
    launch(1, 1, 1, 0, "k#0", (4, 1, 0), None, None, None, x, y, 4, 1024)
    assert [name for name, _ in gpu.launches[-1][7]] == ["b_x", "b_y", "S_n"]
    assert gpu.launches[-1][7][2] == ("S_n", 4)
    _, shuffled = stand_in_launcher({"S_n": "i32", "XBLOCK": "constexpr", "b_x": "*fp32", "b_y": "*fp32"})
    with pytest.raises(TypeError, match="argument 0 is a Tensor where the signature has i32"):
        shuffled(1, 1, 1, 0, "k#0", (4, 1, 0), None, None, None, x, y, 4, 1024)
    with pytest.raises(OverflowError, match="out of range for i32"):
        launch(1, 1, 1, 0, "k#0", (4, 1, 0), None, None, None, x, y, 2**31, 1024)
