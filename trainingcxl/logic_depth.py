"""Logic depth of a flattened ECP5 netlist: the longest combinational paths, by source line.

Place and route of the whole device does not finish (docs/fpga.md), so nextpnr names no
critical path; the mapped netlist still shows which paths are deep and where they run. Each
path runs from a flip-flop, a block-RAM output or a top-level input to a flip-flop, block-RAM or
multiplier input (clock pins aside), or a distributed-RAM write port. Its depth counts one level
per LUT4, carry cell entered (CCU2C input to sum or carry out), distributed-RAM read and
multiplier, and 0.05 per carry cell a carry ripples through; wide-mux cells (PFUMX, L6MUX21)
count 0.3. Routing delay is not modelled: depth ranks paths, it does not predict a frequency.
"""
import collections

__all__ = ["logic_depth", "depth_markdown"]

_ENDPOINT_CELLS = ("TRELLIS_FF", "DP16KD", "TRELLIS_DPR16X4", "MULT18X18D")


def _arcs(cell):
    """(input port, output port, depth) of one cell's combinational arcs."""
    t, conn = cell["type"], cell["connections"]
    dirs = cell.get("port_directions", {})
    ins = [p for p in conn if dirs.get(p) == "input"]
    outs = [p for p in conn if dirs.get(p) == "output"]
    if t == "LUT4":
        return [(p, "Z", 1.0) for p in "ABCD" if p in conn]
    if t == "CCU2C":
        return [(p, o, 0.05 if (p, o) == ("CIN", "COUT") else (0.3 if p == "CIN" else 1.0))
                for p in ins for o in ("COUT", "S0", "S1") if o in conn]
    if t in ("PFUMX", "L6MUX21"):
        return [(p, "Z", 0.3) for p in ins]
    if t == "TRELLIS_DPR16X4":
        return [(p, o, 1.0) for p in ins if p.startswith("RAD") for o in outs]
    if t == "MULT18X18D":
        return [(p, o, 1.0) for p in ins if p[0] in "AB" for o in outs if o.startswith("P")]
    return []


def _bit_names(mod):
    """Per bit: (name, src) of its most readable net name (a user name before a generated one,
    fewer ``$`` and shorter first)."""
    best = {}
    for name, net in mod["netnames"].items():
        src = net.get("attributes", {}).get("src", "")
        for i, b in enumerate(net["bits"]):
            if isinstance(b, str):
                continue
            score = (net.get("hide_name", 0), name.count("$"), "_LUT4_" in name, len(name))
            if b not in best or score < best[b][0]:
                label = f"{name}[{i}]" if len(net["bits"]) > 1 else name
                best[b] = (score, label, src)
    return {b: (label, src) for b, (_, label, src) in best.items()}


def _design_line(src, source, root):
    """The first location of a Yosys ``src`` attribute (``|``-separated) that ``source`` maps
    to a path under ``root``, as ``file:line`` (else None)."""
    for part in src.split("|"):
        loc = source(part)
        if loc and loc.startswith(root):
            path, _, pos = loc.rpartition(":")
            return f"{path}:{pos.split('.')[0]}"
    return None


def logic_depth(netlist: dict, top: str, *, source, paths: int = 5, root: str = "hw/") -> dict:
    """Depth histogram of every endpoint and the ``paths`` deepest paths of ``top`` (a
    flattened module of a Yosys JSON ``netlist``), each ending in a different block pair (the
    first two parts of the start and end net names), with their steps by source line under
    ``root``; ``source`` maps a Yosys source location to one relative to the checkout, or to
    None (``trainingcxl.synth.clean_source``). Raises ValueError if ``top`` still instantiates
    modules of the netlist."""
    mod = netlist["modules"][top]
    cells = mod["cells"]
    user = {k for k, v in netlist["modules"].items()
            if not int(v.get("attributes", {}).get("blackbox", "0"), 2)}
    sub = sorted({c["type"] for c in cells.values() if c["type"] in user})
    if sub:
        raise ValueError(f"{top} is not flattened: it instantiates {', '.join(sub[:3])}")
    succ = collections.defaultdict(list)
    indeg = collections.Counter()
    bits = set()
    for c in cells.values():
        conn = c["connections"]
        for ip, op, w in _arcs(c):
            if ip not in conn or op not in conn:
                continue
            for ib in conn[ip]:
                for ob in conn[op]:
                    if isinstance(ib, str) or isinstance(ob, str):
                        continue
                    succ[ib].append((ob, w))
                    indeg[ob] += 1
                    bits.update((ib, ob))
    dist = {b: 0.0 for b in bits if indeg[b] == 0}
    pred = {}
    todo = collections.deque(dist)
    left = dict(indeg)
    while todo:
        b = todo.popleft()
        for ob, w in succ[b]:
            if dist[b] + w > dist.get(ob, -1.0):
                dist[ob], pred[ob] = dist[b] + w, b
            left[ob] -= 1
            if left[ob] == 0:
                todo.append(ob)
    looped = len(bits) - len(dist)
    ends = set()
    for c in cells.values():
        if c["type"] in _ENDPOINT_CELLS:
            dirs = c.get("port_directions", {})
            for p, bb in c["connections"].items():
                if dirs.get(p) == "input" and not p.startswith("CLK"):
                    ends.update(b for b in bb if not isinstance(b, str))
    hist = collections.Counter(int(dist.get(b, 0.0)) for b in ends)
    names = _bit_names(mod)

    def block(b):
        return ".".join(names.get(b, (str(b), ""))[0].split(".")[:2])

    out, seen = [], set()
    for b in sorted(ends & dist.keys(), key=lambda x: -dist[x]):
        chain = [b]
        while chain[-1] in pred:
            chain.append(pred[chain[-1]])
        key = (block(chain[-1]), block(b))
        if key in seen:
            continue
        seen.add(key)
        steps = []
        for x in reversed(chain):
            label, src = names.get(x, (str(x), ""))
            where = _design_line(src, source, root)
            if where and (not steps or steps[-1]["src"] != where):
                steps.append({"depth": round(dist[x], 2), "src": where, "net": label})
        out.append({"depth": round(dist[b], 2), "start": names.get(chain[-1], ("?",))[0],
                    "end": names.get(b, ("?",))[0], "steps": steps})
        if len(out) == paths:
            break
    return {"max_depth": out[0]["depth"] if out else 0.0, "endpoints": len(ends),
            "histogram": dict(sorted(hist.items())), "loop_bits": looped, "paths": out}


def depth_markdown(d: dict) -> list[str]:
    """Report lines for :func:`logic_depth`'s result."""
    md = ["## Logic depth before placement (flattened netlist)", "",
          "Longest combinational paths in LUT levels (one per LUT4, carry cell entered, "
          "distributed-RAM read or multiplier; 0.05 per carry cell rippled through). Routing is "
          "not modelled: depth ranks paths, it does not give a frequency "
          "(`trainingcxl/logic_depth.py`).", ""]
    deep = {k: v for k, v in d["histogram"].items() if k >= 8}
    md.append(f"Deepest: **{d['max_depth']:g} levels**. Endpoints by depth (8 and more): "
              + (", ".join(f"{k}: {v}" for k, v in deep.items()) or "none")
              + f" (of {d['endpoints']} endpoint bits).")
    md.append("")
    for i, p in enumerate(d["paths"], 1):
        md.append(f"{i}. depth {p['depth']:g}: `{p['start']}` → `{p['end']}`")
        for s in p["steps"]:
            md.append(f"   - {s['depth']:g}: `{s['src']}` (`{s['net']}`)")
    md.append("")
    return md
