"""PoolAccumulator (hw/gather/pool.py): exact per-bag sums, saturated int32 output lines."""
import pytest

from hw.gather.pool import PoolAccumulator

from pysim_util import Stall, check_stream, line_of_words, make_rng, simulate, words_of

I32_MIN, I32_MAX = -2**31, 2**31 - 1
ADDR_BITS = 40


def s32(w):
    return w - (1 << 32) if w & (1 << 31) else w


def lane_value(rng):
    """Mostly values that make sums leave int32 on both rails (and come back), some small."""
    return rng.choice([
        rng.randint(I32_MIN, I32_MAX),
        rng.randint(I32_MAX - 1000, I32_MAX),
        rng.randint(I32_MIN, I32_MIN + 1000),
        rng.randint(-1000, 1000),
        I32_MAX, I32_MIN, 0, -1,
    ])


def make_bags(rng, n_bags, lines):
    """Bags of random rows (0 = empty bag); a row is ``lines`` lines of 16 signed lanes."""
    bags = []
    for _ in range(n_bags):
        n = rng.choice([0, 1, 1, 2, 3, 5, 8])
        bags.append([[[lane_value(rng) for _ in range(16)] for _ in range(lines)]
                     for _ in range(n)])
    return bags


def stimulus(bags, lines, err_at=None):
    """Tags and row responses in issue order (rows of a bag, lines k of a row)."""
    tags, resps = [], []
    for bag in bags:
        if not bag:
            tags += [{"k": k, "first": 1, "last": 1, "empty": 1} for k in range(lines)]
            continue
        for r, row in enumerate(bag):
            for k in range(lines):
                tags.append({"k": k, "first": int(r == 0), "last": int(r == len(bag) - 1),
                             "empty": 0})
                resps.append({"id": 0, "err": int(len(resps) == err_at),
                              "data": line_of_words(row[k])})
    return tags, resps


COVER = {"hi": 0, "lo": 0, "back_in_range": 0}


def reference(bags, lines):
    """Expected output lines (16 int32 lanes each) and saturated lane count."""
    out, sat = [], 0
    for bag in bags:
        for k in range(lines):
            lanes = []
            for i in range(16):
                s = sum(row[k][i] for row in bag)          # exact
                c = min(max(s, I32_MIN), I32_MAX)
                sat += c != s
                COVER["hi"] += s > I32_MAX
                COVER["lo"] += s < I32_MIN
                partial = [sum(row[k][i] for row in bag[:j + 1]) for j in range(len(bag))]
                COVER["back_in_range"] += c == s and any(not I32_MIN <= x <= I32_MAX
                                                         for x in partial)
                lanes.append(c)
            out.append(lanes)
    return out, sat


@pytest.mark.parametrize("seed", [31, 32])
def test_pool_sums_exactly_and_saturates_both_rails(seed):
    """Bags of 0..8 rows at 1, 2, 4 and 8 lines per row (one run each, ``start`` between runs):
    every output line equals the exact lane sums saturated to int32 (both rails), at consecutive
    addresses from ``out_line``; ``sat``, ``lines`` and ``media_err`` match; random stalls on tags,
    responses and out.ready."""
    rng = make_rng(seed)
    dut = PoolAccumulator(ADDR_BITS, acc_bits=48)
    COVER.update(hi=0, lo=0, back_in_range=0)
    runs = []
    for lines in (1, 2, 4, 8):
        bags = make_bags(rng, 14 if lines < 4 else 6, lines)
        err_at = rng.choice([None, 0, 3])
        tags, resps = stimulus(bags, lines, err_at)
        exp, sat = reference(bags, lines)
        err = any(r["err"] for r in resps)
        runs.append((lines, rng.randrange(1 << 34), tags, resps, exp, sat, err))
    results = check_runs(dut, runs, rng, f"pool_{seed}")
    assert len(results) == 4
    # the stimulus reached both rails and sums that are exact only with a wide accumulator
    assert min(COVER.values()) > 0, COVER
    assert any(r[2] for r in results) and not all(r[2] for r in results)


def check_runs(dut, runs, rng, name):
    """Drive each run (``start``, then its tags and responses with random stalls) through
    ``dut``; every output line, and then ``sat``, ``lines`` and ``media_err``, must equal the
    run's expectation. Returns the (sat, lines, media_err) of each run."""
    results = []

    async def tb(ctx):
        for lines, out_line, tags, resps, exp, sat, err in runs:
            ctx.set(dut.out_line, out_line)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            out = []
            await run_streams(ctx, dut, tags, resps, out, len(exp), rng)
            for j, (o, e) in enumerate(zip(out, exp)):
                assert o.addr == (out_line + j) % (1 << 34), f"line {j}: addr {o.addr:#x}"
                got = [s32(w) for w in words_of(o.data)]
                assert got == e, f"dim lines {lines}, output line {j}: {got} != {e}"
            assert len(out) == len(exp)
            await ctx.tick()    # contract: `sat` counts a line one cycle after it is emitted
            results.append((ctx.get(dut.sat), ctx.get(dut.lines), ctx.get(dut.media_err)))
            assert results[-1] == (sat, len(exp), int(err)), \
                f"dim lines {lines}: (sat, lines, media_err) = {results[-1]}, want " \
                f"{(sat, len(exp), int(err))}"

    simulate(dut, [tb], [check_stream(dut.out, "out")], max_cycles=20000, name=name)
    return results


