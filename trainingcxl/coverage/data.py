"""Verilator coverage counters: read ``coverage.dat`` files, merge them, attribute every point
to a hw block, apply the exclusions, and summarise line and toggle coverage per block.

A point of Verilator's coverage file is one line ``C '<key\\x02value\\x01...>' <count>``; the keys
used here are ``page`` (``v_line/<module>`` or ``v_toggle/<module>``), ``f``/``l``/``n`` (Verilog
file, line, column), ``o`` (the comment: ``block``/``if``/``else``/... for line points,
``<signal>[bit]:0->1`` for toggle points) and ``S`` (the source lines a line point stands for).

The same RTL is built in several tops and configurations (the full device, ``DcohTestTop``, the
CSR alone), each its own Verilog file. A point is identified independently of the file: by block,
its module's path inside the block, a *variant* (the hash of the block's Verilog with the top's
name taken out and its clock and reset named as in the ``sync`` domain, :func:`_one_domain`, so
the DCOH inside the device, clocked by ``dev_clk``, and inside ``DcohTestTop``, by ``clk``, of
the same configuration are one variant and merge, while a 2x2 snoop filter is another), and its
position relative to its module's first line. Counts of one point add up over runs.
"""
from __future__ import annotations

import bisect
import fnmatch
import hashlib
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from trainingcxl.coverage.blocks import BLOCKS, OTHER, block_of

__all__ = ["Point", "read_dat", "Coverage", "load", "KINDS"]

KINDS = ("line", "toggle")
_ENTRY = re.compile(r"^C '(.*)' (\d+)$")
_MODULE = re.compile(r"^module (\\\S+|\w+)")
_TOGGLE = re.compile(r"^(.*?)((?:\[\d+\])*):[01]->[01]$")


def toggle_signal_bit(comment: str) -> tuple[str, int] | None:
    """(signal, bit) of a toggle point's comment (``x[3]:0->1`` -> ``("x", 3)``; every index
    leaves the signal name, the last is the bit; no index: bit 0), None for another comment."""
    m = _TOGGLE.match(comment)
    if m is None:
        return None
    idx = re.findall(r"\d+", m.group(2))
    return m.group(1), int(idx[-1]) if idx else 0


def _one_domain(lines: list) -> tuple[list, set, dict]:
    """A module's lines with its clock and reset named ``clk`` and ``rst`` when it has one input
    of each, and (the second result: their indices) the lines declaring or connecting them
    left out, and (the third) the renames. Amaranth names them after the clock domain
    (``clk`` for ``sync``, ``dev_clk`` for ``dev``), and Yosys declares wires and connects
    instance ports in name order, so in two tops with different domain names one block's
    lines differ only there; a line point's position counts the lines before it without
    those (:meth:`_VerilogFile.rel_line`), a toggle point's signal is renamed."""
    drop, renames = set(), {}
    text = "\n".join(lines)
    for suffix in ("clk", "rst"):
        names = set(re.findall(rf"^\s*input (\w*{suffix});$", text, re.M))
        if len(names) != 1:
            continue
        orig = names.pop()
        renames[orig] = suffix
        name = re.escape(orig)
        gone = re.compile(rf"^\s*((input|wire) {name};|\.\w+\({name}\),?)$")
        drop |= {i for i, line in enumerate(lines) if gone.match(line)}
        lines = [re.sub(rf"\b{name}\b", suffix, line) for line in lines]
    # the last connection of an instance has no comma: commas ending lines go too
    kept = [line.rstrip(",") for i, line in enumerate(lines) if i not in drop]
    return kept, drop, renames


_PORT = re.compile(r"^\s*(?:input|output|inout)\s*(?:\[\d+:\d+\])?\s*\\?(\S+)\s*;")


def port_names(lines: list[str]) -> set[str]:
    """Names of the ports one module's Verilog declares (``input``/``output``/``inout``), as
    Verilator's toggle comments name them once demangled (escaped identifiers without their
    backslash)."""
    return {m.group(1) for m in map(_PORT.match, lines) if m}


_DECL = re.compile(r"^\s*(?:wire|reg|input|output)\s*(?:\[(\d+):(\d+)\])?\s*\\?(\S+)\s*;")
_ASSIGN = re.compile(r"^\s*assign\s+\\?(\S+?)\s*(?:\[(\d+)(?::(\d+))?\])?\s*=\s*(.+?)\s*;\s*$")
_CONST = re.compile(r"^(\d+)'[hdb][0-9a-fA-F_]+$")
_PART = re.compile(r"^\\?(\S+?)\s*(?:\[(\d+)(?::(\d+))?\])?$")


