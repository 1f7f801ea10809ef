"""cocotb bench of the DCOH (``hw.testtops.dcoh.DcohTestTop``): host model, device traffic, PMEM.

``DcohTB`` wires:

* the host model (``cosim.cxl_host``: HostCore + CxlHost) on the six CXL.mem channels,
* :class:`DeviceAgent`, a seeded engine stand-in on the device request port ``dev`` (RdCur,
  RdOwn, full and partial writes, ids 0..14),
* ``cosim.pmem.PmemModel`` on ``m_axi_`` (memory starts all zero),
* the checkers: ``sw_model.coherence.LineValueChecker`` (every host load/store, host MemRd
  data, uncached host write, device read and write, by cycle intervals),
  ``cosim.coherence_check.CoherenceScoreboard`` (rules 1-8 at the boundary, err pulses) and the
  host model's own response checks against ``sw_model.coherence``,

all on one :class:`cosim.cxl_host.ChannelSet` loop, so every agent counts the same cycles.
Configuration: :class:`cosim.tb.config.BenchConfig` from the run's parameters: ``device``,
``latency`` (PMEM read/write latency, default 20), ``host_trace`` (log every message of the host
and the device agent), ``strict_media`` (also HostPermission.device_access at each device AW/AR
valid rise: stricter than docs/coherence.md requires, see cosim.coherence_check).
"""
from __future__ import annotations

import logging
import random
from collections import Counter, deque

from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from cosim.coherence_check import CoherenceScoreboard
from cosim.cxl_host import (ALL_BE, ChannelSet, CxlHost, HostCore, HostKnobs, LINE_BYTES,
                            Reference, bursty_pauses, fast_getter)
from cosim.pmem import PmemModel
from cosim.tb.config import bench_config
from hw.reqport import (RD_CUR, RD_OWN, rd_req_layout, rd_resp_layout, wr_req_layout,
                        wr_resp_layout)
from sw_model.coherence import LineValueChecker

CLOCK_NS = 10
DEV_IDS = 15


def dcoh_top_build(cfg):
    """The Verilator build of the DCOH test top (``hw.testtops.dcoh.DcohTestTop``) for ``cfg``,
    under its top name: the one build every DCOH launcher, bench and stress task runs on (cached
    by content like every build). Imported late: the simulator side of this module needs
    neither."""
    from cosim import build as cb
    from hw.testtops.dcoh import TEST_TOP_NAME, DcohTestTop
    return cb.build(cb.generate_verilog(DcohTestTop(cfg), name=TEST_TOP_NAME), top=TEST_TOP_NAME)


class DevOp:
    __slots__ = ("kind", "id", "line", "data", "be", "q", "t_resp", "resp", "err", "handle",
                 "callbacks", "done")

    def __init__(self, kind, dev_id, line, data=None, be=ALL_BE):
        self.kind, self.id, self.line, self.data, self.be = kind, dev_id, line, data, be
        self.q = self.t_resp = self.resp = self.err = self.handle = None
        self.callbacks = []
        self.done = False


