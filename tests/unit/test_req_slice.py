"""The device request port's register slice (hw/req_slice.py): order and payload under random
stalls, one transfer per cycle with one cycle of latency, and that neither side depends
combinationally on the other; on the whole port, requests cross and responses pass through."""
import pytest

from hw.req_slice import DeviceRequestSlice, StreamRegisterSlice

from pysim_util import as_int, check_stream, make_rng, simulate, sink, source, Stall

WIDTH = 20


def run_stream(rng, n, p_src, p_dst):
    dut = StreamRegisterSlice(WIDTH)
    sent = [rng.getrandbits(WIDTH) for _ in range(n)]
    got, t_in, t_out = [], [], []

    async def src(ctx):
        stall, t = Stall(rng, p_src), 0
        for item in sent:
            while stall():
                ctx.set(dut.i.valid, 0)
                await ctx.tick()
                t += 1
            ctx.set(dut.i.payload, item)
            ctx.set(dut.i.valid, 1)
            while True:
                *_, r = await ctx.tick().sample(dut.i.ready)
                t += 1
                if r:
                    break
            t_in.append(t - 1)
        ctx.set(dut.i.valid, 0)

    async def dst(ctx):
        stall, t = Stall(rng, p_dst), 0
        while len(got) < n:
            ctx.set(dut.o.ready, 0 if stall() else 1)
            *_, v, r, p = await ctx.tick().sample(dut.o.valid, dut.o.ready, dut.o.payload)
            if v and r:
                got.append(as_int(p))
                t_out.append(t)
            t += 1

    simulate(dut, [src, dst], [check_stream(dut.o, "o")], max_cycles=40 * n, name="req_slice")
    return sent, got, t_in, t_out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_keeps_order_and_payload_under_random_stalls(seed):
    sent, got, _, _ = run_stream(make_rng(seed), 300, p_src=0.3, p_dst=0.4)
    assert got == sent


def test_one_transfer_per_cycle_one_cycle_of_latency():
    n = 50
    sent, got, t_in, t_out = run_stream(make_rng(5), n, p_src=0, p_dst=0)
    assert got == sent
    assert t_out[-1] - t_out[0] == n - 1, f"{n} transfers over {t_out[-1] - t_out[0] + 1} cycles"
    assert {o - i for i, o in zip(t_in, t_out)} == {1}


def test_full_rate_again_after_a_stall():
    """The output stalls for one cycle in a stream of back-to-back transfers: the skid buffer
    takes the transfer that arrives meanwhile, and the output runs at one per cycle again."""
    dut = StreamRegisterSlice(WIDTH)
    n = 20
    got_t = []

    async def src(ctx):
        await source(ctx, dut.i, range(n))

    async def dst(ctx):
        t = 0
        while len(got_t) < n:
            ctx.set(dut.o.ready, 0 if t == 5 else 1)
            *_, v, r, p = await ctx.tick().sample(dut.o.valid, dut.o.ready, dut.o.payload)
            if v and r:
                got_t.append((t, as_int(p)))
            t += 1

    simulate(dut, [src, dst], max_cycles=200, name="req_slice_stall")
    assert [p for _, p in got_t] == list(range(n))
    times = [t for t, _ in got_t]
    assert times[-1] - times[0] == n, f"one stalled cycle, then a bubble: {times}"


@pytest.mark.parametrize("seed", [11, 12])
def test_no_combinational_path_through_the_slice(seed):
    """Changing ``i.valid``/``i.payload`` and ``o.ready`` within one cycle changes neither
    ``o.valid``/``o.payload`` nor ``i.ready``: both sides see flip-flops only."""
    rng = make_rng(seed)
    dut = StreamRegisterSlice(WIDTH)
    checked = []

    def drive(ctx):
        ctx.set(dut.i.valid, rng.getrandbits(1))
        ctx.set(dut.i.payload, rng.getrandbits(WIDTH))
        ctx.set(dut.o.ready, rng.getrandbits(1))

    def seen(ctx):
        return (ctx.get(dut.o.valid), as_int(ctx.get(dut.o.payload)), ctx.get(dut.i.ready))

    async def tb(ctx):
        for _ in range(300):
            drive(ctx)
            before = seen(ctx)
            for _ in range(3):
                drive(ctx)
                assert seen(ctx) == before, "an output follows an input in the same cycle"
                checked.append(1)
            await ctx.tick()

    simulate(dut, [tb], max_cycles=400, name="req_slice_comb")
    assert len(checked) == 900


def test_device_port_slice_carries_requests_and_passes_responses():
    """Reads and writes reach the responder side in order with their payloads; read and write
    responses reach the requester side in the same cycle."""
    rng = make_rng(21)
    dut = DeviceRequestSlice(addr_bits=40)
    n = 40
    rd = [{"id": rng.getrandbits(4), "op": rng.getrandbits(1), "addr": rng.getrandbits(34)}
          for _ in range(n)]
    wr = [{"id": rng.getrandbits(4), "addr": rng.getrandbits(34), "be": rng.getrandbits(64),
           "data": rng.getrandbits(512)} for _ in range(n)]
    got = {"rd_req": [], "wr_req": []}

    def feeder(ch, items):
        async def proc(ctx):
            await source(ctx, getattr(dut.s, ch), items)
        return proc

    def collector(ch):
        async def proc(ctx):
            out = []
            await sink(ctx, getattr(dut.m, ch), out, n=n, stall=Stall(rng, 0.3))
            got[ch] = [{k: as_int(getattr(p, k)) for k in (rd[0] if ch == "rd_req" else wr[0])}
                       for p in out]
        return proc

    async def responses(ctx):
        for _ in range(50):
            rv, wv, rr, wr_ = (rng.getrandbits(1) for _ in range(4))
            rp, wp = rng.getrandbits(4 + 1 + 512), rng.getrandbits(5)
            ctx.set(dut.m.rd_resp.valid, rv)
            ctx.set(dut.m.rd_resp.payload.as_value(), rp)
            ctx.set(dut.m.wr_resp.valid, wv)
            ctx.set(dut.m.wr_resp.payload.as_value(), wp)
            ctx.set(dut.s.rd_resp.ready, rr)
            ctx.set(dut.s.wr_resp.ready, wr_)
            assert (ctx.get(dut.s.rd_resp.valid), as_int(ctx.get(dut.s.rd_resp.payload)),
                    ctx.get(dut.m.rd_resp.ready)) == (rv, rp, rr)
            assert (ctx.get(dut.s.wr_resp.valid), as_int(ctx.get(dut.s.wr_resp.payload)),
                    ctx.get(dut.m.wr_resp.ready)) == (wv, wp, wr_)
            await ctx.tick()

    simulate(dut, [feeder("rd_req", rd), feeder("wr_req", wr), collector("rd_req"),
                   collector("wr_req"), responses], max_cycles=2000, name="req_slice_port")
    assert got["rd_req"] == rd
    assert got["wr_req"] == wr
