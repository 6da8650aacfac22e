"""The binaries manifest a GPU build keeps with its module (`_binaries.py`): parsed and checked, never trusted for
its form; a kernel whose files are gone or changed is left to Triton's JIT. (That a warm process binds every kernel
from it without the JIT, on a stand-in sm_90, is `test_gpu_compile.py`'s `warm_bind_*` checks.)"""

from __future__ import annotations

import base64
import hashlib
import json
import stat
import types

import pytest
import triton
import triton.language as tl
from ember_codegen_triton import _binaries as binaries
from ember_codegen_triton._binaries import BadManifest, load, restore
from triton.backends.compiler import GPUTarget

SHA = "0" * 64


def entry(**changes):
    good = {"folder": "ABC123", "metadata": "k.json", "binary": "k.cubin", "sha256": {"k.json": SHA, "k.cubin": SHA},
            "blobs": {"k.json": "", "k.cubin": ""}, "hash": SHA,
            "signature": [["b_x", "*fp32"], ["S_s0", "i32"], ["XBLOCK", "constexpr"]],
            "constants": [[[2], 1024]], "attrs": [[[0], [["tt.divisibility", 16]]]]}
    return {**good, **changes}


def manifest(**kernels) -> bytes:
    return json.dumps({"format": 3, "kernels": kernels}).encode()


@pytest.mark.parametrize("bad,says", [
    (b"\xff", "not JSON"),
    (b"[]", "format"),
    (json.dumps({"format": 1, "kernels": {}}).encode(), "format"),
    (json.dumps({"format": 2, "kernels": {}}).encode(), "format"),  # its signatures lost their order
    (manifest(k=entry(blobs={"k.json": ""})), "bad blobs"),
    (manifest(k=entry(blobs={"k.json": "", "k.cubin": "not base64!"})), "bad blobs"),
    (manifest(other=entry()), "not in the module"),
    (manifest(k=entry(folder="../../etc")), "bad folder"),
    (manifest(k=entry(binary="k.cubin; rm")), "bad binary file name"),
    (manifest(k=entry(metadata="k.cubin")), "bad file kinds"),
    (manifest(k=entry(sha256={"k.json": SHA})), "bad sha256"),
    (manifest(k=entry(signature=[["b_x", "*fp32); system(1"]])), "bad signature"),
    (manifest(k=entry(signature=[["x y", "i32"]])), "bad signature"),
    (manifest(k=entry(signature={"b_x": "*fp32", "S_s0": "i32"})), "bad signature"),  # a mapping: no order
    (manifest(k=entry(signature=[["b_x", "*fp32"], ["b_x", "i32"]])), "bad signature"),
    (manifest(k=entry(signature=[["b_x", "*fp32", "i32"]])), "bad signature"),
    (manifest(k=entry(constants=[[[2], {"a": 1}]])), "bad constants"),
    (manifest(k=entry(attrs=[[[-1], []]])), "bad attributes"),
    (manifest(k=entry(extra=1)), "unexpected fields"),
])
def test_a_manifest_of_another_form_is_refused_naming_what(bad, says):
    with pytest.raises(BadManifest, match=says.replace("(", r"\(")):
        load(bad, {"k": object()}, "/nonexistent")


def test_an_empty_manifest_finds_nothing():
    assert load(b"", {"k": object()}, "/nonexistent") == {}


def test_a_kernel_whose_files_changed_and_whose_manifest_bytes_do_not_match_is_left_to_the_jit(tmp_path, caplog):
    folder = tmp_path / "ABC123"
    folder.mkdir()
    (folder / "k.json").write_text("{}")
    (folder / "k.cubin").write_bytes(b"binary")
    sha = {"k.json": hashlib.sha256(b"{}").hexdigest(), "k.cubin": hashlib.sha256(b"other").hexdigest()}
    blobs = {"k.json": base64.b64encode(b"{}").decode(), "k.cubin": base64.b64encode(b"forged").decode()}
    with caplog.at_level("INFO", logger="ember.kernels"):
        assert load(manifest(k=entry(sha256=sha, blobs=blobs)), {"k": object()}, tmp_path) == {}
    assert "k.cubin missing or changed" in caplog.text and "does not match its sha256" in caplog.text
    assert (folder / "k.cubin").read_bytes() == b"binary"  # nothing written
    assert load(manifest(k=entry()), {"k": object()}, tmp_path / "gone") == {}


