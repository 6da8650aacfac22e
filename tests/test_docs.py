"""docs/architecture.md keeps up with the contracts it states: every event kind, payload and kit is in it."""

from __future__ import annotations

import re
from pathlib import Path

import ember_core
import ember_core.testing

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "architecture.md").read_text()


def test_readme_links_the_architecture_page_inside_the_repository():
    links = re.findall(r"\]\(([^)]+)\)", (ROOT / "README.md").read_text())
    assert "docs/architecture.md" in links
    assert not [link for link in links if link.startswith("../")], links


def test_every_event_kind_and_payload_is_documented():
    for name, kind in ember_core.EVENT_KINDS.items():
        assert f"`{name}`" in DOC, name
        if kind.payload is not None:
            assert f"`{kind.payload.__name__}(" in DOC, kind.payload.__name__


def test_every_conformance_kit_is_documented():
    kits = [name for name in ember_core.testing.__all__ if name.endswith("Conformance")]
    assert len(kits) == 4
    for name in kits:
        assert f"`{name}`" in DOC, name
