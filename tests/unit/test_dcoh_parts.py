# amaranth: UnusedElaboratable=no
"""Leaf components of the DCOH (hw/dcoh/): SnoopFilter, BITracker, WriteBuckets and
RoundRobinMerge, each against a small Python reference model checked every cycle.

The models hold whole line addresses in dicts, sets and lists (a set index is ``line % sets``, a
bucket ``line % n``); none reuses the RTL's tag/index slicing or priority chains. Each component
gets seeded random sequences plus directed corner cases. Timing model: inputs are driven with
``ctx.set`` and the combinational outputs read with ``ctx.get`` before the clock edge, so every
check compares against the model state *before* that cycle's writes (a write is visible from the
next cycle).

The first line turns off Amaranth's UnusedElaboratable warning for this file (as Amaranth's own
tests do): a constructor that raises ValueError leaves a half-built component behind, and every
other component here is simulated.
"""
import re
from collections import Counter

import pytest

from amaranth.hdl import ClockDomain, Elaboratable, Fragment, Module, Signal
from amaranth.lib import data

from hw.dcoh.hazards import WriteBuckets
from hw.dcoh.merge import RoundRobinMerge
from hw.dcoh.snoop_filter import SF_A, SF_I, SF_S, SnoopFilter
from hw.dcoh.tracker import BITracker

from pysim_util import ReadyPolicy, Stall, as_int, check_stream, make_rng, simulate, source


class WithReset(Elaboratable):
    """``dut`` in an explicit ``sync`` domain whose reset the testbench drives through ``rst``.
    Memories keep their contents across a reset, so after one only the component's init sweep
    can make them read as empty."""

    def __init__(self, dut):
        self.dut = dut
        self.rst = Signal()

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = cd = ClockDomain("sync")
        m.d.comb += cd.rst.eq(self.rst)
        m.submodules.dut = self.dut
        return m


async def ready_low_cycles(ctx, ready, limit=1000):
    """Number of cycles from now until ``ready`` is high (0 if it already is)."""
    n = 0
    while not ctx.get(ready):
        n += 1
        assert n <= limit, f"ready still low after {limit} cycles"
        await ctx.tick()
    return n


async def pulse_reset(ctx, top):
    ctx.set(top.rst, 1)
    await ctx.tick()
    ctx.set(top.rst, 0)


# ==================================================================================== SnoopFilter

class SnoopFilterModel:
    """Per set, ``ways`` entries ``[state, line]`` holding the full line address."""

    def __init__(self, sets, ways):
        self.sets, self.ways = sets, ways
        self.entries = {s: [[SF_I, None] for _ in range(ways)] for s in range(sets)}

    def write(self, line, way, state):
        self.entries[line % self.sets][way] = [state, line]

    def hit_way(self, line):
        for w, (st, held) in enumerate(self.entries[line % self.sets]):
            if st != SF_I and held == line:
                return w
        return None

    def tracked(self):
        return [held for ents in self.entries.values() for st, held in ents if st != SF_I]

    def expect(self, line):
        """Expected lookup outputs; ``way``/``free_way``/``way_line`` only where defined."""
        ents = self.entries[line % self.sets]
        way = self.hit_way(line)
        free = [w for w, (st, _) in enumerate(ents) if st == SF_I]
        exp = {"hit": int(way is not None), "state": SF_I if way is None else ents[way][0],
               "free": int(bool(free))}
        if way is not None:
            exp["way"] = way
        if free:
            exp["free_way"] = free[0]
        for w, (st, held) in enumerate(ents):
            exp[f"way_state{w}"] = st
            if st != SF_I:
                exp[f"way_line{w}"] = held
        return exp


def sf_outputs(ctx, lk, ways):
    out = {k: ctx.get(getattr(lk, k)) for k in ("hit", "way", "state", "free", "free_way")}
    for w in range(ways):
        out[f"way_state{w}"] = ctx.get(lk.way_state[w])
        out[f"way_line{w}"] = ctx.get(lk.way_line[w])
    return out


def sf_check(ctx, model, lk, line, ways, where):
    exp = model.expect(line)
    out = sf_outputs(ctx, lk, ways)
    got = {k: out[k] for k in exp}
    assert got == exp, f"{where}, line {line:#x}: got {got}, want {exp}"
    return exp


SF_CONFIGS = [
    # sets, ways, line_bits, n_lookup, registered
    (8, 4, 6, 3, ()),
    (4, 3, 5, 2, ()),    # ways not a power of two
    (1, 3, 4, 3, ()),    # one set: the whole line is the tag
    (4, 1, 5, 2, ()),    # one way: every installed line is the set's only entry
    (1, 1, 2, 2, ()),    # one entry in all
    (4, 2, 5, 3, (0,)),  # the DCOH's form: the host lane's lookup read a cycle ahead
    (4, 3, 5, 2, (1, 0)),
    (1, 3, 4, 2, (1,)),
]


