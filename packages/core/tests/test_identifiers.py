from __future__ import annotations

import pytest
from ember_core import is_source_identifier, source_identifier


@pytest.mark.parametrize("name, expected", [
    ("block", "block"), ("Ｂlock", "uff22lock"), ("x²", "xub2"), ("a-b.c", "a_b_c"), ("", "_"), ("日", "u65e5"),
])
def test_any_name_is_spelled_in_ascii_letters_digits_and_underscores(name, expected):
    assert source_identifier(name) == expected


def test_names_python_would_normalize_or_reject_are_not_source_identifiers():
    assert is_source_identifier("x") and not is_source_identifier("ｘ")
    assert not is_source_identifier("x²") and not is_source_identifier("class") and not is_source_identifier("1a")
