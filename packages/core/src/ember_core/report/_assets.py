"""The report page's own style and script, inlined (the page loads nothing: its Content-Security-Policy allows no
network, and only this script, by its hash)."""

from __future__ import annotations

import base64
import hashlib

CSS = """
:root { --ink: #212529; --muted: #6c757d; --line: #dee2e6; --soft: #f8f9fa; --accent: #1864ab; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink); }
header { padding: 14px 24px; background: #1b1f24; color: #f1f3f5; }
header h1 { margin: 0 0 4px; font-size: 20px; }
header .meta { color: #adb5bd; font-size: 12px; }
nav { padding: 8px 24px; border-bottom: 1px solid var(--line); background: var(--soft); position: sticky; top: 0;
      z-index: 2; display: flex; flex-wrap: wrap; gap: 4px 14px; align-items: center; }
nav a { color: var(--accent); text-decoration: none; }
nav button { font: inherit; font-size: 12px; padding: 2px 8px; }
main { padding: 8px 24px 40px; }
h2 { margin: 28px 0 8px; font-size: 18px; border-bottom: 2px solid var(--line); padding-bottom: 4px; }
h3 { margin: 18px 0 6px; font-size: 15px; }
.badge { display: inline-block; font-size: 11px; padding: 1px 7px; border-radius: 9px; background: #e7f5ff;
         color: #1864ab; margin-left: 6px; vertical-align: middle; font-weight: normal; }
.badge.warn { background: #fff3bf; color: #8f5800; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 12px 0; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 8px 14px; min-width: 120px; }
.card b { display: block; font-size: 20px; }
.card span { color: var(--muted); font-size: 12px; }
details { margin: 6px 0; border: 1px solid var(--line); border-radius: 6px; background: #fff; }
details > summary { cursor: pointer; padding: 6px 10px; background: var(--soft); border-radius: 6px; }
details[open] > summary { border-bottom: 1px solid var(--line); border-radius: 6px 6px 0 0; }
details > :not(summary) { margin: 8px 10px; }
pre.code { font: 12px/1.4 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; background: #fbfcfd;
           padding: 8px; overflow: auto; max-height: 560px; white-space: pre; }
pre .ln { display: inline-block; min-width: 100%; }
pre .ln:target, tr:target { background: #ffe066; outline: 1px solid #fab005; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: var(--soft); }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td code, li code { font-size: 12px; }
.scroll { overflow: auto; max-height: 760px; border: 1px solid var(--line); border-radius: 4px; background: #fff; }
svg.diagram .label { font: 11px ui-monospace, Menlo, Consolas, monospace; text-anchor: middle; fill: #212529; }
svg.diagram .label.sub { fill: #495057; font-size: 10px; }
svg.diagram .legend { font: 11px system-ui, sans-serif; fill: #495057; }
svg.diagram rect { stroke: #868e96; stroke-width: 0.8; }
svg.diagram .edge { fill: none; stroke: #adb5bd; stroke-width: 1; }
svg.diagram a:hover rect { stroke: #1864ab; stroke-width: 2; }
svg.bars text { font: 11px system-ui, sans-serif; fill: #212529; }
.muted { color: var(--muted); }
.note { color: #5c3c00; background: #fff9db; border-left: 3px solid #fab005; padding: 4px 8px; margin: 4px 0; }
.empty { color: var(--muted); font-style: italic; }
"""

SCRIPT = """
(function () {
  "use strict";
  function reveal() {
    var id = decodeURIComponent(window.location.hash.slice(1));
    var target = id ? document.getElementById(id) : null;
    if (!target) { return; }
    for (var d = target.closest("details"); d; d = d.parentElement && d.parentElement.closest("details")) {
      d.open = true;
    }
    target.scrollIntoView({ block: "center" });
  }
  function setAll(open) {
    var all = document.querySelectorAll("details");
    for (var i = 0; i < all.length; i++) { all[i].open = open; }
  }
  document.addEventListener("DOMContentLoaded", function () {
    var buttons = document.querySelectorAll("button[data-details]");
    for (var i = 0; i < buttons.length; i++) {
      buttons[i].addEventListener("click", function (e) { setAll(e.target.dataset.details === "open"); });
    }
    reveal();
  });
  window.addEventListener("hashchange", reveal);
  document.documentElement.setAttribute("data-script", "ran");  // tests read this: the policy let the script run
})();
"""


def script_hash() -> str:
    """The CSP source that lets exactly `SCRIPT` run."""
    digest = hashlib.sha256(SCRIPT.encode()).digest()
    return "'sha256-" + base64.b64encode(digest).decode() + "'"


def content_policy() -> str:
    return (f"default-src 'none'; style-src 'unsafe-inline'; script-src {script_hash()}; img-src data:; "
            "base-uri 'none'; form-action 'none'")
