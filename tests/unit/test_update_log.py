"""UpdateEngine + UndoLogger together (docs/training.md sections 4-5): the synchronous logging
path of UPDATE, byte for byte against the golden model (sw_model.training.TrainingDevice).

Both engines share one behavioural memory through a RequestPortMux (ids 4..7 update, 8..9
logger), with ``ensure``/``ensure_done`` and the row query (``q_row``/``q_busy``) connected as in
hw/top.py. The memory samples a read when it is accepted and lands a write when it is
acknowledged, so a read that passes an unacknowledged write of its line sees the old value.

Main case: one UPDATE with one bag [0, 257, 514, 514] (256 sets x 2 ways: rows 0 and 257 fill
set ``table``, so 514 is logged at each of its two items); the second record of 514 must hold
the row after the first update of 514 (the logger waits until the engine's write of 514 is
acknowledged). The whole memory image (table rows and log slots) is compared with the model.
"""
import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring

from hw.config import DeviceConfig
from hw.encodings import LOG_SLOT_BYTES
from hw.port_mux import RequestPortMux
from hw.undolog import UndoLogger
from hw.update import UpdateEngine
from sw_model.memory import MemoryImage
from sw_model.training import TrainingDevice, make_record, slot_addr

from pysim_util import Stall, make_rng, send, simulate, sink

# 256 x 2 logged set (not the default): rows 0, 257, 514 of table 3 share set 3
CFG = DeviceConfig(max_reads=32, max_writes=16, upd_rows=16, acc_bits=36,
                   log_set_sets=256, log_set_ways=2)
TABLE_BASE = 0x40_0000
S = CFG.staging_base
M32 = 0xFFFF_FFFF


class Pair(Elaboratable):
    """UpdateEngine and UndoLogger on one request port (``mux.mem``), wired as hw/top.py."""

    def __init__(self, cfg, *, batch, epoch, connect_query=True):
        self.upd, self.log = UpdateEngine(cfg), UndoLogger(cfg)
        self.mux = RequestPortMux(cfg.addr_bits, [(4, 5, 6, 7), (8, 9)])
        self.batch, self.epoch, self.connect_query = batch, epoch, connect_query

    def elaborate(self, platform):
        m = Module()
        m.submodules.upd, m.submodules.log, m.submodules.mux = self.upd, self.log, self.mux
        wiring.connect(m, self.upd.mem, self.mux.req_0)
        wiring.connect(m, self.log.mem, self.mux.req_1)
        wiring.connect(m, self.upd.ensure, self.log.ensure)
        wiring.connect(m, self.log.ensure_done, self.upd.ensure_done)
        m.d.comb += [self.log.batch.eq(self.batch), self.log.epoch.eq(self.epoch)]
        if self.connect_query:
            m.d.comb += [self.upd.q_row.eq(self.log.q_row), self.log.q_busy.eq(self.upd.q_busy)]
        return m


