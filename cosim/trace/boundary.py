"""Boundary-transaction trace: every handshake on the device's ports as one JSON line.

A passive monitor (architecture section 6): it drives nothing and never waits on the bench, so
turning it on cannot change what the design does. Usage (inside a test running under cocotb)::

    rec = TraceRecorder(dut, clock=dut.clk, reset=dut.rst, period_ns=10,
                        streams={"cmd": cmd_layout(ab), "cpl": cpl_layout(ab)})
    ...                      # run the bench
    rec.write("trace.jsonl")

One line per transaction, e.g.::

    {"cycle": 9, "ch": "ar", "arid": 0, "araddr": 68719476736, "arlen": 0, "arsize": 6, ...}
    {"cycle": 26, "ch": "r", "rid": 0, "rdata": "0000...0003", "rlast": 1, "rresp": 0}
    {"cycle": 159, "ch": "cpl", "tag": 0, "err_code": 0, ...}

* ``cycle``: whole clock periods since the recorder was created (the bench creates it together
  with its clock, so cycle *k* is the *k*-th rising edge of that clock, the first being 0).
  Simulation time, not a count of the edges seen: simulators may differ on whether the clock's
  first transition at time 0 is an edge, never on the time of an edge.
* ``ch``: the stream name (``cmd``, ``cpl``: payload unpacked with the hardware's own layout
  into its fields, at top level of the line) or the AXI channel (``ar``, ``r``, ``aw``, ``w``,
  ``b``: every AXI signal of the channel present on the DUT, under its AXI name). Fields are
  ints; ``rdata``/``wdata`` are lowercase hex strings zero-padded to the bus width, without 0x.
* A transaction is recorded at the rising edge that samples valid and ready both high, with the
  values sampled there (pre-edge, docs/conventions.md), and never while reset is sampled high.
* Order: by cycle, then in the fixed channel order (streams in the order given, then ar, r, aw,
  w, b), so equal behaviour gives byte-identical files on any simulator.

X/Z: with ``strict`` (default) a valid that is not 0/1, a ready that is not 0/1 while valid is
high, or an X/Z in a field at a handshake raises :class:`TraceXError` in the simulation (a
4-state simulator showing an unknown on the boundary is a bug, not a trace entry). Without
``strict`` they are recorded as binary strings (``"ready": "x"``) so a comparison shows them.

Cost: one wake-up per clock edge while any valid is high, reading only the valid strobes (and
ready where valid is high); fields are read on handshake edges only, as the simulator's binary
strings (about 6x cheaper than ``int(handle.value)``, see ``cosim.pmem``), and decoded only
when ``records``/``write`` ask for them. After a few edges with every valid low the recorder
sleeps until one of them changes.
"""
from __future__ import annotations

import json
from pathlib import Path

import cocotb
import cocotb.simulator
from cocotb.triggers import Event, RisingEdge

from cosim.model_top import require_cocotb_clock
from cosim.streams import PayloadCodec

__all__ = ["TraceRecorder", "TraceXError", "AXI_CHANNELS", "read_trace", "first_difference"]

# AXI signals per channel, in recording order; optional ones are recorded when the DUT has them.
AXI_CHANNELS = {
    "ar": ("arid", "araddr", "arlen", "arsize", "arburst", "arlock", "arcache", "arprot",
           "arqos", "arregion", "aruser"),
    "r": ("rid", "rdata", "rlast", "rresp", "ruser"),
    "aw": ("awid", "awaddr", "awlen", "awsize", "awburst", "awlock", "awcache", "awprot",
           "awqos", "awregion", "awuser"),
    "w": ("wdata", "wstrb", "wlast", "wuser"),
    "b": ("bid", "bresp", "buser"),
}
_HEX_FIELDS = ("rdata", "wdata")
_RESERVED = ("cycle", "ch")
# Going to sleep wakes every valid's watcher once; only worth it in a real gap (PMEM latency).
_IDLE_EDGES_BEFORE_SLEEP = 8


