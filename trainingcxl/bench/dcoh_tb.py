"""cocotb benchmark of the DCOH (driven by trainingcxl/bench/dcoh.py): host read latency and request rate.

Run parameters: :class:`DcohBenchParams` (each test writes ``<out>/<name>.json``). The bench's host answers every BISnp at once (BIRspI, nothing dirty)
and its channels never stall, so the figures are the device's own. Every MemData is checked
against the memory image the bench wrote (a wrong value fails the test).

Latency is counted in clock cycles from the Req handshake to the MemData handshake.
"""
import collections
import json
import pathlib
from dataclasses import dataclass

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from cosim import params
from cosim.pmem import PmemModel
from cosim.streams import StreamSink, StreamSource
from cosim.tb.config import BenchConfig
from hw.cxl.messages import message_layout
from hw.cxl_encodings import (BIRspOpcode, MetaField, MetaValue, NDROpcode, ReqOpcode,
                              RwDOpcode, SnpType)
from hw.reqport import rd_req_layout, rd_resp_layout, wr_req_layout, wr_resp_layout, RD_CUR, RD_OWN



@dataclass(frozen=True)
class DcohBenchParams:
    """``bench``: device configuration and PMEM read/write latency (default 100); ``n``:
    requests per throughput point; ``out``: the directory the tests write their JSON to."""
    bench: BenchConfig = BenchConfig()
    n: int = 2000
    out: str = "."


P = params.current(DcohBenchParams)
CFG = P.bench.device
LATENCY = P.bench.latency if P.bench.latency is not None else 100
N = P.n
ALL_BE = (1 << 64) - 1


def _req(opcode, snp, mf, mv, tag, line):
    return {"hdr": {"opcode": opcode, "snp_type": snp, "meta_field": mf, "meta_value": mv,
                    "tag": tag, "addr": line, "ld_id": 0, "ckid": 0, "rsvd": 0, "tc": 0}}


def _rwd(opcode, mv, tag, line, data, be=ALL_BE, mf=MetaField.META0_STATE):
    return {"hdr": {"opcode": opcode, "snp_type": 0, "meta_field": mf, "meta_value": mv,
                    "tag": tag, "addr": line, "poison": 0, "trp": 0, "ld_id": 0, "ckid": 0,
                    "rsvd": 0, "tc": 0}, "data": data, "be": be}


def _pattern(line):
    return bytes(((line * 7 + i) & 0xFF) for i in range(64))


