"""The DCOH under pressure, default configuration: DevLoad under a pile of host reads, and more
Reqs waiting for victims than park slots. Both were unchecked until mutation testing
(docs/verification.md "Mutation testing: hw") showed mutants of them surviving the DCOH bench.

- DevLoad (hw/dcoh/routing.py ``_dev_load``, thresholds 1/2, 3/4, 7/8 of ``host_reads``): the
  DRS channel is held while the host issues reads to distinct lines, so they pile up in the
  device; once released, the DRS responses drain back to back and the ``j``-th one leaves with
  ``n - j`` reads in flight (``n`` sent before the drain), give or take the few cycles between
  the counter and the channel.
- Park slots (hw/dcoh/host_lane.py): a Req that needs a victim parks until the victim's BIRsp;
  with every slot taken the next one must wait on the Req channel, not take a busy slot.
"""
import cocotb
import pytest

from cosim import build as cb
from cosim.cxl_host import HostKnobs
from cosim.tb.config import BenchConfig
from cosim.tb.dcoh import DcohTB, dcoh_top_build
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


# ---- pytest launcher ----------------------------------------------------------------------------
@pytest.mark.cosim
def test_dcoh_pressure_cosim(seed, tmp_path):
    """DevLoad under a pile of host reads; more victim-waiting Reqs than park slots."""
    cfg = DeviceConfig()
    b = dcoh_top_build(cfg)
    res = cb.run(b, __name__, seed=seed, test_dir=tmp_path, params=BenchConfig(cfg))
    assert res.n_ran == 2 and res.n_failed == 0
