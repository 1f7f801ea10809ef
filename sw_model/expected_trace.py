"""Expected semantic trace of a full-device run, from the host's actions and the golden model.

Input: the host-level action log of a run (``cosim.trace.action_log`` writes it; JSON lines, schema in
docs/traces.md): CSR writes/reads as the host issued them (with the response the host got,
used only to find synchronisation points, see below), backdoor writes of host data ("pokes"),
media images loaded during reset ("load"), completed host CXL.mem transactions (request fields
only are used) and device resets.

Output: the trace the device must produce, as semantic events (docs/traces.md):

* ``csr_w`` / ``csr_r``: every CSR access in order with the expected response, and for reads
  the expected data under ``mask`` (``data`` None: not determined by the contract at that
  moment, e.g. a poll while descriptors execute);
* ``cxl``: per host request (key ``tag`` + ``n``, the n-th use of that tag): the expected NDR
  and DRS opcodes (``sw_model.coherence``) and, for reads, the line's data and poison bit (the
  media's, ``sw_model.coherence.media_poison_after`` over the writes before);
* ``mwr``: every media write the device must make, per line (key ``addr`` + ``k``, the k-th
  write of that line), with byte enables, data (bytes not enabled are 0) and the poison bit
  the write carries to the media (``poison``, 1 only for a host write with poison);
* ``mrd``: every line the device must read from the media, once per power-on epoch (the
  first read; key ``addr``);
* ``cpl``: every completion (key ``n``), all ``CPL_FIELDS`` but ``cycles``, and its ring slot;
* ``image``: at every successful COMMIT, per-line hashes of the lines written so far in the
  table region and the superblock (the overlay of media writes since the start of the trace).

Timing: the model executes descriptors lazily, when the host observes progress (a read of
``CPL_HEAD``/``CMD_HEAD`` returning ``h`` runs descriptors until the model's head is ``h``) and
at the end of the log. Between an accepted doorbell (or ``CONTROL.RECOVER``) and the host's
observation that everything is done (head read equal to the tail, or ``STATUS`` READY and not
RECOVERING after a recovery), the device is *unsynchronised*: CSR read data and host read data
are left unchecked (``None``), since the contract does not fix when the device gets there.

Pure Python; imports only ``hw.config``, ``hw.encodings``, ``hw.cxl_encodings`` and sw_model.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from hw.config import DeviceConfig
from hw.csr.regmap import regmap_document
from hw.encodings import (CPL_BYTES, CPL_FIELDS, N_TABLES, SB_FIELDS, DescKind, DeviceError,
                          unpack_fields)
from .coherence import NXM_DATA, expected_req, expected_rwd, media_poison_after
from .memory import MemoryImage
from .training import TrainingDevice

__all__ = ["SEMANTIC", "ACTIONS", "RAW", "COVERS", "LineOverlay", "RegMap", "expected_events",
           "commit_image_regions",
           "expected_from_file", "cpl_cycles_range", "hexbe", "read_jsonl", "TraceFormatError"]

SEMANTIC = "trainingcxl-semantic"
ACTIONS = "trainingcxl-actions"
RAW = "trainingcxl-raw"
VERSION = 1
# event classes a semantic trace may cover; a comparison checks those both sides cover
COVERS = ("csr", "cxl", "bisnp", "mwr", "mrd", "cpl", "image")
LINE = 64
OKAY, SLVERR = 0, 2
_CYC = next((off, w) for n, off, w in CPL_FIELDS if n == "cycles")
E = DeviceError


class TraceFormatError(ValueError):
    """A trace or action file that cannot be read (message names file and line)."""


def read_jsonl(path) -> list[dict]:
    """JSON objects of a file, one per non-empty line; TraceFormatError names the bad line."""
    out = []
    try:
        f = open(path)
    except OSError as e:
        raise TraceFormatError(f"{path}: cannot open: {e.strerror}") from None
    with f:
        for no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise TraceFormatError(f"{path}:{no}: malformed JSON ({e.msg} at column "
                                       f"{e.colno})") from None
            if not isinstance(obj, dict):
                raise TraceFormatError(f"{path}:{no}: a trace line must be a JSON object, got "
                                       f"{type(obj).__name__}")
            obj["_line"] = no
            out.append(obj)
    return out


def cpl_cycles_range() -> tuple[int, int]:
    """(byte offset, width) of the completion record's ``cycles`` field (RTL only)."""
    return _CYC