class DcohBench:
    def __init__(self, dut):
        self.dut = dut
        ab = CFG.addr_bits
        cocotb.start_soon(Clock(dut.clk, 10, "ns").start())
        self.pmem = PmemModel(dut, clock=dut.clk, reset=dut.rst, read_latency=LATENCY,
                              write_latency=LATENCY)
        self.req = StreamSource(dut, "m2s_req", message_layout("m2s_req"), dut.clk, dut.rst)
        self.rwd = StreamSource(dut, "m2s_rwd", message_layout("m2s_rwd"), dut.clk, dut.rst)
        self.birsp = StreamSource(dut, "m2s_birsp", message_layout("m2s_birsp"), dut.clk, dut.rst)
        self.ndr = StreamSink(dut, "s2m_ndr", message_layout("s2m_ndr"), dut.clk, dut.rst)
        self.drs = StreamSink(dut, "s2m_drs", message_layout("s2m_drs"), dut.clk, dut.rst)
        self.bisnp = StreamSink(dut, "s2m_bisnp", message_layout("s2m_bisnp"), dut.clk, dut.rst)
        self.drq = StreamSource(dut, "dev__rd_req", rd_req_layout(ab), dut.clk, dut.rst)
        self.drp = StreamSink(dut, "dev__rd_resp", rd_resp_layout(), dut.clk, dut.rst)
        self.dwq = StreamSource(dut, "dev__wr_req", wr_req_layout(ab), dut.clk, dut.rst)
        self.dwp = StreamSink(dut, "dev__wr_resp", wr_resp_layout(), dut.clk, dut.rst)
        self.tag = 0
        self.conflict_on = None     # line on which a pending Req meets a BISnp (early conflict)
        self.acks = 0
        self.cmps = collections.deque()

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        while not self.dut.ready.value:
            await RisingEdge(self.dut.clk)
        cocotb.start_soon(self._answer_snoops())
        cocotb.start_soon(self._ndr_loop())

    async def _ndr_loop(self):
        """All NDRs: BI-ConflictAcks are counted at once (the snoop answer waits for them),
        completions are queued for ``recv_ndr``."""
        while True:
            n = (await self.ndr.recv())["hdr"]
            if n["opcode"] == NDROpcode.BI_CONFLICT_ACK:
                self.acks += 1
            else:
                self.cmps.append(n)

    async def _answer_snoops(self):
        while True:
            s = (await self.bisnp.recv())["hdr"]
            if s["addr"] == self.conflict_on:
                # the host has a Req pending to this line: BIConflict, wait for the ack first
                await self.rwd.send(_rwd(RwDOpcode.BI_CONFLICT, 0, 0xFFFF, s["addr"], 0))
                while self.acks == 0:
                    await RisingEdge(self.dut.clk)
                self.acks -= 1
                self.conflict_on = None     # one conflict; the Req is served after this BIRsp
            await self.birsp.send({"hdr": {"opcode": BIRspOpcode.BIRSP_I, "bi_id": 0,
                                           "bi_tag": s["bi_tag"], "low_addr": 0, "rsvd": 0}})

    def next_tag(self):
        self.tag = (self.tag + 1) & 0x7FFF
        return self.tag

    def cycle(self):
        return self.pmem.cycle

    async def recv_ndr(self):
        while not self.cmps:
            await RisingEdge(self.dut.clk)
        return self.cmps.popleft()

    async def host_read(self, line, kind):
        """One host read; returns (latency in cycles to MemData, NDR opcode)."""
        snp, mf, mv = {"A": (SnpType.SNP_INV, MetaField.META0_STATE, MetaValue.A),
                       "S": (SnpType.SNP_DATA, MetaField.META0_STATE, MetaValue.S),
                       "cur": (SnpType.SNP_CUR, MetaField.NO_OP, 0)}[kind]
        t0 = self.cycle()
        await self.req.send(_req(ReqOpcode.MEM_RD, snp, mf, mv, self.next_tag(), line))
        await self.req.wait()
        d = await self.drs.recv()
        t1 = self.cycle()
        n = await self.recv_ndr()
        want = int.from_bytes(self.pmem.mem.read(line * 64, 64), "little")
        assert d["data"] == want, f"line {line:#x}: MemData differs from memory"
        return t1 - t0, n["opcode"]

    def fill(self, lines):
        for ln in lines:
            self.pmem.mem.write(ln * 64, _pattern(ln))


def _out(name, res):
    pathlib.Path(P.out, f"{name}.json").write_text(json.dumps(res))
    print(f"  {name}: {res}", flush=True)


