"""The schema lock: the schema's shape may only change together with its version.

The digest covers the fields (names, types, defaults) of every schema record, the argument tags, the kind tuples
and the JSON Schema file (its descriptions and titles excepted). tests/schema_lock.json maps each version to its
digest; a released version's entry never changes.
"""

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import ember_core as ec
from ember_core.graph import _json, _json_args, _schema

LOCK = Path(__file__).parent / "schema_lock.json"
RECORDS = (_schema.Graph, _schema.Node, _schema.Value, _schema.Input, _schema.Output, _schema.Symbol,
           _schema.Constant, _schema.Ref, _schema.Sym)
KIND_TUPLES = ("INPUT_KINDS", "OUTPUT_KINDS", "VALUE_TYPES", "REGIONS")
PROSE = {"description", "title", "$comment"}

BUMP_RULES = """\
The graph schema changed, but SCHEMA_VERSION did not.
  - A field added with a default (readers of the old minor ignore it): bump the minor, (1, 0) -> (1, 1).
  - A field removed, renamed or retyped, a default changed, a kind or tag removed: bump the major, (1, 0) -> (2, 0),
    and ship a JSON Schema file graph-v2.json.
Then:
  1. set SCHEMA_VERSION in packages/core/src/ember_core/_schema.py;
  2. record the new digest: EMBER_ACCEPT=1 pytest packages/core/tests/test_schema_lock.py
     (it adds the new version to tests/schema_lock.json and never rewrites a recorded one);
  3. write the new version's golden files: python packages/core/tests/golden/make_golden.py;
  4. note the change in packages/core/CHANGELOG.md."""


def _without_prose(node):
    if isinstance(node, dict):
        return {k: _without_prose(v) for k, v in node.items() if k not in PROSE or not isinstance(v, str)}
    if isinstance(node, list):
        return [_without_prose(v) for v in node]
    return node


def _field(f: dataclasses.Field) -> list:
    if f.default is not dataclasses.MISSING:
        default = repr(f.default)
    elif f.default_factory is not dataclasses.MISSING:
        default = f"{f.default_factory.__name__}()"
    else:
        default = "required"
    return [f.name, str(f.type), default]


def schema_shape() -> dict:
    return {
        "records": {cls.__name__: [_field(f) for f in dataclasses.fields(cls)] for cls in RECORDS},
        "arg_tags": sorted(_json_args.ARG_TAGS),
        "kinds": {name: list(getattr(_schema, name)) for name in KIND_TUPLES},
        "format": _json.FORMAT,
        "json_schema": _without_prose(ec.json_schema()),
    }


def schema_digest() -> str:
    text = json.dumps(schema_shape(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _recorded() -> dict[str, str]:
    return json.loads(LOCK.read_text()) if LOCK.exists() else {}


def test_schema_shape_matches_the_digest_recorded_for_its_version():
    version = "{}.{}".format(*ec.SCHEMA_VERSION)
    recorded, digest = _recorded(), schema_digest()
    if version not in recorded and os.environ.get("EMBER_ACCEPT") == "1":
        LOCK.write_text(json.dumps(recorded | {version: digest}, indent=1, sort_keys=True) + "\n")
        return
    assert version in recorded, f"schema {version} has no recorded digest.\n{BUMP_RULES}"
    assert recorded[version] == digest, (
        f"schema digest {digest[:12]} differs from {recorded[version][:12]} recorded for {version}.\n{BUMP_RULES}"
    )


def test_lock_records_no_version_newer_than_the_schema():
    newest = max(tuple(map(int, v.split("."))) for v in _recorded())
    assert newest == ec.SCHEMA_VERSION, f"schema_lock.json records {newest}, but SCHEMA_VERSION is {ec.SCHEMA_VERSION}"


def test_digest_ignores_prose_but_not_structure():
    schema = {"description": "a", "properties": {"description": {"type": "string", "description": "b"}}}
    assert _without_prose(schema) == {"properties": {"description": {"type": "string"}}}


def test_digest_changes_when_a_tag_or_kind_is_added(monkeypatch):
    before = schema_digest()
    monkeypatch.setattr(_json_args, "ARG_TAGS", (*_json_args.ARG_TAGS, "tensor"))
    after_tag = schema_digest()
    monkeypatch.setattr(_schema, "INPUT_KINDS", (*_schema.INPUT_KINDS, "state"))
    assert len({before, after_tag, schema_digest()}) == 3


def test_digest_changes_when_a_field_default_changes(monkeypatch):
    before = schema_digest()
    fields = dict(_schema.Value.__dataclass_fields__)
    patched = dataclasses.field(default="cuda")
    patched.name, patched.type = "device", fields["device"].type
    monkeypatch.setitem(_schema.Value.__dataclass_fields__, "device", patched)
    assert schema_digest() != before