class TraceXError(AssertionError):
    """An X or Z on the device boundary where the protocol needs a defined value."""


def _binstr(handle):
    """A getter for the signal's value as 0/1/X/Z characters (fast path of ``cosim.pmem``:
    cocotb's simulator object, cocotb 2.1 pinned; the public API as fallback)."""
    raw = getattr(getattr(handle, "_handle", None), "get_signal_val_binstr", None)
    return raw if raw is not None else (lambda: str(handle.value))


def _now() -> int:
    hi, lo = cocotb.simulator.get_sim_time()
    return hi << 32 | lo


def _steps_per_ns() -> float:
    # precision is 10**p seconds: steps per ns = 1e-9 / 10**p
    return 10.0 ** (-9 - cocotb.simulator.get_precision())


class _Channel:
    __slots__ = ("name", "valid", "ready", "keys", "getters", "decoders", "count")

    def __init__(self, name, valid, ready, fields):
        self.name = name
        self.valid = valid      # getter
        self.ready = ready      # getter
        # fields: [(key, getter, decode)], decode(bit string) -> value; key None: the value is
        # a dict (a stream payload) merged into the line
        self.keys = [f[0] for f in fields]
        self.getters = [f[1] for f in fields]
        self.decoders = [f[2] for f in fields]
        self.count = 0

    def line(self, cycle, values) -> dict:
        line = {"cycle": cycle, "ch": self.name}
        if isinstance(values, dict):     # an X/Z strobe (non-strict mode)
            line.update(values)
            return line
        for key, decode, b in zip(self.keys, self.decoders, values):
            try:
                value = decode(b)
            except ValueError:           # X/Z in a field (non-strict mode)
                value = b.lower()
            if key is None and isinstance(value, dict):
                line.update(value)
            else:
                line[key or "payload"] = value
        return line


