"""WordReader (hw/word_reader.py): prefetching 32-bit word stream over the request port."""
import pytest

from hw.reqport import RD_CUR
from hw.word_reader import WordReader

from pysim_util import Stall, line_of_words, make_rng, simulate

RD_ID = 2
DEPTH = 4


def word_at(addr):
    """Memory contents: a word is a hash of its byte address (so stale words are recognisable)."""
    return ((addr >> 2) * 0x9E37_79B1 + 0x1234_5678) & 0xFFFF_FFFF


def line_data(line):
    return line_of_words(word_at(line * 64 + 4 * i) for i in range(16))


class Bench:
    """WordReader with a memory responder (in order, random latency and request stalls) and a
    monitor of in-flight reads, ``idle`` and ``words``."""

    def __init__(self, rng, *, lat=(1, 6), p_req_stall=0.3):
        self.rng = rng
        self.dut = WordReader(40, rd_id=RD_ID, depth=DEPTH)
        self.lat = lat
        self.req_stall = Stall(rng, p_req_stall)
        self.err_lines = set()
        self.pending = []          # (release cycle, line)
        self.requests = []         # lines requested, in order
        self.outstanding = 0       # accepted requests whose response has not transferred
        self.flushed = False       # a flush was seen and no start since
        self.max_held = 0          # most lines requested and not consumed (per job)

    def background(self):
        return [self.responder, self.monitor]

    async def responder(self, ctx):
        mem = self.dut.mem
        t = 0
        while True:
            ctx.set(mem.rd_req.ready, 0 if self.req_stall() else 1)
            head = self.pending[0] if self.pending and self.pending[0][0] <= t else None
            if head is not None:
                ctx.set(mem.rd_resp.payload, {"id": RD_ID, "err": head[1] in self.err_lines,
                                              "data": line_data(head[1])})
            ctx.set(mem.rd_resp.valid, head is not None)
            *_, qv, qr, qp, limit, sr, wv = await ctx.tick().sample(
                mem.rd_req.valid, mem.rd_req.ready, mem.rd_req.payload, self.dut.limit,
                mem.rd_resp.ready, mem.wr_req.valid)
            t += 1
            assert not wv, "WordReader raised wr_req.valid"
            if head is not None:
                assert sr, "WordReader back-pressured rd_resp"
                self.pending.pop(0)
            if qv and qr:
                assert qp.id == RD_ID and qp.op == RD_CUR, f"bad request id/op {qp}"
                assert qp.addr * 64 < limit, \
                    f"read of line {qp.addr:#x} at or beyond limit {limit:#x}"
                self.requests.append(qp.addr)
                self.pending.append((t + self.rng.randint(*self.lat), qp.addr))

    async def monitor(self, ctx):
        d = self.dut
        mem = d.mem
        since_drain = None
        held_word = None
        job_requests = consumed_lines = widx = 0
        while True:
            *_, qv, qr, rv, rr, idle, flush, start, sa, wv, wr, wp = await ctx.tick().sample(
                mem.rd_req.valid, mem.rd_req.ready, mem.rd_resp.valid, mem.rd_resp.ready,
                d.idle, d.flush, d.start, d.start_addr, d.words.valid, d.words.ready,
                d.words.payload)
            # stream rules on words, except that flush drops a word offered but not taken
            if held_word is not None:
                assert wv, "words: valid dropped before ready without flush"
                assert wp == held_word, "words: payload changed while valid and not ready"
            held_word = wp if (wv and not wr and not flush) else None
            if idle:
                assert self.outstanding == 0, \
                    f"idle high with {self.outstanding} responses still in flight"
            if self.flushed and not start:
                assert not wv, "words.valid after flush"
            self.outstanding += (qv and qr) - (rv and rr)
            if flush:
                self.flushed = True
            if wv and wr:
                if widx == 15:
                    consumed_lines += 1
                widx = (widx + 1) % 16
            if qv and qr:
                job_requests += 1
            if start:
                self.flushed = False
                job_requests = consumed_lines = 0
                widx = (sa >> 2) % 16
            # liveness: once drained after a flush, idle follows within 2 cycles
            if self.flushed and self.outstanding == 0 and not idle:
                since_drain = 0 if since_drain is None else since_drain + 1
                assert since_drain < 2, "idle did not rise after the last in-flight response"
            else:
                since_drain = None
            held = job_requests - consumed_lines
            self.max_held = max(self.max_held, held)
            if not self.flushed:
                # depth lines in flight or buffered, plus at most one line whose last words sit
                # in the 4-word output buffer (a second would need 16 slots)
                assert held <= DEPTH + 1, \
                    f"{held} lines requested and not consumed > depth {DEPTH} + 1"

    async def start(self, ctx, addr, limit):
        d = self.dut
        while not ctx.get(d.idle):
            await ctx.tick()
        ctx.set(d.start_addr, addr)
        ctx.set(d.limit, limit)
        ctx.set(d.start, 1)
        await ctx.tick()
        ctx.set(d.start, 0)

    async def flush(self, ctx):
        ctx.set(self.dut.flush, 1)
        await ctx.tick()
        ctx.set(self.dut.flush, 0)

    async def wait_idle(self, ctx, timeout=200):
        for _ in range(timeout):
            if ctx.get(self.dut.idle):
                return
            await ctx.tick()
        raise AssertionError("WordReader did not become idle")

    async def consume(self, ctx, addr, n, stall, check=None):
        """Take ``n`` words; each must be the word at the next address from ``addr``."""
        w = self.dut.words
        got = 0
        while got < n:
            ctx.set(w.ready, 0 if stall() else 1)
            *_, v, r, p = await ctx.tick().sample(w.valid, w.ready, w.payload)
            if v and r:
                a = addr + 4 * got
                if check is not None:
                    check(a)
                assert p == word_at(a), \
                    f"word {got} (addr {a:#x}): {p:#010x}, want {word_at(a):#010x}"
                got += 1
        ctx.set(w.ready, 0)