class DeviceAgent:
    """Requester on the DCOH's device request port: directed reads/writes and seeded random
    traffic; every read and write is reported to the value checker by its [request, response]
    interval and to the scoreboard (media attribution)."""

    def __init__(self, tb, chans: ChannelSet, *, seed, stall=0.0):
        self.tb = tb
        self.cfg = tb.cfg
        self.rng = random.Random(seed)
        ab = self.cfg.addr_bits
        self.rd_q: deque[DevOp] = deque()
        self.wr_q: deque[DevOp] = deque()
        self.rd_by_id = {i: deque() for i in range(DEV_IDS)}
        self.wr_by_id = {i: deque() for i in range(DEV_IDS)}
        self.outstanding = 0
        self.stats = {"reads": 0, "writes": 0, "read_errs": 0}
        self._rand_left = 0
        self._rand_lines = []
        self._rand_p = 0.0
        rng = random.Random(seed * 31 + 7)

        def pauses():
            return bursty_pauses(random.Random(rng.getrandbits(32)), stall) if stall else None
        # idle request ports keep their last payload (a stream's payload means nothing without
        # valid; the DCOH once depended on it, tests/cosim device_write_after_device_read_...)
        chans.add_out("dev__rd_req", rd_req_layout(ab), self._pop_rd, self._sent_rd, pauses())
        chans.add_out("dev__wr_req", wr_req_layout(ab), self._pop_wr, self._sent_wr, pauses())
        chans.add_in("dev__rd_resp", rd_resp_layout(), self._rd_resp, pauses())
        chans.add_in("dev__wr_resp", wr_resp_layout(), self._wr_resp, pauses())
        chans.every_cycle.append(self._tick)

    # ---- queues
    def _pop_rd(self, cycle):
        if self.rd_q:
            op = self.rd_q.popleft()
            return {"id": op.id, "op": RD_OWN if op.kind == "rd_own" else RD_CUR,
                    "addr": op.line}, op
        return None

    def _pop_wr(self, cycle):
        if self.wr_q:
            op = self.wr_q.popleft()
            return {"id": op.id, "addr": op.line, "be": op.be,
                    "data": int.from_bytes(op.data, "little")}, op
        return None

    def _trace(self, msg):
        if self.tb.core.trace:
            self.tb.core.trace(msg)

    def _sent_rd(self, op: DevOp, cycle):
        self._trace(f"{cycle} dev -> rd_req {op.kind} id={op.id} line={op.line:#x}")
        op.q = cycle
        self.rd_by_id[op.id].append(op)
        self.tb.sb.dev_request(op.kind, op.id, op.line, cycle)

    def _sent_wr(self, op: DevOp, cycle):
        self._trace(f"{cycle} dev -> wr_req id={op.id} line={op.line:#x} be={op.be:#x} "
                    f"data={op.data[:8].hex()}..")
        op.q = cycle
        self.wr_by_id[op.id].append(op)
        op.handle = self.tb.checker.write_begin(op.line, op.data, op.be, cycle,
                                                who=f"dev{op.id}-wr")
        self.tb.sb.dev_request("wr", op.id, op.line, cycle)

    def _finish(self, op, cycle):
        op.t_resp, op.done = cycle, True
        self.outstanding -= 1
        for cb in op.callbacks:
            cb(op)

    def _rd_resp(self, msg, cycle):
        self._trace(f"{cycle} dev <- rd_resp id={msg['id']} err={msg['err']}")
        q = self.rd_by_id.get(msg["id"])
        self.tb.sb.dev_response(False, msg["id"], cycle)
        if not q:
            return
        op = q.popleft()
        op.err = msg["err"]
        op.resp = int(msg["data"]).to_bytes(LINE_BYTES, "little")
        self.stats["reads"] += 1
        self.stats["read_errs"] += op.err
        self.tb.checker.read(op.line, op.resp, op.q, cycle, who=f"dev{op.id}-{op.kind}",
                             poison=bool(op.err))
        self._finish(op, cycle)

    def _wr_resp(self, msg, cycle):
        self._trace(f"{cycle} dev <- wr_resp id={msg['id']} err={msg['err']}")
        q = self.wr_by_id.get(msg["id"])
        self.tb.sb.dev_response(True, msg["id"], cycle)
        if not q:
            return
        op = q.popleft()
        op.err = msg["err"]
        self.stats["writes"] += 1
        self.tb.checker.write_end(op.handle, cycle)
        self._finish(op, cycle)

    # ---- API
    def submit(self, kind, line, data=None, be=ALL_BE, dev_id=None) -> DevOp:
        if kind not in ("rd_cur", "rd_own", "wr"):
            raise ValueError(f"device request kind must be rd_cur, rd_own or wr, got {kind!r}")
        if dev_id is None:
            dev_id = self.rng.randrange(DEV_IDS)
        if kind == "wr" and data is None:
            data = self.rng.randbytes(LINE_BYTES)
        op = DevOp(kind, dev_id, line, data, be)
        (self.wr_q if kind == "wr" else self.rd_q).append(op)
        self.outstanding += 1
        return op

    async def wait(self, op: DevOp, timeout=20000) -> DevOp:
        from cocotb.triggers import Event, First
        if not op.done:
            ev = Event()
            op.callbacks.append(lambda _: ev.set())
            await First(ev.wait(), ClockCycles(self.tb.dut.clk, timeout))
        if not op.done:
            raise AssertionError(f"device {op.kind} of line {op.line:#x} (id {op.id}) not answered "
                                 f"within {timeout} cycles (seed {self.tb.seed})")
        return op

    async def read(self, line, own=False, timeout=20000, **kw) -> DevOp:
        return await self.wait(self.submit("rd_own" if own else "rd_cur", line, **kw), timeout)

    async def write(self, line, data=None, be=ALL_BE, timeout=20000, **kw) -> DevOp:
        return await self.wait(self.submit("wr", line, data, be, **kw), timeout)

    def start_random(self, n_ops, lines, p=0.1, max_outstanding=8, write_frac=0.5):
        self._rand_left, self._rand_lines, self._rand_p = n_ops, list(lines), p
        self._rand_max, self._write_frac = max_outstanding, write_frac

    def _tick(self, cycle):
        if self._rand_left <= 0 or self.outstanding >= self._rand_max:
            return
        r = self.rng
        if r.random() >= self._rand_p:
            return
        self._rand_left -= 1
        line = r.choice(self._rand_lines)
        if r.random() < self._write_frac:
            be = ALL_BE if r.random() < 0.5 else (r.getrandbits(64) or 1)
            self.submit("wr", line, r.randbytes(LINE_BYTES), be)
        else:
            self.submit("rd_own" if r.random() < 0.4 else "rd_cur", line)

    def idle(self):
        return self.outstanding == 0 and self._rand_left <= 0


