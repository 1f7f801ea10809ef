# amaranth: UnusedElaboratable=no
"""RequestPortMux (hw/port_mux.py): three requesters sharing one request port.

The first line turns off Amaranth's UnusedElaboratable warning for this file: a constructor that
raises ValueError leaves a half-built component behind; every other mux here is simulated."""
import pytest

from hw.port_mux import RequestPortMux
from hw.reqport import RD_CUR

from pysim_util import ReadyPolicy, Stall, check_stream, make_rng, send, simulate

IDS = [(1,), (2,), (0,)]
STRAY_IDS = [i for i in range(16) if i not in (0, 1, 2)]


def tag(req, kind, seq):
    """A line address naming the requester, channel and sequence number of a request."""
    return (req << 20) | (kind << 16) | seq


@pytest.mark.parametrize("registered", [(), ("rd",), ("rd", "wr")],
                         ids=["comb", "registered_rd", "registered"])
@pytest.mark.parametrize("seed", [11, 12, 13])
def test_port_mux_merges_without_loss_and_routes_by_id(seed, registered):
    """Random stalls everywhere: merged rd_req/wr_req keep the stream rules, every request
    reaches mem exactly once (per-requester order kept), every response reaches the owner of its
    id in order, and a response with an unowned id pulses ``stray`` and reaches nobody."""
    rng = make_rng(seed)
    dut = RequestPortMux(40, IDS, registered_grant=registered)
    reqs = [dut.req_0, dut.req_1, dut.req_2]
    n_per = 80                                   # requests per requester per channel
    merged = {"rd": [], "wr": []}                # (id, addr) in mem-side transfer order
    routed = {(i, k): [] for i in range(3) for k in ("rd", "wr")}
    strays = {"injected": 0, "pulsed": 0}

    def requester(i):
        async def tb(ctx):
            stall = Stall(rng, 0.4)
            my_id = IDS[i][0]
            for seq in range(n_per):
                await send(ctx, reqs[i].rd_req, {"id": my_id, "op": RD_CUR,
                                                 "addr": tag(i, 0, seq)}, stall)
        return tb

    def writer(i):
        async def tb(ctx):
            stall = Stall(rng, 0.4)
            my_id = IDS[i][0]
            for seq in range(n_per):
                await send(ctx, reqs[i].wr_req, {"id": my_id, "addr": tag(i, 1, seq),
                                                 "be": seq, "data": seq * 3}, stall)
        return tb

    def receiver(i, kind):
        async def tb(ctx):
            stall = Stall(rng, 0.3)
            s = getattr(reqs[i], f"{kind}_resp")
            while len(routed[i, kind]) < n_per:
                ctx.set(s.ready, 0 if stall() else 1)
                *_, v, r, p = await ctx.tick().sample(s.valid, s.ready, s.payload)
                if v:
                    assert p.id in IDS[i], f"req_{i}.{kind}_resp valid with foreign id {p.id}"
                if v and r:
                    routed[i, kind].append(p)
        return tb

    def responder(kind):
        """Accepts requests with random stalls and answers each id in order, mixing ids in a
        random order, with occasional stray-id responses."""
        async def proc(ctx):
            req = getattr(dut.mem, f"{kind}_req")
            resp = getattr(dut.mem, f"{kind}_resp")
            stall = Stall(rng, 0.3)
            policy = ReadyPolicy(rng, 0.3)
            queues = {i: [] for i in range(16)}
            while True:
                ctx.set(req.ready, policy.ready())
                ready_ids = [i for i, q in queues.items() if q]
                pick = None
                if not stall():
                    if rng.random() < 0.05:
                        pick = ("stray", rng.choice(STRAY_IDS))
                    elif ready_ids:
                        pick = ("real", rng.choice(ready_ids))
                if pick is None:
                    # idle payload: an owned id (the unowned-idle-payload case has its own test)
                    ctx.set(resp.payload.id, 0)
                    ctx.set(resp.valid, 0)
                else:
                    rid = pick[1]
                    addr = queues[rid][0] if pick[0] == "real" else 0xDEAD
                    payload = {"id": rid, "err": addr & 1}
                    if kind == "rd":
                        payload["data"] = addr * 7
                    ctx.set(resp.payload, payload)
                    ctx.set(resp.valid, 1)
                done = False
                while not done:
                    *_, qv, qr, qp, sr = await ctx.tick().sample(
                        req.valid, req.ready, req.payload, resp.ready)
                    policy.observe(qv, qr)
                    if qv and qr:
                        merged[kind].append((qp.id, qp.addr))
                        queues[qp.id].append(qp.addr)
                    ctx.set(req.ready, policy.ready())
                    if pick is None:
                        done = True
                    else:
                        done = bool(sr)
                        if sr:
                            if pick[0] == "stray":
                                strays["injected"] += 1
                            else:
                                queues[pick[1]].pop(0)
                ctx.set(resp.payload.id, 0)
                ctx.set(resp.valid, 0)
        return proc

    owned = {i for ids in IDS for i in ids}

    async def stray_monitor(ctx):
        """``stray`` is high exactly in the cycles where either response channel transfers a
        response with an unowned id (it is accepted: ready is high)."""
        rd, wr = dut.mem.rd_resp, dut.mem.wr_resp
        while True:
            *_, rv, rr, rid, wv, wr_, wid, st = await ctx.tick().sample(
                rd.valid, rd.ready, rd.payload.id, wr.valid, wr.ready, wr.payload.id,
                dut.stray)
            want = False
            for ch, v, r, i in (("rd", rv, rr, rid), ("wr", wv, wr_, wid)):
                if v and i not in owned:
                    assert r, f"{ch}_resp with stray id {i} not accepted"
                    want = True
                    strays["pulsed"] += bool(st)
            assert bool(st) == want, \
                f"stray={st}, want {int(want)} (rd valid={rv} id={rid}, wr valid={wv} id={wid})"

    tbs = [requester(i) for i in range(3)] + [writer(i) for i in range(3)]
    tbs += [receiver(i, k) for i in range(3) for k in ("rd", "wr")]
    bgs = [responder("rd"), responder("wr"), stray_monitor,
           check_stream(dut.mem.rd_req, "mem.rd_req"), check_stream(dut.mem.wr_req, "mem.wr_req")]
    simulate(dut, tbs, bgs, max_cycles=20000, name=f"port_mux_{seed}_{'_'.join(registered) or 'comb'}")

    for kind, k in (("rd", 0), ("wr", 1)):
        seen = merged[kind]
        assert len(seen) == len(set(seen)) == 3 * n_per, f"{kind}: lost or duplicated requests"
        for i in range(3):
            mine = [addr for rid, addr in seen if addr >> 20 == i]
            assert mine == [tag(i, k, s) for s in range(n_per)], \
                f"{kind}: requester {i} requests reordered or lost"
            assert all(rid == IDS[i][0] for rid, addr in seen if addr >> 20 == i)
            got = routed[i, kind]
            assert [p.err for p in got] == [s & 1 for s in range(n_per)]
            if kind == "rd":
                assert [p.data for p in got] == [tag(i, 0, s) * 7 for s in range(n_per)], \
                    f"rd: requester {i} got responses out of order or not its own"
    assert strays["injected"] > 0 and strays["pulsed"] == strays["injected"]