@pytest.mark.parametrize("seed", [21, 22])
def test_word_reader_streams_words_from_random_starts(seed):
    """Jobs at random 4-aligned starts: the N words come out in address order equal to memory,
    under consumer and request stalls; no line at or past ``limit`` is read; at most ``depth`` + 1
    lines requested and not consumed; every job ends with flush -> idle."""
    rng = make_rng(seed)
    b = Bench(rng)
    done = []

    async def tb(ctx):
        stall = Stall(rng, 0.3)
        for job in range(16):
            addr = rng.randrange(1 << 20) * 4
            n = rng.randint(1, 20) if job % 2 else rng.randint(40, 110)
            limit = addr + 4 * n + rng.choice([0, 0, rng.randrange(256)])
            await b.start(ctx, addr, limit)
            await b.consume(ctx, addr, n, stall)
            for _ in range(rng.randrange(4)):
                await ctx.tick()
            await b.flush(ctx)
            await b.wait_idle(ctx)
            done.append(job)

    simulate(b.dut, [tb], b.background(), max_cycles=10000, name=f"word_reader_{seed}")
    assert len(done) == 16
    assert b.max_held >= DEPTH, "prefetch never filled the buffer (weak stimulus)"


@pytest.mark.parametrize("seed", [23, 24])
def test_word_reader_limit_grows_gradually(seed):
    """With ``limit`` at 0, then at the start of the start address's line, nothing is read and
    no word appears; as ``limit`` grows in small random steps, reads stay below it, each word
    appears only once its line starts below the current limit, and all words arrive."""
    rng = make_rng(seed)
    b = Bench(rng)
    cur = {"limit": 0}

    async def tb(ctx):
        d = b.dut
        addr = rng.randrange(1 << 20) * 4
        n = 150
        await b.start(ctx, addr, 0)
        for lim in (0, addr & ~63):
            cur["limit"] = lim
            ctx.set(d.limit, lim)
            for _ in range(20):
                *_, v, qv = await ctx.tick().sample(d.words.valid, d.mem.rd_req.valid)
                assert not v and not qv, f"activity with limit {lim:#x} <= start line"
        assert not b.requests

        def opened(a):
            assert (a >> 6) * 64 < cur["limit"], \
                f"word at {a:#x} appeared with limit {cur['limit']:#x} (line not opened)"

        # the limit grows by 1..48 bytes every 1..12 cycles while the consumer takes words
        w = d.words
        stall = Stall(rng, 0.2)
        got = 0
        end = addr + 4 * n
        wait = 0
        while got < n:
            if wait == 0 and cur["limit"] < end:
                cur["limit"] = min(end, cur["limit"] + rng.randint(1, 48))
                ctx.set(d.limit, cur["limit"])
                wait = rng.randint(1, 12)
            wait = max(0, wait - 1)
            ctx.set(w.ready, 0 if stall() else 1)
            *_, v, r, p = await ctx.tick().sample(w.valid, w.ready, w.payload)
            if v and r:
                a = addr + 4 * got
                opened(a)
                assert p == word_at(a), f"word {got}: {p:#x}, want {word_at(a):#x}"
                got += 1
        ctx.set(w.ready, 0)
        await b.flush(ctx)
        await b.wait_idle(ctx)

    simulate(b.dut, [tb], b.background(), max_cycles=10000, name=f"word_reader_limit_{seed}")
    assert len(b.requests) >= 150 * 4 // 64


