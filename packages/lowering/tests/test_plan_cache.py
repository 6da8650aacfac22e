"""lower_cached(): a graph lowered once is read back from its plan's text in the disk cache, as equal as lowered
again; an entry that does not parse, verify or fit the graph is a logged miss naming the file, and lowered again."""

from __future__ import annotations

import pytest
import torch
from ember_core import facts_key, record_events, testing
from ember_lowering import PLANS, PlanError, format_plan, lower, lower_cached, plan_facts, read_plan
from lowering_checks import trace


def softmax(x):
    return torch.softmax(x * 2, -1)


def graph(name: str = "graph", n: int = 8):
    return trace(softmax, torch.randn(4, n), name=name)


def entry(g) -> dict:
    key = facts_key(plan_facts(g))
    return {"plan": PLANS.disk.path(key, "plan"), "sidecar": PLANS.disk.path(key, "json")}


def restamp(g, text: str) -> None:
    """Give the entry other text with a sidecar that matches it (an entry another ember could have written)."""
    testing.restamp(entry(g)["plan"], text.encode())


def lowered_again(g) -> tuple[list[str], str]:
    """The event kinds of one lower_cached(g), and the miss reason if it missed."""
    with record_events() as rec:
        plan = lower_cached(g)
    assert plan == lower(g, emit_event=False)
    misses = rec.kinds("disk_cache_miss")
    return [e.kind for e in rec.events], misses[0].data["reason"] if misses else ""


def test_a_lowered_graph_is_read_back_equal_without_lowering():
    g = graph()
    kinds, reason = lowered_again(g)
    assert kinds == ["disk_cache_miss", "kernels_planned"] and reason == "not cached"
    kinds, _ = lowered_again(g)
    assert kinds == ["disk_cache_hit"]


def test_a_hit_reports_the_plan_as_lowering_would():
    """A warm start's plan reached observers as a bare hit: EMBER_DUMP and the report showed no plan and no kernel
    table. The hit now carries the plan's text and its steps, as `kernels_planned` does for a plan it lowers."""
    g = graph()
    with record_events() as cold:
        lower_cached(g)
    with record_events() as warm:
        plan = lower_cached(g)
    planned, (hit,) = cold.kinds("kernels_planned")[0], warm.kinds("disk_cache_hit")
    assert hit.source == format_plan(plan) and hit.data["steps"] == planned.data["steps"] and hit.data["steps"]


def test_the_entry_is_the_plans_canonical_text():
    g = graph()
    lower_cached(g)
    assert entry(g)["plan"].read_text() == format_plan(lower(g, emit_event=False))


def test_cache_off_neither_reads_nor_stores():
    g = graph()
    with record_events() as rec:
        lower_cached(g, cache=False)
    assert [e.kind for e in rec.events] == ["kernels_planned"] and not entry(g)["plan"].exists()


def test_a_graph_with_other_names_or_sizes_is_another_entry():
    lower_cached(graph())
    assert lowered_again(graph(name="other"))[0][0] == "disk_cache_miss"
    assert lowered_again(graph(n=16))[0][0] == "disk_cache_miss"


def test_flipped_bytes_are_a_miss_and_the_plan_is_stored_again():
    g = graph()
    lower_cached(g)
    data = bytearray(entry(g)["plan"].read_bytes())
    data[len(data) // 2] ^= 0x20
    entry(g)["plan"].write_bytes(bytes(data))
    kinds, reason = lowered_again(g)
    assert kinds[:2] == ["disk_cache_miss", "kernels_planned"] and "does not match its recorded sha256" in reason
    assert lowered_again(g)[0] == ["disk_cache_hit"]


@pytest.mark.parametrize("change, says", [
    (lambda text: text[: len(text) // 2], "line"),
    (lambda text: text.replace("# ember kernel plan", "# some plan"), "line 1: expected"),
    (lambda text: text.replace("def graph(", "def other("), "line"),
    (lambda text: "\n".join(line for line in text.splitlines() if "return (" not in line), "unexpected end"),
])
def test_text_that_does_not_parse_is_a_miss_naming_the_file_and_line(change, says, caplog):
    g = graph()
    lower_cached(g)
    restamp(g, change(entry(g)["plan"].read_text()))
    with caplog.at_level("WARNING", logger="ember.cache"):
        kinds, reason = lowered_again(g)
    assert kinds[0] == "disk_cache_miss" and reason.startswith(f"{entry(g)['plan']}: ") and says in reason
    assert str(entry(g)["plan"]) in caplog.text


def test_the_plan_of_another_graph_is_refused():
    g, other = graph(), graph(name="other")
    lower_cached(g)
    restamp(g, format_plan(lower(other, emit_event=False)))
    kinds, reason = lowered_again(g)
    assert kinds[0] == "disk_cache_miss" and "is not the plan of graph 'graph'" in reason


def test_read_plan_names_what_does_not_fit():
    g = graph()
    text = format_plan(lower(g, emit_event=False))
    assert read_plan(text, g) == lower(g, emit_event=False)
    with pytest.raises(PlanError, match="plan inputs .* are not the inputs of graph"):
        read_plan(text, g.replace(inputs=()))
    with pytest.raises(PlanError, match="plan has 1 outputs, graph 'graph' has 0"):
        read_plan(text, g.replace(outputs=()))


def test_a_plan_that_breaks_a_loop_ir_rule_is_refused_by_the_verifier():
    g = graph()
    lower_cached(g)
    text = entry(g)["plan"].read_text()
    buffer = next(line.split(":")[0].strip() for line in text.splitlines() if line.strip().endswith(" output"))
    restamp(g, text.replace(f"store {buffer}[", "store nowhere["))
    kinds, reason = lowered_again(g)
    assert kinds[0] == "disk_cache_miss" and "nowhere" in reason