class TraceRecorder:
    """Records the handshakes of ``streams`` (name -> ``amaranth.lib.data`` layout; Verilog
    ports ``<name>__payload/__valid/__ready``) and of the AXI port ``axi_prefix`` (cocotbext-axi
    style prefix: ``"m_axi_"`` finds ``m_axi__araddr``; None for no AXI port).

    ``axi_ports``: more AXI / AXI4-Lite ports, ``{name: prefix}``; their channels are recorded
    as ``<name>_ar`` ... ``<name>_b`` (e.g. ``{"csr": "s_axil_"}`` gives ``csr_aw``), after the
    main port's. ``hex_fields``: top-level stream payload fields written as zero-padded
    lowercase hex strings instead of ints (e.g. ``("data", "be")`` for 512-bit CXL data).

    ``period_ns`` is the clock period; ``records`` gives the lines as dicts, ``counts`` the
    transactions per channel. Starts monitoring at construction; ``stop()`` ends it."""

    def __init__(self, dut, *, clock, reset=None, period_ns, streams=None, axi_prefix="m_axi_",
                 strict=True, axi_ports=None, hex_fields=()):
        require_cocotb_clock(dut, "the boundary trace recorder (cosim.trace)")
        if not period_ns or period_ns <= 0:
            raise ValueError(f"period_ns must be > 0, got {period_ns!r}")
        self.dut = dut
        self.clock = clock
        self.reset = reset
        self.strict = strict
        self._raw = []        # (cycle, channel, bit strings) per transaction, decoded on demand
        self._records: list[dict] = []
        self._period = round(period_ns * _steps_per_ns())
        if self._period <= 0:
            raise ValueError(f"period_ns={period_ns} is below the simulator precision")
        self._t0 = _now()
        self._channels: list[_Channel] = []
        self._valid_handles = []
        self._hex_fields = tuple(hex_fields)
        for name, layout in (streams or {}).items():
            self._add_stream(name, layout)
        if axi_prefix is not None:
            for ch, signals in AXI_CHANNELS.items():
                self._add_axi(axi_prefix, ch, signals)
        for name, prefix in (axi_ports or {}).items():
            for ch, signals in AXI_CHANNELS.items():
                self._add_axi(prefix, ch, signals, name=f"{name}_{ch}")
        if not self._channels:
            raise ValueError("TraceRecorder: nothing to record (no streams, no AXI port)")
        self._stopped = False
        # Sleeping: the monitor waits on _wake; one watcher per valid, armed only while the
        # monitor sleeps, sets it on that valid's next change. (Not cocotb's First: in cocotb
        # 2.1 cancelling a task that waits in First fails the test with "Task was cancelled, but
        # continued running".)
        self.sleeps = 0       # times the monitor went to sleep (a figure for tuning)
        self._wake = Event()
        self._armed = Event()
        for h in self._valid_handles:
            cocotb.start_soon(self._watch(h))
        cocotb.start_soon(self._run())

    # ----------------------------------------------------------------------------- setup

    def _handle(self, name, required=True):
        try:
            return getattr(self.dut, name)
        except AttributeError:
            if required:
                raise ValueError(f"TraceRecorder: the DUT has no port {name!r}") from None
            return None

    def _add(self, name, valid, ready, fields):
        self._valid_handles.append(valid)
        self._channels.append(_Channel(name, _binstr(valid), _binstr(ready), fields))

    def _add_stream(self, name, layout):
        codec = layout if isinstance(layout, PayloadCodec) else PayloadCodec(layout)
        clash = [n for n, *_ in codec._fields if n in _RESERVED]
        if clash:
            raise ValueError(f"stream {name!r}: field(s) {clash} clash with the trace's own keys")
        payload = self._handle(f"{name}__payload")
        if len(payload) != codec.width:
            raise ValueError(f"{name}__payload is {len(payload)} bits, layout is {codec.width}")
        unpack = codec.unpack
        # top-level payload fields rendered as zero-padded hex strings (wide data, byte enables)
        hexw = {n: (w + 3) // 4 for n, _, w, _, sub in codec._fields
                if n in self._hex_fields and sub is None}
        if hexw:
            def decode(s, _u=unpack, _h=hexw):
                d = _u(int(s, 2))
                for k, digits in _h.items():
                    d[k] = format(d[k], f"0{digits}x")
                return d
        else:
            def decode(s, _u=unpack):
                return _u(int(s, 2))
        # one "field" whose decoded value is the payload dict, merged into the line
        self._add(name, self._handle(f"{name}__valid"), self._handle(f"{name}__ready"),
                  [(None, _binstr(payload), decode)])

    def _add_axi(self, prefix, ch, signals, name=None):
        fields = []
        for sig in signals:
            h = self._handle(f"{prefix}_{sig}", required=False)
            if h is None:
                continue
            if sig in _HEX_FIELDS:
                digits = (len(h) + 3) // 4
                fields.append((sig, _binstr(h), lambda s, d=digits: format(int(s, 2), f"0{d}x")))
            else:
                fields.append((sig, _binstr(h), lambda s: int(s, 2)))
        self._add(name or ch, self._handle(f"{prefix}_{ch}valid"),
                  self._handle(f"{prefix}_{ch}ready"), fields)

    # ----------------------------------------------------------------------------- monitor

    @property
    def records(self) -> list[dict]:
        """The transactions so far, one dict per trace line."""
        for cycle, ch, values in self._raw[len(self._records):]:
            self._records.append(ch.line(cycle, values))
        return self._records

    @property
    def counts(self) -> dict:
        return {c.name: c.count for c in self._channels}

    def stop(self):
        """Stop recording. Transactions at edges before now stay; one at an edge at this very
        time is dropped whether or not the monitor ran before the caller at that edge, so the
        trace does not depend on the simulator's order of waking coroutines."""
        self._stopped = True
        self._wake.set()
        now, raw = _now(), self._raw
        while raw and self._t0 + raw[-1][0] * self._period >= now:
            cycle, ch, values = raw.pop()
            if not isinstance(values, dict):
                ch.count -= 1
        del self._records[len(raw):]

    def _x(self, cycle, ch, what, value):
        if self.strict:
            raise TraceXError(f"trace: {ch.name} {what} is {value!r} at cycle {cycle} "
                              f"(X/Z on the device boundary)")

    async def _run(self):
        edge = RisingEdge(self.clock)
        rst = _binstr(self.reset) if self.reset is not None else (lambda: "0")
        channels = self._channels
        raw = self._raw
        strict = self.strict
        idle = 0
        t0, period = self._t0, self._period
        wake = self._wake.wait()
        while True:
            await edge
            if self._stopped:
                return
            if rst() != "0":
                continue
            any_valid = False
            cycle = None
            for ch in channels:
                v = ch.valid()
                if v == "0":
                    continue
                any_valid = True
                if cycle is None:
                    cycle = (_now() - t0) // period
                if v != "1":
                    self._x(cycle, ch, "valid", v)
                    raw.append((cycle, ch, {"valid": v.lower()}))
                    continue
                r = ch.ready()
                if r == "0":
                    continue
                if r != "1":
                    self._x(cycle, ch, "ready (valid high)", r)
                    raw.append((cycle, ch, {"ready": r.lower()}))
                    continue
                # Only the bit strings here; decoding waits until the records are asked for.
                values = [get() for get in ch.getters]
                if strict and not "".join(values).isdigit():  # X, Z, U... are not digits
                    for key, b in zip(ch.keys, values):
                        if not b.isdigit():
                            self._x(cycle, ch, key or "payload", b)
                raw.append((cycle, ch, values))
                ch.count += 1
            if any_valid:
                idle = 0
                continue
            idle += 1
            if idle >= _IDLE_EDGES_BEFORE_SLEEP:
                # Nothing can hand shake until a valid rises: sleep until one changes. Values
                # read here are pre-edge, so a valid raised by this edge changes after the
                # watchers are armed, and the next edge awaited is the one that samples it.
                idle = 0
                self.sleeps += 1
                self._wake.clear()
                self._armed.set()
                await wake
                self._armed.clear()
                if self._stopped:
                    return

    async def _watch(self, valid):
        change = valid.value_change
        armed = self._armed.wait()
        while not self._stopped:
            await armed
            await change
            self._wake.set()

    # ----------------------------------------------------------------------------- output

    def lines(self) -> list[str]:
        """The trace as JSON lines (no newline characters)."""
        return [json.dumps(r) for r in self.records]

    def write(self, path, *, append=False, header: dict | None = None) -> Path:
        """Write the trace to ``path`` (one JSON object per line). ``header`` (optional) is
        written first as its own line, e.g. ``{"test": name, "seed": s}`` to start a section of a
        file several runs append to."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a" if append else "w") as f:
            if header is not None:
                f.write(json.dumps(header) + "\n")
            for line in self.lines():
                f.write(line + "\n")
        return path


def read_trace(path) -> list[dict]:
    """The lines of a trace file as dicts."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def first_difference(a_lines, b_lines, *, context=3, names=("a", "b")) -> str | None:
    """None when the two sequences of lines are equal; otherwise a report of the first
    differing line (1-based number) with ``context`` lines before and after from each side."""
    a_lines, b_lines = list(a_lines), list(b_lines)
    n = min(len(a_lines), len(b_lines))
    i = next((k for k in range(n) if a_lines[k] != b_lines[k]), None)
    if i is None:
        if len(a_lines) == len(b_lines):
            return None
        i = n
    lo = max(0, i - context)
    out = [f"traces differ at line {i + 1} ({names[0]}: {len(a_lines)} lines, "
           f"{names[1]}: {len(b_lines)} lines)"]
    for name, lines in zip(names, (a_lines, b_lines)):
        out.append(f"--- {name}, lines {lo + 1}..{min(len(lines), i + context + 1)}:")
        for k in range(lo, min(len(lines), i + context + 1)):
            mark = ">" if k == i else " "
            out.append(f"{mark}{k + 1:6d}: {lines[k].rstrip()}")
        if i >= len(lines):
            out.append(f">{i + 1:6d}: (end of trace)")
    return "\n".join(out)
