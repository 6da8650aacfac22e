"""Options: defaults filled in, typos caught with a suggestion and the list of valid keys, types checked."""

import pytest
from ember_core import OptionError, OptionSpec, get_plugin_manager
from ember_core.plugins._options import check_options

# a table as the runtime declares it (ember-core itself reads, so declares, no option)
OPTIONS = (
    OptionSpec("frontend", str, "dynamo", "capture frontend", stage="frontend"),
    OptionSpec("passes", (list, tuple), None, "graph pass ids to run, in order", stage="pass"),
    OptionSpec("autograd", str, None, "autograd implementation", stage="autograd", also=("eager",)),
    OptionSpec("partition", str, None, "partitioner of joint graphs", stage="partition"),
    OptionSpec("codegen.cpu", str, None, "codegen for CPU graphs", stage="codegen", device="cpu"),
    OptionSpec("cache", bool, True, "reuse compiled graphs"),
)
SPECS = {s.key: s for s in OPTIONS}
LIMIT = OptionSpec("limit", int, 8, "entries per function", "a-plugin")  # an int option, as a plugin adds one


def test_no_options_gives_every_default():
    assert check_options(None, SPECS) == {s.key: s.default for s in OPTIONS}


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


def test_core_declares_no_option_it_does_not_read():
    """Each option is declared by the package that reads it; ember-core reads none (the runtime's are its own)."""
    declared = {s.key: s.plugin for s in get_plugin_manager().registry.options.values()}
    assert [k for k, plugin in declared.items() if plugin in ("core", "ember-core")] == []


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


def test_a_declared_check_refuses_a_value_of_the_right_type():
    share = OptionSpec("share", float, 1.0, "a share in (0, 1]", "a-plugin",
                       check=lambda v: None if 0 < v <= 1 else "must be in (0, 1]")
    assert check_options({"share": 0.5}, SPECS | {"share": share})["share"] == 0.5
    with pytest.raises(OptionError, match=r"option 'share' must be in \(0, 1\], not 1.5: a share in \(0, 1\]"):
        check_options({"share": 1.5}, SPECS | {"share": share})
    assert check_options({"share": None}, SPECS | {"share": share})["share"] is None  # None: the default choice
