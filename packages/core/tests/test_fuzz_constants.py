"""Fuzzing constants, inline and in side files: any dtype, shape and numbers, in JSON and in text, and side files
with damaged bytes, other objects or odd tensors, or that are not files at all. Each case ends in a clean
`EmberError` or in a graph whose constants hold exactly the numbers given (as their dtype can: `constant_fit_problem`)
and that the oracle passes; quickly, with nothing run. The module prints its tally at the end."""

import copy
import io
import json
import math
import os
import shutil
import warnings
from pathlib import Path

import ember_core as ec
import pytest
import torch
from ember_core.testing import PAYLOADS, FuzzTally, accepted_graph_problem, constant_fit_problem, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

GOLDEN = Path(__file__).parent / "golden" / "v1.0"
SEED = json.loads((GOLDEN / "constants.json").read_text())
INLINE = next(k for k, c in SEED["constants"].items() if "data" in c)
SIDE = next(k for k, c in SEED["constants"].items() if "file" in c)
SIDE_BYTES = (GOLDEN / SEED["constants"][SIDE]["file"]).read_bytes()
DTYPES = sorted(ec.SHORT_DTYPE_NAMES)  # schema names: "float32"; text writes ec.SHORT_DTYPE_NAMES[name], "f32"
TALLY = FuzzTally("constants")
FUZZ = fuzz_settings()
# torch's own warnings about what odd files hold (typed storages, complex32): the cases are judged, not the warnings
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

# Numbers at the edges of the dtypes: ranges, infinities, the kinds that do not belong.
EDGES = [0, 1, -1, True, False, 1.5, -0.0, 127, 128, -129, 255, 256, 300, 65504.0, 65520.0, 448.0, 449.0, 57344.0,
         3.4e38, 3.5e38, 1e300, -1e300, 2**31, 2**53 + 1, 2**63 - 1, -(2**63), 2**64 - 1, 5e-324,
         float("inf"), float("-inf"), float("nan")]
number = st.one_of(st.sampled_from(EDGES), st.integers(-2**64, 2**64), st.floats(allow_nan=True, allow_infinity=True),
                   st.booleans())
small_shape = st.lists(st.integers(0, 4), max_size=3)
shape = st.one_of(small_shape, small_shape, small_shape,
                  st.lists(st.sampled_from([0, 1, 2**31, 2**62, 2**63 - 1, 2**63, -1]), max_size=4))
filled = st.sampled_from([True, True, True, False])  # as many numbers as the shape holds, most of the time


@pytest.fixture(scope="module", autouse=True)
def tally(request):
    yield TALLY
    TALLY.report(request.config)


def _tagged(x):
    """A number as the JSON schema writes it, non-finite floats as their words."""
    if isinstance(x, bool):
        return {"bool": x}
    if isinstance(x, int):
        return {"int": x}
    return {"float": x if math.isfinite(x) else repr(x)}


def _oracle(items: list, name: str = INLINE):
    """The graph the loader accepted: its inline constant holds the numbers given, and nothing else is wrong."""
    def check(graph: ec.Graph) -> str | None:
        return constant_fit_problem(items, graph.constants[name].tensor) or accepted_graph_problem(graph)
    return check


def _loaded(load) -> ec.Graph:
    graph = ec.verify(load())
    assert ec.loads(ec.dumps(graph)) == graph
    return graph


@FUZZ
@given(st.sampled_from(DTYPES), shape,
       st.lists(number, max_size=6), filled)
def test_inline_constants_of_any_dtype_shape_and_numbers_end_cleanly(dtype, sizes, items, fill):
    data = copy.deepcopy(SEED)
    numel = math.prod(sizes) if sizes else 1
    if fill and 0 <= numel <= 64:  # as many numbers as the shape holds, so the numbers themselves are judged
        items = (items * numel)[:numel] if items else [0] * numel
    data["constants"][INLINE] = {"dtype": dtype, "shape": sizes, "data": [_tagged(x) for x in items]}
    TALLY.run(lambda: _loaded(lambda: ec.graph_from_json(data, "fuzz", base_dir=GOLDEN)), _oracle(items))


