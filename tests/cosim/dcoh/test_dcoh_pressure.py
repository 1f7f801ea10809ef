"""The DCOH under pressure, default configuration: DevLoad under a pile of host reads, and more
Reqs waiting for victims than park slots. Both were unchecked until mutation testing
(docs/verification.md "Mutation testing: hw") showed mutants of them surviving the DCOH bench.

- DevLoad (hw/dcoh/routing.py ``_dev_load``, thresholds 1/2, 3/4, 7/8 of ``host_reads``): the
  DRS channel is held while the host issues reads to distinct lines, so they pile up in the
  device; once released, the DRS responses drain back to back and the ``j``-th one leaves with
  ``n - j`` reads in flight (``n`` sent before the drain), give or take the few cycles between
  the counter and the channel.
- Park slots (hw/dcoh/host_lane.py): a Req that needs a victim parks until the victim's BIRsp;
  with every slot taken the next one must wait on the Req channel, not take a busy slot. A
  parked Req keeps its tag and blocks only Reqs to its own line, and it retries only when a
  BIRsp wakes it.
- Victims (hw/dcoh/host_lane.py ``_victim``): the first way not under snoop, starting from a
  pointer that moves on with each victim, so successive victims of a set rotate over its ways.
- The tracker's 8 BITags all in use at once (device snoops plus parked Reqs that need victims),
  with two of them on lines one high bit apart, and with BITag 7 snooping the way a
  victim scan reaches.
"""
import cocotb
import pytest
from cocotb.triggers import ClockCycles

from cosim import build as cb
from cosim.cxl_host import HostKnobs, fast_getter
from cosim.tb.config import BenchConfig
from cosim.tb.dcoh import BISnpLog, DcohTB, dcoh_top_build
from hw.config import DeviceConfig

SLACK = 4           # reads in flight either side of the expected count that are accepted


def level(inflight: int, cap: int) -> int:
    """DevLoad for ``inflight`` host reads of ``cap`` (CXL 3.x: light/optimal/moderate/severe)."""
    return 0 if inflight < cap // 2 else 1 if inflight < cap * 3 // 4 else \
        2 if inflight < cap * 7 // 8 else 3


@cocotb.test()
async def dev_load_follows_host_reads_in_flight(dut):
    """Reads held behind a paused DRS channel, then drained: each DRS carries the DevLoad of the
    reads still in flight, and every level from 3 down to 0 appears."""
    tb = DcohTB(dut, host_stall=0.0, dev_stall=0.0, knobs=HostKnobs.calm())
    await tb.reset()
    cap = tb.cfg.host_reads
    n = cap - 2
    stable = _HeldPayload(tb, "s2m_drs")
    tb.chans.hold("s2m_drs", 20 * cap)
    txns = [await tb.host.read(tb.line("table", i), "cur", wait=False) for i in range(n)]
    for t in txns:
        await tb.host.wait_txn(t, timeout=60 * cap)
    order = sorted(txns, key=lambda t: t.t_drs)
    release = order[0].t_drs
    assert all(t.t_sent is not None and t.t_sent < release for t in txns), \
        "reads still unsent when the DRS channel reopened: raise the hold"
    seen = set()
    for j, t in enumerate(order[1:], 1):          # the first DRS was waiting before the drain
        got = t.drs["dev_load"]
        allowed = {level(max(0, n - j + d), cap) for d in range(-SLACK, SLACK + 1)}
        assert got in allowed, (f"DRS {j} of {n}: DevLoad {got} with about {n - j} reads in "
                                f"flight (allowed {sorted(allowed)}, seed {tb.seed})")
        seen.add(got)
    assert seen == {0, 1, 2, 3}, seen
    assert stable.waits > 0 and not stable.changes, stable.changes[:4]
    await tb.finish()


@cocotb.test()
async def reqs_beyond_the_park_slots_wait_and_all_complete(dut):
    """``park_slots + 2`` sets full of host-owned lines, then one RdOwn per set (each needs a
    victim) while the host takes 300 cycles to answer each BISnp: the Reqs beyond the park
    slots wait on the Req channel, none is lost, all complete."""
    knobs = HostKnobs.calm()
    knobs.snoop_delay_min = knobs.snoop_delay_max = 300
    tb = DcohTB(dut, host_stall=0.0, dev_stall=0.0, knobs=knobs)
    await tb.reset()
    s, ways, n = tb.cfg.sf_sets, tb.cfg.sf_ways, tb.cfg.park_slots + 2
    assert n <= tb.cfg.bi_tags
    for k in range(n):
        for w in range(ways):
            await tb.host.read(tb.line("table", k + s * w), "own")
    txns = [tb.core.issue("rd_own", tb.line("table", k + s * ways)) for k in range(n)]
    for t in txns:
        await tb.host.wait_txn(t, timeout=50_000)
    assert tb.core.stats["max_open_bisnp"] >= tb.cfg.park_slots, tb.core.stats   # slots full
    await tb.finish()


