"""Loading: stubs wait for the build and rebind themselves; a failed build makes them raise UseFallback."""

from __future__ import annotations

import pytest
from ember_codegen_cpp import Builder, compiler
from ember_codegen_cpp._loader import LazyLibrary
from ember_core import Graph
from ember_lowering.codegen import UseFallback


@pytest.mark.skipif(compiler() is None, reason="no C++ compiler")
def test_stub_loads_library_and_rebinds_itself():
    src = 'extern "C" __attribute__((visibility("default"))) int ember_seg0(void* p, long long n) { return (int)n; }'
    env: dict = {}
    lazy = LazyLibrary(Builder().library(src), Graph(name="g"), {"ember_seg0": (1, 1)}, env)
    lazy.install_stubs()
    stub = env["ember_seg0"]
    assert stub(0, 5) == 5
    assert env["ember_seg0"] is not stub and env["ember_seg0"](0, 6) == 6


@pytest.mark.allow_build_failure("no compiler")
def test_failed_build_raises_use_fallback_every_time():
    env: dict = {}
    lazy = LazyLibrary(Builder(cxx="/nonexistent/c++").library("int x;"), Graph(name="g"), {"ember_seg0": (0, 0)},
                       env)
    lazy.install_stubs()
    for _ in range(2):
        with pytest.raises(UseFallback, match="build failed"):
            env["ember_seg0"]()


@pytest.mark.skipif(compiler() is None, reason="no C++ compiler")
def test_libraries_share_torchs_openmp_runtime_and_thread_count():
    import torch

    src = ('extern "C" int omp_get_max_threads(void);\n'
           'extern "C" __attribute__((visibility("default"))) int ember_seg0(void) { return omp_get_max_threads(); }')
    env: dict = {}
    LazyLibrary(Builder().library(src), Graph(name="g"), {"ember_seg0": (0, 0)}, env).load()
    maps = open("/proc/self/maps").read() if __import__("os").path.exists("/proc/self/maps") else ""
    gomps = {line.split()[-1] for line in maps.splitlines() if "libgomp" in line}
    assert len(gomps) <= 1, gomps  # one OpenMP runtime in the process: torch's
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert env["ember_seg0"]() == 1
        torch.set_num_threads(2)
        assert env["ember_seg0"]() == 2
    finally:
        torch.set_num_threads(before)