@pytest.mark.parametrize("sets,ways,line_bits,n_lookup,registered", SF_CONFIGS)
@pytest.mark.parametrize("seed", [31, 32])
def test_snoop_filter_matches_model(seed, sets, ways, line_bits, n_lookup, registered):
    """ready is low for exactly ``sets`` cycles, then stays high. Random writes (install, state
    change, eviction to I) and ``n_lookup`` simultaneous lookups (often the same line, often the
    line being written): every cycle each port's hit/way/state, free/free_way (first I way) and
    per-way way_state/way_line (valid ways) equal the model as it was before the cycle's write;
    the write is seen from the next cycle; wr_line/wr_way/wr_state are ignored while wr_en is
    low. A ``registered`` port's line is a register of the testbench that loads a new line
    (often the one being written) or holds, named on ``lk_next`` a cycle ahead; it answers
    exactly like an asynchronous port."""
    rng = make_rng(seed)
    dut = SnoopFilter(sets=sets, ways=ways, line_bits=line_bits, n_lookup=n_lookup,
                      registered=registered)
    model = SnoopFilterModel(sets, ways)
    n_lines = 1 << line_bits
    stats = Counter()
    held = {i: 0 for i in registered}      # the registered ports' line registers

    async def tb(ctx):
        assert await ready_low_cycles(ctx, dut.ready) == sets, "init sweep length"
        for cyc in range(300):
            tracked = model.tracked()

            def pick():
                return rng.choice(tracked) if tracked and rng.random() < 0.6 \
                    else rng.randrange(n_lines)

            wr = None
            if rng.random() < 0.6:
                line = pick()
                way = model.hit_way(line)
                if way is not None:              # state change or eviction of a tracked line
                    wr = (line, way, rng.choice([SF_I, SF_S, SF_A]))
                else:                            # install, mostly into a free way
                    free = [w for w, (st, _) in enumerate(model.entries[line % sets])
                            if st == SF_I]
                    way = rng.choice(free) if free and rng.random() < 0.85 \
                        else rng.randrange(ways)
                    wr = (line, way, rng.choice([SF_I, SF_S, SF_A, SF_A, SF_S, SF_A]))
            ctx.set(dut.wr_en, wr is not None)
            line, way, state = wr if wr else (rng.randrange(n_lines), rng.randrange(ways),
                                              rng.choice([SF_S, SF_A]))
            ctx.set(dut.wr_line, line)
            ctx.set(dut.wr_way, way)
            ctx.set(dut.wr_state, state)

            lines = [held[i] if i in held else line if rng.random() < 0.3 else pick()
                     for i in range(n_lookup)]
            stats["shared_port_line"] += len(set(lines)) < n_lookup
            for i, lk in enumerate(dut.lk):
                ctx.set(lk.line, lines[i])
            for k, i in enumerate(registered):
                load = rng.random() < 0.6
                nxt = line if rng.random() < 0.3 else pick()
                ctx.set(dut.lk_next[k].load, load)
                ctx.set(dut.lk_next[k].line, nxt)
                stats["held"] += not load
                stats["next_is_written"] += load and wr is not None and nxt == wr[0]
                if load:
                    held[i] = nxt
            assert ctx.get(dut.ready), f"ready dropped at cycle {cyc}"
            for i, lk in enumerate(dut.lk):
                exp = sf_check(ctx, model, lk, lines[i], ways, f"cycle {cyc} port {i}")
                stats["hit" if exp["hit"] else "miss"] += 1
                stats[f"state{exp['state']}"] += 1
                stats["set_full"] += not exp["free"]
                stats["write_same_line"] += wr is not None and wr[0] == lines[i]
            await ctx.tick()
            if wr:
                model.write(*wr)

    simulate(dut, [tb], max_cycles=2000, name=f"sf_{sets}x{ways}_{seed}")
    print(dict(stats))
    for k in ("hit", "miss", f"state{SF_S}", f"state{SF_A}", "set_full", "shared_port_line",
              "write_same_line", *(("held", "next_is_written") if registered else ())):
        assert stats[k] > 0, f"weak stimulus: no {k} ({dict(stats)})"


def test_snoop_filter_directed_two_by_two():
    """sets=2, ways=2, 3-bit lines (set = bit 0, tag = bits 2:1): a write is not seen in its own
    cycle and is seen after it; a line of the same set and another tag misses but sees the way
    holding the other line in way_state/way_line; free_way is the first I way; the other set is
    unaffected; evicting to I frees the way."""
    dut = SnoopFilter(sets=2, ways=2, line_bits=3, n_lookup=2)
    model = SnoopFilterModel(2, 2)
    steps = []

    async def tb(ctx):
        assert await ready_low_cycles(ctx, dut.ready) == 2, "init sweep length"
        lk0, lk1 = dut.lk

        def look(l0, l1, tag):
            ctx.set(lk0.line, l0)
            ctx.set(lk1.line, l1)
            sf_check(ctx, model, lk0, l0, 2, f"{tag} port 0")
            sf_check(ctx, model, lk1, l1, 2, f"{tag} port 1")
            return sf_outputs(ctx, lk0, 2), sf_outputs(ctx, lk1, 2)

        async def write(line, way, state):
            ctx.set(dut.wr_en, 1)
            ctx.set(dut.wr_line, line)
            ctx.set(dut.wr_way, way)
            ctx.set(dut.wr_state, state)
            look(line, line ^ 1, f"write {line:#05b} own cycle")    # model before the write
            await ctx.tick()
            ctx.set(dut.wr_en, 0)
            model.write(line, way, state)

        await write(0b110, 1, SF_S)
        o0, o1 = look(0b110, 0b010, "after S in way 1")
        assert (o0["hit"], o0["way"], o0["state"], o0["free_way"]) == (1, 1, SF_S, 0)
        assert (o1["hit"], o1["state"], o1["free_way"]) == (0, SF_I, 0)
        assert (o1["way_state1"], o1["way_line1"]) == (SF_S, 0b110), "victim info of way 1"
        o0, o1 = look(0b111, 0b011, "other set")
        assert o0["way_state0"] == o0["way_state1"] == SF_I and not o0["hit"]
        steps.append("install")

        await write(0b010, 0, SF_A)
        o0, o1 = look(0b010, 0b110, "set 0 full")
        assert (o0["hit"], o0["way"], o0["state"], o0["free"]) == (1, 0, SF_A, 0)
        assert (o1["hit"], o1["way"], o1["state"]) == (1, 1, SF_S)
        o0, _ = look(0b000, 0b100, "set 0 full, miss")
        assert (o0["hit"], o0["free"], o0["way_line0"], o0["way_line1"]) == (0, 0, 0b010, 0b110)
        steps.append("full")

        await write(0b110, 1, SF_I)
        o0, o1 = look(0b110, 0b010, "way 1 evicted")
        assert (o0["hit"], o0["free"], o0["free_way"]) == (0, 1, 1)
        assert (o1["hit"], o1["way"]) == (1, 0)
        steps.append("evict")

    simulate(dut, [tb], max_cycles=100, name="sf_directed")
    assert steps == ["install", "full", "evict"]