def hexbe(be: int) -> str:
    return format(be, "016x")


def _be_of(offset: int, n: int) -> int:
    return ((1 << n) - 1) << offset


class LineOverlay:
    """Media writes since the start of a trace, per 64 B line: content and written-byte mask.
    ``write(line_addr, data64, be, poison)`` applies one line write and returns its ``mwr``
    event;
    ``image(regions)`` the per-line hashes of the lines inside ``regions`` [(base, size)]."""

    def __init__(self):
        self.lines: dict[int, list] = {}       # addr -> [bytearray(64), mask]
        self.count: dict[int, int] = {}

    def write(self, addr: int, data: bytes, be: int, poison: int = 0) -> dict:
        ent = self.lines.setdefault(addr, [bytearray(LINE), 0])
        buf = bytearray(LINE)
        for i in range(LINE):
            if be >> i & 1:
                ent[0][i] = data[i]
                buf[i] = data[i]
        ent[1] |= be
        k = self.count.get(addr, 0)
        self.count[addr] = k + 1
        return {"ev": "mwr", "addr": addr, "k": k, "be": hexbe(be), "data": bytes(buf).hex(),
                "poison": int(poison)}

    def image(self, regions, skip=()) -> dict:
        """Per-line hashes of the written lines inside ``regions``; the bytes of ``skip``
        (``(address, length)`` ranges) are left out, content and mask."""
        out = {}
        for a in sorted(self.lines):
            if any(b <= a < b + s for b, s in regions):
                content, mask = bytearray(self.lines[a][0]), self.lines[a][1]
                for sa, n in skip:
                    for i in range(max(sa, a) - a, min(sa + n, a + LINE) - a):
                        content[i] = 0
                        mask &= ~(1 << i)
                h = hashlib.sha256(bytes(content) + mask.to_bytes(8, "little")).hexdigest()
                out[format(a, "x")] = h[:16]
        return out


def commit_image_regions(cfg: DeviceConfig) -> tuple[list, list]:
    """What a COMMIT's ``image`` event hashes: ``(regions, skip)``. The table region and the
    superblock, less the superblock's MLP flip word: a SNAPSHOT still copying in the background
    writes it whenever it finishes, before or after a later COMMIT (training.md section 9), so
    its value at a commit is not fixed; each flip write is compared as an ``mwr`` event."""
    off, width = next((o, w) for n, o, w in SB_FIELDS if n == "mlp_slot")
    return ([(cfg.table_base, cfg.table_size), (cfg.superblock_base, cfg.superblock_size)],
            [(cfg.superblock_base + off, width)])


class RegMap:
    """The generated register map (``hw.csr.regmap.regmap_document``) read as data: names,
    offsets, access, fields. ``path``: a regmap.json to read instead."""

    def __init__(self, path=None):
        doc = regmap_document() if path is None else json.loads(Path(path).read_text())
        self.regs = {r["name"]: r for r in doc["registers"]}
        self.by_off = {r["offset"]: r for r in doc["registers"]}
        self.off = {r["name"]: r["offset"] for r in doc["registers"]}

    def name(self, addr: int):
        r = self.by_off.get(addr & ~3)
        return r["name"] if r else None

    def bits(self, reg: str, *fields) -> int:
        m = 0
        for f in self.regs[reg]["fields"]:
            if not fields or f["name"] in fields:
                m |= ((1 << f["width"]) - 1) << f["lsb"]
        return m

    def bit(self, reg: str, field: str) -> int:
        return self.bits(reg, field)

    def reset_value(self, reg: str):
        """Reset value of a register whose every field has one, else None."""
        v = 0
        for f in self.regs[reg]["fields"]:
            if f["reset"] is None:
                return None
            v |= f["reset"] << f["lsb"]
        return v

    def constant(self, reg: str):
        """Value of a read-only register the hardware never changes (``hw`` = na), else None."""
        fs = self.regs[reg]["fields"]
        if all(f["hw"] == "na" and f["reset"] is not None for f in fs):
            return self.reset_value(reg)
        return None


