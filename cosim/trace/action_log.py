"""Host-level action log of a full-device cosim run: the input of ``sw_model.expected_trace``.

One JSON object per line (docs/traces.md), in the order the host saw them complete:

* ``{"act": "csr_write", "addr", "data", "strb", "resp", "cycle"}`` (data masked by strb);
* ``{"act": "csr_read", "addr", "data", "resp", "cycle"}`` (the value the host got: the model
  uses it only to find synchronisation points);
* ``{"act": "poke", "addr", "data": hex}``: backdoor write of host data into the media;
* ``{"act": "reset", "cycle"}``: device reset asserted (memory kept);
* ``{"act": "load", "lines": {hex address: hex}}``: the media replaced, while reset was
  asserted, by an image holding exactly these lines (every other line reads as zero): the
  tables a job starts from, or the crash image a power failure left;
* ``{"act": "cxl", "tag", "ch", "hdr": {...}, "data": hex, "be": hex, "kind", "cycle",
  "ndr": [...], "drs": [...]}``: a completed host CXL.mem transaction (request header and, for
  RwD, its data and byte enables; the responses the host got are kept for reading only);
  ``"cut": true`` marks one still outstanding when a power cycle ended the host.

Hooks: :meth:`ActionLog.attach` wraps the driver's CSR master (``raw_read``/``raw_write``, so
named and raw accesses are both seen) and sets ``drv.actions``; ``DeviceDriver`` calls
:meth:`attach_host` for every new host model (an observer of ``HostCore``), :meth:`reset` at a
power cycle, :meth:`poke` for backdoor writes and :meth:`load` for media images loaded in reset. No cocotb import at module level.
"""
from __future__ import annotations

import json
from pathlib import Path

__all__ = ["ActionLog", "ACTIONS"]

ACTIONS = "trainingcxl-actions"
_HDR_KEYS = ("opcode", "snp_type", "meta_field", "meta_value", "tag", "addr", "poison")


class ActionLog:
    """In-memory action log; ``cycle()`` (optional) returns the current cycle number."""

    def __init__(self, cycle=None):
        self.entries: list[dict] = []
        self._cycle = cycle

    def _add(self, d: dict):
        if self._cycle is not None:
            d["cycle"] = self._cycle()
        self.entries.append(d)

    # -- hooks -------------------------------------------------------------------------------
    def csr_write(self, addr: int, value: int, strb: int, resp: int):
        mask = sum(0xFF << 8 * i for i in range(4) if strb >> i & 1)
        self._add({"act": "csr_write", "addr": addr & ~3, "data": int(value) & mask,
                   "strb": strb, "resp": int(resp)})

    def csr_read(self, addr: int, data: int, resp: int):
        self._add({"act": "csr_read", "addr": addr & ~3, "data": int(data), "resp": int(resp)})

    def poke(self, addr: int, data):
        self._add({"act": "poke", "addr": int(addr), "data": bytes(data).hex()})

    def reset(self):
        self._add({"act": "reset"})

    def load(self, mem):
        """The media was replaced by ``mem`` (a ``MemoryImage``): its stored lines, by address,
        and its poisoned lines (``poisoned``, only when there are any)."""
        act = {"act": "load",
               "lines": {format(a, "x"): mem.read(a, 64).hex() for a in mem.lines()}}
        if mem.poisoned:
            act["poisoned"] = [format(a, "x") for a in sorted(mem.poisoned)]
        self._add(act)

    def cut(self, core):
        """A power cycle ends ``core``'s host transactions still outstanding: each is logged
        like a completed one with ``"cut": true`` and no responses (the device may or may not
        have seen and answered it)."""
        for tag in sorted(core.txns):
            self.on_txn_done(core.txns[tag], cut=True)

    def on_txn_done(self, txn, now=None, *, cut=False):
        """HostCore observer: a host transaction completed."""
        p = txn.payload
        h = p["hdr"]
        d = {"act": "cxl", "tag": txn.tag, "ch": txn.channel, "kind": txn.kind,
             "hdr": {k: int(h[k]) for k in _HDR_KEYS if k in h}}
        if txn.channel == "m2s_rwd":
            d["data"] = int(p["data"]).to_bytes(64, "little").hex()
            d["be"] = format(int(p["be"]), "016x")
        if cut:
            d["cut"] = True
            d["ndr"], d["drs"] = [], []
            self._add(d)
            return
        d["ndr"] = [] if txn.ndr is None else [int(txn.ndr["opcode"])]
        d["drs"] = [] if txn.drs is None else [
            {"opcode": int(txn.drs["opcode"]), "poison": int(txn.drs.get("poison", 0)),
             "data": None if txn.drs_data is None else bytes(txn.drs_data).hex()}]
        self._add(d)

    def attach(self, drv):
        """Log every CSR access of driver ``drv`` and let it report hosts, resets, pokes."""
        csr = drv.csr
        raw_read, raw_write = csr.raw_read, csr.raw_write
        log = self

        async def logged_read(addr):
            data, resp = await raw_read(addr)
            log.csr_read(addr, data, resp)
            return data, resp

        async def logged_write(addr, value, strb=0xF):
            resp = await raw_write(addr, value, strb)
            log.csr_write(addr, value, strb, resp)
            return resp

        csr.raw_read, csr.raw_write = logged_read, logged_write
        drv.actions = self
        if drv.host is not None:
            self.attach_host(drv.host.core)
        return self

    def attach_host(self, core):
        if self not in core.observers:
            core.observers.append(self)

    # -- output ------------------------------------------------------------------------------
    def write(self, path, *, append=False, header: dict | None = None) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a" if append else "w") as f:
            f.write(json.dumps({"trace": ACTIONS, "version": 1, **(header or {})}) + "\n")
            for e in self.entries:
                f.write(json.dumps(e) + "\n")
        return path