@pytest.mark.parametrize("sets,ways", [(4, 2), (1, 2), (8, 1)])
def test_snoop_filter_reset_sweep_clears_surviving_entries(sets, ways):
    """Fill every entry with S/A, then reset (memories keep their contents): ready is low for
    exactly ``sets`` cycles, after which every line of the address space misses with free way 0
    and all ways in I; the filter then works normally."""
    line_bits = (sets - 1).bit_length() + 2
    dut = SnoopFilter(sets=sets, ways=ways, line_bits=line_bits, n_lookup=1)
    top = WithReset(dut)
    done = []

    async def tb(ctx):
        lk = dut.lk[0]
        await ready_low_cycles(ctx, dut.ready)
        ctx.set(dut.wr_en, 1)
        for s in range(sets):
            for w in range(ways):
                ctx.set(dut.wr_line, s + sets * w)
                ctx.set(dut.wr_way, w)
                ctx.set(dut.wr_state, SF_S if (s + w) % 2 else SF_A)
                await ctx.tick()
        ctx.set(dut.wr_en, 0)
        for line in range(sets * ways):
            ctx.set(lk.line, line)
            assert ctx.get(lk.hit) and not ctx.get(lk.free), f"line {line:#x} not installed"

        await pulse_reset(ctx, top)
        assert await ready_low_cycles(ctx, dut.ready) == sets, "init sweep length after reset"
        for line in range(1 << line_bits):
            ctx.set(lk.line, line)
            got = (ctx.get(lk.hit), ctx.get(lk.state), ctx.get(lk.free), ctx.get(lk.free_way),
                   [ctx.get(lk.way_state[w]) for w in range(ways)])
            assert got == (0, SF_I, 1, 0, [SF_I] * ways), f"line {line:#x} after reset: {got}"

        ctx.set(dut.wr_en, 1)
        ctx.set(dut.wr_line, 1 % (1 << line_bits))
        ctx.set(dut.wr_way, ways - 1)
        ctx.set(dut.wr_state, SF_A)
        await ctx.tick()
        ctx.set(dut.wr_en, 0)
        ctx.set(lk.line, 1)
        assert (ctx.get(lk.hit), ctx.get(lk.way), ctx.get(lk.state)) == (1, ways - 1, SF_A)
        done.append(True)

    simulate(top, [tb], max_cycles=500, name=f"sf_reset_{sets}x{ways}")
    assert done


@pytest.mark.parametrize("kwargs,match", [
    (dict(sets=0, ways=2, line_bits=8), "sets must be a power of two, got 0"),
    (dict(sets=3, ways=2, line_bits=8), "sets must be a power of two, got 3"),
    (dict(sets=12, ways=2, line_bits=8), "sets must be a power of two, got 12"),
    (dict(sets=4, ways=0, line_bits=8), "ways must be >= 1, got 0"),
    (dict(sets=8, ways=2, line_bits=3), "line_bits 3 too small for 8 sets"),
    (dict(sets=1, ways=2, line_bits=0), "line_bits 0 too small for 1 sets"),
    (dict(sets=2, ways=1, line_bits=3, registered=(1,)),
     "registered must name distinct lookup ports of 0..0, got (1,)"),
    (dict(sets=2, ways=1, line_bits=3, registered=(0, 0)),
     "registered must name distinct lookup ports of 0..0, got (0, 0)"),
])
def test_snoop_filter_constructor_rejects(kwargs, match):
    """Bad geometry raises ValueError naming the bad value (no tag bit left is bad geometry)."""
    with pytest.raises(ValueError, match=re.escape(match)):
        SnoopFilter(n_lookup=1, **kwargs)


def test_snoop_filter_registered_lookup_must_be_the_line_named():
    """A registered port whose requester looks up another line than it named a cycle ahead
    stops the simulation with the filter's assertion (its answer would be for the named
    line)."""
    dut = SnoopFilter(sets=2, ways=1, line_bits=3, n_lookup=1, registered=(0,))

    async def tb(ctx):
        await ready_low_cycles(ctx, dut.ready)
        ctx.set(dut.lk_next[0].load, 1)
        ctx.set(dut.lk_next[0].line, 5)
        await ctx.tick()
        ctx.set(dut.lk_next[0].load, 0)
        ctx.set(dut.lk[0].line, 5)
        await ctx.tick()                  # as named: no failure
        ctx.set(dut.lk[0].line, 4)
        await ctx.tick()
        await ctx.tick()

    with pytest.raises(AssertionError, match="lookup 0 is not the line named a cycle ahead"):
        simulate(dut, [tb], max_cycles=50, name="sf_named")


def test_snoop_filter_constructor_accepts_smallest():
    """The smallest legal geometries elaborate: one set with a 1-bit line, 8 sets with 1 tag
    bit."""
    Fragment.get(SnoopFilter(sets=1, ways=1, line_bits=1, n_lookup=1), None)
    Fragment.get(SnoopFilter(sets=8, ways=1, line_bits=4, n_lookup=1), None)


# ====================================================================================== BITracker

