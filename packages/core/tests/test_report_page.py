"""The report page: events gathered per compile, every stage's section, times, kernels linked to graph nodes and
source lines, and nothing of a graph's or a user's text reaching the page unescaped."""

import re

from ember_core import Event, Graph, Input, Node, Output, Ref, Reused, Value
from ember_core.report import PageInfo, PageRenderer, Report
from report_events import inference_events, training_events

INFO = PageInfo("train.py --steps 3", 1234, 0.0, "ember-core test")


def gathered(events) -> Report:
    report = Report()
    for e in events:
        report.add(e)
    return report


def page(events) -> str:
    return PageRenderer().render(gathered(events), INFO)


def test_a_training_compile_gathers_its_joint_partition_and_both_halves():
    report = gathered(training_events())
    (c,) = report.compiles
    assert (c.name, c.training, c.autograd, c.partitioner) == ("softmax", True, "aot", "region")
    assert [(g.name, g.role) for g in c.graphs.values()] == [("softmax_joint_forward", "forward"),
                                                              ("softmax_joint_backward", "backward")]
    forward = c.graphs["softmax_joint_forward"]
    assert forward.plan.startswith("# plan of") and forward.unit and forward.wrapper and forward.codegen == "cpp"
    assert forward.seconds == {"lowering": 0.25, "codegen": 0.125, "compile": 0.5, "build": 2.0}
    assert c.seconds == {"capture": 0.5, "autograd": 0.25, "partition": 0.125}
    assert any("fallback" in n for n in c.graphs["softmax_joint_backward"].notes)
    assert [e.compile for e in report.log if e.kind == "kernels_built"] == [1, 1]


def test_every_stage_has_its_section_for_a_training_compile():
    html = page(training_events())
    for title in ("Captured graph", "Joint graph", "Partition by <code>region</code>", "Partition report",
                  "forward graph", "backward graph", "Kernel plan (loop IR)", "Scheduler decisions",
                  "Generated C++ source", "Python wrapper", "Compile time per stage", "Guards and recompiles",
                  "Fallbacks", "Events (", "Source lines"):
        assert title in html, title
    assert html.count('<svg xmlns="http://www.w3.org/2000/svg" class="diagram"') == 4  # captured, partition, 2 halves
    assert "x.shape[0] == 6 failed: 7" in html and "softmax: a new shape" in html
    assert "<code>kernel</code>" in html  # the fallback's cause


def test_kernels_link_to_their_nodes_and_source_lines():
    html = page(inference_events())
    rows = re.findall(r'<tr id="c1-g1-r(\d+)">(.*?)</tr>', html)
    assert len(rows) == 2  # a kernel per node of softmax's graph, the last an extern call
    first = rows[0][1]
    assert 'href="#c1-g1-s0"' in first and 'href="#c1-g1-n1"' in first and 'href="#src-1"' in first
    assert 'id="c1-g1-n1"' in html and 'id="c1-g1-s0"' in html and 'id="src-1"' in html
    assert "model.py:10" in first and "layer0" in first
    assert re.search(r'<span id="src-1"><code>model.py:10</code></span>.*?href="#c1-g1-r0"', html)


def test_times_are_shown_per_stage_and_in_total():
    html = page(inference_events())
    for text in ("capture", "lowering", "codegen, other", "build", "750.0 ms", "2.00 s", "3.25 s"):
        assert text in html, text


def evil_graph() -> Graph:
    bad = "<script>alert(1)</script>"
    vec = Value(shape=(2,), stride=(1,))
    node = Node((f"y{bad}",), "aten.neg.default", (Ref(f"x{bad}"),),
                meta={"source": '</pre><img src=x onerror="alert(2)">.py:3', "module": bad})
    return Graph(name=f"g{bad}", inputs=(Input(f"x{bad}"),), nodes=(node,), outputs=(Output(f"y{bad}"),),
                 values={f"x{bad}": vec, f"y{bad}": vec})


def test_untrusted_text_is_escaped_everywhere():
    graph = evil_graph()
    steps = ({"kind": "kernel", "name": "k<b>", "sizes": "2", "origins": [graph.nodes[0].outputs[0]]},)
    events = [Event("graph_captured", "capture", "captured <script>alert(3)</script>", graph=graph),
              Event("guards_built", "capture", "guards", source="<script>alert(4)</script>"),
              Event("kernels_planned", "lowering", "planned", source="kernel k<b>[i0 < 2]:",
                    data={"graph": graph.name, "steps": steps}),
              Event("graph_break", "capture", "</pre><script>alert(5)</script>", data={"reason": "<i>"})]
    html = page(events)
    assert html.count("<script") == 1  # the page's own
    assert "<img" not in html and "k<b>" not in html and "<i>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;img src=x onerror=" in html
    for k in (3, 4, 5):
        assert f"&lt;script&gt;alert({k})" in html


