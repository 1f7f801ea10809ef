"""Per-block summary (``summary.json``) and a static HTML report from merged coverage.

Figures are Verilator's: *line* = line (statement-block) points hit / total, *toggle* = toggle
points (each bit of each signal, 0->1 and 1->0 counted apart) hit / total, after the exclusions
of ``exclusions.toml`` (each listed with its reason and how many points it removed) and the
toggle points of constant bits (:func:`trainingcxl.coverage.data.constant_bits`, counted per
block as ``excluded.toggle_constant``). *toggle_ports* is the same toggle figure over the
points of module ports only (every module of the block, its own and its submodules'), the
population lowRISC's Ibex and OpenTitan grade (VCS ``-cm_tgl portsonly``); it is reported beside
the all-signals figure, never instead of it.
"""
from __future__ import annotations

import html
import json
import tomllib
from collections import defaultdict
from importlib import resources
from pathlib import Path

from trainingcxl.coverage.blocks import BLOCKS, OTHER
from trainingcxl.coverage.data import KINDS, Coverage, matches, signal_of

__all__ = ["load_exclusions", "summarise", "write_html", "DEFAULT_TOP"]

DEFAULT_TOP = "trainingcxl_device"   # the headline variant is the block as built in the device


def load_exclusions(path: Path | None = None) -> list[dict]:
    """The exclusion rules; each must name a kind and give a non-empty reason."""
    text = (Path(path).read_text() if path is not None else
            resources.files("trainingcxl.coverage").joinpath("exclusions.toml").read_text())
    rules = tomllib.loads(text).get("exclude", [])
    for i, r in enumerate(rules):
        if not str(r.get("reason", "")).strip():
            raise ValueError(f"exclusion {i} ({r}) has no reason")
        if r.get("kind") not in KINDS:
            raise ValueError(f"exclusion {i} ({r}) must have kind in {KINDS}")
        unknown = set(r) - {"block", "kind", "module", "signal", "comment", "bits", "reason"}
        if unknown:
            raise ValueError(f"exclusion {i} has unknown keys {sorted(unknown)}")
        if "bits" in r and (r["kind"] != "toggle" or not r["bits"] or not all(
                isinstance(b, int) and b >= 0 for b in r["bits"])):
            raise ValueError(f"exclusion {i}: bits must be a non-empty list of bit indices of "
                             "a toggle rule")
    return rules


def _pct(hit: int, total: int):
    return round(100.0 * hit / total, 2) if total else None


def summarise(cov: Coverage, rules: list[dict], meta: dict | None = None,
              sources: dict | None = None, headline: dict | None = None) -> dict:
    """Per-block figures. ``sources`` ((block, module path in block) -> Amaranth source file,
    from :func:`trainingcxl.coverage.blocks.module_sources`) adds a per-module breakdown of the
    headline variant naming the file each module was elaborated from. ``headline`` (block ->
    variant: the default configuration's, :func:`trainingcxl.coverage.data.block_variants`)
    chooses each block's headline variant; without it (or for a block whose variant did not
    run) the largest variant built in the full device, else the largest; a block whose default
    variant did not run says so in ``headline_missing``."""
    per = defaultdict(lambda: {k: [0, 0] for k in KINDS})      # (block, variant) -> kind -> [hit, total]
    per_mod = defaultdict(lambda: {k: [0, 0] for k in KINDS})  # (block, variant, module) -> ...
    ports = defaultdict(lambda: [0, 0])                        # (block, variant) -> [hit, total]
    excl_per = defaultdict(lambda: {**{k: 0 for k in KINDS}, "toggle_constant": 0})
    rule_hits = [0] * len(rules)
    constant = cov.constant
    for p, n in cov.counts.items():
        key = (p.block, p.variant)
        if p in constant:
            excl_per[key]["toggle_constant"] += 1
            continue
        hit_rule = next((i for i, r in enumerate(rules) if matches(r, p)), None)
        if hit_rule is not None:
            rule_hits[hit_rule] += 1
            excl_per[key][p.kind] += 1
            continue
        per[key][p.kind][1] += 1
        per[key][p.kind][0] += n > 0
        per_mod[key + (p.module,)][p.kind][1] += 1
        per_mod[key + (p.module,)][p.kind][0] += n > 0
        if p in cov.ports:
            ports[key][1] += 1
            ports[key][0] += n > 0
    blocks = {}
    for b in (*BLOCKS, OTHER):
        variants = []
        for (name, variant), kinds in per.items():
            if name != b.name:
                continue
            tops = sorted(cov.variant_tops[(name, variant)])
            variants.append({
                "variant": variant, "tops": tops, "runs": cov.variant_runs[(name, variant)],
                **{k: {"hit": kinds[k][0], "total": kinds[k][1],
                       "pct": _pct(*kinds[k])} for k in KINDS},
                "toggle_ports": {"hit": ports[(name, variant)][0],
                                 "total": ports[(name, variant)][1],
                                 "pct": _pct(*ports[(name, variant)])},
                "excluded": dict(excl_per[(name, variant)]),
            })
        if not variants:
            continue
        want = (headline or {}).get(b.name)
        variants.sort(key=lambda v: (v["variant"] != want, DEFAULT_TOP not in v["tops"],
                                     -sum(v[k]["total"] for k in KINDS)))
        head, rest = variants[0], variants[1:]
        if want is not None and head["variant"] != want:
            head["headline_missing"] = (
                f"no coverage of the default configuration's variant {want} (the RTL changed "
                "since these files were written?): shown is the largest other variant")
        modules = {}
        for (name, variant, mod), kinds in sorted(per_mod.items()):
            if (name, variant) == (b.name, head["variant"]):
                modules[mod or "(block)"] = {
                    "source": (sources or {}).get((name, mod), ""),
                    **{k: f"{kinds[k][0]}/{kinds[k][1]}" for k in KINDS}}
        blocks[b.name] = {"source": b.source, **head, "modules": modules, "other_variants": rest}
    return {
        **(meta or {}),
        "metric": "Verilator line points and toggle points (per bit and direction) hit/total, "
                  "after exclusions (the rules, and toggle points of bits driven by a literal "
                  "constant in the generated Verilog: 'toggle_constant'); headline = the block "
                  "as built in the full device's default configuration; toggle_ports = the "
                  "toggle figure over module ports only",
        "coverage_files": len(cov.files),
        "exclusions": [{**r, "points": rule_hits[i]} for i, r in enumerate(rules)],
        "blocks": blocks,
    }