def constant_bits(lines: list[str]) -> dict[str, set[int]]:
    """Signal -> bits driven by a literal constant in one module's Verilog: ``assign x = 4'h0;``,
    ``assign x[7:4] = ...``, and the constant parts of a concatenation ``{ 3'h0, y }`` as far
    as the widths below them are known (a part of unknown width ends the walk: such bits are
    left out, never guessed). Their toggle points can never be hit, whatever the stimulus
    (what simulators call constant objects)."""
    width = {}
    for t in lines:
        m = _DECL.match(t)
        if m:
            width[demangle(m.group(3))] = int(m.group(1)) - int(m.group(2)) + 1 if m.group(1) else 1
    out = defaultdict(set)
    for t in lines:
        m = _ASSIGN.match(t)
        if not m:
            continue
        name, rhs = demangle(m.group(1)), m.group(4)
        if m.group(2) is not None:
            lo = int(m.group(3) if m.group(3) is not None else m.group(2))
        elif name in width:
            lo = 0
        else:
            continue
        parts = [x.strip() for x in rhs[1:-1].split(",")] if rhs.startswith("{") else [rhs]
        pos = lo
        for part in reversed(parts):          # from the least significant part
            c = _CONST.match(part)
            if c:
                w = int(c.group(1))
                out[name].update(range(pos, pos + w))
            else:
                q = _PART.match(part)
                if not q:
                    break
                if q.group(2) is not None:
                    w = int(q.group(2)) - int(q.group(3) if q.group(3) is not None
                                              else q.group(2)) + 1
                else:
                    w = width.get(demangle(q.group(1)))
                    if w is None:
                        break
            pos += w
    return dict(out)


@dataclass(frozen=True)
class Point:
    block: str
    variant: str       # hash of the block's normalised Verilog (see the module docstring)
    module: str        # path inside the block ("" for the block's own module)
    kind: str          # "line" or "toggle"
    comment: str       # Verilator's ("if", "else", "block", ... or "signal[bit]:0->1"),
                       # demangled, Yosys' $N numbers dropped
    rel_line: int      # line relative to the module's first line
    nth: int           # order among the points of the same kind and comment on that line


def _fields(key: str) -> dict:
    out = {}
    for kv in key.split("\x01"):
        if "\x02" in kv:
            k, v = kv.split("\x02", 1)
            out[k] = v
    return out


def read_dat(path: Path):
    """Yield (fields, count) for every point of one coverage.dat."""
    with open(path, encoding="utf-8", errors="replace") as f:
        header = f.readline()
        if not header.startswith("# SystemC::Coverage"):
            raise ValueError(f"{path}: not a Verilator coverage file (header {header[:40]!r})")
        for line in f:
            m = _ENTRY.match(line.rstrip("\n"))
            if m:
                yield _fields(m.group(1)), int(m.group(2))


@dataclass
class _VerilogFile:
    """Module line ranges and per-block variants of one generated Verilog file."""
    path: Path
    top: str = ""
    starts: list = field(default_factory=list)    # (first line, module name), sorted
    variants: dict = field(default_factory=dict)  # block name -> variant hash
    text: list = field(default_factory=list)
    dropped: dict = field(default_factory=dict)   # module's first line -> lines left out
    renames: dict = field(default_factory=dict)   # module's first line -> {clock/reset: name}
    constants: dict = field(default_factory=dict)  # module's first line -> constant_bits()
    ports: dict = field(default_factory=dict)     # module's first line -> port_names()

    @classmethod
    def read(cls, path: Path, text: str | None = None) -> "_VerilogFile":
        vf = cls(path=path)
        vf.text = (path.read_text(errors="replace") if text is None else text).splitlines()
        mods = []
        for i, line in enumerate(vf.text, 1):
            m = _MODULE.match(line)
            if m:
                mods.append((i, m.group(1).lstrip("\\")))
        vf.starts = mods
        names = [n for _, n in mods]
        vf.top = min(names, key=lambda n: n.count(".")) if names else ""
        # a block's variant: its modules' text, top's name taken out, in path order
        per_block = defaultdict(list)
        bounds = [s for s, _ in mods] + [len(vf.text) + 1]
        for (start, name), end in zip(mods, bounds[1:]):
            block, rel = block_of(name)
            kept, drop, vf.renames[start] = _one_domain(vf.text[start - 1:end - 1])
            vf.constants[start] = constant_bits(vf.text[start - 1:end - 1])
            vf.ports[start] = port_names(vf.text[start - 1:end - 1])
            vf.dropped[start] = sorted(drop)
            body = "\n".join(kept).replace(vf.top + ".", "TOP.")
            body = re.sub(r"\$\d+", "$", body)
            # the port list's order differs between tops of the same logic: sort it
            head, _, rest = body.partition(");")
            body = " ".join(sorted(head.replace(",", " ").replace("(", " ").split())) + rest
            per_block[block.name].append((rel, body))
        for b, items in per_block.items():
            h = hashlib.sha256()
            for rel, body in sorted(items):
                h.update(rel.encode() + b"\0" + body.encode() + b"\0")
            vf.variants[b] = h.hexdigest()[:12]
        return vf

    def rel_line(self, start: int, line: int) -> int:
        """Position of ``line`` in the module starting at ``start``, not counting the lines
        :func:`_one_domain` left out."""
        return line - start - bisect.bisect_left(self.dropped.get(start, ()), line - start)

    def module_at(self, line: int) -> tuple[int, str]:
        lo, hi = 0, len(self.starts) - 1
        best = self.starts[0] if self.starts else (1, "")
        while lo <= hi:
            mid = (lo + hi) // 2
            if self.starts[mid][0] <= line:
                best = self.starts[mid]
                lo = mid + 1
            else:
                hi = mid - 1
        return best