def memory(dut, img, rng, lat, p_stall):
    """Behavioural memory on ``dut.mux.mem``: responses in request order, latency drawn from
    ``lat`` (a (lo, hi) pair); reads sample ``img`` at acceptance, writes land at their
    acknowledgement."""
    mem = dut.mux.mem
    stall = Stall(rng, p_stall)

    async def run(ctx):
        rd_q, wr_q = [], []       # (due, id, line, data)
        rd_cur = wr_cur = None
        t = 0
        while True:
            ctx.set(mem.rd_req.ready, not stall())
            ctx.set(mem.wr_req.ready, not stall())
            if rd_cur is None and rd_q and rd_q[0][0] <= t:
                rd_cur = rd_q.pop(0)
            if rd_cur is not None:
                ctx.set(mem.rd_resp.payload, {"id": rd_cur[1], "err": 0,
                                              "data": int.from_bytes(rd_cur[3], "little")})
            ctx.set(mem.rd_resp.valid, rd_cur is not None)
            if wr_cur is None and wr_q and wr_q[0][0] <= t:
                wr_cur = wr_q.pop(0)
            if wr_cur is not None:
                ctx.set(mem.wr_resp.payload, {"id": wr_cur[1], "err": 0})
            ctx.set(mem.wr_resp.valid, wr_cur is not None)
            *_, qv, qr, qp, sr, wv, wr, wp, br = await ctx.tick().sample(
                mem.rd_req.valid, mem.rd_req.ready, mem.rd_req.payload, mem.rd_resp.ready,
                mem.wr_req.valid, mem.wr_req.ready, mem.wr_req.payload, mem.wr_resp.ready)
            t += 1
            if rd_cur is not None and sr:
                rd_cur = None
            if wr_cur is not None and br:
                _, _, line, data = wr_cur
                img.write(line << 6, data)
                wr_cur = None
            if qv and qr:
                due = max(t + rng.randint(*lat), rd_q[-1][0] if rd_q else 0)
                rd_q.append((due, int(qp.id), int(qp.addr), img.read(int(qp.addr) << 6, 64)))
            if wv and wr:
                assert int(wp.be) == (1 << 64) - 1, "partial write"
                due = max(t + rng.randint(*lat), wr_q[-1][0] if wr_q else 0)
                wr_q.append((due, int(wp.id), int(wp.addr),
                             int(wp.data).to_bytes(64, "little")))
    return run


def run_case(seed, dim, bags, *, lat, p_stall=0.0, table=3, table_rows=1024, cfg=CFG,
             connect_query=True):
    """One UPDATE (with logging) of ``bags`` on RTL and model from the same image; returns
    (rtl image, model image, model, RTL completion, logger record count)."""
    rng = make_rng(seed)
    img = MemoryImage()
    rb = dim * 4
    for x in sorted({x for bag in bags for x in bag}):
        img.write(TABLE_BASE + x * rb, b"".join(
            rng.randrange(1 << 32).to_bytes(4, "little") for _ in range(dim)))
    oa, ia, ga = S + 0x100, S + 0x1000, S + 0x4000
    offs = [0]
    for bag in bags:
        offs.append(offs[-1] + len(bag))
    img.write(oa, b"".join(o.to_bytes(4, "little") for o in offs))
    img.write(ia, b"".join(x.to_bytes(4, "little") for bag in bags for x in bag))
    img.write(ga, b"".join(rng.randrange(-2**20, 2**20).to_bytes(4, "little", signed=True)
                           for _ in range(len(bags) * dim)))
    lr = 3 << (cfg.frac_bits - 2)
    model = TrainingDevice(cfg, img)
    model.set_table(table, TABLE_BASE, table_rows, dim)
    model.recover()                 # formats the superblock (epoch 0)
    model.recover()                 # an ordinary recovery: epoch 1, batch 1 open
    assert model.recovery_epoch == 1 and model.committed == 0
    rtl_img = img.copy()
    want = model.update(table, len(bags), oa, ia, ga, lr=lr)
    dut = Pair(cfg, batch=model.committed + 1, epoch=model.recovery_epoch,
               connect_query=connect_query)
    got = {}

    async def tb(ctx):
        await send(ctx, dut.upd.cmd, {
            "table_id": table, "dim": dim, "table_rows": table_rows, "n_bags": len(bags),
            "table_base": TABLE_BASE, "offsets_addr": oa, "indices_addr": ia, "grads_addr": ga,
            "lr": lr, "nolog": 0})
        out = []
        await sink(ctx, dut.upd.cpl, out, n=1)
        for _ in range(4 * lat[1] + 20):     # the logger has nothing in flight after cpl
            if ctx.get(dut.log.idle):
                break
            await ctx.tick()
        got["cpl"] = out[0]
        got["records"] = ctx.get(dut.log.records)
        got["idle"] = ctx.get(dut.log.idle)

    simulate(dut, [tb], [memory(dut, rtl_img, rng, lat, p_stall)], max_cycles=20000,
             name=f"update_log_{seed}_{dim}_{lat[1]}")
    assert got["idle"], f"seed={seed}: logger not idle after the completion"
    return rtl_img, img, model, want, got