class _HeldPayload:
    """Stream rule: the payload of ``channel`` does not change while valid is high and ready
    low. Records each change (cycle, old, new) and counts the cycles spent waiting."""

    def __init__(self, tb, channel):
        d = tb.dut
        self._get = [fast_getter(getattr(d, f"{channel}__{x}"))
                     for x in ("valid", "ready", "payload")]
        self._waiting = None
        self.waits = 0
        self.changes = []
        tb.chans.every_cycle.append(self)

    def __call__(self, cycle):
        valid, ready, payload = (g() for g in self._get)
        if self._waiting is not None and payload != self._waiting:
            self.changes.append((cycle, self._waiting, payload))
        self._waiting = payload if valid == "1" and ready != "1" else None
        self.waits += self._waiting is not None


@cocotb.test()
async def victims_rotate_over_the_ways_and_skip_a_way_under_snoop(dut):
    """One set, host-owned lines with line-address bit 18 set: seven RdOwns of new lines of
    the set, one after the other, each evict the next way (victims: the four first lines, way
    3's included, then the three that replaced the first three, in order); then, with way 3's
    line under a device write's BISnp and the pointer at way 3, another RdOwn evicts way 0's
    line, not the one already snooped."""
    knobs = HostKnobs.calm()
    knobs.snoop_delay_min = knobs.snoop_delay_max = 150
    tb = DcohTB(dut, host_stall=0.0, dev_stall=0.0, knobs=knobs)
    await tb.reset()
    s, ways = tb.cfg.sf_sets, tb.cfg.sf_ways
    assert ways == 4
    x = [tb.line("table", (1 << 18) + 5 + s * k) for k in range(12)]
    snoops = BISnpLog(tb)
    for k in range(ways):
        await tb.host.read(x[k], "own")                   # ways 0..3
    for k in range(ways, ways + 7):
        await tb.host.read(x[k], "own")                   # victims x0..x6, pointer at 3
    assert snoops.lines == x[:7], [hex(a) for a in snoops.lines]
    # way 3 holds x3, under a device write's snoop; the pointer says way 3
    w = tb.dev.submit("wr", x[7], bytes([0x3C]) * 64, dev_id=3)
    await tb.until(lambda: len(snoops.lines) == 8, 200, "the device write's BISnp")
    t = await tb.host.read(x[11], "own")
    await tb.dev.wait(w)
    assert snoops.lines == x[:8] + [x[8]], [hex(a) for a in snoops.lines]
    assert t.grant == "E"
    await tb.finish()


@cocotb.test()
async def parked_reqs_keep_their_tags_and_block_only_their_own_line(dut):
    """Four full sets, one RdOwn each that needs a victim (all four park slots taken, tags with
    bit 4 clear), while the host takes 300 cycles to answer each BISnp: exactly four BISnps
    (a parked Req retries only when a BIRsp wakes it); an S-to-A upgrade of a line in the set of
    the third parked Req (its address differs from that Req's only in bit 19) is served at once,
    not held behind it; every Req is answered with its own tag (host model) and completes."""
    knobs = HostKnobs.calm()
    knobs.snoop_delay_min = knobs.snoop_delay_max = 300
    tb = DcohTB(dut, host_stall=0.0, dev_stall=0.0, knobs=knobs)
    await tb.reset()
    s, ways, P = tb.cfg.sf_sets, tb.cfg.sf_ways, tb.cfg.park_slots
    assert P == 4
    sets = [10, 11, 12, 13]
    upgrade = tb.line("table", sets[2])                    # way 0 of the third set, held S
    for i, st in enumerate(sets):
        for w in range(ways):
            line = tb.line("table", st + s * w)
            await tb.host.read(line, "shared" if line == upgrade else "own")
    reqs = [tb.line("table", st + s * ways) for st in sets]
    reqs[2] = upgrade | 1 << 19                            # same set, differs in bit 19 only
    n0 = tb.core.stats["recv_s2m_bisnp"]
    tb.core._next_tag = 0x100                              # tags 0x100..0x103: bit 4 clear
    txns = [tb.core.issue("rd_own", a) for a in reqs]
    assert [t.tag & 0x10 for t in txns] == [0] * P
    await tb.until(lambda: tb.core.stats["recv_s2m_bisnp"] == n0 + P, 200, "four BISnps")
    t = await tb.host.read(upgrade, "own")
    assert t.t_done - t.t_issue < 100, (f"the upgrade of {upgrade:#x} took "
                                        f"{t.t_done - t.t_issue} cycles behind a parked Req")
    assert tb.core.stats["recv_s2m_bisnp"] == n0 + P, "a parked Req retried without a BIRsp"
    assert all(x.t_done is None for x in txns), "a Req needing a victim was served early"
    for x in txns:
        await tb.host.wait_txn(x, timeout=50_000)
    await tb.finish()