def test_the_page_loads_nothing_and_runs_only_its_own_script():
    html = page(training_events())
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    assert "default-src &#x27;none&#x27;" in policy and "script-src &#x27;sha256-" in policy
    assert not re.search(r'(src|href)="(https?:)?//', html)


def test_a_compile_is_rendered_again_only_when_it_changed():
    report, renderer = gathered(inference_events()), PageRenderer()
    first = renderer.compiles.render(report.compiles[0])
    assert renderer.compiles.render(report.compiles[0]) is first
    report.add(Event("fallback", "codegen", "graph 'softmax': slower", data={"graph": "softmax", "cause": "kernel"}))
    assert "slower" in renderer.compiles.render(report.compiles[0])


def test_a_partition_from_the_disk_cache_is_matched_by_name():
    events = [e for e in training_events() if e.kind not in ("joint_traced", "partitioned")]
    (c,) = gathered(events).compiles
    assert {g.name: g.role for g in c.graphs.values()} == {"softmax_joint_forward": "forward",
                                                          "softmax_joint_backward": "backward"}
    assert c.training


def test_an_empty_report_is_a_page_too():
    html = PageRenderer().render(Report(), INFO)
    assert "Nothing compiled yet." in html and html.startswith("<!DOCTYPE html>")


def test_large_graphs_are_shown_as_text_without_a_diagram(monkeypatch):
    monkeypatch.setattr("ember_core.report._sections.MAX_DIAGRAM_NODES", 1)
    html = page(inference_events())
    assert "No diagram: 2 nodes (more than 1)" in html
    assert 'class="diagram"' not in html


def test_node_lines_of_the_graph_text_are_anchored():
    graph = inference_events()[0].graph
    html = page(inference_events())
    for k, node in enumerate(graph.nodes, start=1):
        line = re.search(rf'<span class="ln" id="c1-cap-n{k}">([^<]*)</span>', html).group(1)
        assert line.strip().startswith(node.outputs[0])


def test_a_graph_break_hit_again_on_a_recompile_counts_once():
    """The report counted "2 graph breaks" where explain reported 1: the same break, reported again when the frame
    recompiled. Both count distinct breaks (`ember_core.break_site`)."""
    data = {"reason": "call to print()", "where": "model.py:12", "code": "print(x)"}
    events = [Event("graph_break", "capture", "break at model.py:12", data=data),
              Event("recompiled", "capture", "f: n changed"),
              Event("graph_break", "capture", "break at model.py:12", data=dict(data)),
              Event("graph_break", "capture", "break at model.py:20", data={**data, "where": "model.py:20"})]
    html = page(events)
    assert re.search(r"<b>2</b><span>graph breaks</span>", html), "two distinct breaks, not three"
    breaks = re.search(r'<section id="breaks">.*?</section>', html, re.S)[0]  # (the event log lists every event)
    assert breaks.count("break at model.py:12") == 1 and breaks.count("break at model.py:20") == 1


def test_a_plan_from_the_disk_cache_is_shown_and_marked_as_such():
    """A warm start reuses lowering's plan: no `kernels_planned`, only the cache hit, whose source is the plan's
    text. The page showed no plan at all; now it shows that one, saying where it came from."""
    events = inference_events()
    graph = events[0].graph
    planned = next(e for e in events if e.kind == "kernels_planned")
    hit = Event("disk_cache_hit", "lowering", f"graph {graph.name!r}: kernel plan from the disk cache (plans 0123)",
                graph=graph, source="# plan of the warm start\n  kernel warm_0[i0 < 6]:",
                data={"cache": "plans", "steps": planned.data["steps"]})
    html = page([e if e is not planned else hit for e in events])
    assert "plan of the warm start" in html and "lowering did not run in this process" in html
    rows = re.findall(r'<tr id="c1-g1-r[0-9]+">', html)  # the kernel table, a row a step, as when lowered
    assert len(rows) == len(planned.data["steps"]) == len(re.findall(r'<tr id="c1-g1-r[0-9]+">', page(events)))


def test_a_partition_from_the_disk_cache_is_shown_and_marked_as_such():
    """A warm start reuses the runtime's partition: no `joint_traced`, no `partitioned`, only the cache hit whose
    payload is the partition. The page showed no partition section; now it shows the reused one, saying where it
    came from and why there is no joint diagram."""
    events = training_events()
    split = next(e for e in events if e.kind == "partitioned").payload
    captured = events[0].graph
    hit = Event("disk_cache_hit", "runtime", f"graph {captured.name!r}: partition from the remote cache r (p 01)",
                graph=captured, payload=Reused(split.partition), data={"cache": "partitions", "origin": "redis://r"})
    warm = [hit if e.kind == "partitioned" else e for e in events if e.kind != "joint_traced"]
    (c,) = gathered(warm).compiles
    assert c.partition is split.partition and c.joint is None and c.partitioner == "the remote cache redis://r"
    html = page(warm)
    assert "Partition from <code>the remote cache redis://r</code>" in html and "no joint graph to draw" in html
    assert "Saved for the backward" in html and "Joint graph" not in html