class TrackerModel:
    """Outstanding entries: ``{index: (line, op)}``."""

    def __init__(self, n):
        self.n = n
        self.entries = {}

    def lowest_free(self):
        return min((t for t in range(self.n) if t not in self.entries), default=None)


TRK_CONFIGS = [
    # n, line_bits, n_cam, tag_bits
    (4, 4, 3, 12),
    (5, 3, 2, 3),    # tags 5..7 exist on q_idx but name no entry
    (1, 2, 2, 1),    # one entry; tag 1 names none
]


@pytest.mark.parametrize("n,line_bits,n_cam,tag_bits", TRK_CONFIGS)
@pytest.mark.parametrize("seed", [41, 42])
def test_bi_tracker_matches_model(seed, n, line_bits, n_cam, tag_bits):
    """Random allocations (distinct lines, never while full), releases of outstanding entries
    (often in the same cycle as an allocation, sometimes re-allocating the released line), CAM
    lookups on every port and tag queries over the whole q_idx range: every cycle full,
    free_idx (lowest free), valid, cam[i].hit and q_valid/q_line/q_op equal the model; no in-RTL
    assertion fires."""
    rng = make_rng(seed)
    dut = BITracker(n=n, line_bits=line_bits, n_cam=n_cam, tag_bits=tag_bits)
    model = TrackerModel(n)
    n_lines = 1 << line_bits
    stats = Counter()

    async def tb(ctx):
        for cyc in range(300):
            ents = model.entries
            tracked = [ln for ln, _ in ents.values()]
            rel = rng.choice(sorted(ents)) if ents and rng.random() < 0.35 else None
            free = model.lowest_free()
            alloc = None
            if free is not None and rng.random() < 0.55:
                if rel is not None and rng.random() < 0.3:
                    line = ents[rel][0]          # the line being released, re-allocated
                else:
                    busy = {ln for t, (ln, _) in ents.items() if t != rel}
                    line = rng.choice([x for x in range(n_lines) if x not in busy])
                alloc = (line, rng.randrange(16))
            ctx.set(dut.rel_en, rel is not None)
            ctx.set(dut.rel_idx, rel if rel is not None else rng.randrange(n))
            ctx.set(dut.alloc_en, alloc is not None)
            a_line, a_op = alloc if alloc else (rng.randrange(n_lines), rng.randrange(16))
            ctx.set(dut.alloc_line, a_line)
            ctx.set(dut.alloc_op, a_op)
            cams = [rng.choice(tracked) if tracked and rng.random() < 0.5
                    else rng.randrange(n_lines) for _ in range(n_cam)]
            for c, line in zip(dut.cam, cams):
                ctx.set(c.line, line)
            q = rng.randrange(n) if rng.random() < 0.7 else rng.randrange(1 << tag_bits)
            ctx.set(dut.q_idx, q)

            where = f"cycle {cyc}"
            assert ctx.get(dut.full) == (free is None), f"{where}: full"
            if free is not None:
                assert ctx.get(dut.free_idx) == free, f"{where}: free_idx"
            assert ctx.get(dut.valid) == sum(1 << t for t in ents), f"{where}: valid"
            for i, (c, line) in enumerate(zip(dut.cam, cams)):
                assert ctx.get(c.hit) == (line in tracked), f"{where}: cam[{i}] line {line:#x}"
            got_q = ctx.get(dut.q_valid)
            assert got_q == (q in ents), f"{where}: q_valid for tag {q}"
            if q in ents:
                assert (ctx.get(dut.q_line), ctx.get(dut.q_op)) == ents[q], f"{where}: q {q}"
            stats["full"] += free is None
            stats["q_out_of_range"] += q >= n
            stats["alloc_and_rel"] += alloc is not None and rel is not None
            stats["realloc_released_line"] += (alloc is not None and rel is not None
                                               and alloc[0] == ents[rel][0])
            stats["cam_hit"] += sum(line in tracked for line in cams)
            await ctx.tick()
            if rel is not None:
                del ents[rel]
            if alloc is not None:
                ents[free] = alloc

    simulate(dut, [tb], max_cycles=1000, name=f"trk_{n}_{seed}")
    print(dict(stats))
    need = ["full", "cam_hit"]
    if n > 1:                       # with one entry, releasing it means the tracker is full
        need += ["alloc_and_rel", "realloc_released_line"]
    if n < 1 << tag_bits:
        need.append("q_out_of_range")
    for k in need:
        assert stats[k] > 0, f"weak stimulus: no {k} ({dict(stats)})"


