"""A program's compiled kernels, found again without Triton's JIT: the manifest a GPU build stores with its module.

After the build compiles every kernel (`_precompile.py`), the module's cache entry also keeps, per kernel, where
Triton stored its binary and metadata (a group folder of Triton's cache, under ember's private cache directory),
their sha256, and what the binary was specialized for (Triton's `ASTSource`: signature, constants, attributes).
The signature is a list in the kernel's parameter order, and `load` refuses one in any other: Triton's CUDA
launcher binds a launch's arguments to the signature's entries by position, so a signature reordered (as a JSON
object written with sorted keys was) hands each parameter another's value (on an H100 every kernel wrote near
address 0).
A later process binds the program from it: each kernel's `CompiledKernel` is made from those two files, so no
JIT cache key (Triton hashes its own sources and libraries once per process, then each kernel's AST), no
specialization and no cache lookup runs. On this repository's 2-core CPU machine (stand-in sm_90, Triton 3.9)
Triton's warm path cost about 10 ms a kernel and 0.3 s once a process; a GPU host is still to be measured.

The manifest also holds both files' bytes (base64), so that an entry is whole wherever it goes: a kernel whose files
are gone from Triton's cache (cleared, or a fresh machine that took the entry from a remote cache or an artifact,
see `ember_core.caches`) has them written back there from the manifest, checked against their sha256, and binds as
before. The manifest comes from ember's verified cache (signed sidecar, sha256 of every file; a shared entry only
with the team key's signature); it is still parsed, never evaluated: each field is checked for its type and form
before use. A kernel whose files cannot be written back, or whose bytes differ from their sha256, is not in
`load`'s result, and its caller compiles it through Triton's JIT as before (a log line says why).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ember_core.caches import write_atomic
from triton.compiler import ASTSource, CompiledKernel, make_backend

log = logging.getLogger("ember.kernels")

FORMAT = 3  # 2: each kernel's files' bytes are in the manifest (`blobs`); 3: the signature a list, in order
MAX_FILE_BYTES = 64 << 20
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")
_FOLDER = re.compile(r"[A-Za-z0-9_\-]{1,128}")
_FILE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}\.[a-z0-9]{1,16}")
_TYPE = re.compile(r"\*?(?:[a-z]{1,12}[0-9]{0,3}|constexpr)")
_SHA = re.compile(r"[0-9a-f]{64}")
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_SCALARS = (bool, int, float, str, type(None))


class BadManifest(ValueError):
    """A manifest that does not have the form `manifest` writes."""


def manifest(kernels: Mapping[str, CompiledKernel], cache_dir: str | Path) -> bytes:
    """What `load` needs to find `kernels` (name → the build's compiled kernel) again under `cache_dir`, as JSON.
    A kernel whose files are not in `cache_dir` (Triton's cache moved under it) is left out."""
    root = Path(cache_dir).resolve()
    out: dict[str, Any] = {}
    for name, compiled in kernels.items():
        group = {Path(p).name: Path(p) for p in compiled.metadata_group.values()}
        binary = f"{compiled.name}.{make_backend(compiled.metadata.target).binary_ext}"
        meta = f"{compiled.name}.json"
        if binary not in group or meta not in group or group[meta].resolve().parent.parent != root:
            continue
        src = compiled.src
        out[name] = {
            "folder": group[meta].parent.name, "metadata": meta, "binary": binary,
            "sha256": {f: hashlib.sha256(group[f].read_bytes()).hexdigest() for f in (meta, binary)},
            "blobs": {f: base64.b64encode(group[f].read_bytes()).decode() for f in (meta, binary)},
            "hash": compiled.hash, "signature": [[p, t] for p, t in src.signature.items()],
            "constants": [[list(k), v] for k, v in src.constants.items()],
            "attrs": [[list(k), [list(a) for a in v]] for k, v in src.attrs.items()],
        }
    return json.dumps({"format": FORMAT, "kernels": out}, sort_keys=True).encode()


def load(data: bytes, functions: Mapping[str, Any], cache_dir: str | Path) -> dict[str, CompiledKernel]:
    """The compiled kernel of each of `functions` (name → its `JITFunction`) that `data`, a manifest, names and
    whose files are in `cache_dir` as the manifest recorded them. Raises BadManifest for a manifest of any other
    form; a kernel whose files are missing or changed is left out, logged."""
    try:
        doc = json.loads(data.decode("utf-8")) if data else {"format": FORMAT, "kernels": {}}
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadManifest(f"not JSON: {e}") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("kernels"), dict):
        raise BadManifest(f"expected format {FORMAT} with a 'kernels' object")
    root = Path(cache_dir)
    found = {}
    for name, entry in doc["kernels"].items():
        if name not in functions:
            raise BadManifest(f"kernel {name!r} is not in the module")
        record = _checked(name, entry)
        files = {f: root / record["folder"] / f for f in (record["metadata"], record["binary"])}
        changed = [f for f, path in files.items() if _sha256(path) != record["sha256"][f]]
        problem = restore(root, record, changed) if changed else None
        if problem:
            log.info("triton binaries: kernel %s: %s missing or changed under %s and %s; compiling it through the "
                     "JIT", name, ", ".join(changed), root / record["folder"], problem)
            continue
        fn = functions[name]
        params = [p for p, _ in record["signature"]]
        if params != list(fn.arg_names):
            raise BadManifest(f"kernel {name!r}: signature of parameters {params}, the kernel's are {fn.arg_names}")
        src = ASTSource(fn, dict(record["signature"]), {tuple(k): v for k, v in record["constants"]},
                        {tuple(k): [list(a) for a in v] for k, v in record["attrs"]})
        found[name] = CompiledKernel(src, {f: str(p) for f, p in files.items()}, record["hash"])
    return found


def restore(root: Path, record: dict, names: list[str]) -> str | None:
    """Write the files `names` of a checked kernel record back under `root/<folder>` from the record's bytes, each
    checked against its sha256 first and moved into place whole; None when done, else why not."""
    folder = root / record["folder"]
    blobs = {}
    for name in names:
        try:
            data = base64.b64decode(record["blobs"][name], validate=True)
        except (binascii.Error, ValueError):
            return f"its {name} in the manifest is not base64"
        if hashlib.sha256(data).hexdigest() != record["sha256"][name]:
            return f"its {name} in the manifest does not match its sha256"
        blobs[name] = data
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        for name, data in blobs.items():
            write_atomic(folder / name, data)
    except OSError as e:
        return f"cannot be written back ({e})"
    log.info("triton binaries: restored %s under %s from the manifest", ", ".join(names), folder)
    return None


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _checked(name: str, entry: Any) -> dict:
    """`entry` if it has exactly the fields and forms `manifest` writes; BadManifest naming the kernel otherwise."""
    def need(ok: bool, what: str) -> None:
        if not ok:
            raise BadManifest(f"kernel {name!r}: {what}")

    need(isinstance(entry, dict) and set(entry) == {"folder", "metadata", "binary", "sha256", "blobs", "hash",
                                                     "signature", "constants", "attrs"}, "unexpected fields")
    need(isinstance(entry["folder"], str) and bool(_FOLDER.fullmatch(entry["folder"])), "bad folder")
    for key in ("metadata", "binary"):
        need(isinstance(entry[key], str) and bool(_FILE.fullmatch(entry[key])), f"bad {key} file name")
    need(entry["metadata"].endswith(".json") and not entry["binary"].endswith(".json"), "bad file kinds")
    sha = entry["sha256"]
    need(isinstance(sha, dict) and set(sha) == {entry["metadata"], entry["binary"]}
         and all(isinstance(v, str) and _SHA.fullmatch(v) for v in sha.values()), "bad sha256")
    blobs = entry["blobs"]
    need(isinstance(blobs, dict) and set(blobs) == set(sha) and all(
        isinstance(v, str) and len(v) <= MAX_FILE_BYTES * 4 // 3 + 4 and _BASE64.fullmatch(v) for v in blobs.values()),
        "bad blobs")
    need(isinstance(entry["hash"], str) and bool(_SHA.fullmatch(entry["hash"])), "bad hash")
    sig = entry["signature"]
    need(isinstance(sig, list) and all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
                                       and _NAME.fullmatch(p[0]) and _TYPE.fullmatch(p[1]) for p in sig)
         and len({p[0] for p in sig}) == len(sig), "bad signature")
    need(_pairs(entry["constants"], lambda v: isinstance(v, _SCALARS)), "bad constants")
    need(_pairs(entry["attrs"], lambda v: isinstance(v, list) and all(
        isinstance(a, list) and len(a) == 2 and isinstance(a[0], str) and isinstance(a[1], _SCALARS) for a in v)),
        "bad attributes")
    return entry


def _pairs(value: Any, ok) -> bool:
    """A list of [index path, value] pairs: index paths are lists of small non-negative ints."""
    return isinstance(value, list) and all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], list) and 0 < len(p[0]) <= 8
        and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 4096 for i in p[0]) and ok(p[1])
        for p in value)