@cocotb.test()
async def latency(dut):
    cocotb.start_soon(_watchdog(dut))
    """Host read latency (cycles, Req handshake → MemData handshake) per snoop-filter case."""
    tb = DcohBench(dut)
    await tb.reset()
    sets = CFG.sf_sets
    base = CFG.table_base // 64
    tb.fill(range(base, base + sets * (CFG.sf_ways + 4)))
    res = {"latency": LATENCY}
    # SnpCur read: no snoop-filter entry at all
    res["cur"], _ = await tb.host_read(base + 1, "cur")
    # miss: a free way is allocated
    res["miss"], op = await tb.host_read(base + 2, "A")
    assert op == NDROpcode.CMP_E
    # hit: S then upgrade to A (entry already there)
    await tb.host_read(base + 3, "S")
    res["hit"], op = await tb.host_read(base + 3, "A")
    assert op == NDROpcode.CMP_E
    # victim: fill every way of set 0, then one more line of that set
    for w in range(CFG.sf_ways):
        await tb.host_read(base + (w + 1) * sets, "A")
    res["victim"], op = await tb.host_read(base + (CFG.sf_ways + 1) * sets, "A")
    assert op == NDROpcode.CMP_E and int(dut.bisnp_sent.value) >= 1
    # early conflict: host holds S; a device RdOwn snoops it while the host's upgrade is pending
    line = base + 5
    await tb.host_read(line, "S")
    tb.conflict_on = line
    await tb.drq.send({"id": 1, "op": RD_OWN, "addr": line})
    while int(dut.bisnp_sent.value) < 2:
        await RisingEdge(dut.clk)
    res["conflict"], op = await tb.host_read(line, "A")
    assert op == NDROpcode.CMP_E and int(dut.conflicts.value) == 1
    await tb.drp.recv()
    res["bisnp_sent"] = int(dut.bisnp_sent.value)
    res["conflicts"] = int(dut.conflicts.value)
    _out("latency", res)


async def _device_reads(tb, n, stop):
    """Device RdCur stream to lines the host never touches (staging), at full rate."""
    base = CFG.staging_base // 64
    i = 0
    while not stop:
        tb.drq.send_nowait({"id": 2, "op": RD_CUR, "addr": base + (i % 4096)})
        i += 1
        if tb.drq.count() > 8:
            await RisingEdge(tb.dut.clk)
    return i


async def _drain_dev(tb, stop):
    while not stop:
        await tb.drp.recv()


@cocotb.test()
@cocotb.parametrize(kind=["read_cur", "read_own", "write", "inv"], with_device=[False, True])
async def throughput(dut, kind, with_device):
    """Host requests accepted per cycle over N back-to-back requests to distinct lines, with and
    without a concurrent device read stream (which shares the media read port)."""
    tb = DcohBench(dut)
    await tb.reset()
    base = CFG.table_base // 64 + 0x10000
    stop = []
    if with_device:
        cocotb.start_soon(_device_reads(tb, N, stop))
        cocotb.start_soon(_drain_dev(tb, stop))
        await ClockCycles(dut.clk, 2 * LATENCY)
    n_drs = 0
    t0 = tb.cycle()
    r0 = tb.pmem.r_beats
    for i in range(N):
        line = base + i
        t = i & 0x7FFF
        if kind == "read_cur":
            tb.req.send_nowait(_req(ReqOpcode.MEM_RD, SnpType.SNP_CUR, MetaField.NO_OP, 0, t, line))
            n_drs += 1
        elif kind == "read_own":
            tb.req.send_nowait(_req(ReqOpcode.MEM_RD, SnpType.SNP_INV, MetaField.META0_STATE,
                                    MetaValue.A, t, line))
            n_drs += 1
        elif kind == "write":
            tb.rwd.send_nowait(_rwd(RwDOpcode.MEM_WR, MetaValue.I, t, line, i))
        else:
            tb.req.send_nowait(_req(ReqOpcode.MEM_INV, SnpType.SNP_INV, MetaField.META0_STATE,
                                    MetaValue.I, t, line))
    src = tb.rwd if kind == "write" else tb.req
    await src.wait()
    t1 = tb.cycle()
    r1 = tb.pmem.r_beats
    for _ in range(n_drs):
        await tb.drs.recv()
    for _ in range(N):
        await tb.recv_ndr()
    stop.append(1)
    beats = CFG.beats_per_line
    res = {"kind": kind, "with_device": with_device, "n": N, "cycles": t1 - t0,
           "req_per_cycle": N / max(1, t1 - t0),
           "media_lines_per_cycle": (r1 - r0) / beats / max(1, t1 - t0),
           "bisnp_sent": int(dut.bisnp_sent.value)}
    _out(f"tput_{kind}_{'dev' if with_device else 'alone'}", res)


async def _watchdog(dut, limit=200_000):
    await ClockCycles(dut.clk, limit)
    raise AssertionError(f"bench did not finish in {limit} cycles")