class Coverage:
    """Merged counters of many runs, by :class:`Point`."""

    def __init__(self):
        self.counts: dict[Point, int] = defaultdict(int)
        self.where: dict[Point, tuple] = {}          # point -> (Verilog path, line, S lines)
        self.variant_tops: dict = defaultdict(set)   # (block, variant) -> tops it was built in
        self.variant_runs: dict = defaultdict(int)   # (block, variant) -> runs that counted it
        self.constant: set[Point] = set()             # toggle points of constant bits
        self.ports: set[Point] = set()                # toggle points of module ports
        self.files: list[Path] = []
        self._verilog: dict[str, _VerilogFile] = {}

    def _vf(self, path: str) -> _VerilogFile:
        if path not in self._verilog:
            p = Path(path)
            if not p.is_file():
                raise FileNotFoundError(f"coverage point names {p}, which no longer exists "
                                        "(the simulator build was removed from the cache)")
            self._verilog[path] = _VerilogFile.read(p)
        return self._verilog[path]

    def add(self, dat: Path) -> None:
        self.files.append(dat)
        seen = set()
        nth = defaultdict(int)
        for f, count in read_dat(dat):
            page = f.get("page", "")
            kind = page.split("/", 1)[0][2:] if page.startswith("v_") else ""
            if kind not in KINDS:
                continue
            vf = self._vf(f["f"])
            line = int(f.get("l", 0))
            start, module = vf.module_at(line)
            block, rel = block_of(module)
            variant = vf.variants.get(block.name, "")
            # the column is not part of a point's identity: it moves with the length of
            # generated names (``dump_module$7`` vs ``$123``); the points of one line are told
            # apart by their order in the file instead
            # a toggle point is its signal, bit and direction (its line, for a port the header
            # line, moves with the port order, which differs between tops)
            # Yosys' numbered names (``port$2383$0``) differ between tops: the numbers go, and
            # the points they no longer tell apart are told apart by their order
            raw = demangle(f.get("o", ""))
            comment = re.sub(r"\$\d+", "$", raw)
            sig, colon, rest = comment.partition(":")
            comment = vf.renames.get(start, {}).get(sig, sig) + colon + rest
            slot = (block.name, variant, rel, kind, comment,
                    vf.rel_line(start, line) if kind == "line" else 0)
            nth[slot] += 1
            p = Point(*slot, nth[slot] - 1)
            self.counts[p] += count
            if kind == "toggle":
                sb = toggle_signal_bit(raw)
                if sb and sb[1] in vf.constants.get(start, {}).get(sb[0], ()):
                    self.constant.add(p)
                if sb and sb[0] in vf.ports.get(start, ()):
                    self.ports.add(p)
            self.where.setdefault(p, (f["f"], line, f.get("S", "")))
            if (block.name, variant) not in seen:
                seen.add((block.name, variant))
                self.variant_tops[(block.name, variant)].add(vf.top)
                self.variant_runs[(block.name, variant)] += 1

    def source_line(self, p: Point) -> str:
        path, line, _ = self.where[p]
        text = self._vf(path).text
        return text[line - 1].strip() if 0 < line <= len(text) else ""


def block_variants(verilog_text: str) -> dict[str, str]:
    """Block name -> variant hash of each block in one generated Verilog text (as the points
    of a build of that text are identified)."""
    return _VerilogFile.read(Path("<text>"), verilog_text).variants


def load(files) -> Coverage:
    cov = Coverage()
    for f in sorted(files):
        cov.add(Path(f))
    return cov


def demangle(name: str) -> str:
    """Verilator's escaped identifier characters back to text (``a___05Fb__02ec`` -> ``a_b.c``)."""
    return re.sub(r"__0([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), name)


def signal_of(p: Point) -> str:
    """The signal name of a toggle point (``x[3]:0->1`` -> ``x``), demangled."""
    sb = toggle_signal_bit(p.comment)
    return p.comment if sb is None else sb[0]


def matches(rule: dict, p: Point) -> bool:
    """True when exclusion ``rule`` (block, kind, module glob, signal/comment glob, and for
    toggle points optionally ``bits``: the bit indices it covers) covers ``p``."""
    if rule.get("block") not in (None, p.block):
        return False
    if rule.get("kind") not in (None, p.kind):
        return False
    if not fnmatch.fnmatchcase(p.module, rule.get("module", "*")):
        return False
    if "bits" in rule:
        sb = toggle_signal_bit(p.comment) if p.kind == "toggle" else None
        if sb is None or sb[1] not in rule["bits"]:
            return False
    what = signal_of(p) if p.kind == "toggle" else p.comment
    return fnmatch.fnmatchcase(what, rule.get("signal", rule.get("comment", "*")))


__all__ += ["signal_of", "demangle", "matches", "port_names", "BLOCKS", "OTHER"]