class _RecMem(MemoryImage):
    """A MemoryImage that reports every write to ``hook`` and every read to ``read_hook``
    unless ``backdoor`` is set."""

    def __init__(self, size, hook, read_hook):
        super().__init__(size)
        self.hook = hook
        self.read_hook = read_hook
        self.backdoor = False

    def read(self, address, length, **kw):
        data = super().read(address, length, **kw)
        if not self.backdoor and length:
            self.read_hook(int(address), int(length))
        return data

    def write(self, address, data, **kw):
        super().write(address, data, **kw)
        if not self.backdoor:
            self.hook(int(address), bytes(data))

    def copy(self):                             # pragma: no cover - not used on the model side
        m = MemoryImage(self.size, self.fill)
        m._lines = {a: bytearray(v) for a, v in self._lines.items()}
        m.poisoned = set(self.poisoned)
        return m


class _Replay:
    def __init__(self, cfg: DeviceConfig, regmap: RegMap):
        self.cfg = cfg
        self.rm = regmap
        self.mem = _RecMem(1 << cfg.addr_bits, self._media_write, self._media_read)
        self.m = TrainingDevice(cfg, self.mem)
        self.events: list[dict] = []
        self.overlay = LineOverlay()
        self.n_cpl = 0
        self.n_commit = 0
        self.tag_n: dict[int, int] = {}
        self.caching = False
        self._cpl_write = False
        self._may = False               # events of work a power failure may have cut
        self._recover_from = 0          # first event of the recovery in progress
        self._power_on()

    # -- state -----------------------------------------------------------------------------
    def _power_on(self):
        m, rm = self.m, self.rm
        self.read_lines: set[int] = set()        # lines the device has read this epoch
        m.reset()
        m.tables = [(0, 0, 0)] * N_TABLES       # the CSR block resets the directory
        m.lr = rm.reset_value("LR") or 0
        self.shadow = {}                         # other writable registers: last value written
        self.recovering = False
        self.synced = True
        self.irq_uncertain = 0

    def _sync_update(self):
        self.synced = not self.recovering and self.m.pending == 0

    def _emit(self, ev: dict):
        ev.setdefault("cycle", None)
        if self._may:
            ev["may"] = True
        self.events.append(ev)

    def _media_write(self, addr: int, data: bytes):
        a, i, n = addr, 0, len(data)
        while i < n:
            la = a - a % LINE
            o = a - la
            k = min(LINE - o, n - i)
            line = bytes(o) + data[i:i + k] + bytes(LINE - o - k)
            be = _be_of(o, k)
            if k == LINE:       # a device write of the whole line clears the media's poison
                self.mem.set_poison(la, False)
            ev = self.overlay.write(la, line, be)
            if self._cpl_write:
                ev["cpl_line"] = True
            self._emit(ev)
            a += k
            i += k

    def _media_read(self, addr: int, n: int):
        """The first read of each line in a power-on epoch is an ``mrd`` event."""
        for la in range(addr - addr % LINE, addr + n, LINE):
            if la not in self.read_lines:
                self.read_lines.add(la)
                self._emit({"ev": "mrd", "addr": la})

    def _step(self):
        """Execute the descriptor at the model's head (model.process, one step)."""
        m = self.m
        i = m.head
        rec = m.execute(m.mem.read(m.cmd_base + 64 * i, 64))
        self._cpl_write = True
        try:
            m._write(m.cpl_base + CPL_BYTES * i, rec, "cpl")
        finally:
            self._cpl_write = False
        m.head = (i + 1) % m.cmd_size
        m.irq_status.add("CPL")
        c = unpack_fields(CPL_FIELDS, rec)
        c.pop("cycles")
        self._emit({"ev": "cpl", "n": self.n_cpl, "slot": i, **c})
        self.n_cpl += 1
        if c["kind"] == DescKind.COMMIT and c["status"] == E.OK:
            self._image(c["batch"])

    def _image(self, batch):
        self._emit({"ev": "image", "n": self.n_commit, "batch": batch,
                    "lines": self.overlay.image(*commit_image_regions(self.cfg))})
        self.n_commit += 1

    def _run_until(self, head=None):
        m = self.m
        while m.pending and (head is None or m.head != head):
            self._step()

    # -- CSRs ------------------------------------------------------------------------------
    def csr_write(self, a: dict):
        addr, value, strb = int(a["addr"]) & ~3, int(a["data"]), int(a.get("strb", 0xF))
        name = self.rm.name(addr)
        m = self.m
        ev = {"ev": "csr_w", "addr": addr, "name": name, "data": value, "strb": strb,
              "resp": OKAY, "cycle": a.get("cycle")}
        if name is None:
            ev["resp"] = SLVERR
            m._error(E.CSR_ADDR, addr)
        elif "w" not in self.rm.regs[name]["sw"]:
            ev["resp"] = SLVERR
            m._error(E.CSR_RO, addr)
        else:
            self._apply_write(name, addr, value)
        self._emit(ev)

    def _apply_write(self, name, addr, v):
        m, rm = self.m, self.rm
        if name.startswith("TABLE") and "_" in name:
            t = int(name[5:name.index("_")])
            base, rows, dim = m.tables[t]
            f = name[name.index("_") + 1:]
            if f == "BASE_LO":
                base = (base & ~0xFFFFFFFF) | v
            elif f == "BASE_HI":
                base = (base & 0xFFFFFFFF) | v << 32
            elif f == "ROWS":
                rows = v
            elif f == "DIM":
                dim = v
            m.tables[t] = (base, rows, dim)
        elif name == "LR":
            m.lr = v
        elif name in ("CMD_BASE_LO", "CMD_BASE_HI", "CMD_SIZE", "CPL_BASE_LO", "CPL_BASE_HI"):
            if m.pending:
                m._error(E.CSR_BUSY, addr)
                return
            if name == "CMD_SIZE":
                m.cmd_size = v
            else:
                attr = "cmd_base" if name.startswith("CMD") else "cpl_base"
                old = getattr(m, attr)
                new = ((old & ~0xFFFFFFFF) | v) if name.endswith("LO") else \
                    ((old & 0xFFFFFFFF) | v << 32)
                setattr(m, attr, new)
            m.head = m.tail = 0
            m.seq = 0
        elif name == "CMD_TAIL":
            m.doorbell(v)
            self._sync_update()
        elif name == "CONTROL":
            if v & rm.bit("CONTROL", "RECOVER"):
                self._recover_from = len(self.events)
                if m.recover() >= 0:
                    self.recovering = True
                self._sync_update()
        elif name == "ERR_CLEAR":
            if v & rm.bit("ERR_CLEAR", "CLEAR"):
                m.err_clear()
        elif name == "IRQ_STATUS":
            for bit in ("CPL", "ERR", "RECOVERED"):
                if v & rm.bit("IRQ_STATUS", bit):
                    m.irq_status.discard(bit)
            if self.synced:
                self.irq_uncertain &= ~v
            else:
                self.irq_uncertain |= v & rm.bits("IRQ_STATUS")
        else:
            self.shadow[name] = v

    def csr_read(self, a: dict):
        addr, got = int(a["addr"]) & ~3, int(a["data"])
        name = self.rm.name(addr)
        m, rm = self.m, self.rm
        ev = {"ev": "csr_r", "addr": addr, "name": name, "resp": OKAY, "data": None,
              "mask": 0xFFFFFFFF, "cycle": a.get("cycle")}
        if name is None:
            ev.update(resp=SLVERR, data=0)
            m._error(E.CSR_ADDR, addr)
            self._emit(ev)
            return
        # the host's observation of progress (its own value, used for synchronisation only)
        if name in ("CPL_HEAD", "CMD_HEAD"):
            self._run_until(got if got < max(m.cmd_size, 1) else None)
        elif name == "STATUS" and self.recovering:
            if got & rm.bit("STATUS", "READY") and not got & rm.bit("STATUS", "RECOVERING"):
                self.recovering = False
        self._sync_update()
        if self.synced:
            val = self._reg_value(name)
            if val is not None:
                ev["data"], ev["mask"] = val
        self._emit(ev)

    def _reg_value(self, name):
        """(value, mask) of register ``name`` with the device idle, or None if unknown."""
        m, rm, cfg = self.m, self.rm, self.cfg
        full = 0xFFFFFFFF
        lo = {"ERR_VALUE": m.err_value, "COMMITTED": m.committed, "CMD_BASE": m.cmd_base,
              "CPL_BASE": m.cpl_base}
        for r in ("table", "log", "superblock", "slots", "staging"):
            lo[f"REGION_{r.upper()}_BASE"] = getattr(cfg, r + "_base")
            lo[f"REGION_{r.upper()}_SIZE"] = getattr(cfg, r + "_size")
        for k, v in lo.items():
            if name == k + "_LO":
                return v & full, full
            if name == k + "_HI":
                return (v >> 32) & full, full
        simple = {"ERR_CODE": int(m.err_code), "ERR_COUNT": m.err_count & full,
                  "RECOVERED_RECORDS": m.recovered_records, "LR": m.lr,
                  "CMD_SIZE": m.cmd_size, "CMD_TAIL": m.tail, "CMD_HEAD": m.head,
                  "CPL_HEAD": m.head, "CONTROL": 0}
        if m.ready:
            simple["LOG_SLOT"] = m.next_slot
        if name in simple:
            return simple[name] & full, full
        if name == "STATUS":
            v = (rm.bit("STATUS", "ERROR") if m.status_error else 0) | \
                (rm.bit("STATUS", "READY") if m.ready else 0)
            return v, rm.bits("STATUS", "BUSY", "ERROR", "READY", "RECOVERING")
        if name == "IRQ_STATUS":
            v = sum(rm.bit("IRQ_STATUS", b) for b in m.irq_status)
            return v, rm.bits("IRQ_STATUS") & ~self.irq_uncertain
        if name.startswith("TABLE") and "_" in name:
            t = int(name[5:name.index("_")])
            base, rows, dim = m.tables[t]
            f = name[name.index("_") + 1:]
            v = {"BASE_LO": base & full, "BASE_HI": base >> 32, "ROWS": rows, "DIM": dim}[f]
            return v, full
        if name in self.shadow:
            return self.shadow[name], full
        c = rm.constant(name)
        if c is not None:
            return c, full
        r = rm.regs[name]
        if "w" in r["sw"] and rm.reset_value(name) is not None:
            return rm.reset_value(name), full
        return None

    # -- other actions -----------------------------------------------------------------------
    def poke(self, a: dict):
        self.mem.backdoor = True
        try:
            self.mem.write(int(a["addr"]), bytes.fromhex(a["data"]))
        finally:
            self.mem.backdoor = False

    def reset(self, a: dict):
        """Reset (a power cycle): work the host had not seen finish may or may not have been
        done by the device, so its events are marked ``may``: the descriptors still pending
        (executed now) and the writes of a recovery not yet seen complete. Images restart."""
        if self.recovering:
            for ev in self.events[self._recover_from:]:
                if ev["ev"] == "mwr":
                    ev["may"] = True
        if self.m.pending:
            self._may = True
            try:
                self._run_until()
            finally:
                self._may = False
        self._emit({"ev": "reset", "cycle": a.get("cycle")})
        self._power_on()
        self.overlay = LineOverlay()

    def load(self, a: dict):
        """The media replaced by an image (in reset): exactly the given lines, zeros elsewhere,
        and the given poisoned lines (none if absent)."""
        lines = {int(k, 16): bytes.fromhex(v) for k, v in a["lines"].items()}
        for addr, data in lines.items():
            if addr % LINE or len(data) != LINE:
                raise ValueError(f"load: line {addr:#x} must be a whole aligned line")
        self.mem._lines.clear()
        self.mem.poisoned = {int(k, 16) & ~(LINE - 1) for k in a.get("poisoned", ())}
        self.mem.backdoor = True
        try:
            for addr, data in sorted(lines.items()):
                self.mem.write(addr, data)
        finally:
            self.mem.backdoor = False

    def cxl(self, a: dict):
        """A host transaction; one cut by a power cycle (``cut``) gives ``may`` events."""
        self._may = bool(a.get("cut"))
        try:
            self._cxl(a)
        finally:
            self._may = False

    def _cxl(self, a: dict):
        h = a["hdr"]
        tag = int(h["tag"])
        n = self.tag_n.get(tag, 0)
        self.tag_n[tag] = n + 1
        ev = {"ev": "cxl", "tag": tag, "n": n, "ch": a["ch"], "opcode": h["opcode"],
              "snp_type": h["snp_type"], "meta_field": h["meta_field"],
              "meta_value": h["meta_value"], "addr": h["addr"], "cycle": a.get("cycle")}
        if a["ch"] == "m2s_rwd":
            ev.update(poison=h.get("poison", 0), wdata=a["data"], be=a["be"])
            ans = expected_rwd(self.cfg, h)
            ev["ndr"] = [] if ans.ndr is None else [int(ans.ndr)]
            ev["drs"] = []
            self._emit(ev)
            if ans.media_write:
                be = int(a["be"], 16)
                data = bytes.fromhex(a["data"])
                line = MemoryImage.read(self.mem, h["addr"] * LINE, LINE)   # no media read
                merged = bytes(data[i] if be >> i & 1 else line[i] for i in range(LINE))
                super(_RecMem, self.mem).write(h["addr"] * LINE, merged)
                poison = int(h.get("poison", 0))
                self.mem.set_poison(h["addr"] * LINE, media_poison_after(
                    self.mem.is_poisoned(h["addr"] * LINE), poison, be))
                self._emit(self.overlay.write(h["addr"] * LINE, data, be, poison))
            return
        ans = expected_req(self.cfg, h)
        if ans.grant in ("S", "E"):
            self.caching = True
        ev["ndr"] = [] if ans.ndr is None else [int(ans.ndr)]
        if ans.drs is None:
            ev["drs"] = []
        elif ans.drs == 0:          # MemData
            data = self.mem.read(h["addr"] * LINE, LINE).hex() if self.synced else None
            poison = int(self.mem.is_poisoned(h["addr"] * LINE))
            ev["drs"] = [{"opcode": 0, "poison": poison, "data": data}]
        else:
            ev["drs"] = [{"opcode": int(ans.drs), "poison": 1, "data": NXM_DATA.hex()}]
        self._emit(ev)


