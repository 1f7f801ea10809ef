"""MediaAXI (hw/media_axi.py): request port onto AXI4, against a pysim AXI4 slave model."""
import pytest

from hw.axi import BURST_INCR
from hw.config import DeviceConfig
from hw.media_axi import MediaAXI
from hw.reqport import RD_CUR

from pysim_util import ReadyPolicy, Stall, check_channel, make_rng, send, simulate

LINE_ADDR_BITS = 34        # addr_bits 40 - 6
RESP_SLVERR = 0b10


def small_cfg(dw):
    return DeviceConfig(media_data_bits=dw, max_reads=4, max_writes=4)


class AXISlave:
    """In-order AXI4 slave over a line memory dict, with seeded random latency and stalls
    (AR/AW/W ready sometimes waits for valid, as AXI allows).

    Records, for the host side to check against: the error flag and the poison flag (RUSER on
    one random beat) of each read burst and the error flag of each write response (decided
    before the burst/response is driven, so in request order), and each write as seen on AW/W
    (address, full strobe, full data, AWUSER)."""

    def __init__(self, dut, cfg, rng, mem, *, p_stall=0.3, max_lat=5, p_err=0.1):
        self.dut, self.axi, self.rng, self.mem = dut, dut.axi, rng, mem
        self.dw = cfg.media_data_bits
        self.beats = 512 // self.dw
        self.size = (self.dw // 8).bit_length() - 1
        self.stall = Stall(rng, p_stall)
        self.max_lat, self.p_err = max_lat, p_err
        self.cfg = cfg
        self.ar_q, self.aw_q, self.w_q, self.b_q = [], [], [], []
        self.r_errs, self.r_poisons, self.b_errs, self.writes = [], [], [], []
        self.max_rd_out = self.max_wr_out = 0

    def processes(self):
        a = self.axi
        return [
            self.ar, self.r, self.aw, self.w, self.b, self.monitor,
            check_channel(a.arvalid, a.arready, [a.arid, a.araddr, a.arlen, a.arsize, a.arburst],
                          "AR"),
            check_channel(a.awvalid, a.awready, [a.awid, a.awaddr, a.awlen, a.awsize, a.awburst,
                                                 a.awuser], "AW"),
            check_channel(a.wvalid, a.wready, [a.wdata, a.wstrb, a.wlast], "W"),
        ]

    def _check_burst(self, ch, cid, addr, alen, size, burst):
        assert cid == 0, f"{ch}ID {cid}: contract says all bursts use ID 0"
        assert addr % 64 == 0, f"{ch}ADDR {addr:#x} not line aligned"
        assert alen == self.beats - 1, f"{ch}LEN {alen}, want {self.beats - 1}"
        assert size == self.size, f"{ch}SIZE {size}, want {self.size} (full width)"
        assert burst == BURST_INCR, f"{ch}BURST {burst}, want INCR"

    async def ar(self, ctx):
        a, t = self.axi, 0
        policy = ReadyPolicy(self.rng, self.stall.p)
        while True:
            ctx.set(a.arready, policy.ready())
            *_, v, r, cid, addr, alen, size, burst = await ctx.tick().sample(
                a.arvalid, a.arready, a.arid, a.araddr, a.arlen, a.arsize, a.arburst)
            policy.observe(v, r)
            t += 1
            if v and r:
                self._check_burst("AR", cid, addr, alen, size, burst)
                # snapshot now: the host never reads a line with a write in flight
                self.ar_q.append((t + self.rng.randint(0, self.max_lat), self.mem[addr >> 6]))

    async def r(self, ctx):
        a, t = self.axi, 0
        while True:
            if not self.ar_q or self.ar_q[0][0] > t or self.stall():
                ctx.set(a.rvalid, 0)
                await ctx.tick()
                t += 1
                continue
            _, line = self.ar_q.pop(0)
            err_beat = self.rng.randrange(self.beats) if self.rng.random() < self.p_err else None
            self.r_errs.append(err_beat is not None)
            poison_beat = self.rng.randrange(self.beats) if self.rng.random() < 0.2 else None
            self.r_poisons.append(poison_beat is not None)
            for beat in range(self.beats):
                ctx.set(a.ruser, beat == poison_beat)
                ctx.set(a.rid, 0)
                ctx.set(a.rdata, (line >> (beat * self.dw)) & ((1 << self.dw) - 1))
                ctx.set(a.rresp, RESP_SLVERR if beat == err_beat else 0)
                ctx.set(a.rlast, beat == self.beats - 1)
                ctx.set(a.rvalid, 1)
                while True:
                    *_, rr = await ctx.tick().sample(a.rready)
                    t += 1
                    if rr:
                        break
                ctx.set(a.rvalid, 0)
                while beat != self.beats - 1 and self.stall():   # gaps between beats
                    await ctx.tick()
                    t += 1

    async def aw(self, ctx):
        a = self.axi
        policy = ReadyPolicy(self.rng, self.stall.p)
        while True:
            ctx.set(a.awready, policy.ready())
            *_, v, r, cid, addr, alen, size, burst, user = await ctx.tick().sample(
                a.awvalid, a.awready, a.awid, a.awaddr, a.awlen, a.awsize, a.awburst, a.awuser)
            policy.observe(v, r)
            if v and r:
                self._check_burst("AW", cid, addr, alen, size, burst)
                self.aw_q.append((addr, user))

    async def w(self, ctx):
        a = self.axi
        beat, data, strb = 0, 0, 0
        policy = ReadyPolicy(self.rng, self.stall.p)
        while True:
            ctx.set(a.wready, policy.ready())
            *_, v, r, wd, ws, wl = await ctx.tick().sample(a.wvalid, a.wready, a.wdata, a.wstrb,
                                                           a.wlast)
            policy.observe(v, r)
            if v and r:
                assert wl == (beat == self.beats - 1), f"WLAST={wl} on beat {beat}"
                data |= wd << (beat * self.dw)
                strb |= ws << (beat * self.dw // 8)
                beat += 1
                if wl:
                    self.w_q.append((data, strb))
                    beat, data, strb = 0, 0, 0

    async def b(self, ctx):
        a, t = self.axi, 0
        while True:
            if self.aw_q and self.w_q:
                addr, user = self.aw_q.pop(0)
                data, strb = self.w_q.pop(0)
                self.writes.append((addr, strb, data, user))
                old = self.mem[addr >> 6]
                for i in range(64):
                    if strb >> i & 1:
                        old = (old & ~(0xFF << 8 * i)) | (data & (0xFF << 8 * i))
                self.mem[addr >> 6] = old
                self.b_q.append(t + self.rng.randint(1, self.max_lat + 1))
            if self.b_q and self.b_q[0] <= t and not self.stall():
                self.b_q.pop(0)
                err = self.rng.random() < self.p_err
                self.b_errs.append(err)
                ctx.set(a.bid, 0)
                ctx.set(a.bresp, RESP_SLVERR if err else 0)
                ctx.set(a.bvalid, 1)
                while True:
                    *_, br = await ctx.tick().sample(a.bready)
                    t += 1
                    if br:
                        break
                ctx.set(a.bvalid, 0)
            else:
                await ctx.tick()
                t += 1

    async def monitor(self, ctx):
        """Outstanding limits, counted on the AXI side at each edge."""
        a = self.axi
        rd_out = wr_out = 0
        while True:
            *_, arv, arr, rv, rr, rl, awv, awr, bv, br = await ctx.tick().sample(
                a.arvalid, a.arready, a.rvalid, a.rready, a.rlast, a.awvalid, a.awready,
                a.bvalid, a.bready)
            rd_out += (arv and arr) - (rv and rr and rl)
            wr_out += (awv and awr) - (bv and br)
            assert rd_out <= self.cfg.max_reads, \
                f"{rd_out} reads outstanding > max_reads={self.cfg.max_reads}"
            assert wr_out <= self.cfg.max_writes, \
                f"{wr_out} writes outstanding > max_writes={self.cfg.max_writes}"
            self.max_rd_out = max(self.max_rd_out, rd_out)
            self.max_wr_out = max(self.max_wr_out, wr_out)


def random_be(rng):
    return rng.choice([(1 << 64) - 1, 0, rng.getrandbits(64), rng.getrandbits(64),
                       ((1 << 16) - 1) << (16 * rng.randrange(4))])


@pytest.mark.parametrize("dw,seed", [(512, 1), (512, 2), (128, 3), (128, 4)])
def test_media_axi_random_traffic_against_axi_slave(dw, seed):
    """Random reads/writes with random ids and stalls on both sides: reads return the last
    written data of their line, ids come back in request order, WSTRB = byte enables, burst fields
    right, outstanding reads/writes within max_reads/max_writes, AXI valid held until ready,
    RRESP/BRESP errors reach rd_resp.err/wr_resp.err, wr_req.poison goes out on AWUSER and a
    RUSER on any beat of a burst reaches rd_resp.poison."""
    rng = make_rng(seed)
    cfg = small_cfg(dw)
    dut = MediaAXI(cfg)
    port = dut.port
    lines = rng.sample(range(1 << LINE_ADDR_BITS), 8)
    host_mem = {ln: rng.getrandbits(512) for ln in lines}
    slave = AXISlave(dut, cfg, rng, dict(host_mem))
    n_reads, n_writes = (250, 160) if dw == 512 else (120, 80)

    rd_pending = {ln: 0 for ln in lines}
    wr_pending = {ln: 0 for ln in lines}
    exp_reads, exp_writes = [], []
    got = {"rd": 0, "wr": 0, "rd_err": 0, "wr_err": 0, "rd_poison": 0, "wr_poison": 0}

    async def read_issuer(ctx):
        stall = Stall(rng, 0.3)
        for _ in range(n_reads):
            free = [ln for ln in lines if wr_pending[ln] == 0]
            while not free:          # hazard rule: no read of a line with a write in flight
                await ctx.tick()
                free = [ln for ln in lines if wr_pending[ln] == 0]
            ln, rid = rng.choice(free), rng.randrange(16)
            rd_pending[ln] += 1
            exp_reads.append((rid, ln, host_mem[ln]))
            await send(ctx, port.rd_req, {"id": rid, "op": RD_CUR, "addr": ln}, stall)

    async def write_issuer(ctx):
        stall = Stall(rng, 0.3)
        for _ in range(n_writes):
            free = [ln for ln in lines if rd_pending[ln] == 0]
            while not free:
                await ctx.tick()
                free = [ln for ln in lines if rd_pending[ln] == 0]
            ln, wid = rng.choice(free), rng.randrange(16)
            be, data, poison = random_be(rng), rng.getrandbits(512), int(rng.random() < 0.3)
            wr_pending[ln] += 1
            exp_writes.append((wid, ln, be, data, poison))
            await send(ctx, port.wr_req, {"id": wid, "addr": ln, "be": be, "data": data,
                                          "poison": poison}, stall)

    async def read_responses(ctx):
        stall = Stall(rng, 0.3)
        s = port.rd_resp
        n = 0
        while n < n_reads:
            ctx.set(s.ready, 0 if stall() else 1)
            *_, v, r, p = await ctx.tick().sample(s.valid, s.ready, s.payload)
            if not (v and r):
                continue
            rid, ln, data = exp_reads[n]
            assert p.id == rid, f"read {n}: id {p.id}, want {rid} (request order)"
            assert p.data == data, f"read {n} of line {ln:#x}: data is not the last written"
            assert p.err == slave.r_errs[n], f"read {n}: err {p.err}, RRESP error {slave.r_errs[n]}"
            assert p.poison == slave.r_poisons[n], \
                f"read {n}: poison {p.poison}, RUSER {slave.r_poisons[n]}"
            got["rd_err"] += p.err
            got["rd_poison"] += p.poison
            rd_pending[ln] -= 1
            n += 1
        got["rd"] = n

    async def write_responses(ctx):
        stall = Stall(rng, 0.3)
        s = port.wr_resp
        n = 0
        while n < n_writes:
            ctx.set(s.ready, 0 if stall() else 1)
            *_, v, r, p = await ctx.tick().sample(s.valid, s.ready, s.payload)
            if not (v and r):
                continue
            wid, ln, be, data, poison = exp_writes[n]
            assert p.id == wid, f"write {n}: id {p.id}, want {wid} (request order)"
            assert p.err == slave.b_errs[n], \
                f"write {n}: err {p.err}, BRESP error {slave.b_errs[n]}"
            addr, strb, wdata, user = slave.writes[n]
            assert user == poison, f"write {n}: AWUSER {user}, poison {poison}"
            got["wr_poison"] += user
            assert addr == ln << 6, f"write {n}: AWADDR {addr:#x}, want {ln << 6:#x}"
            assert strb == be, f"write {n}: WSTRB {strb:#018x} != be {be:#018x}"
            mask = sum(0xFF << 8 * i for i in range(64) if be >> i & 1)
            assert wdata & mask == data & mask, f"write {n}: WDATA differs in enabled bytes"
            host_mem[ln] = (host_mem[ln] & ~mask) | (data & mask)
            got["wr_err"] += p.err
            wr_pending[ln] -= 1
            n += 1
        got["wr"] = n

    simulate(dut, [read_issuer, write_issuer, read_responses, write_responses],
             slave.processes(), max_cycles=20000, name=f"media_axi_{dw}_{seed}")
    print(got, "max outstanding rd/wr:", slave.max_rd_out, slave.max_wr_out)
    assert got["rd"] == n_reads and got["wr"] == n_writes
    assert not slave.ar_q and not slave.b_q and not slave.aw_q and not slave.w_q
    # the stimulus did exercise what it claims to
    assert got["rd_err"] > 0 and got["wr_err"] > 0
    assert 0 < got["rd_poison"] < n_reads and 0 < got["wr_poison"] < n_writes
    assert slave.max_rd_out >= 2 and slave.max_wr_out >= 2


@pytest.mark.parametrize("dw", [512, 128])
def test_media_axi_back_to_back_throughput(dw):
    """Contract: one line per cycle each way at 512 bits (one beat per cycle at narrower
    widths) with an always-ready zero-latency slave and an always-ready requester."""
    cfg = DeviceConfig(media_data_bits=dw, max_reads=8, max_writes=8)
    dut = MediaAXI(cfg)
    a, port = dut.axi, dut.port
    beats = 512 // dw
    n = 24
    stamps = {"rd": [], "wr": []}

    async def reads(ctx):
        for i in range(n):
            await send(ctx, port.rd_req, {"id": i % 16, "op": RD_CUR, "addr": i})

    async def writes(ctx):
        for i in range(n):
            await send(ctx, port.wr_req, {"id": i % 16, "addr": i, "be": -1, "data": i})

    async def responses(ctx):
        ctx.set(port.rd_resp.ready, 1)
        ctx.set(port.wr_resp.ready, 1)
        t = 0
        while len(stamps["rd"]) < n or len(stamps["wr"]) < n:
            *_, rv, wv = await ctx.tick().sample(port.rd_resp.valid, port.wr_resp.valid)
            if rv:
                stamps["rd"].append(t)
            if wv:
                stamps["wr"].append(t)
            t += 1

    async def slave(ctx):
        """Zero-wait slave: R beats follow AR one cycle later, B follows the last W."""
        for s in (a.arready, a.awready, a.wready):
            ctx.set(s, 1)
        reads_q, b_q, rbeat = [], 0, 0
        while True:
            ctx.set(a.rvalid, bool(reads_q))
            ctx.set(a.rlast, rbeat == beats - 1)
            ctx.set(a.bvalid, b_q > 0)
            *_, arv, rr, wv, wl, br = await ctx.tick().sample(a.arvalid, a.rready, a.wvalid,
                                                              a.wlast, a.bready)
            if reads_q and rr:
                rbeat += 1
                if rbeat == beats:
                    reads_q.pop(0)
                    rbeat = 0
            if b_q and br:
                b_q -= 1
            if arv:
                reads_q.append(1)
            if wv and wl:
                b_q += 1

    simulate(dut, [reads, writes, responses], [slave], max_cycles=2000,
             name=f"media_axi_tput_{dw}")
    for kind in ("rd", "wr"):
        s = stamps[kind]
        span = s[-1] - s[0]        # one line each `beats` cycles after the first
        assert span == (n - 1) * beats, \
            f"{kind}: {n} responses spread over {span} cycles, want {(n - 1) * beats}"


def test_media_axi_request_and_response_latency():
    """Contract (512 bits): AR and AW/W are driven combinationally in the cycle the request is
    valid; a read answered in the cycle right after AR reaches rd_resp exactly one cycle later
    (the register slice's R register)."""
    dut = MediaAXI(small_cfg(512))
    a, port = dut.axi, dut.port
    seen = {}

    async def tb(ctx):
        ctx.set(a.arready, 1)
        ctx.set(port.rd_resp.ready, 1)
        ctx.set(port.rd_req.payload, {"id": 7, "op": RD_CUR, "addr": 5})
        ctx.set(port.rd_req.valid, 1)
        seen["ar"] = (ctx.get(a.arvalid), ctx.get(a.araddr), ctx.get(port.rd_req.ready))
        ctx.set(port.wr_req.payload, {"id": 3, "addr": 9, "be": -1, "data": 0x55})
        ctx.set(port.wr_req.valid, 1)
        seen["aw_w"] = (ctx.get(a.awvalid), ctx.get(a.awaddr), ctx.get(a.wvalid),
                        ctx.get(a.wdata), ctx.get(a.wlast))
        await ctx.tick()
        ctx.set(port.rd_req.valid, 0)
        ctx.set(port.wr_req.valid, 0)
        ctx.set(a.rdata, 0xABCD)
        ctx.set(a.rlast, 1)
        ctx.set(a.rvalid, 1)
        for t in (1, 2):
            if ctx.get(port.rd_resp.valid):
                seen["resp"] = (t, ctx.get(port.rd_resp.payload.id),
                                ctx.get(port.rd_resp.payload.data), ctx.get(a.rready))
                break
            await ctx.tick()

    simulate(dut, [tb], max_cycles=20, name="media_axi_latency")
    assert seen["ar"] == (1, 5 << 6, 1)
    assert seen["aw_w"] == (1, 9 << 6, 1, 0x55, 1)
    assert "resp" in seen, "rd_resp not valid within one cycle of the R beat"
    assert seen["resp"] == (2, 7, 0xABCD, 1), "rd_resp not exactly one cycle after the R beat"
