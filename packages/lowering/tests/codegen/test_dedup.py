"""The shared grouping of kernels of one body (`ember_lowering.codegen.same_kernels`, `with_placeholders`), which
codegen-cpp and codegen-triton print once per unit."""

from __future__ import annotations

from types import SimpleNamespace

from ember_lowering.codegen import same_kernels, with_placeholders

TEXT = "t0 = load({a}); t1 = load({b}); {local}[0] = t0 * t1; store({c}, {local}[0])"


def _text(a: str, b: str, c: str, local: str = "b_stash0") -> str:
    return TEXT.format(a=a, b=b, c=c, local=local)


def test_parameters_count_by_position_and_inner_names_by_first_use():
    one = with_placeholders(_text("b_x", "b_y", "b_out"), ["b_x", "b_y", "b_out"], {"b_stash0", "b_stash7"})
    two = with_placeholders(_text("b_x_3", "b_y_1", "b_x", "b_stash7"), ["b_x_3", "b_y_1", "b_x"],
                            {"b_stash0", "b_stash7"})
    assert one == two and "b_" not in one
    # the same text with the operands' roles swapped is another kernel
    assert with_placeholders(_text("b_x", "b_y", "b_out"), ["b_y", "b_x", "b_out"]) != one
    # an inner name is renamed only where it is inner: not given, it stays and the texts differ
    assert with_placeholders(_text("b_x", "b_y", "b_out", "b_stash7"), ["b_x", "b_y", "b_out"]) != \
        with_placeholders(_text("b_x", "b_y", "b_out"), ["b_x", "b_y", "b_out"])


def test_a_name_that_starts_another_is_renamed_whole():
    a = with_placeholders(_text("b_mul", "b_mul_1", "b_mul_12"), ["b_mul", "b_mul_1", "b_mul_12"])
    b = with_placeholders(_text("b_add", "b_mul", "b_x"), ["b_add", "b_mul", "b_x"])
    assert a == b


def test_each_kernel_maps_to_the_first_of_its_group():
    kernels = [SimpleNamespace(name=n, key=k) for n, k in (("k1", "a"), ("k2", "b"), ("k3", "a"), ("k4", "b"))]
    assert same_kernels(kernels, lambda k: k.key) == {"k1": "k1", "k2": "k2", "k3": "k1", "k4": "k2"}