async def _bitag_schedule(tb, owned, second, requests):
    """The schedule of the BITag tests: the host takes the lines ``owned`` (in that order) and
    table lines 40 and 41 (A); the device writes line 40 and sends ``second`` (kind, line);
    100 cycles after both device BISnps the host issues a RdOwn of each line of ``requests``.
    Returns when every request has completed."""
    for ln in owned:
        await tb.host.read(ln, "own")
    for st in (40, 41):
        await tb.host.read(tb.line("table", st), "own")
    n0 = tb.core.stats["recv_s2m_bisnp"]
    ops = [tb.dev.submit("wr", tb.line("table", 40), dev_id=1),
           tb.dev.submit(*second, dev_id=2)]
    await tb.until(lambda: tb.core.stats["recv_s2m_bisnp"] == n0 + 2, 200, "two device BISnps")
    await ClockCycles(tb.dut.clk, 100)
    txns = [tb.core.issue("rd_own", ln) for ln in requests]
    for op in ops:
        await tb.dev.wait(op, timeout=50_000)
    for t in txns:
        await tb.host.wait_txn(t, timeout=50_000)


@cocotb.test()
async def all_bitags_in_use_and_every_request_completes(dut):
    """A device write and a device RdOwn of host-owned lines, then (100 cycles later) six
    RdOwns that need victims, while the host takes 200 cycles per BISnp: the device snoops'
    BIRsps wake the parked Reqs before their own victims are answered, so they snoop further
    victims until all ``bi_tags`` BITags are in use (rule 7 checked per BISnp by the host
    model), and every request completes."""
    knobs = HostKnobs.calm()
    knobs.snoop_delay_min = knobs.snoop_delay_max = 200
    tb = DcohTB(dut, host_stall=0.0, dev_stall=0.0, knobs=knobs)
    await tb.reset()
    s, ways = tb.cfg.sf_sets, tb.cfg.sf_ways
    sets = range(30, 36)
    await _bitag_schedule(tb, [tb.line("table", st + s * w) for st in sets for w in range(ways)],
                          ("rd_own", tb.line("table", 41)),
                          [tb.line("table", st + s * ways) for st in sets])
    assert tb.core.stats["max_open_bisnp"] == tb.cfg.bi_tags, tb.core.stats["max_open_bisnp"]
    await tb.finish()


@cocotb.test()
async def bitags_1_and_7_on_lines_one_high_bit_apart(dut):
    """All 8 BITags in use at once as in ``all_bitags_in_use_and_every_request_completes`` (a
    device write and a device RdOwn of host-owned lines, then six host RdOwns that need
    victims while the host takes 200 cycles per BISnp), two of the RdOwns in snoop-filter set
    31, whose first and third lines differ only in line bit 25 and have line bit 22 set. With
    this schedule those two lines become the victims held by BITags 7 and 1 at once; the test
    checks that it reached that case (from the BISnps the host saw), that every request
    completes and that the memory equals the model's. Written for DCOH mutant 107
    (``hw/dcoh/tracker.py``: the "two entries hold the same line" assertion for entries 1 and
    7 with entry 7's line bit 25 XOR bit 22, which fires falsely on these two lines)."""
    knobs = HostKnobs.calm()
    knobs.snoop_delay_min = knobs.snoop_delay_max = 200
    tb = DcohTB(dut, host_stall=0.0, dev_stall=0.0, knobs=knobs)
    log = BISnpLog(tb)
    await tb.reset()
    s, ways = tb.cfg.sf_sets, tb.cfg.sf_ways
    sets = (30, 31, 32, 31, 34, 35)
    owned = {st: [tb.line("table", st + s * w) for w in range(ways)] for st in sorted(set(sets))}
    low = tb.line("table", 31) | 1 << 22
    owned[31][0], owned[31][2] = low, low | 1 << 25
    await _bitag_schedule(tb, [ln for lines in owned.values() for ln in lines],
                          ("rd_own", tb.line("table", 41)),
                          [tb.line("table", st + s * (ways + k)) for k, st in enumerate(sets)])
    reached = [(tag, line, open_) for tag, line, open_ in log.seen
               if tag == 7 and line == low and open_.get(1) == low | 1 << 25]
    assert reached, f"BITags 1 and 7 never held the two lines at once: {log.seen}"
    assert tb.core.stats["max_open_bisnp"] == tb.cfg.bi_tags, tb.core.stats["max_open_bisnp"]
    await tb.finish()