class DcohTB:
    """Everything around the DCOH test top; ``await tb.reset()`` first."""

    def __init__(self, dut, *, seed=None, latency=None, host_stall=0.2, dev_stall=0.2,
                 pmem_stall=0.0, knobs: HostKnobs | None = None, strict=False,
                 perm_media=None, log_writes=True):
        self.dut = dut
        self.bench = bench_config()
        self.cfg = self.bench.device
        self.seed = random.getrandbits(32) if seed is None else seed
        if latency is None:
            latency = self.bench.latency if self.bench.latency is not None else 20
        self.latency = latency
        logging.getLogger(f"cocotb.{dut._name}").setLevel(logging.WARNING)
        dut.rst.value = 1
        Clock(dut.clk, CLOCK_NS, unit="ns").start()
        self.checker = LineValueChecker(raise_on_violation=False)
        if perm_media is None:
            perm_media = self.bench.strict_media
        self.sb = CoherenceScoreboard(self.cfg, perm_media=perm_media)
        self.core = HostCore(self.cfg, seed=self.seed, knobs=knobs, reference=Reference(self.cfg),
                             checker=self.checker, strict=strict, observers=[self.sb],
                             log=dut._log.warning,
                             trace=dut._log.warning if self.bench.host_trace else None)
        self.chans = ChannelSet(dut, dut.clk, dut.rst)
        self.host = CxlHost(dut, self.core, clock=dut.clk, reset=dut.rst, stall=host_stall,
                            channels=self.chans)
        self.dev = DeviceAgent(self, self.chans, seed=self.seed + 1, stall=dev_stall)
        stalls = (dict(pmem_stall) if isinstance(pmem_stall, dict) else
                  {ch: pmem_stall for ch in ("ar", "r", "aw", "w", "b")} if pmem_stall else None)
        self.pmem = PmemModel(dut, clock=dut.clk, reset=dut.rst, read_latency=self.latency,
                              write_latency=self.latency, seed=self.seed, stall=stalls,
                              log_writes=log_writes)
        self._mon = {
            "arvalid": fast_getter(dut.m_axi__arvalid), "arready": fast_getter(dut.m_axi__arready),
            "araddr": fast_getter(dut.m_axi__araddr),
            "awvalid": fast_getter(dut.m_axi__awvalid), "awready": fast_getter(dut.m_axi__awready),
            "awaddr": fast_getter(dut.m_axi__awaddr),
            "err": fast_getter(dut.err), "err_code": fast_getter(dut.err_code),
            "err_addr": fast_getter(dut.err_addr),
        }
        self._ar_busy = self._aw_busy = False
        self.chans.every_cycle.append(self._monitor)
        self.chans.every_cycle.append(self.sb.flush)
        self.chans.every_cycle.append(self._horizon)
        # print, not log: the bench's logger is at WARNING (cocotbext-axi logs every burst)
        print(f"DcohTB seed={self.seed} latency={self.latency} host_stall={host_stall} "
              f"dev_stall={dev_stall} pmem_stall={pmem_stall} cfg={self.cfg.to_json()}",
              flush=True)

    # ---- monitors (run once per cycle on the shared loop)
    def _monitor(self, cycle):
        m = self._mon
        if m["arvalid"]() == "1":
            if not self._ar_busy:
                self.sb.media_access(False, int(m["araddr"](), 2) >> 6, cycle)
            self._ar_busy = m["arready"]() != "1"
        else:
            self._ar_busy = False
        if m["awvalid"]() == "1":
            if not self._aw_busy:
                self.sb.media_access(True, int(m["awaddr"](), 2) >> 6, cycle)
            self._aw_busy = m["awready"]() != "1"
        else:
            self._aw_busy = False
        if m["err"]() == "1":
            self.sb.err_pulse(int(m["err_code"](), 2), int(m["err_addr"](), 2), cycle)

    def _horizon(self, cycle):
        if cycle & 255:
            return
        h = cycle
        for t in self.core.txns.values():
            if t.reads_data:
                h = min(h, t.t_sent if t.t_sent is not None else cycle)
        for q in self.dev.rd_by_id.values():
            if q:
                h = min(h, q[0].q)
        self.checker.advance(h - 1)

    # ---- control
    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        self.chans.start()
        for _ in range(100_000):
            await RisingEdge(self.dut.clk)
            if self.dut.ready.value:
                break
        else:
            raise AssertionError("DCOH never raised ready after reset")
        await ClockCycles(self.dut.clk, 2)

    @property
    def cycle(self):
        return self.chans.cycle

    async def drain(self, timeout=400_000, poll=16):
        """Until host, device agent and PMEM are idle (polled every ``poll`` cycles)."""
        for _ in range(0, timeout, poll):
            if self.core.idle() and self.dev.idle() and self.pmem.writes_in_flight == 0:
                await ClockCycles(self.dut.clk, 20)   # let stray responses show up
                if self.core.idle() and self.dev.idle():
                    return
            await ClockCycles(self.dut.clk, poll)
        raise AssertionError(
            f"not idle after {timeout} cycles (seed {self.seed}): host outstanding "
            f"{[t.describe() for t in list(self.core.txns.values())[:6]]}, busy lines "
            f"{[hex(a) for a in self.core.busy_lines()[:6]]}, device outstanding "
            f"{self.dev.outstanding}")

    def violations(self):
        return (list(self.core.violations) + self.sb.all_violations() +
                list(self.checker.violations))

    def counters(self):
        d = self.dut
        return {k: int(getattr(d, k).value) for k in ("bisnp_sent", "conflicts", "proto_errors")}

    async def finish(self, *, expect_proto_errors=0, check=True):
        """Drain, then require: no violation anywhere, every expected err pulse seen, the DUT's
        counters equal to what the host saw. Returns a summary dict (``check=False``: only
        returns it, with the problems listed under "problems")."""
        await self.drain()
        v = list(self.core.violations) + self.sb.finish() + list(self.checker.violations)
        c = self.counters()
        s = self.core.stats
        problems = [str(x) for x in v[:12]]
        if c["bisnp_sent"] != s["recv_s2m_bisnp"]:
            problems.append(f"bisnp_sent={c['bisnp_sent']} but the host received "
                            f"{s['recv_s2m_bisnp']} BISnps")
        if c["conflicts"] != s["conflicts"]:
            problems.append(f"conflicts={c['conflicts']} but the host sent {s['conflicts']} "
                            "BIConflicts")
        if expect_proto_errors is not None and c["proto_errors"] != expect_proto_errors:
            problems.append(f"proto_errors={c['proto_errors']}, expected {expect_proto_errors}")
        summary = {**self.core.summary(), "dut": c, "device": dict(self.dev.stats),
                   "checker": dict(self.checker.stats), "scoreboard": dict(self.sb.stats),
                   "violations_total": len(v), "problems": problems,
                   "violations_by_rule": dict(Counter(getattr(x, "rule", "?") for x in v))}
        if not check:
            return summary
        assert not problems, (f"{len(v)} violation(s), seed {self.seed}:\n" +
                              "\n".join(problems))
        return summary

    # ---- helpers for directed tests
    def line(self, region="table", index=0) -> int:
        return (getattr(self.cfg, region + "_base") >> 6) + index

    async def until(self, cond, cycles, what):
        """Wait (cycle by cycle) until ``cond()`` holds; AssertionError naming ``what`` and the
        seed if it does not within ``cycles`` cycles."""
        for _ in range(cycles):
            if cond():
                return
            await ClockCycles(self.dut.clk, 1)
        raise AssertionError(f"{what} not within {cycles} cycles (seed {self.seed})")

    def mem_line(self, line) -> bytes:
        return self.pmem.mem.read(line << 6, LINE_BYTES)


class BISnpLog:
    """Host observer of a :class:`DcohTB` (registered on construction): every BISnp in the
    order the host receives it, in ``seen`` as (BITag, line, {BITag: line} of the BISnps still
    open when it arrives); ``lines``: their lines."""

    def __init__(self, tb: DcohTB):
        self.core, self.seen = tb.core, []
        tb.core.observers.append(self)

    @property
    def lines(self) -> list:
        return [line for _, line, _ in self.seen]

    def on_s2m(self, channel, msg, cycle, txn):
        if channel == "s2m_bisnp":
            h = msg["hdr"]
            self.seen.append((h["bi_tag"], h["addr"],
                              {t: sn.line for t, sn in self.core.open_bitags.items()}))