def test_bi_tracker_directed():
    """n=4, 3-bit tags: allocations take entries 0,1,2,3 in order, then full; tags 4..7 read
    not valid; releasing 2 makes it the free entry; release of 0 with an allocation in the same
    cycle puts the new line in 2 (lowest free before the edge) and frees 0; a line released and
    re-allocated in one cycle is held once, in its new entry."""
    dut = BITracker(n=4, line_bits=8, n_cam=2, tag_bits=3)
    log = []

    async def tb(ctx):
        def state():
            return (ctx.get(dut.valid), ctx.get(dut.full), ctx.get(dut.free_idx))

        def query(t):
            ctx.set(dut.q_idx, t)
            return (ctx.get(dut.q_valid), ctx.get(dut.q_line), ctx.get(dut.q_op))

        def cam(line):
            ctx.set(dut.cam[0].line, line)
            return ctx.get(dut.cam[0].hit)

        async def step(alloc=None, rel=None):
            ctx.set(dut.alloc_en, alloc is not None)
            if alloc is not None:
                ctx.set(dut.alloc_line, alloc[0])
                ctx.set(dut.alloc_op, alloc[1])
            ctx.set(dut.rel_en, rel is not None)
            if rel is not None:
                ctx.set(dut.rel_idx, rel)
            await ctx.tick()
            ctx.set(dut.alloc_en, 0)
            ctx.set(dut.rel_en, 0)

        assert state() == (0, 0, 0)
        assert query(0)[0] == 0
        ctx.set(dut.cam[0].line, 0xA0)
        await step(alloc=(0xA0, 1))
        assert state() == (0b0001, 0, 1)
        assert query(0) == (1, 0xA0, 1)
        assert cam(0xA0) == 1 and cam(0xA1) == 0
        for t, line in ((1, 0xB0), (2, 0xC0), (3, 0xD0)):
            ctx.set(dut.alloc_line, line)
            assert ctx.get(dut.free_idx) == t
            await step(alloc=(line, t + 1))
        assert state()[:2] == (0b1111, 1)
        assert [query(t) for t in range(4)] == [(1, 0xA0, 1), (1, 0xB0, 2), (1, 0xC0, 3),
                                               (1, 0xD0, 4)]
        assert [query(t)[0] for t in range(4, 8)] == [0, 0, 0, 0], "tags >= n read valid"
        log.append("fill")

        await step(rel=2)
        assert state() == (0b1011, 0, 2)
        assert cam(0xC0) == 0 and query(2)[0] == 0
        await step(alloc=(0xE0, 5), rel=0)
        assert state() == (0b1110, 0, 0)
        assert query(2) == (1, 0xE0, 5) and query(0)[0] == 0 and cam(0xA0) == 0
        log.append("alloc+rel")

        await step(alloc=(0xB0, 6), rel=1)          # line B0 moves from entry 1 to entry 0
        assert state() == (0b1101, 0, 1)
        assert query(0) == (1, 0xB0, 6) and query(1)[0] == 0 and cam(0xB0) == 1
        await step()                                # one more edge: the same-line Assert holds
        log.append("realloc")

    simulate(dut, [tb], max_cycles=100, name="trk_directed")
    assert log == ["fill", "alloc+rel", "realloc"]


def _alloc(line):
    return {"alloc_en": 1, "alloc_line": line}


def _rel(t):
    return {"rel_en": 1, "rel_idx": t}


def _run_tracker(steps, n=2):
    """Drive one dict of inputs per cycle (others 0), then idle for 3 cycles."""
    dut = BITracker(n=n, line_bits=8, n_cam=1)
    done = []

    async def tb(ctx):
        names = ("alloc_en", "alloc_line", "rel_en", "rel_idx")
        for inputs in list(steps) + [{}] * 3:
            for k in names:
                ctx.set(getattr(dut, k), inputs.get(k, 0))
            await ctx.tick()
        done.append(True)

    simulate(dut, [tb], max_cycles=50, name="trk_assert")
    return done


@pytest.mark.parametrize("steps,match", [
    ([_alloc(1), _alloc(2), _alloc(3)], "BITracker: allocation while full"),
    # the release applies at the edge: the tracker is still full when the allocation is made
    ([_alloc(1), _alloc(2), {**_alloc(3), **_rel(0)}], "BITracker: allocation while full"),
    ([_alloc(5), _alloc(5)], "BITracker: entries 0 and 1 hold the same line"),
    ([_alloc(5), _alloc(6), _rel(0), _alloc(6)], "BITracker: entries 0 and 1 hold the same line"),
])
def test_bi_tracker_assertions_fire(steps, match):
    """A violated invariant stops the simulation with the in-RTL Assert's message."""
    with pytest.raises(AssertionError, match=re.escape(match)):
        _run_tracker(steps)


@pytest.mark.parametrize("steps", [
    [_alloc(1), _alloc(2), _rel(0), _alloc(3)],
    [_alloc(5), {**_alloc(5), **_rel(0)}],          # released and re-allocated in one cycle
    [_alloc(5), _alloc(6), _rel(0), _alloc(5), _rel(1), _alloc(6)],
])
def test_bi_tracker_assertions_quiet_on_legal_sequences(steps):
    """Controls for the test above: the nearby legal sequences run to the end."""
    assert _run_tracker(steps) == [True]


@pytest.mark.parametrize("n,tag_bits,match", [
    (0, 12, "tracker size must be 1..4096, got 0"),
    (5, 2, "tracker size must be 1..4, got 5"),
    (-1, 3, "tracker size must be 1..8, got -1"),
])
def test_bi_tracker_constructor_rejects(n, tag_bits, match):
    """A tracker with no entry, or more entries than tags, raises ValueError naming the size."""
    with pytest.raises(ValueError, match=re.escape(match)):
        BITracker(n=n, line_bits=8, n_cam=1, tag_bits=tag_bits)


def test_bi_tracker_constructor_accepts_every_tag_used():
    """Trackers using every tag value elaborate."""
    Fragment.get(BITracker(n=4, line_bits=8, n_cam=1, tag_bits=2), None)
    Fragment.get(BITracker(n=1, line_bits=8, n_cam=1, tag_bits=1), None)


# =================================================================================== WriteBuckets

WB_CONFIGS = [
    # n, max_count, line_bits, n_query
    (4, 6, 5, 2),
    (1, 3, 3, 1),    # one bucket: every write makes every read wait
    (8, 8, 6, 3),    # max_count a power of two
    (2, 1, 3, 2),    # one write in flight at most
]


