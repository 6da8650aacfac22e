"""The sweep's summary as markdown: pass counts per dtype and phase, failure classes, fallbacks, graph breaks."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from .cases import STATUSES, STRICT_FALLBACKS, CaseResult
from .expected import Verdict

_SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "forward": "fwd", "backward": "bwd"}


def _key(r: CaseResult) -> str:
    return f"{r.op}.{r.variant}" if r.variant else r.op


def _cell(text: str, limit: int = 160) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def totals(results: Sequence[CaseResult]) -> list[str]:
    by: dict[tuple[str, str], Counter] = defaultdict(Counter)
    ops: dict[tuple[str, str], set] = defaultdict(set)
    for r in results:
        by[(r.dtype, r.phase)][r.status] += 1
        by[(r.dtype, r.phase)]["eager-only"] += r.status == "pass" and r.graphs == 0 and r.compiler == "ember"
        ops[(r.dtype, r.phase)].add(_key(r))
    failing = defaultdict(set)
    for r in results:
        if r.failed:
            failing[(r.dtype, r.phase)].add(_key(r))
    lines = ["| dtype | phase | ops | cases | " + " | ".join(STATUSES) + " | pass rate | ops all passing |",
             "|---|---|---:|---:|" + "---:|" * (len(STATUSES) + 2)]
    for (dtype, phase), c in sorted(by.items(), key=lambda kv: (kv[0][0] != "float32", kv[0])):
        run = sum(c[s] for s in STATUSES)
        judged = run - c["skipped-by-eager"]
        rate = f"{100 * c['pass'] / judged:.1f}%" if judged else "-"
        n_ops = len(ops[(dtype, phase)])
        lines.append(f"| {dtype} | {phase} | {n_ops} | {run} | " + " | ".join(str(c[s]) for s in STATUSES) +
                     f" | {rate} | {n_ops - len(failing[(dtype, phase)])} |")
    eager_only = sum(c["eager-only"] for c in by.values())
    if eager_only:
        lines.append("")
        lines.append(f"{eager_only} passing cases captured no graph (the op ran in eager behind a graph break); "
                     "see 'Graph breaks'.")
    return lines


def classes(results: Sequence[CaseResult]) -> list[str]:
    groups: dict[str, list[CaseResult]] = defaultdict(list)
    for r in results:
        if r.failed:
            groups[r.klass].append(r)
    lines = ["| class | cases | ops | dtypes / phases | example ops | example message |", "|---|---:|---:|---|---|---|"]
    for klass, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        ops = sorted({_key(r) for r in rs})
        where = ", ".join(sorted({f"{r.dtype}/{r.phase}" for r in rs}))
        example = rs[0]
        message = f"{example.error_type}: {example.error}" if example.error_type else example.error
        lines.append(f"| {klass} | {len(rs)} | {len(ops)} | {where} | {_cell(', '.join(ops[:6]), 200)} | "
                     f"{_cell(f'{_key(example)}: {message}', 240)} |")
    return lines


def failing_ops(results: Sequence[CaseResult]) -> list[str]:
    """Every failing op with its classes and one message per class: the list others fix from."""
    per: dict[tuple[str, str], list[CaseResult]] = defaultdict(list)
    for r in results:
        if r.failed:
            per[(r.klass, _key(r))].append(r)
    lines = ["| class | op | cases (dtype/phase/sample) | message |", "|---|---|---|---|"]
    for (klass, op), rs in sorted(per.items()):
        where = " ".join(f"{_SHORT[r.dtype]}/{_SHORT[r.phase]}/{r.sample}" for r in rs)
        first = rs[0]
        message = f"{first.error_type}: {first.error}" if first.error_type else first.error
        lines.append(f"| {klass} | {op} | {where} | {_cell(message, 220)} |")
    return lines


def fallbacks(results: Sequence[CaseResult]) -> list[str]:
    """Every fallback event by op, stage and cause (`-` in result files older than causes); a cause of
    `STRICT_FALLBACKS` fails its case unless the expected-failures list names it."""
    seen: Counter = Counter()
    for r in results:
        for f in r.fallbacks:
            stage, cause, reason = f if len(f) == 3 else (f[0], "-", f[-1])
            seen[(_key(r), stage, cause, reason)] += 1
    if not seen:
        return ["No fallback events."]
    lines = ["| op | stage | cause | reason | cases |", "|---|---|---|---|---:|"]
    for (op, stage, cause, reason), n in sorted(seen.items(), key=lambda kv: (-kv[1], kv[0])):
        strict = f"**{cause}**" if cause in STRICT_FALLBACKS else cause
        lines.append(f"| {op} | {stage} | {strict} | {_cell(reason, 240)} | {n} |")
    return lines


def breaks(results: Sequence[CaseResult]) -> list[str]:
    seen: dict[str, set] = defaultdict(set)
    for r in results:
        for reason in r.breaks:
            seen[reason].add(_key(r))
    if not seen:
        return ["No graph breaks."]
    lines = ["| reason | ops | example ops |", "|---|---:|---|"]
    for reason, ops in sorted(seen.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"| {_cell(reason, 200)} | {len(ops)} | {_cell(', '.join(sorted(ops)[:8]), 200)} |")
    return lines


def random_ops(results: Sequence[CaseResult]) -> list[str]:
    status: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        if r.random and r.status != "skipped-by-eager":
            status[_key(r)][r.status] += 1
    if not status:
        return ["No random op ran."]
    return [", ".join(f"{op} ({', '.join(f'{n} {s}' for s, n in sorted(c.items()))})"
                      for op, c in sorted(status.items()))]


RULES = """\
Each OpInfo of torch's `op_db` that supports the dtype on CPU, its first 3 samples, compiled with
`ember.compile(lambda *args: op(*args, **kwargs))` (Dynamo frontend, fullgraph=False) and compared with eager by
torch.testing.assert_close at the op's declared tolerances. *forward*: inputs without grad. *backward*: inputs that
require grad; outputs, then the gradients of sum(out * w) over the floating outputs (w fixed random) for every input
that requires grad. In both, the inputs as the call left them (what an op wrote into them: batch norm's running stats)
too. bfloat16 and float16 values outside the tolerance pass when no further from a float32 reference than eager's;
float32 values (of ops that draw no random numbers) when they match a float64 reference at the tolerances, no further
from it than eager's.
Random ops run from the same seed in both (ember reproduces eager's random stream) and are compared exactly like the
rest; ops returning uninitialized memory (`empty*`) are compared by shape, dtype and device only.
*fallback*: the numbers match but ember's codegen did not compile the graph (it did not build, lower or print: a
fallback of a cause in bold below) and the interpreter codegen ran it. *skipped-by-eager*: eager refuses the sample
or computes no gradient for it. Rules: tests/opinfo/cases.py."""


def render(results: Sequence[CaseResult], verdict: Verdict | None = None, title: str = "ember OpInfo sweep",
           notes: Sequence[str] = ()) -> str:
    compilers = sorted({r.compiler for r in results})
    out = [f"# {title}", "", RULES, "", *notes, "" if notes else "",
           f"Compiler: {', '.join(compilers)}. Cases: {len(results)}.", "", "## Pass counts", "", *totals(results)]
    if verdict is not None:
        out += ["", "## Against the expected-failures list", "",
                f"{len(verdict.unexpected_failures)} unexpected failures, {len(verdict.unexpected_passes)} "
                f"unexpected passes, {len(verdict.changed_class)} cases failing with another class than listed."]
        if verdict.lines():
            out += ["", "```", *verdict.lines()[:200], "```"]
    out += ["", "## Failure classes", "", *classes(results),
            "", "## Fallbacks taken", "", *fallbacks(results),
            "", "## Random ops", "",
            "Ops whose eager runs differ between two seeds (cases eager refuses left out); each case runs from the "
            "same seed in eager and in the compiled function and is compared like any other, except the `empty*` "
            "ops, compared by metadata only.", "", *random_ops(results),
            "", "## Graph breaks", "", *breaks(results),
            "", "## Failing ops", "", *failing_ops(results), ""]
    return "\n".join(out)