def _text_number(x) -> str:
    return repr(x) if not isinstance(x, float) or math.isfinite(x) else ("nan" if math.isnan(x) else
                                                                          ("-inf" if x < 0 else "inf"))


@FUZZ
@given(st.sampled_from(DTYPES), shape, st.lists(number, max_size=6), filled)
def test_constants_in_text_end_cleanly(dtype, sizes, items, fill):
    numel = math.prod(sizes) if sizes else 1
    if fill and 0 <= numel <= 64:
        items = (items * numel)[:numel] if items else [0] * numel
    short, sizes_text, data_text = ec.SHORT_DTYPE_NAMES[dtype], ", ".join(map(str, sizes)), \
        ", ".join(map(_text_number, items))
    text = f"# ember graph v1.0\ndef f():\n  c: {short}[{sizes_text}] = constant [{data_text}]\n  return (c)\n"
    TALLY.run(lambda: ec.verify(ec.parse_graph(text)), _oracle(items, "c"))


def _saved(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _odd_objects() -> list:
    """What a side file may hold instead of the plain float32[16, 8] tensor the record names."""
    t = torch.arange(128.0).reshape(16, 8)
    return [t, t.double(), t.half(), t[:, :4], t.t(), t.reshape(8, 16), t.reshape(-1), t[2:].contiguous(),
            torch.empty(0), torch.nn.Parameter(t), t.to_sparse(), {"x": t}, [t], 3, "text", None,
            _quantized(t), torch.zeros(16, 8, device="meta"),
            torch.full((16, 8), float("inf")), t.to(torch.int64)]


def _quantized(t: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensors are deprecated: all the more reason to refuse them
        return torch.quantize_per_tensor(t, 0.1, 0, torch.quint8)


ODD = [_saved(obj) for obj in _odd_objects()]


def _side_file_graph(tmp: Path, content: bytes | str) -> Path:
    """A copy of the golden constants graph in `tmp`, its side file holding `content` (bytes), or being a fifo,
    a link to a device, a folder, or a path out of the graph's folder (str)."""
    (tmp / "constants.data").mkdir(exist_ok=True)
    path = tmp / "g.json"
    data = copy.deepcopy(SEED)
    side = tmp / "constants.data" / "c.pt"
    data["constants"][SIDE]["file"] = "constants.data/c.pt"
    if isinstance(content, bytes):
        side.write_bytes(content)
    elif content == "fifo":
        os.mkfifo(side)
    elif content == "device":
        side.symlink_to("/dev/zero")
    elif content == "folder":
        side.mkdir()
    else:
        data["constants"][SIDE]["file"] = content
    path.write_text(json.dumps(data))
    return path


@FUZZ
@given(st.one_of(st.sampled_from(ODD),
                 st.lists(st.tuples(st.integers(0, len(SIDE_BYTES)), st.binary(min_size=1, max_size=8)),
                          min_size=1, max_size=4),
                 st.sampled_from(["fifo", "device", "folder", "../constants.json", "/dev/zero",
                                  "constants.data/../../x.pt", "constants.data/missing.pt", *PAYLOADS])),
       st.booleans())
def test_side_files_end_cleanly(tmp_path_factory, content, truncate):
    if isinstance(content, list):  # bytes of the true side file, overwritten in places
        raw = bytearray(SIDE_BYTES)
        for at, chunk in content:
            raw[at:at + len(chunk)] = chunk
        content = bytes(raw[: len(raw) // 2] if truncate else raw)
    if content in ("fifo", "device") and not hasattr(os, "mkfifo"):
        return
    tmp = tmp_path_factory.mktemp("side")
    path = _side_file_graph(tmp, content)
    TALLY.run(lambda: _loaded(lambda: ec.load(path)), _side_file_oracle)
    shutil.rmtree(tmp, ignore_errors=True)


def _side_file_oracle(graph: ec.Graph) -> str | None:
    t = graph.constants[SIDE].tensor
    if type(t) is not torch.Tensor or t.layout != torch.strided or t.device.type != "cpu" or t.dtype != torch.float32 \
            or tuple(t.shape) != (16, 8) or t.is_quantized:
        return f"side file gave {type(t).__name__} {t.dtype} {tuple(t.shape)} {t.layout} on {t.device}"
    return accepted_graph_problem(graph)
