"""Max-flow min-cut on hand-made networks whose optimal cut is known."""

import random

import pytest
from ember_core import GraphError
from ember_partition import FlowNetwork


def network(*edges) -> FlowNetwork:
    net = FlowNetwork()
    for u, v, c in edges:
        net.add_edge(u, v, c)
    return net


def test_textbook_network_cut_is_23():
    # CLRS figure 26.6: max flow 23; the minimum cut is {s, v1, v2, v4} | {v3, t}.
    net = network(("s", "v1", 16), ("s", "v2", 13), ("v2", "v1", 4), ("v1", "v3", 12), ("v3", "v2", 9),
                  ("v2", "v4", 14), ("v4", "v3", 7), ("v3", "t", 20), ("v4", "t", 4))
    cut = net.min_cut("s", "t")
    assert cut.value == 23
    assert cut.source_side == {"s", "v1", "v2", "v4"}
    assert sorted(cut.edges) == [("v1", "v3"), ("v4", "t"), ("v4", "v3")]


def test_chain_is_cut_at_its_narrowest_edge():
    cut = network(("s", "a", 5), ("a", "b", 2), ("b", "c", 7), ("c", "t", 3)).min_cut("s", "t")
    assert (cut.value, cut.edges, cut.source_side) == (2, (("a", "b"),), {"s", "a"})


def test_infinite_edges_are_never_cut():
    # s -> a and the edges into t are infinite: a's two finite out-edges are the only cut.
    cut = network(("s", "a", None), ("a", "b", 10), ("a", "c", 1), ("b", "t", None), ("c", "t", None)).min_cut("s", "t")
    assert cut.value == 11
    assert set(cut.edges) == {("a", "b"), ("a", "c")}


def test_parallel_edges_add_up():
    net = network(("s", "a", 2), ("s", "a", 3), ("a", "t", 10))
    assert net.min_cut("s", "t").value == 5


def test_adding_to_an_infinite_edge_keeps_it_infinite():
    net = network(("s", "a", None), ("s", "a", 3), ("a", "t", 10))
    assert net.min_cut("s", "t").value == 10


def test_disconnected_sink_costs_nothing():
    cut = network(("s", "a", 3), ("b", "t", 4)).min_cut("s", "t")
    assert (cut.value, cut.edges) == (0, ())


def test_all_infinite_path_is_an_error_naming_the_path():
    net = network(("s", "a", None), ("a", "t", None), ("s", "t", 1))
    with pytest.raises(GraphError, match=r"no finite cut .* \['s', 't'\]|\['s', 'a', 't'\]"):
        net.min_cut("s", "t")


def test_negative_capacity_is_refused():
    with pytest.raises(ValueError, match="negative"):
        FlowNetwork().add_edge("a", "b", -1)


def test_big_integer_capacities_stay_exact():
    big = 10**30
    cut = network(("s", "a", big + 1), ("a", "t", big), ("s", "t", 1)).min_cut("s", "t")
    assert cut.value == big + 1


def brute_force_min_cut(n: int, edges: list[tuple[int, int, int]]) -> int:
    """Every source side containing 0 and not n - 1: the cheapest is the minimum cut."""
    best = None
    for mask in range(1 << (n - 2)):
        side = {0} | {k + 1 for k in range(n - 2) if mask >> k & 1}
        value = sum(c for u, v, c in edges if u in side and v not in side)
        best = value if best is None else min(best, value)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_random_networks_match_brute_force(seed):
    rng = random.Random(seed)
    n = rng.randint(3, 9)
    edges = [(u, v, rng.randint(0, 9)) for u in range(n) for v in range(n) if u != v and rng.random() < 0.4]
    net = network(*edges)
    cut = net.min_cut(0, n - 1)
    assert cut.value == brute_force_min_cut(n, edges)
    assert cut.value == sum(c for u, v, c in edges if (u, v) in set(cut.edges))
    assert 0 in cut.source_side and n - 1 not in cut.source_side


def test_long_chain_needs_no_recursion():
    net = network(*((k, k + 1, 5 + k % 3) for k in range(5000)))
    assert net.min_cut(0, 5000).value == 5