@pytest.mark.parametrize("seed", [25, 26])
def test_word_reader_flush_mid_job_drains_then_next_job_is_clean(seed):
    """Flush at random points (before any data, mid-line, with reads in flight under long
    latency): words stop at once, ``idle`` stays low while any response is in flight and rises
    right after the last one; the next job at another address yields only its own words."""
    rng = make_rng(seed)
    b = Bench(rng, lat=(6, 24))
    rounds = []

    async def tb(ctx):
        stall = Stall(rng, 0.3)
        for rnd in range(16):
            addr = rng.randrange(1 << 20) * 4
            await b.start(ctx, addr, addr + 4096)
            k = rng.choice([0, 0, rng.randint(1, 8), rng.randint(1, 40)])
            await b.consume(ctx, addr, k, stall)
            for _ in range(rng.randrange(6)):
                await ctx.tick()
            inflight_at_flush = b.outstanding
            await b.flush(ctx)
            await b.wait_idle(ctx)
            rounds.append(inflight_at_flush)
        # a clean job after all that
        addr = rng.randrange(1 << 20) * 4
        await b.start(ctx, addr, addr + 4 * 40)
        await b.consume(ctx, addr, 40, stall)
        await b.flush(ctx)
        await b.wait_idle(ctx)

    simulate(b.dut, [tb], b.background(), max_cycles=10000, name=f"word_reader_flush_{seed}")
    assert sum(1 for x in rounds if x > 0) >= 5, f"few flushes with reads in flight: {rounds}"


def test_word_reader_media_err_during_job_only():
    """``media_err``: set by an err response consumed during a job, cleared by ``start``; an err
    response arriving after flush (dropped) does not set it."""
    rng = make_rng(27)
    b = Bench(rng, lat=(10, 10), p_req_stall=0.0)
    seen = {}

    async def tb(ctx):
        d = b.dut
        always = Stall(rng, 0.0)
        addr = 0x4000
        b.err_lines = {addr >> 6}
        await b.start(ctx, addr, addr + 64)
        await b.consume(ctx, addr, 16, always)
        seen["job1"] = ctx.get(d.media_err)
        await b.flush(ctx)
        await b.wait_idle(ctx)
        seen["after_flush"] = ctx.get(d.media_err)
        # job 2: err line requested, flushed before its response returns
        addr2 = 0x8000
        b.err_lines = {addr2 >> 6}
        await b.start(ctx, addr2, addr2 + 64)
        seen["cleared_by_start"] = ctx.get(d.media_err)
        while not b.requests or b.requests[-1] != addr2 >> 6:
            await ctx.tick()
        await b.flush(ctx)
        await b.wait_idle(ctx)
        seen["dropped_err"] = ctx.get(d.media_err)

    simulate(b.dut, [tb], b.background(), max_cycles=1000, name="word_reader_media_err")
    assert seen == {"job1": 1, "after_flush": 1, "cleared_by_start": 0, "dropped_err": 0}


def test_word_reader_flush_wins_over_simultaneous_start():
    """A start strobed in the same cycle as a flush is ignored: the reader stays idle (so an
    engine draining after an error can never be left waiting on a reader that restarted)."""
    from amaranth.sim import Simulator
    from hw.word_reader import WordReader
    dut = WordReader(40, rd_id=2, depth=4)
    seen = {}

    async def tb(ctx):
        ctx.set(dut.mem.rd_req.ready, 1)
        ctx.set(dut.start_addr, 0x1000)
        ctx.set(dut.limit, 0x2000)
        ctx.set(dut.start, 1)
        ctx.set(dut.flush, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        ctx.set(dut.flush, 0)
        for _ in range(4):
            await ctx.tick()
            seen.setdefault("rd", 0)
            seen["rd"] += ctx.get(dut.mem.rd_req.valid)
        seen["idle"] = ctx.get(dut.idle)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert seen == {"rd": 0, "idle": 1}
