"""Compare two device traces by the rules that really hold, not by cycle (docs/traces.md).

    trainingcxl compare A B [--context N]        (the command line: trainingcxl/compare.py)

``A`` and ``B`` are trace files of any of three kinds (told apart by their header line):

* a raw RTL boundary trace (``cosim.trace.device``, header ``"trace": "trainingcxl-raw"``),
  reduced here to semantic events (:func:`reduce_raw`);
* a host action log (``cosim.trace.action_log``, ``"trainingcxl-actions"``): the golden model replays
  it (``sw_model.expected_trace``) into the expected semantic trace;
* a semantic trace (``"trainingcxl-semantic"``), e.g. written by ``--write-semantic``.

Rules (:func:`compare`): CSR writes and CSR reads each in order (address, response, data under
the expected mask; data ``None`` on either side is not compared); host CXL.mem requests per tag
(the n-th use of each tag: request fields, NDR/DRS opcodes, read data); media writes per line in
order (k-th write of each line: byte enables and data); completions in order (all fields but
``cycles``); memory images at each successful COMMIT (per-line hashes of table region and
superblock); BISnp per line in order. Reordering across lines / tags is not a divergence.

Exit status: 0 equal, 1 divergence (the first one, with context from both sides), 2 bad input
(missing file, malformed JSON with its line number, unknown trace kind). No cocotb import.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hw.config import DeviceConfig
from hw.encodings import CPL_FIELDS, DescKind, DeviceError, unpack_fields
from sw_model.expected_trace import (ACTIONS, COVERS, RAW, SEMANTIC, LineOverlay, RegMap,
                                     TraceFormatError, commit_image_regions, cpl_cycles_range,
                                     expected_events, read_jsonl)

__all__ = ["compare", "compare_files", "Result", "Divergence", "reduce_raw", "load_trace",
           "TraceFormatError"]

LINE = 64
_CXL_REQ_FIELDS = ("ch", "opcode", "snp_type", "meta_field", "meta_value", "addr", "poison",
                   "wdata", "be")


# ------------------------------------------------------------------------------ reduction
def _hex_to_mem(h: str, nbytes: int) -> bytes:
    """Payload integer as hex (byte 0 in the low bits) -> bytes in memory order."""
    return int(h, 16).to_bytes(nbytes, "little")


class _Reducer:
    def __init__(self, cfg: DeviceConfig, regmap: RegMap):
        self.cfg = cfg
        self.rm = regmap
        self.events: list[dict] = []
        self.overlay = LineOverlay()
        self.tag_n: dict[int, int] = {}
        self.bisnp_k: dict[int, int] = {}
        self.n_cpl = self.n_commit = 0
        self.cmd_size = 0
        self.cpl_base = 0
        self.caching = False
        self.read_lines: set[int] = set()
        self.reset_at = None            # (record, cycle) of a reset applied after its cycle
        self._clear()

    def _clear(self):
        self.csr_aw, self.csr_w, self.csr_ar = [], [], []
        self.m_aw, self.m_w = [], []      # media: AW headers, W bursts (list of beats)
        self.m_beats = []
        self.open_tag: dict[int, dict] = {}
        self.open_bi: dict[int, dict] = {}

    def emit(self, ev, cycle):
        ev["cycle"] = cycle
        self.events.append(ev)
        return ev

    # ring area: completion records lie in [cpl_base, cpl_base + 64 * cmd_size)
    def in_cpl_ring(self, addr: int) -> bool:
        return self.cmd_size > 0 and self.cpl_base <= addr < self.cpl_base + 64 * self.cmd_size

    def scrub(self, addr: int, data: bytes) -> bytes:
        """Zero the ``cycles`` field of a completion-ring line (RTL only; the model has 0)."""
        if not self.in_cpl_ring(addr):
            return data
        off, w = cpl_cycles_range()
        return data[:off] + bytes(w) + data[off + w:]

    def line(self, rec):
        ch = rec.get("ch")
        c = rec.get("cycle")
        if self.reset_at is not None and c != self.reset_at[1]:
            self.flush()
        if ch == "reset" and rec.get("rst") == 1 and self.reset_at is None:
            # a handshake sampled at the edge that also sampled reset still happened under the
            # old power-on epoch (flip-flops reset at that edge): start the epoch after the
            # cycle's other records
            self.reset_at = (rec, c)
            return
        fn = getattr(self, "on_" + str(ch), None)
        if fn is None:
            if ch == "r":                   # read data: timing-dependent, not compared
                return
            raise TraceFormatError(f"unknown channel {ch!r}")
        fn(rec, c)

    # -- reset ----------------------------------------------------------------------------
    def flush(self):
        """Apply a reset held back until the end of its cycle."""
        if self.reset_at is not None:
            rec, c = self.reset_at
            self.reset_at = None
            self.on_reset(rec, c)

    def on_reset(self, rec, c):
        if rec.get("rst") == 1:
            self.emit({"ev": "reset"}, c)
            self._clear()
            self.overlay = LineOverlay()
            self.read_lines = set()
            self.cmd_size = 0
            self.cpl_base = 0

    # -- CSR (AXI4-Lite) ------------------------------------------------------------------
    def on_csr_aw(self, rec, c):
        self.csr_aw.append(rec["awaddr"])

    def on_csr_w(self, rec, c):
        self.csr_w.append((int(rec["wdata"], 16), rec.get("wstrb", 0xF)))

    def on_csr_b(self, rec, c):
        if not self.csr_aw or not self.csr_w:
            raise TraceFormatError(f"csr_b at cycle {c} without a write")
        addr = self.csr_aw.pop(0) & ~3
        data, strb = self.csr_w.pop(0)
        data &= sum(0xFF << 8 * i for i in range(4) if strb >> i & 1)
        name = self.rm.name(addr)
        resp = rec.get("bresp", 0)
        self.emit({"ev": "csr_w", "addr": addr, "name": name, "data": data, "strb": strb,
                   "resp": resp}, c)
        if resp == 0 and name in ("CMD_SIZE", "CPL_BASE_LO", "CPL_BASE_HI"):
            if name == "CMD_SIZE":
                self.cmd_size = data
            elif name == "CPL_BASE_LO":
                self.cpl_base = (self.cpl_base & ~0xFFFFFFFF) | data
            else:
                self.cpl_base = (self.cpl_base & 0xFFFFFFFF) | data << 32

    def on_csr_ar(self, rec, c):
        self.csr_ar.append(rec["araddr"])

    def on_csr_r(self, rec, c):
        if not self.csr_ar:
            raise TraceFormatError(f"csr_r at cycle {c} without a read")
        addr = self.csr_ar.pop(0) & ~3
        self.emit({"ev": "csr_r", "addr": addr, "name": self.rm.name(addr),
                   "resp": rec.get("rresp", 0), "data": int(rec["rdata"], 16),
                   "mask": 0xFFFFFFFF}, c)

    # -- media reads: the first read of each line in an epoch ------------------------------
    def on_ar(self, rec, c):
        addr = rec["araddr"]
        end = addr + (rec.get("arlen", 0) + 1) * (1 << rec.get("arsize", 6))
        for la in range(addr - addr % LINE, end, LINE):
            if la not in self.read_lines:
                self.read_lines.add(la)
                self.emit({"ev": "mrd", "addr": la}, c)

    # -- media writes ---------------------------------------------------------------------
    def on_aw(self, rec, c):
        self.m_aw.append(rec)
        self._media_pair(c)

    def on_w(self, rec, c):
        self.m_beats.append(rec)
        if rec.get("wlast", 1):
            self.m_w.append(self.m_beats)
            self.m_beats = []
        self._media_pair(c)

    def on_b(self, rec, c):
        pass

    def _media_pair(self, c):
        while self.m_aw and self.m_w:
            aw, beats = self.m_aw.pop(0), self.m_w.pop(0)
            addr = aw["awaddr"]
            nbytes = len(beats[0]["wdata"]) // 2
            for i, b in enumerate(beats):
                a = addr + i * nbytes
                data = _hex_to_mem(b["wdata"], nbytes)
                strb = b.get("wstrb", (1 << nbytes) - 1)
                la = a - a % LINE
                o = a - la
                line = bytes(o) + data + bytes(LINE - o - nbytes)
                be = strb << o
                self._line_write(la, line[:LINE], be & ((1 << LINE) - 1), c,
                                 aw.get("awuser", 0))

    def _line_write(self, la, data, be, c, poison=0):
        data = self.scrub(la, data)
        ev = self.emit(self.overlay.write(la, data, be, poison), c)
        if self.in_cpl_ring(la) and be == (1 << LINE) - 1:
            ev["cpl_line"] = True
            cpl = unpack_fields(CPL_FIELDS, data)
            cpl.pop("cycles")
            self.emit({"ev": "cpl", "n": self.n_cpl, "slot": (la - self.cpl_base) // 64, **cpl},
                      c)
            self.n_cpl += 1
            if cpl["kind"] == DescKind.COMMIT and cpl["status"] == DeviceError.OK:
                self.emit({"ev": "image", "n": self.n_commit, "batch": cpl["batch"],
                           "lines": self.overlay.image(*commit_image_regions(self.cfg))}, c)
                self.n_commit += 1

    # -- CXL.mem --------------------------------------------------------------------------
    def _req(self, rec, c, ch):
        h = rec["hdr"]
        tag = h["tag"]
        n = self.tag_n.get(tag, 0)
        self.tag_n[tag] = n + 1
        ev = {"ev": "cxl", "tag": tag, "n": n, "ch": ch, "opcode": h["opcode"],
              "snp_type": h["snp_type"], "meta_field": h["meta_field"],
              "meta_value": h["meta_value"], "addr": h["addr"], "ndr": [], "drs": []}
        if ch == "m2s_rwd":
            ev.update(poison=h.get("poison", 0),
                      wdata=_hex_to_mem(rec["data"], LINE).hex(),
                      be=format(int(rec["be"], 16), "016x"))
        elif h["meta_value"] in (2, 3) and h["meta_field"] == 0:     # caching read: A or S
            self.caching = True
        self.open_tag[tag] = self.emit(ev, c)

    def on_m2s_req(self, rec, c):
        self._req(rec, c, "m2s_req")

    def on_m2s_rwd(self, rec, c):
        self._req(rec, c, "m2s_rwd")

    def _resp(self, rec, c, ch):
        h = rec["hdr"]
        ev = self.open_tag.get(h["tag"])
        if ev is None:
            self.emit({"ev": "cxl_orphan", "ch": ch, "tag": h["tag"], "opcode": h["opcode"]}, c)
            return
        if ch == "s2m_ndr":
            ev["ndr"].append(h["opcode"])
        else:
            data = self.scrub(ev["addr"] * LINE, _hex_to_mem(rec["data"], LINE))
            ev["drs"].append({"opcode": h["opcode"], "poison": h.get("poison", 0),
                              "data": data.hex()})

    def on_s2m_ndr(self, rec, c):
        self._resp(rec, c, "s2m_ndr")

    def on_s2m_drs(self, rec, c):
        self._resp(rec, c, "s2m_drs")

    def on_s2m_bisnp(self, rec, c):
        h = rec["hdr"]
        k = self.bisnp_k.get(h["addr"], 0)
        self.bisnp_k[h["addr"]] = k + 1
        self.open_bi[h["bi_tag"]] = self.emit({"ev": "bisnp", "addr": h["addr"], "k": k,
                                              "opcode": h["opcode"], "birsp": []}, c)

    def on_m2s_birsp(self, rec, c):
        h = rec["hdr"]
        ev = self.open_bi.get(h["bi_tag"])
        if ev is not None:
            ev["birsp"].append(h["opcode"])


def reduce_raw(records, cfg: DeviceConfig | None = None, *, regmap=None) -> list[dict]:
    """Semantic events (header first) of the raw boundary records of one section."""
    r = _Reducer(cfg or DeviceConfig(), regmap or RegMap())
    for rec in records:
        try:
            r.line(rec)
        except (KeyError, TypeError, ValueError) as e:
            raise TraceFormatError(f"line {rec.get('_line', '?')}: cannot reduce "
                                   f"{rec.get('ch')!r} record: {e}") from None
    r.flush()
    covers = list(COVERS)
    for i, ev in enumerate(r.events):
        ev["i"] = i
    return [{"trace": SEMANTIC, "version": 1, "source": "rtl", "covers": covers}, *r.events]


# ------------------------------------------------------------------------------ loading
def load_trace(path) -> dict:
    """``{section: semantic events (header first)}`` of any trace kind (module docstring)."""
    lines = read_jsonl(path)
    if not lines:
        raise TraceFormatError(f"{path}: empty trace")
    kind = lines[0].get("trace")
    if kind not in (RAW, ACTIONS, SEMANTIC):
        raise TraceFormatError(f"{path}:{lines[0]['_line']}: first line is not a trace header "
                               f"(\"trace\" must be one of {RAW!r}, {ACTIONS!r}, {SEMANTIC!r}, "
                               f"got {kind!r})")
    sections, order = {}, []
    cur, hdr = None, None

    def close():
        if hdr is None:
            return
        name = hdr.get("section", "") or ""
        if name in sections:
            name = f"{name}#{len(order)}"
        cfg = DeviceConfig.from_json(hdr["cfg"]) if hdr.get("cfg") else None
        k = hdr["trace"]
        try:
            if k == RAW:
                ev = reduce_raw(cur, cfg)
            elif k == ACTIONS:
                ev = expected_events(cur, cfg)
            else:
                ev = [hdr, *cur]
        except TraceFormatError as e:
            raise TraceFormatError(f"{path}: {e}") from None
        sections[name] = ev
        order.append(name)

    for obj in lines:
        if obj.get("trace") in (RAW, ACTIONS, SEMANTIC):
            close()
            hdr, cur = obj, []
            continue
        if kind == RAW and ("ch" not in obj or "cycle" not in obj):
            raise TraceFormatError(f"{path}:{obj['_line']}: raw trace line without "
                                   "\"ch\"/\"cycle\"")
        if kind == SEMANTIC and "ev" not in obj:
            raise TraceFormatError(f"{path}:{obj['_line']}: semantic trace line without \"ev\"")
        if kind == ACTIONS and "act" not in obj:
            raise TraceFormatError(f"{path}:{obj['_line']}: action line without \"act\"")
        cur.append(obj)
    close()
    return {k: sections[k] for k in order}


# ------------------------------------------------------------------------------ comparison
@dataclass
class Divergence:
    cls: str               # event class: csr_w, csr_r, cxl, mwr, cpl, image, bisnp, section
    key: tuple             # what is compared (e.g. ("tag", 5, "n", 0))
    field: str             # first differing field ("missing" when one side lacks the event)
    a: dict | None
    b: dict | None
    message: str
    section: str = ""


@dataclass
class Result:
    equal: bool
    divergence: Divergence | None = None
    report: str = ""
    counts: dict = field(default_factory=dict)     # events compared per class
    skipped: list = field(default_factory=list)    # classes not covered by both sides

    def __bool__(self):
        return self.equal


_FULL_LINE = "f" * 16


def _key(ev):
    """What an event is matched by: the n-th use of a tag, the k-th write of a line with the
    same byte enables (engines write disjoint words of one line independently, e.g. COMMIT's
    batch word and a background SNAPSHOT's flip word of the superblock), the k-th BISnp of a
    line, the n-th event of its class; counted within its epoch (``_n``, set by ``compare``)."""
    c = ev["ev"]
    if c == "cxl":
        return ("tag", ev["tag"], "n", ev["_n"])
    if c == "mwr" and ev.get("be") != _FULL_LINE:
        return ("line", ev["addr"], "be", ev["be"], "k", ev["_n"])
    if c in ("mwr", "bisnp", "mrd"):
        return ("line", ev["addr"], "k", ev["_n"])
    return ("n", ev["_n"])


_CLASS_OF = {"csr_w": "csr", "csr_r": "csr", "cxl": "cxl", "cxl_orphan": "cxl", "mwr": "mwr",
             "mrd": "mrd",
             "cpl": "cpl", "image": "image", "bisnp": "bisnp"}
_CPL_KEYS = [n for n, _, _ in CPL_FIELDS if n != "cycles"]


def _diff_fields(cls, a, b):
    """First differing field of two events of class ``cls``, or None."""
    if cls == "csr_w":
        for f in ("addr", "strb", "data", "resp"):
            if a.get(f) != b.get(f):
                return f
        return None
    if cls == "csr_r":
        for f in ("addr", "resp"):
            if a.get(f) != b.get(f):
                return f
        if a.get("data") is not None and b.get("data") is not None:
            mask = a.get("mask", 0xFFFFFFFF) & b.get("mask", 0xFFFFFFFF)
            if (a["data"] ^ b["data"]) & mask:
                return "data"
        return None
    if cls == "cxl":
        for f in _CXL_REQ_FIELDS:
            if a.get(f) != b.get(f):
                return f
        na, nb = a.get("ndr", []), b.get("ndr", [])
        da, db = a.get("drs", []), b.get("drs", [])
        if a.get("may") or b.get("may"):
            # cut by a power cycle: the responses that did go out must be the expected ones
            na, nb = na[:len(nb)], nb[:len(na)]
            da, db = da[:len(db)], db[:len(da)]
        if sorted(na) != sorted(nb):
            return "ndr"
        if len(da) != len(db):
            return "drs"
        for x, y in zip(da, db):
            for f in ("opcode", "poison"):
                if x.get(f) != y.get(f):
                    return f"drs.{f}"
            if x.get("data") is not None and y.get("data") is not None and x["data"] != y["data"]:
                return "drs.data"
        return None
    if cls == "mwr":
        for f in ("be", "data"):
            if a.get(f) != b.get(f):
                return f
        if a.get("poison", 0) != b.get("poison", 0):
            return "poison"
        return None
    if cls == "cpl":
        for f in ("slot", *_CPL_KEYS):
            if a.get(f) != b.get(f):
                return f
        return None
    if cls == "image":
        if a.get("batch") != b.get("batch"):
            return "batch"
        la, lb = a.get("lines", {}), b.get("lines", {})
        for k in sorted(la.keys() | lb.keys(), key=lambda x: int(x, 16)):
            if la.get(k) != lb.get(k):
                return f"lines[{k}]"
        return None
    if cls == "bisnp":
        for f in ("opcode", "birsp"):
            if a.get(f) != b.get(f):
                return f
        return None
    return None


def _detail(cls, fld, a, b) -> str:
    if a is None or b is None:
        return ""
    if fld == "data" and cls == "mwr" or fld == "drs.data":
        xa = a["data"] if cls == "mwr" else a["drs"][0]["data"]
        xb = b["data"] if cls == "mwr" else b["drs"][0]["data"]
        bad = [i for i in range(min(len(xa), len(xb)) // 2) if xa[2 * i:2 * i + 2] !=
               xb[2 * i:2 * i + 2]]
        return f" (bytes differing: {bad[:16]}{'...' if len(bad) > 16 else ''})"
    if cls == "image" and fld.startswith("lines["):
        k = fld[6:-1]
        return (f" (line {int(k, 16):#x}: A {a['lines'].get(k, '(not written)')}, "
                f"B {b['lines'].get(k, '(not written)')})")
    if cls == "csr_r" and fld == "data":
        return f" (mask {a.get('mask', 0xFFFFFFFF) & b.get('mask', 0xFFFFFFFF):#x})"
    return ""


def _fmt(ev, width=160) -> str:
    if ev is None:
        return "(none)"
    skip = {"i", "_n", "_line"}
    parts = []
    for k, v in ev.items():
        if k in skip or k == "cycle":
            continue
        if k == "lines" and isinstance(v, dict):
            v = f"<{len(v)} lines>"
        elif k == "addr" and isinstance(v, int):
            v = hex(v)
        elif isinstance(v, str) and len(v) > 24:
            v = v[:20] + "..."
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            v = [{kk: (vv[:12] + "..." if isinstance(vv, str) and len(vv) > 16 else vv)
                  for kk, vv in d.items()} for d in v]
        parts.append(f"{k}={v}")
    cyc = ev.get("cycle")
    s = f"[{'cycle ' + str(cyc) if cyc is not None else 'model'}] " + " ".join(parts)
    return s if len(s) <= width else s[:width - 3] + "..."


def _context(events, idx, n) -> list[str]:
    if idx is None:
        return ["    (event absent on this side)"]
    out = []
    for j in range(max(0, idx - n), min(len(events), idx + n + 1)):
        mark = ">" if j == idx else " "
        out.append(f"  {mark}{j:6d} {_fmt(events[j])}")
    return out


def compare(a_events, b_events, *, context=3, names=("A", "B"), section="") -> Result:
    """Compare two semantic traces (lists of events, header optional) of one section."""
    def split(evs):
        hdr = evs[0] if evs and "trace" in evs[0] else {"covers": list(COVERS)}
        body = [e for e in evs if "ev" in e]
        return hdr, body
    ha, ea = split(list(a_events))
    hb, eb = split(list(b_events))
    covers = [c for c in COVERS if c in ha.get("covers", COVERS) and c in hb.get("covers", COVERS)]
    skipped = [c for c in COVERS if c not in covers]

    def index(evs):
        """``{class: {key: position}}``; keys count per power-on epoch (a reset after at least
        one compared event starts the next), prefixed with ``("epoch", e)`` from the second."""
        by = {}
        seq = {}
        epoch, busy = 0, False
        for pos, e in enumerate(evs):
            cls = e["ev"]
            if cls == "reset":
                if busy:
                    epoch, busy, seq = epoch + 1, False, {}
                continue
            if _CLASS_OF.get(cls) not in covers:
                continue
            busy = True
            per = {"cxl": ("tag", e.get("tag")), "mwr": ("line", e.get("addr"), e.get("be")),
                   "bisnp": ("line", e.get("addr")),
                   "mrd": ("line", e.get("addr"))}.get(cls, (cls,))
            e["_n"] = seq.get((cls, per), 0)
            seq[(cls, per)] = e["_n"] + 1
            key = _key(e)
            if epoch:
                key = ("epoch", epoch, *key)
            by.setdefault(cls, {})[key] = pos
        return by

    ia, ib = index(ea), index(eb)
    divs = []
    counts = {}
    for cls in sorted(ia.keys() | ib.keys()):
        ka, kb = ia.get(cls, {}), ib.get(cls, {})
        counts[cls] = len(ka.keys() & kb.keys())
        for key in ka.keys() | kb.keys():
            pa, pb = ka.get(key), kb.get(key)
            a = ea[pa] if pa is not None else None
            b = eb[pb] if pb is not None else None
            if b is None and a.get("may") or a is None and b.get("may"):
                continue            # work a power failure may have cut: done or not, both fine
            if a is None or b is None:
                fld = "missing"
            else:
                fld = _diff_fields(cls, a, b)
                if fld is None:
                    continue
            rank = pa if pa is not None else len(ea) + (pb or 0)
            if cls == "mwr" and a is not None and a.get("cpl_line"):
                rank += 1.5         # a completion record: its ``cpl`` event names the field
            divs.append((rank, cls, key, fld, pa, pb))
    if not divs:
        return Result(True, counts=counts, skipped=skipped,
                      report=f"traces equal{(' [' + section + ']') if section else ''}: "
                             + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                             + (f" (not compared: {', '.join(skipped)})" if skipped else ""))
    divs.sort(key=lambda d: (d[0], d[1], str(d[2])))
    _, cls, key, fld, pa, pb = divs[0]
    a = ea[pa] if pa is not None else None
    b = eb[pb] if pb is not None else None
    keytxt = " ".join(f"{key[i]}={hex(key[i + 1]) if key[i] == 'line' else key[i + 1]}"
                      for i in range(0, len(key), 2))
    if fld == "missing":
        who = names[1] if b is None else names[0]
        msg = f"{cls} {keytxt}: missing in {who}"
    else:
        va = a.get(fld, "") if "." not in fld and "[" not in fld else ""
        vb = b.get(fld, "") if "." not in fld and "[" not in fld else ""
        shown = f": {names[0]} {va!r} != {names[1]} {vb!r}" if va != "" or vb != "" else ""
        if isinstance(va, str) and len(va) > 40:
            shown = ""
        msg = f"{cls} {keytxt}: field '{fld}' differs{shown}{_detail(cls, fld, a, b)}"
    sec = f" in section {section!r}" if section else ""
    lines = [f"first divergence{sec} ({len(divs)} in all): {msg}",
             f"--- {names[0]} (event {pa}):", *_context(ea, pa, context),
             f"--- {names[1]} (event {pb}):", *_context(eb, pb, context)]
    if skipped:
        lines.append(f"(not compared: {', '.join(skipped)})")
    d = Divergence(cls, key, fld, a, b, msg, section)
    return Result(False, d, "\n".join(lines), counts, skipped)


def compare_files(path_a, path_b, *, context=3) -> Result:
    """Load both files (any kind), pair sections in order, compare each; the first section
    with a divergence decides."""
    sa, sb = load_trace(path_a), load_trace(path_b)
    na, nb = list(sa), list(sb)
    names = (str(path_a), str(path_b))
    if len(na) != len(nb):
        msg = (f"section count differs: {names[0]} has {len(na)} {na}, {names[1]} has "
               f"{len(nb)} {nb}")
        return Result(False, Divergence("section", (), "sections", None, None, msg), msg)
    reports, counts = [], {}
    for x, y in zip(na, nb):
        r = compare(sa[x], sb[y], context=context, names=names, section=x)
        if not r.equal:
            if x != y:
                r.report = f"(sections {x!r} / {y!r})\n" + r.report
            return r
        reports.append(r.report)
        for k, v in r.counts.items():
            counts[k] = counts.get(k, 0) + v
    return Result(True, None, "\n".join(reports), counts)