def test_port_mux_stray_response_is_dropped_directed():
    """Directed: a read and a write response with id 9 (owned by nobody) are accepted with
    ready high even while every requester stalls its response ready, pulse ``stray`` in their
    transfer cycle only, and no requester sees a valid response."""
    dut = RequestPortMux(40, IDS)
    reqs = [dut.req_0, dut.req_1, dut.req_2]
    log = []

    async def tb(ctx):
        for r in reqs:
            ctx.set(r.rd_resp.ready, 0)
            ctx.set(r.wr_resp.ready, 0)
        for kind in ("rd", "wr"):
            resp = getattr(dut.mem, f"{kind}_resp")
            ctx.set(resp.payload.id, 9)
            ctx.set(resp.valid, 1)
            assert ctx.get(resp.ready) == 1
            assert ctx.get(dut.stray) == 1
            assert not any(ctx.get(getattr(r, f"{kind}_resp").valid) for r in reqs)
            await ctx.tick()
            ctx.set(resp.valid, 0)
            assert ctx.get(dut.stray) == 0
            # an owned id is not stray and waits for its owner's ready
            ctx.set(resp.payload.id, 2)
            ctx.set(resp.valid, 1)
            assert ctx.get(dut.stray) == 0
            assert ctx.get(resp.ready) == 0
            assert ctx.get(getattr(dut.req_1, f"{kind}_resp").valid) == 1
            assert ctx.get(getattr(dut.req_0, f"{kind}_resp").valid) == 0
            assert ctx.get(getattr(dut.req_2, f"{kind}_resp").valid) == 0
            ctx.set(resp.valid, 0)
            log.append(kind)
            await ctx.tick()

    simulate(dut, [tb], max_cycles=100, name="port_mux_stray")
    assert log == ["rd", "wr"]