def _missed(cov: Coverage, rules, block: str, variant: str):
    lines, toggles = [], defaultdict(int)
    constant = cov.constant
    for p, n in cov.counts.items():
        if (p.block != block or p.variant != variant or n or p in constant
                or any(matches(r, p) for r in rules)):
            continue
        if p.kind == "line":
            lines.append(p)
        else:
            toggles[(p.module, signal_of(p))] += 1
    lines.sort(key=lambda p: (p.module, p.rel_line, p.nth))
    return lines, sorted(toggles.items())


def write_html(cov: Coverage, rules, summary: dict, out: Path) -> Path:
    """index.html (per block) and one page per block listing every missed line point (with its
    Verilog line) and every signal with untoggled bits."""
    out.mkdir(parents=True, exist_ok=True)
    e = html.escape
    style = ("<style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:left}"
             "code{font-size:90%}.lo{color:#b00}</style>")
    rows = []
    for name, b in summary["blocks"].items():
        page = "block-" + "".join(c if c.isalnum() else "_" for c in name) + ".html"
        cells = "".join(
            f"<td class='{'lo' if (b[k]['pct'] or 0) < 90 else ''}'>{b[k]['pct']} % "
            f"({b[k]['hit']}/{b[k]['total']})</td>" for k in (*KINDS, "toggle_ports"))
        rows.append(f"<tr><td><a href='{page}'>{e(name)}</a></td><td><code>{e(b['source'])}"
                    f"</code></td>{cells}<td>{b['runs']}</td></tr>")
        lines, toggles = _missed(cov, rules, name, b["variant"])
        body = [f"<h1>{e(name)} ({e(b['source'])})</h1>",
                f"<p>variant {b['variant']} built in {e(', '.join(b['tops']))}; "
                f"line {b['line']['pct']} %, toggle {b['toggle']['pct']} % (ports only "
                f"{b['toggle_ports']['pct']} %)</p>",
                "<h2>Modules</h2><table><tr><th>module</th><th>Amaranth source</th>"
                "<th>line</th><th>toggle</th></tr>",
                *(f"<tr><td>{e(m)}</td><td><code>{e(v['source'])}</code></td>"
                  f"<td>{v['line']}</td><td>{v['toggle']}</td></tr>"
                  for m, v in b.get("modules", {}).items()),
                "</table>",
                f"<h2>Missed line points ({len(lines)})</h2><table>"
                "<tr><th>module</th><th>kind</th><th>Verilog line</th></tr>"]
        for p in lines:
            path, line, _ = cov.where[p]
            body.append(f"<tr><td>{e(p.module or '(block)')}</td><td>{e(p.comment)}</td>"
                        f"<td><code>{Path(path).name}:{line}: {e(cov.source_line(p))}</code>"
                        "</td></tr>")
        consts = defaultdict(int)
        for p in cov.constant:
            if (p.block, p.variant) == (name, b["variant"]):
                consts[(p.module, signal_of(p))] += 1
        for title, counted, rows_of in (
                (f"Signals with untoggled bits ({len(toggles)})", "missed points", toggles),
                (f"Signals with constant bits, not counted ({len(consts)})", "points",
                 sorted(consts.items()))):
            body.append(f"</table><h2>{title}</h2><table><tr><th>module</th><th>signal</th>"
                        f"<th>{counted}</th></tr>")
            body += [f"<tr><td>{e(mod or '(block)')}</td><td><code>{e(sig)}</code></td>"
                     f"<td>{n}</td></tr>" for (mod, sig), n in rows_of]
        body.append("</table>")
        (out / page).write_text(f"<html><head><meta charset='utf-8'>{style}</head><body>"
                                + "\n".join(body) + "</body></html>")
    excl = "".join(f"<li>{e(json.dumps({k: v for k, v in r.items() if k != 'reason'}))}: "
                   f"{e(r['reason'])}</li>" for r in summary["exclusions"]) or "<li>none</li>"
    index = out / "index.html"
    index.write_text(
        f"<html><head><meta charset='utf-8'>{style}</head><body><h1>TrainingCXL code coverage</h1>"
        f"<p>{e(summary['metric'])}; {summary['coverage_files']} coverage files.</p>"
        "<table><tr><th>block</th><th>source</th><th>line</th><th>toggle</th>"
        "<th>toggle, ports only</th><th>runs</th></tr>"
        + "\n".join(rows) + f"</table><h2>Exclusions</h2><ul>{excl}</ul></body></html>")
    return index
