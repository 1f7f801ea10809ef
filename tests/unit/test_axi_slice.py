# amaranth: UnusedElaboratable=no
"""AXI4RegisterSlice (hw/axi_slice.py): order, payload and throughput of every channel under random
stalls on both sides, the added latency (none on AR/AW/W, one cycle on R/B), and that nothing on
the master side depends combinationally on the slave side's signals.

The first line turns off Amaranth's UnusedElaboratable warning for this file: a constructor that
raises TypeError leaves a half-built component behind; every other slice here is simulated."""
import pytest

from hw.axi import AXI4Signature
from hw.axi_slice import AXI4RegisterSlice

from pysim_util import ReadyPolicy, Stall, check_channel, make_rng, simulate

SIG = AXI4Signature(addr_width=16, data_width=32, id_width=2, user_width=1)
# channel: (valid, ready, payload, direction); "req" goes s -> m, "resp" m -> s
CHANNELS = {
    "ar": ("arvalid", "arready", ("arid", "araddr", "arlen", "arsize", "arburst"), "req"),
    "aw": ("awvalid", "awready", ("awid", "awaddr", "awlen", "awsize", "awburst", "awuser"),
           "req"),
    "w": ("wvalid", "wready", ("wdata", "wstrb", "wlast"), "req"),
    "r": ("rvalid", "rready", ("rid", "rdata", "rresp", "rlast", "ruser"), "resp"),
    "b": ("bvalid", "bready", ("bid", "bresp"), "resp"),
}
# signals driven from the slave's side (inputs of ``m``, and their registered copies on ``s``)
FROM_SLAVE = [n for v, r, p, d in CHANNELS.values() for n in ((r,) if d == "req" else (v, *p))]
FROM_MASTER = [n for v, r, p, d in CHANNELS.values() for n in ((v, *p) if d == "req" else (r,))]


def ends(dut, name):
    """(source interface, sink interface) of a channel."""
    return (dut.s, dut.m) if CHANNELS[name][3] == "req" else (dut.m, dut.s)


def random_payload(rng, iface, names):
    return {n: rng.getrandbits(len(getattr(iface, n))) for n in names}


def run_traffic(rng, n, p_src, p_dst, p_wait=0.5):
    dut = AXI4RegisterSlice(SIG)
    sent = {c: [] for c in CHANNELS}
    got = {c: [] for c in CHANNELS}
    stamps = {c: {"in": [], "out": []} for c in CHANNELS}

    def source(name):
        valid, ready, payload, _ = CHANNELS[name]
        src, _dst = ends(dut, name)
        stall = Stall(rng, p_src)

        async def proc(ctx):
            t = 0
            for _ in range(n):
                while stall():
                    ctx.set(getattr(src, valid), 0)
                    await ctx.tick()
                    t += 1
                item = random_payload(rng, src, payload)
                for k, v in item.items():
                    ctx.set(getattr(src, k), v)
                ctx.set(getattr(src, valid), 1)
                while True:
                    *_, r = await ctx.tick().sample(getattr(src, ready))
                    t += 1
                    if r:
                        break
                sent[name].append(item)
                stamps[name]["in"].append(t - 1)
            ctx.set(getattr(src, valid), 0)
        return proc

    def sink(name):
        valid, ready, payload, _ = CHANNELS[name]
        _src, dst = ends(dut, name)
        policy = ReadyPolicy(rng, p_dst, p_wait)

        async def proc(ctx):
            t = 0
            while len(got[name]) < n:
                ctx.set(getattr(dst, ready), policy.ready())
                _clk, _rst, v, r, *p = await ctx.tick().sample(
                    getattr(dst, valid), getattr(dst, ready), *(getattr(dst, k) for k in payload))
                policy.observe(v, r)
                if v and r:
                    got[name].append({k: int(x) for k, x in zip(payload, p)})
                    stamps[name]["out"].append(t)
                t += 1
            ctx.set(getattr(dst, ready), 0)
        return proc

    checkers = []
    for name, (valid, ready, payload, _) in CHANNELS.items():
        _src, dst = ends(dut, name)
        checkers.append(check_channel(getattr(dst, valid), getattr(dst, ready),
                                      [getattr(dst, k) for k in payload], name.upper()))
    simulate(dut, [source(c) for c in CHANNELS] + [sink(c) for c in CHANNELS], checkers,
             max_cycles=40 * n, name="axi_slice")
    return sent, got, stamps


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_channel_keeps_order_and_payload_under_random_stalls(seed):
    rng = make_rng(seed)
    sent, got, _ = run_traffic(rng, 200, p_src=0.3, p_dst=0.4)
    for c in CHANNELS:
        assert got[c] == sent[c], f"{c.upper()}: transfers differ or reordered"


def test_one_transfer_per_cycle_no_latency_on_requests_one_on_responses():
    rng = make_rng(7)
    n = 50
    sent, got, stamps = run_traffic(rng, n, p_src=0, p_dst=0, p_wait=0)
    for c, (_, _, _, direction) in CHANNELS.items():
        assert got[c] == sent[c]
        out = stamps[c]["out"]
        assert out[-1] - out[0] == n - 1, f"{c.upper()}: {n} transfers over {out[-1] - out[0] + 1} cycles"
        delay = {o - i for i, o in zip(stamps[c]["in"], out)}
        assert delay == ({0} if direction == "req" else {1}), f"{c.upper()}: latency {delay}"


@pytest.mark.parametrize("seed", [11, 12])
def test_master_side_does_not_depend_combinationally_on_the_slave_side(seed):
    """In random states of the slice, changing every slave-side input within one cycle (no clock
    edge) leaves every signal the master sees unchanged: they all come from flip-flops."""
    rng = make_rng(seed)
    dut = AXI4RegisterSlice(SIG)
    checked = []

    def drive_random(ctx, iface, names):
        for k, v in random_payload(rng, iface, names).items():
            ctx.set(getattr(iface, k), v)

    async def tb(ctx):
        for _ in range(300):
            drive_random(ctx, dut.s, FROM_MASTER)
            drive_random(ctx, dut.m, FROM_SLAVE)
            before = [int(ctx.get(getattr(dut.s, k))) for k in FROM_SLAVE]
            for _ in range(3):
                drive_random(ctx, dut.m, FROM_SLAVE)
                after = [int(ctx.get(getattr(dut.s, k))) for k in FROM_SLAVE]
                assert after == before, "a master-facing signal follows the slave side"
                checked.append(1)
            await ctx.tick()

    simulate(dut, [tb], max_cycles=400, name="axi_slice_comb")
    assert len(checked) == 900


def test_rejects_a_non_axi4_signature():
    with pytest.raises(TypeError, match="AXI4Signature"):
        AXI4RegisterSlice(object())