@cocotb.test()
async def victim_choice_skips_the_way_bitag_7_snoops(dut):
    """The schedule of ``all_bitags_in_use_and_every_request_completes`` with the device's
    second request a RdCur of the fourth line of snoop-filter set 33 (its BISnpData leaves the
    host a shared copy, so the line stays in way 3), and eight host RdOwns needing victims, the
    last five in set 33: the victim pointer reaches way 3 of set 33 while BITag 7 snoops that
    very line, then set 33's other three ways come under snoop too, and the next RdOwn there
    must park instead of snooping way 3 again. The test checks from the BISnps the host saw
    that it reached that case, that every request completes and that the memory equals the
    model's. Written for DCOH mutant 89 (``hw/dcoh/tracker.py``: the
    victim CAM's comparison of entry 7 with way 3's line, that line's bit 27 inverted: way 3
    then looks free and is snooped a second time, which the tracker's assertion stops)."""
    knobs = HostKnobs.calm()
    knobs.snoop_delay_min = knobs.snoop_delay_max = 200
    knobs.keep_on_bisnp_data = 1.0                       # the host keeps S: way 3 stays valid
    tb = DcohTB(dut, host_stall=0.0, dev_stall=0.0, knobs=knobs)
    log = BISnpLog(tb)
    await tb.reset()
    s, ways = tb.cfg.sf_sets, tb.cfg.sf_ways
    sets = (30, 31, 32, 33, 33, 33, 33, 33)
    shared = tb.line("table", 33 + s * (ways - 1))        # way 3 of set 33
    await _bitag_schedule(tb, [tb.line("table", st + s * w) for st in sorted(set(sets))
                               for w in range(ways)],
                          ("rd_cur", shared),
                          [tb.line("table", st + s * (ways + k)) for k, st in enumerate(sets)])
    in_33 = [{ln for ln in (line, *open_.values()) if (ln - tb.line("table")) % s == 33}
             for _, line, open_ in log.seen if open_.get(7) == shared or line == shared]
    assert any(len(x) == ways for x in in_33), \
        f"set 33 never had all its ways under snoop while BITag 7 held way 3: {log.seen}"
    assert any(tag == 7 and line == shared for tag, line, _ in log.seen), log.seen
    await tb.finish()


@cocotb.test()
async def ndr_payload_stays_while_the_host_holds_the_channel(dut):
    """The NDR channel merges the host lane's Cmp-E and the media write Cmps: with a Cmp-E
    waiting behind a held s2m_ndr when a write's Cmp becomes ready too, the waiting message
    stays on the channel unchanged until the host takes it (stream rule), then both arrive."""
    tb = DcohTB(dut, host_stall=0.0, dev_stall=0.0, knobs=HostKnobs.calm())
    await tb.reset()
    stable = _HeldPayload(tb, "s2m_ndr")
    tb.chans.hold("s2m_ndr", 200)
    rd = await tb.host.read(tb.line("table", 70), "own", wait=False)
    await ClockCycles(dut.clk, 10)
    wr = await tb.host.write(tb.line("table", 71), bytes([0x71]) * 64, wait=False)
    await tb.host.wait_txn(rd)
    await tb.host.wait_txn(wr)
    assert stable.waits > 100 and not stable.changes, (stable.waits, stable.changes[:4])
    await tb.finish()


# ---- pytest launcher ----------------------------------------------------------------------------
@pytest.mark.cosim
def test_dcoh_pressure_cosim(seed, tmp_path):
    """DevLoad under a pile of host reads; park slots, victims and BITags under pressure."""
    cfg = DeviceConfig()
    b = dcoh_top_build(cfg)
    res = cb.run(b, __name__, seed=seed, test_dir=tmp_path, params=BenchConfig(cfg))
    assert res.n_ran == 8 and res.n_failed == 0
