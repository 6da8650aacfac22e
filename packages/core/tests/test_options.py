"""Options: defaults filled in, typos caught with a suggestion and the list of valid keys, types checked."""

import pytest
from ember_core import OptionError, OptionSpec
from ember_core.plugins._options import CORE_OPTIONS, check_options

SPECS = {s.key: s for s in CORE_OPTIONS}
LIMIT = OptionSpec("limit", int, 8, "entries per function", "a-plugin")  # an int option, as a plugin adds one


def test_no_options_gives_every_default():
    assert check_options(None, SPECS) == {s.key: s.default for s in CORE_OPTIONS}


def test_given_options_override_defaults():
    opts = check_options({"partition": "mincut", "cache": False}, SPECS)
    assert (opts["partition"], opts["cache"], opts["frontend"]) == ("mincut", False, "dynamo")


def test_option_typo_suggests_the_close_key_and_lists_valid_keys():
    with pytest.raises(OptionError) as err:
        check_options({"partiton": "mincut"}, SPECS)
    text = str(err.value)
    assert "unknown option 'partiton' (did you mean 'partition'?)" in text
    assert "valid options: " + ", ".join(sorted(SPECS)) in text


def test_unknown_key_far_from_any_is_listed_without_a_guess():
    with pytest.raises(OptionError, match=r"unknown option 'zzz'; valid options: autograd, cache"):
        check_options({"zzz": 1}, SPECS)


def test_wrong_type_names_key_type_and_doc():
    with pytest.raises(OptionError, match=r"option 'limit' must be int, got str '8': entries per function"):
        check_options({"limit": "8"}, SPECS | {"limit": LIMIT})


def test_bool_is_not_an_int_option():
    with pytest.raises(OptionError, match="must be int, got bool True"):
        check_options({"limit": True}, SPECS | {"limit": LIMIT})


def test_core_declares_only_the_options_core_and_the_runtime_read():
    assert set(SPECS) == {"frontend", "passes", "autograd", "partition", "codegen.cpu", "codegen.cuda", "cache", "dump",
                          "compiled_autograd", "freezing"}


def test_several_types_are_listed():
    with pytest.raises(OptionError, match="option 'passes' must be list or tuple, got str"):
        check_options({"passes": "dce"}, SPECS)


def test_none_means_the_default_choice():
    assert check_options({"codegen.cpu": None}, SPECS)["codegen.cpu"] is None


def test_plugin_options_are_checked_like_core_ones():
    specs = SPECS | {"cpp.simd": OptionSpec("cpp.simd", bool, True, "vectorise inner loops", "ember-codegen-cpp")}
    assert check_options({"cpp.simd": False}, specs)["cpp.simd"] is False
    with pytest.raises(OptionError, match="did you mean 'cpp.simd'"):
        check_options({"cpp.smid": False}, specs)


def test_an_option_of_a_few_values_names_them_when_given_another():
    launch = OptionSpec("triton.launch", str, "lean", "how kernels launch", "a-plugin", choices=("lean", "jit"))
    specs = SPECS | {"triton.launch": launch}
    assert check_options({"triton.launch": "jit"}, specs)["triton.launch"] == "jit"
    with pytest.raises(OptionError, match=r"option 'triton.launch' is one of 'lean', 'jit', not 'fast': how kernels"):
        check_options({"triton.launch": "fast"}, specs)