@pytest.mark.parametrize("n,max_count,line_bits,n_query", WB_CONFIGS)
@pytest.mark.parametrize("seed", [51, 52])
def test_write_buckets_busy_matches_model(seed, n, max_count, line_bits, n_query):
    """ready is low for exactly ``n`` cycles. Then random inc/dec streams in fill and drain
    phases (a dec uncounts a line counted in an earlier cycle, out of order, often in the bucket
    of the same cycle's inc; at most ``max_count`` writes in flight, often all in one bucket):
    every cycle each query's busy equals (model count of the line's bucket != 0), counts before
    the cycle's inc/dec. Long enough that the RTL's counters wrap many times."""
    rng = make_rng(seed)
    dut = WriteBuckets(n=n, max_count=max_count, line_bits=line_bits, n_query=n_query)
    n_lines = 1 << line_bits
    count = Counter()               # bucket -> writes counted and not uncounted
    incs = Counter()                # bucket -> writes ever counted
    stats = Counter()

    def in_bucket(b):
        return b + n * rng.randrange(n_lines // n)

    async def tb(ctx):
        assert await ready_low_cycles(ctx, dut.ready) == n, "init sweep length"
        outstanding = []            # lines counted in earlier cycles and not yet uncounted
        hot = 0
        for cyc in range(600):
            if cyc % 50 == 0:
                hot = rng.randrange(n)
            p_inc, p_dec = (0.8, 0.25) if (cyc // 50) % 2 == 0 else (0.25, 0.8)
            dec = rng.choice(outstanding) if outstanding and rng.random() < p_dec else None
            inc = None
            if len(outstanding) - (dec is not None) < max_count and rng.random() < p_inc:
                r = rng.random()
                if dec is not None and r < 0.3:
                    inc = in_bucket(dec % n)
                elif r < 0.8:
                    inc = in_bucket(hot)
                else:
                    inc = rng.randrange(n_lines)
            ctx.set(dut.inc.en, inc is not None)
            ctx.set(dut.inc.line, inc if inc is not None else rng.randrange(n_lines))
            ctx.set(dut.dec.en, dec is not None)
            ctx.set(dut.dec.line, dec if dec is not None else rng.randrange(n_lines))
            qs = []
            for q in dut.q:
                line = rng.choice([x for x in (inc, dec) if x is not None] +
                                  [in_bucket(hot), rng.randrange(n_lines)])
                ctx.set(q.line, line)
                qs.append(line)
            assert ctx.get(dut.ready), f"ready dropped at cycle {cyc}"
            for i, (q, line) in enumerate(zip(dut.q, qs)):
                want = count[line % n] != 0
                assert ctx.get(q.busy) == want, \
                    f"cycle {cyc}: q[{i}] line {line:#x} busy, want {int(want)} " \
                    f"(bucket count {count[line % n]})"
                stats["busy" if want else "idle"] += 1
            stats["inc_dec_same_bucket"] += (inc is not None and dec is not None
                                             and inc % n == dec % n)
            await ctx.tick()
            if dec is not None:
                outstanding.remove(dec)
                count[dec % n] -= 1
            if inc is not None:
                outstanding.append(inc)
                count[inc % n] += 1
            assert all(0 <= c <= max_count for c in count.values())
            stats["max"] = max(stats["max"], max(count.values(), default=0))
            if inc is not None:
                incs[inc % n] += 1

    simulate(dut, [tb], max_cycles=2000, name=f"wb_{n}_{seed}")
    print(dict(stats))
    assert stats["busy"] and stats["idle"] and stats["inc_dec_same_bucket"], dict(stats)
    assert stats["max"] == max_count, f"weak stimulus: no bucket reached max_count {dict(stats)}"
    # the RTL counts modulo 2 ** (max_count.bit_length() + 1): some bucket must go round
    assert max(incs.values()) > 2 << max_count.bit_length(), f"counters never wrapped {incs}"


@pytest.mark.parametrize("max_count", [1, 2, 3, 4, 7, 8])
def test_write_buckets_count_at_max(max_count):
    """Two buckets, in rounds: ``max_count`` incs of bucket 0 (one per cycle), three cycles of
    inc and dec of bucket 0 together at the maximum, then ``max_count`` decs. Bucket 0 is busy
    exactly from the cycle after its first inc to the cycle of its last dec; bucket 1 is never
    busy. Four rounds move both counters past their wrap."""
    dut = WriteBuckets(n=2, max_count=max_count, line_bits=4, n_query=2)
    rounds = []

    async def tb(ctx):
        await ready_low_cycles(ctx, dut.ready)
        q0, q1 = dut.q
        count = 0

        async def cycle(inc, dec, k):
            ctx.set(dut.inc.en, inc)
            ctx.set(dut.inc.line, 2 * (k % 8))          # bucket 0, varied line
            ctx.set(dut.dec.en, dec)
            ctx.set(dut.dec.line, 2 * ((k + 3) % 8))
            ctx.set(q0.line, 2 * (k % 5))
            ctx.set(q1.line, 2 * (k % 5) + 1)
            assert (ctx.get(q0.busy), ctx.get(q1.busy)) == (int(count != 0), 0), \
                f"round {len(rounds)} step {k}: count {count}"
            await ctx.tick()

        for _ in range(4):
            for k in range(max_count):
                await cycle(1, 0, k)
                count += 1
            for k in range(3):
                await cycle(1, 1, k)
            for k in range(max_count):
                await cycle(0, 1, k)
                count -= 1
            await cycle(0, 0, 0)
            rounds.append(True)

    simulate(dut, [tb], max_cycles=500, name=f"wb_max_{max_count}")
    assert len(rounds) == 4


def test_write_buckets_reset_sweep_clears_counts():
    """Every bucket busy, then reset (memories keep their contents): ready low for exactly ``n``
    cycles, then no bucket is busy; an inc afterwards makes only its bucket busy, its dec clears
    it."""
    n = 4
    dut = WriteBuckets(n=n, max_count=3, line_bits=4, n_query=1)
    top = WithReset(dut)
    done = []

    async def tb(ctx):
        q = dut.q[0]

        def busy():
            out = []
            for b in range(n):
                ctx.set(q.line, b + n)
                out.append(ctx.get(q.busy))
            return out

        await ready_low_cycles(ctx, dut.ready)
        ctx.set(dut.inc.en, 1)
        for b in range(n):
            ctx.set(dut.inc.line, b)
            await ctx.tick()
        ctx.set(dut.inc.en, 0)
        assert busy() == [1] * n
        await pulse_reset(ctx, top)
        assert await ready_low_cycles(ctx, dut.ready) == n, "init sweep length after reset"
        assert busy() == [0] * n, "counts survived the reset"
        ctx.set(dut.inc.en, 1)
        ctx.set(dut.inc.line, 2)
        await ctx.tick()
        ctx.set(dut.inc.en, 0)
        assert busy() == [0, 0, 1, 0]
        ctx.set(dut.dec.en, 1)
        ctx.set(dut.dec.line, 6)
        await ctx.tick()
        ctx.set(dut.dec.en, 0)
        assert busy() == [0] * n
        done.append(True)

    simulate(top, [tb], max_cycles=200, name="wb_reset")
    assert done


@pytest.mark.parametrize("n", [0, 3, 6, -2])
def test_write_buckets_constructor_rejects(n):
    """A bucket count that is not a power of two raises ValueError naming it."""
    with pytest.raises(ValueError, match=re.escape(f"bucket count must be a power of two, got {n}")):
        WriteBuckets(n=n, max_count=4, line_bits=8)


# ================================================================================ RoundRobinMerge

MERGE_LAYOUT = data.StructLayout({"src": 1, "seq": 12})


def merge_checker(dut, stats):
    """Background reference of the arbiter, every cycle: ``o.valid`` = a.valid | b.valid (no
    added latency); the selected input (``o.payload.src``) is valid, its payload is on ``o``, its
    ready is ``o.ready`` and the other's ready is low; a grant whose output was not taken is
    kept; otherwise with both valid the input not served last is chosen, with one valid that
    one. Every input transfer is an output transfer and vice versa."""
    async def checker(ctx):
        a, b, o = dut.a, dut.b, dut.o
        last = held = None
        cyc = 0
        while True:
            *_, av, ar, ap, bv, br, bp, ov, or_, op = await ctx.tick().sample(
                a.valid, a.ready, a.payload, b.valid, b.ready, b.payload,
                o.valid, o.ready, o.payload)
            where = f"cycle {cyc}"
            assert ov == (av or bv), f"{where}: o.valid {ov} with a.valid {av} b.valid {bv}"
            assert (av and ar) + (bv and br) == (ov and or_), f"{where}: transfers differ"
            if ov:
                sel = op.src
                valid, ready, payload = (bv, br, bp) if sel else (av, ar, ap)
                assert valid and as_int(payload) == as_int(op), f"{where}: o is not input {sel}"
                assert ready == or_ and not (ar if sel else br), f"{where}: ready routing"
                if held is not None:
                    assert sel == held, f"{where}: grant {held} dropped while o waited"
                    stats["held"] += 1
                elif av and bv:
                    if last is not None:
                        assert sel != last, f"{where}: input {sel} served twice in a row"
                    stats["contended"] += 1
                else:
                    assert sel == (1 if bv else 0), f"{where}: the only valid input not chosen"
                if or_:
                    last = sel
            held = op.src if (ov and not or_) else None
            cyc += 1
    return checker


@pytest.mark.parametrize("seed,p_gap,p_stall", [
    (71, 0.3, 0.3), (72, 0.1, 0.5), (73, 0.6, 0.2), (74, 0.0, 0.0), (75, 0.0, 0.6),
])
def test_round_robin_merge_random(seed, p_gap, p_stall):
    """Two sources with random valid gaps, a sink with random ready stalls (sometimes waiting for
    valid): ``o`` keeps the stream rules, the arbiter matches the reference (merge_checker), and
    every item of each source comes out exactly once, in its source order."""
    rng = make_rng(seed)
    dut = RoundRobinMerge(MERGE_LAYOUT)
    n_items = 120
    out = []
    stats = Counter()

    def producer(s, src):
        async def tb(ctx):
            await source(ctx, s, [{"src": src, "seq": i} for i in range(n_items)],
                         Stall(rng, p_gap))
        return tb

    async def consumer(ctx):
        policy = ReadyPolicy(rng, p_stall)
        while len(out) < 2 * n_items:
            ctx.set(dut.o.ready, policy.ready())
            *_, v, r, p = await ctx.tick().sample(dut.o.valid, dut.o.ready, dut.o.payload)
            policy.observe(v, r)
            if v and r:
                out.append((p.src, p.seq))
        ctx.set(dut.o.ready, 0)

    simulate(dut, [producer(dut.a, 0), producer(dut.b, 1), consumer],
             [merge_checker(dut, stats), check_stream(dut.o, "o")],
             max_cycles=5000, name=f"rr_merge_{seed}")
    print(dict(stats))
    for src in (0, 1):
        assert [s for x, s in out if x == src] == list(range(n_items)), \
            f"input {src}: items lost, duplicated or reordered"
    assert stats["contended"] > 10, f"weak stimulus: {dict(stats)}"
    if p_stall:
        assert stats["held"] > 0, f"weak stimulus: {dict(stats)}"


@pytest.mark.parametrize("ready_every", [1, 3])
def test_round_robin_merge_alternates_when_both_always_valid(ready_every):
    """Both inputs always valid, ``o.ready`` high every ``ready_every``-th cycle: the output
    strictly alternates between the inputs until one runs dry, then drains the other."""
    dut = RoundRobinMerge(MERGE_LAYOUT)
    na, nb = 20, 26
    out = []

    def producer(s, src, k):
        async def tb(ctx):
            await source(ctx, s, [{"src": src, "seq": i} for i in range(k)])
        return tb

    async def consumer(ctx):
        cyc = 0
        while len(out) < na + nb:
            ctx.set(dut.o.ready, cyc % ready_every == ready_every - 1)
            *_, v, r, p = await ctx.tick().sample(dut.o.valid, dut.o.ready, dut.o.payload)
            if v and r:
                out.append((p.src, p.seq))
            cyc += 1

    simulate(dut, [producer(dut.a, 0, na), producer(dut.b, 1, nb), consumer],
             [merge_checker(dut, Counter()), check_stream(dut.o, "o")],
             max_cycles=1000, name=f"rr_alt_{ready_every}")
    srcs = [s for s, _ in out]
    alternating = srcs[:2 * na]
    assert all(x != y for x, y in zip(alternating, alternating[1:])), f"not alternating: {srcs}"
    assert srcs[2 * na:] == [1] * (nb - na)
    assert [q for s, q in out if s == 0] == list(range(na))
    assert [q for s, q in out if s == 1] == list(range(nb))


def test_round_robin_merge_holds_grant_while_output_waits():
    """``a`` alone offers a0 while ``o.ready`` is low; ``b`` then offers b0 (b has priority at
    reset, nothing served yet): ``o`` keeps a0 with both readies low until ``o.ready``, a0
    goes, then b0 (a served last) although ``a`` offers a1 at once, then a1."""
    dut = RoundRobinMerge(MERGE_LAYOUT)
    seen = []

    async def tb(ctx):
        a, b, o = dut.a, dut.b, dut.o

        def look():
            return (ctx.get(o.valid), ctx.get(o.payload.src), ctx.get(o.payload.seq),
                    ctx.get(a.ready), ctx.get(b.ready))

        ctx.set(o.ready, 0)
        ctx.set(a.payload, {"src": 0, "seq": 0})
        ctx.set(a.valid, 1)
        assert look() == (1, 0, 0, 0, 0)
        await ctx.tick()
        ctx.set(b.payload, {"src": 1, "seq": 0})
        ctx.set(b.valid, 1)
        for _ in range(3):
            assert look() == (1, 0, 0, 0, 0), "grant moved while o waited"
            await ctx.tick()
        ctx.set(o.ready, 1)
        assert look() == (1, 0, 0, 1, 0)
        await ctx.tick()
        seen.append("a0")
        ctx.set(a.payload, {"src": 0, "seq": 1})
        assert look() == (1, 1, 0, 0, 1), "b not served after a"
        await ctx.tick()
        seen.append("b0")
        ctx.set(b.valid, 0)
        assert look() == (1, 0, 1, 1, 0)
        await ctx.tick()
        seen.append("a1")
        ctx.set(a.valid, 0)
        assert ctx.get(o.valid) == 0

    simulate(dut, [tb], [check_stream(dut.o, "o")], max_cycles=100, name="rr_hold")
    assert seen == ["a0", "b0", "a1"]


# ---- ReqDecode: every Req header combination in every kind of region, against the coherence
# reference (sw_model.coherence.expected_req) -------------------------------------------------

def test_req_decode_matches_reference_for_every_combination():
    from amaranth.sim import Simulator
    from hw.config import DeviceConfig
    from hw.cxl_encodings import DcohError, DRSOpcode, NDROpcode
    from hw.dcoh import decode as d
    from sw_model.coherence import expected_req

    cfg = DeviceConfig()
    lb = cfg.addr_bits - 6
    # (rw, ro, nxm) flags of the DCOH's region decode, and a line address of that kind
    regions = {"table": ((1, 0, 0), cfg.table_base >> 6),
               "superblock": ((0, 1, 0), cfg.superblock_base >> 6),
               "log": ((0, 0, 0), cfg.log_base >> 6),
               "outside": ((0, 0, 1), 1 << lb)}
    # what the host lane answers for each action (docs/coherence.md, message table)
    answer = {d.A_SPEC: (None, None), d.A_ERR_RD: (DRSOpcode.MEM_DATA_NXM, None),
              d.A_ERR_ND: (None, NDROpcode.CMP), d.A_RDCUR: (DRSOpcode.MEM_DATA, NDROpcode.CMP),
              d.A_RD_S: (DRSOpcode.MEM_DATA, NDROpcode.CMP_S),
              d.A_RD_A: (DRSOpcode.MEM_DATA, NDROpcode.CMP_E),
              d.A_INV_A: (None, NDROpcode.CMP_E), d.A_INV_I: (None, NDROpcode.CMP)}
    dut = d.ReqDecode()
    bad = []

    async def tb(ctx):
        for name, ((rw, ro, nxm), line) in regions.items():
            ctx.set(dut.rw, rw)
            ctx.set(dut.ro, ro)
            ctx.set(dut.nxm, nxm)
            for op in range(16):
                for snp in range(8):
                    for mf in range(4):
                        for mv in range(4):
                            for sig, v in ((dut.opcode, op), (dut.snp, snp), (dut.mf, mf),
                                           (dut.mv, mv)):
                                ctx.set(sig, v)
                            act, err = ctx.get(dut.act), ctx.get(dut.err)
                            want = expected_req(cfg, dict(opcode=op, snp_type=snp,
                                                          meta_field=mf, meta_value=mv,
                                                          addr=line))
                            got = answer[act] + (DcohError(err),)
                            if got != (want.drs, want.ndr, want.error):
                                bad.append((name, op, snp, mf, mv, got, want))

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()
    assert not bad, f"{len(bad)} combinations differ, first: {bad[:3]}"