def expected_events(actions, cfg: DeviceConfig | None = None, *, regmap=None) -> list[dict]:
    """The semantic events the device must produce for ``actions`` (dicts of an action log,
    header lines allowed and skipped). The first element is the header
    (``{"trace": SEMANTIC, "source": "model", "covers": [...]}``)."""
    rp = _Replay(cfg or DeviceConfig(), regmap or RegMap())
    handlers = {"csr_write": rp.csr_write, "csr_read": rp.csr_read, "poke": rp.poke,
                "reset": rp.reset, "load": rp.load, "cxl": rp.cxl}
    for a in actions:
        act = a.get("act")
        if act is None:
            continue
        fn = handlers.get(act)
        if fn is None:
            raise TraceFormatError(f"action line {a.get('_line', '?')}: unknown action {act!r}")
        try:
            fn(a)
        except (KeyError, TypeError, ValueError) as e:
            raise TraceFormatError(f"action line {a.get('_line', '?')} ({act}): bad field: "
                                   f"{e!r}") from None
    rp._run_until()
    covers = [c for c in COVERS if not (c == "bisnp" and rp.caching)]
    for i, ev in enumerate(rp.events):
        ev["i"] = i
    return [{"trace": SEMANTIC, "version": VERSION, "source": "model", "covers": covers},
            *rp.events]


def expected_from_file(path) -> dict:
    """``{section name: events}`` (header first) for an action-log file; sections are started
    by ``{"trace": ACTIONS, "section": ...}`` header lines (a file without one is one section
    named "")."""
    lines = read_jsonl(path)
    sections: dict[str, list] = {}
    cur, cfg, name = [], None, None
    order = []

    def close():
        if name is not None or cur:
            key = name or ""
            sections[key] = expected_events(cur, cfg)
            order.append(key)

    for obj in lines:
        if obj.get("trace") == ACTIONS:
            close()
            name = obj.get("section", "")
            cfg = DeviceConfig.from_json(obj["cfg"]) if obj.get("cfg") else None
            cur = []
        else:
            cur.append(obj)
    close()
    return {k: sections[k] for k in order}