def record(files: dict[str, bytes]) -> dict:
    return entry(sha256={f: hashlib.sha256(b).hexdigest() for f, b in files.items()},
                 blobs={f: base64.b64encode(b).decode() for f, b in files.items()})


def test_files_gone_from_tritons_cache_are_written_back_from_the_manifest(tmp_path):
    """A fresh machine (an entry from a remote cache or an artifact) has none of the binaries in Triton's cache."""
    files = {"k.json": b'{"name": "k"}', "k.cubin": b"\x7fELF sm_90 code"}
    assert restore(tmp_path, record(files), ["k.json", "k.cubin"]) is None
    folder = tmp_path / "ABC123"
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == files
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_file_that_cannot_be_written_back_is_said(tmp_path):
    (tmp_path / "ABC123").write_text("a file where the folder goes")
    problem = restore(tmp_path, record({"k.json": b"{}", "k.cubin": b"x"}), ["k.cubin"])
    assert problem.startswith("cannot be written back")


@triton.jit
def kernel(b_x, S_s0, XBLOCK: tl.constexpr):
    pass


class Compiled:
    """What `manifest` reads of a compiled kernel, its files in `folder`."""

    def __init__(self, folder, signature: dict):
        (folder / "kernel.json").write_text("{}")
        (folder / "kernel.cubin").write_bytes(b"code")
        self.name, self.hash = "kernel", SHA
        self.metadata = types.SimpleNamespace(target=GPUTarget("cuda", 90, 32))
        self.metadata_group = {p.name: str(p) for p in folder.iterdir()}
        self.src = types.SimpleNamespace(signature=signature, constants={(2,): 1024},
                                         attrs={(0,): [["tt.divisibility", 16]]})


def sources(data: bytes, root, monkeypatch) -> dict:
    """What `load` makes each kernel's `CompiledKernel` from (its source), without Triton reading the files."""
    monkeypatch.setattr(binaries, "CompiledKernel", lambda src, files, hash_: src)
    return binaries.load(data, {"kernel": kernel}, root)


def test_the_signature_keeps_the_kernels_parameter_order(tmp_path, monkeypatch):
    """Triton's CUDA launcher binds arguments to the signature's entries by position: in sorted order (`S_s0`,
    `XBLOCK`, `b_x`), an H100 got the block size as the pointer `b_x`. The stand-in GPU's launcher binds the same
    way (`test_gpu_compile.py`)."""
    (tmp_path / "GROUP").mkdir()
    signature = {"b_x": "*fp32", "S_s0": "i32", "XBLOCK": "constexpr"}
    data = binaries.manifest({"kernel": Compiled(tmp_path / "GROUP", signature)}, tmp_path)
    src = sources(data, tmp_path, monkeypatch)["kernel"]
    assert list(src.signature.items()) == list(signature.items())
    assert json.loads(data)["kernels"]["kernel"]["signature"] == [["b_x", "*fp32"], ["S_s0", "i32"],
                                                                  ["XBLOCK", "constexpr"]]


def test_a_signature_in_another_order_than_the_kernels_parameters_is_refused(tmp_path, monkeypatch):
    (tmp_path / "GROUP").mkdir()
    reordered = {"S_s0": "i32", "XBLOCK": "constexpr", "b_x": "*fp32"}
    data = binaries.manifest({"kernel": Compiled(tmp_path / "GROUP", reordered)}, tmp_path)
    with pytest.raises(BadManifest, match=r"kernel 'kernel': signature of parameters \['S_s0', 'XBLOCK', 'b_x'\]"):
        sources(data, tmp_path, monkeypatch)