def test_pool_saturates_at_exactly_the_int32_rails():
    """Lane sums at and next to both rails (int32 max, max + 1, min, min - 1), around 0 and far
    outside (eight rows of a rail: about 2^34): each output lane is the sum clamped to int32."""
    pairs = [(I32_MAX, 0), (I32_MAX, 1), (I32_MIN, 0), (I32_MIN, -1), (0, 0), (0, -1),
             (I32_MAX, I32_MAX), (I32_MIN, I32_MIN), (I32_MAX, I32_MIN), (I32_MIN, I32_MAX),
             (1, I32_MAX - 1), (-1, I32_MIN + 1), (2, I32_MAX), (-2, I32_MIN),
             (I32_MAX, -1), (I32_MIN, 1)]
    two = [[[a for a, _ in pairs]], [[b for _, b in pairs]]]
    eight = [[[I32_MAX] * 8 + [I32_MIN] * 8] for _ in range(8)]
    bags = [two, eight, [two[0]]]
    tags, resps = stimulus(bags, 1)
    exp, sat = reference(bags, 1)
    assert exp[0] == [min(max(a + b, I32_MIN), I32_MAX) for a, b in pairs]
    dut = PoolAccumulator(ADDR_BITS, acc_bits=48)
    results = check_runs(dut, [(1, 0x40, tags, resps, exp, sat, False)], make_rng(7), "pool_rails")
    assert results == [(sat, 3, 0)] and sat == 6 + 16     # 6 pairs past a rail, 16 lanes of eight rows


async def run_streams(ctx, dut, tags, resps, out, n_out, rng):
    """Drive ``tags`` and ``resps`` (each with its own random gaps) and take ``out`` with random
    ready, all cycle by cycle in one loop, until ``n_out`` lines came out and inputs are used."""
    ti = ri = 0
    tv = rv = False           # an offered item stays offered until taken (stream rule)
    gaps = Stall(rng, 0.3)
    while ti < len(tags) or ri < len(resps) or len(out) < n_out:
        tv = tv or (ti < len(tags) and not gaps())
        rv = rv or (ri < len(resps) and not gaps())
        ctx.set(dut.tags.valid, tv)
        if tv:
            ctx.set(dut.tags.payload, tags[ti])
        ctx.set(dut.resp.valid, rv)
        if rv:
            ctx.set(dut.resp.payload, resps[ri])
        ctx.set(dut.out.ready, not gaps())
        *_, tr, rr, ov, orr, op = await ctx.tick().sample(
            dut.tags.ready, dut.resp.ready, dut.out.valid, dut.out.ready, dut.out.payload)
        if tv and tr:
            ti, tv = ti + 1, False
        if rv and rr:
            ri, rv = ri + 1, False
        if ov and orr:
            out.append(op)
        assert len(out) <= n_out, "more output lines than bags x lines"
    ctx.set(dut.tags.valid, 0)
    ctx.set(dut.resp.valid, 0)
    ctx.set(dut.out.ready, 0)


def test_pool_one_line_per_cycle_one_cycle_latency():
    """Contract: with tags and responses always valid and ``out`` always ready, 2-row bags of 2
    lines produce an output line in the cycle after their last tag is taken, 2 lines every 4
    cycles; a run of empty bags gives one zero line per cycle; every tag is taken in the cycle
    it is offered."""
    dut = PoolAccumulator(ADDR_BITS, acc_bits=48)
    bags = [[[[b + r + k] * 16 for k in range(2)] for r in range(2)] for b in range(8)]
    tags, resps = stimulus(bags, 2)
    empty_tags, _ = stimulus([[]] * 6, 2)
    tags += empty_tags
    exp, _ = reference(bags + [[]] * 6, 2)
    stamps, taken = [], []          # (cycle, line) of each output; cycle each tag was taken

    async def tb(ctx):
        ti = ri = t = 0
        ctx.set(dut.out.ready, 1)
        while ti < len(tags) or len(stamps) < len(exp):
            ctx.set(dut.tags.valid, ti < len(tags))
            if ti < len(tags):
                ctx.set(dut.tags.payload, tags[ti])
            ctx.set(dut.resp.valid, ri < len(resps))
            if ri < len(resps):
                ctx.set(dut.resp.payload, resps[ri])
            *_, tv, tr, rr, ov, op = await ctx.tick().sample(
                dut.tags.valid, dut.tags.ready, dut.resp.ready, dut.out.valid, dut.out.payload)
            if ov:
                stamps.append((t, [s32(w) for w in words_of(op.data)]))
            if tv and tr:
                taken.append(t)
            ti += tv and tr
            ri += rr
            t += 1
        ctx.set(dut.tags.valid, 0)

    simulate(dut, [tb], max_cycles=200, name="pool_throughput")
    assert [s[1] for s in stamps] == exp
    assert taken == list(range(len(tags))), "a tag took more than one cycle"
    last_tags = [i for i, tg in enumerate(tags) if tg["last"]]
    assert [s[0] for s in stamps] == [taken[i] + 1 for i in last_tags], \
        "output not in the cycle after its last tag"