@pytest.mark.parametrize("idle_wr_id", [0, 9])
def test_port_mux_stray_read_pulses_whatever_the_idle_write_payload(idle_wr_id):
    """A stray read response pulses ``stray`` regardless of the payload on the idle (valid low)
    write-response channel. Payload is a don't-care while valid is low, so an unowned id
    there (9) must not mask the read channel's stray pulse."""
    dut = RequestPortMux(40, IDS)
    seen = {}

    async def tb(ctx):
        ctx.set(dut.mem.wr_resp.payload.id, idle_wr_id)
        ctx.set(dut.mem.wr_resp.valid, 0)
        ctx.set(dut.mem.rd_resp.payload.id, 9)
        ctx.set(dut.mem.rd_resp.valid, 1)
        seen["ready"] = ctx.get(dut.mem.rd_resp.ready)
        seen["stray"] = ctx.get(dut.stray)
        await ctx.tick()

    simulate(dut, [tb], max_cycles=10, name=f"port_mux_stray_idle_wr_{idle_wr_id}")
    assert seen["ready"] == 1, "stray read response not accepted"
    assert seen["stray"] == 1, (
        f"stray read response (id 9) did not pulse stray while wr_resp was idle with "
        f"id {idle_wr_id}: the write channel's ~hit branch overrides stray with wr_resp.valid=0")


def test_port_mux_fixed_priority_and_grant_held_while_waiting():
    """Requester 0 has the highest priority: with all three offering two reads at once and mem
    always ready, mem sees 0,0,1,1,2,2. A grant is held while mem stalls: requester 1 offered
    alone under a stall keeps the merged payload when requester 0 becomes valid."""
    dut = RequestPortMux(40, IDS)
    reqs = [dut.req_0, dut.req_1, dut.req_2]
    order = []

    def requester(i, delay):
        async def tb(ctx):
            for _ in range(delay):
                await ctx.tick()
            for seq in range(2):
                await send(ctx, reqs[i].rd_req, {"id": IDS[i][0], "op": RD_CUR,
                                                 "addr": tag(i, 0, seq)})
        return tb

    async def mem(ctx):
        ctx.set(dut.mem.rd_req.ready, 1)
        while len(order) < 6:
            *_, v, p = await ctx.tick().sample(dut.mem.rd_req.valid, dut.mem.rd_req.payload)
            if v:
                order.append(p.addr >> 20)

    simulate(dut, [requester(i, 0) for i in range(3)] + [mem], max_cycles=100,
             name="port_mux_priority")
    assert order == [0, 0, 1, 1, 2, 2]

    dut = RequestPortMux(40, IDS)
    seen = []

    async def hold_tb(ctx):
        rd = dut.mem.rd_req
        ctx.set(rd.ready, 0)
        ctx.set(dut.req_1.rd_req.payload, {"id": 2, "op": RD_CUR, "addr": 111})
        ctx.set(dut.req_1.rd_req.valid, 1)
        await ctx.tick()
        ctx.set(dut.req_0.rd_req.payload, {"id": 1, "op": RD_CUR, "addr": 222})
        ctx.set(dut.req_0.rd_req.valid, 1)
        for _ in range(3):
            seen.append((ctx.get(rd.valid), ctx.get(rd.payload.addr),
                         ctx.get(dut.req_0.rd_req.ready), ctx.get(dut.req_1.rd_req.ready)))
            await ctx.tick()
        ctx.set(rd.ready, 1)
        seen.append((ctx.get(rd.payload.addr), ctx.get(dut.req_1.rd_req.ready)))
        await ctx.tick()
        ctx.set(dut.req_1.rd_req.valid, 0)
        seen.append((ctx.get(rd.payload.addr), ctx.get(dut.req_0.rd_req.ready)))

    simulate(dut, [hold_tb], max_cycles=100, name="port_mux_hold")
    assert seen == [(1, 111, 0, 0)] * 3 + [(111, 1), (222, 1)]