def check(rtl_img, img, model, want, got, what):
    cpl = got["cpl"]
    assert int(cpl.err_code) == 0 and want["status"] == 0, f"{what}: {cpl.err_code} {want}"
    for k in ("rows", "sat", "lines"):
        assert int(getattr(cpl, k)) == want[k], f"{what}: {k} {getattr(cpl, k)} != {want[k]}"
    assert got["records"] == want["log_records"] == model.next_slot, \
        f"{what}: records {got['records']}, model {want['log_records']}"
    n = model.next_slot
    rtl_log = rtl_img.read(slot_addr(CFG, 0), n * LOG_SLOT_BYTES)
    exp_log = img.read(slot_addr(CFG, 0), n * LOG_SLOT_BYTES)
    for s in range(n):
        a, b = s * LOG_SLOT_BYTES, (s + 1) * LOG_SLOT_BYTES
        assert rtl_log[a:b] == exp_log[a:b], f"{what}: log slot {s} differs from the model"
    diff = rtl_img.diff(img, limit=3)
    assert not diff, f"{what}: memory differs from the model:\n" + \
        "\n".join(d for _, d in diff)


@pytest.mark.parametrize("dim", [16, 128])
@pytest.mark.parametrize("lat", [1, 20])
def test_relog_of_row_in_flight(dim, lat):
    """Bag [0, 257, 514, 514]: four records; the second record of 514 holds the row after the
    first update of 514 (checked directly with make_record, and the whole image against the
    model)."""
    seed = 700 + dim + lat
    rtl_img, img, model, want, got = run_case(seed, dim, [[0, 257, 514, 514]], lat=(lat, lat))
    assert model.next_slot == 4 and model.logged.overflows == 2, "set 3 not overflowed"
    # independent of the model's UPDATE path: record 3 = 514 after one update, record 2 = before
    rb = dim * 4
    recs = [rtl_img.read(slot_addr(CFG, s), 64 + rb) for s in range(4)]
    old514 = recs[2][64:]
    assert recs[3][64:] != old514, f"seed={seed}: the update of 514 changed nothing (test bug)"
    final = rtl_img.read(TABLE_BASE + 514 * rb, rb)
    assert recs[3][64:] != final, f"seed={seed}: record 3 holds the final value"
    for s, row in enumerate((0, 257, 514, 514)):
        assert recs[s][:64] == make_record(3, dim, 1, row, TABLE_BASE + row * rb,
                                           recs[s][64:], 1), f"seed={seed}: header {s}"
    check(rtl_img, img, model, want, got, f"seed={seed} dim {dim} latency {lat}")


def test_relog_sensitivity_without_query():
    """The bench sees the bug: with ``q_busy`` unconnected (tied 0) the logger reads 514 while
    the engine's write of it is unacknowledged, and the second record of 514 is stale."""
    rtl_img, img, model, want, got = run_case(720, 16, [[0, 257, 514, 514]], lat=(20, 20),
                                              connect_query=False)
    s3 = slot_addr(CFG, 3)
    assert rtl_img.read(s3, 128) != img.read(s3, 128), \
        "seed=720: stale record not reproduced without the query (bench too weak)"


def test_random_repeats_small_sets(seed):
    """Random bags over few rows, random latency 1..25 and request stalls, a 4 x 1 logged set
    (rows beyond 4 distinct sets re-logged at each meeting): the image against the model."""
    rng = make_rng(seed)
    cfg = CFG.with_(log_set_sets=4, log_set_ways=1)
    pool = rng.sample(range(64), 7)
    bags = [[rng.choice(pool) for _ in range(rng.randint(1, 6))] for _ in range(4)]
    dim = rng.choice([16, 32, 64])
    print(f"seed={seed} dim={dim} bags={bags}")
    rtl_img, img, model, want, got = run_case(seed, dim, bags, lat=(1, 25), p_stall=0.2,
                                              table=1, table_rows=64, cfg=cfg)
    assert model.logged.overflows > 0, f"seed={seed}: no re-logging (weak stimulus)"
    check(rtl_img, img, model, want, got, f"seed={seed} dim {dim}")