def test_port_mux_registered_grant_priority_and_timing():
    """Registered grants: with all three offering two reads at once and mem always ready, mem
    sees 0,1,0,1,2,2 in six consecutive cycles (after each transfer the grant passes to the
    highest-priority other requester waiting); a requester alone streams one read per cycle."""
    dut = RequestPortMux(40, IDS, registered_grant=("rd", "wr"))
    reqs = [dut.req_0, dut.req_1, dut.req_2]
    seen = []

    def requester(i, n):
        async def tb(ctx):
            for seq in range(n):
                await send(ctx, reqs[i].rd_req, {"id": IDS[i][0], "op": RD_CUR,
                                                 "addr": tag(i, 0, seq)})
        return tb

    async def mem(ctx):
        ctx.set(dut.mem.rd_req.ready, 1)
        t = 0
        while len(seen) < 6:
            *_, v, p = await ctx.tick().sample(dut.mem.rd_req.valid, dut.mem.rd_req.payload)
            if v:
                seen.append((t, p.addr >> 20))
            t += 1

    simulate(dut, [requester(i, 2) for i in range(3)] + [mem], max_cycles=100,
             name="port_mux_reg_priority")
    assert [r for _, r in seen] == [0, 1, 0, 1, 2, 2]
    times = [t for t, _ in seen]
    assert times == [0, 1, 2, 3, 4, 5], times

    dut = RequestPortMux(40, IDS, registered_grant=("rd", "wr"))
    reqs = [dut.req_0, dut.req_1, dut.req_2]
    seen = []
    simulate(dut, [requester(2, 6), mem], max_cycles=100,
             name="port_mux_reg_stream")
    times = [t for t, _ in seen]
    assert [r for _, r in seen] == [2] * 6
    assert times[-1] - times[0] == 5, f"a lone requester streams one per cycle: {times}"


def test_port_mux_registered_grant_names_channels():
    with pytest.raises(ValueError, match="'rd' and 'wr'"):
        RequestPortMux(40, IDS, registered_grant=("rd", "rq"))


@pytest.mark.parametrize("seed", [31, 32])
def test_port_mux_registered_grant_ready_ignores_other_requests(seed):
    """Registered grants: within a cycle, changing every requester's valid and payload leaves
    every requester's ready unchanged (it depends only on the grant register and mem's ready),
    and ready is high for at most one requester, the one whose payload mem sees."""
    rng = make_rng(seed)
    dut = RequestPortMux(40, IDS, registered_grant=("rd", "wr"))
    reqs = [dut.req_0, dut.req_1, dut.req_2]
    checked = []

    def drive(ctx):
        for r in reqs:
            ctx.set(r.rd_req.valid, rng.getrandbits(1))
            ctx.set(r.rd_req.payload, {"id": 0, "op": RD_CUR, "addr": rng.getrandbits(20)})

    async def tb(ctx):
        for _ in range(200):
            ctx.set(dut.mem.rd_req.ready, rng.getrandbits(1))
            drive(ctx)
            before = [ctx.get(r.rd_req.ready) for r in reqs]
            assert sum(before) <= 1
            for _ in range(3):
                drive(ctx)
                assert [ctx.get(r.rd_req.ready) for r in reqs] == before
                granted = [i for i, r in enumerate(reqs) if ctx.get(r.rd_req.ready)]
                for i in granted:
                    assert ctx.get(dut.mem.rd_req.payload.addr) == \
                        ctx.get(reqs[i].rd_req.payload.addr)
                checked.append(1)
            # a stable cycle: requests that stay valid until taken
            await ctx.tick()
            for r in reqs:
                ctx.set(r.rd_req.valid, 0)

    simulate(dut, [tb], max_cycles=400, name="port_mux_reg_comb")
    assert len(checked) == 600
