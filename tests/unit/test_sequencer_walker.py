"""BagSequencer (hw/gather/sequencer.py) and OffsetsWalker (hw/gather/walker.py): bag items,
zero-bubble transitions and the per-bag checks 4-7 of docs/lookup.md."""
import pytest

from hw.encodings import LookupErrorCode as E
from hw.gather.sequencer import BagSequencer
from hw.gather.walker import OffsetsWalker

from pysim_util import Stall, check_stream, make_rng, simulate

ADDR_BITS = 40
STAGING_END = 0x10_4000_0000       # DeviceConfig default staging_base + staging_size
MAX_BAG = 16


# ---- BagSequencer ----------------------------------------------------------------------------

def bag(n):
    return {"len": n, "err": 0, "code": 0}


class marker(dict):
    """An error-marker entry; its offending value travels beside the FIFO (walker.err_value)."""

    def __init__(self, code, value):
        super().__init__(len=0, err=1, code=code)
        self.value = value


def expected_items(lens, indices):
    """Reference items: (index, first, last, empty) per row, one empty item per empty bag."""
    items, i = [], 0
    for n in lens:
        if n == 0:
            items.append((0, 1, 1, 1))
        for r in range(n):
            items.append((indices[i], int(r == 0), int(r == n - 1), 0))
            i += 1
    return items


def run_sequencer(entries, indices, table_rows, n_bags, *, rng=None, p_in=0.0, p_out=0.0,
                  settle=20, name="seq"):
    """Feed ``entries`` on ``bags`` and ``indices`` (random gaps ``p_in``), take ``items``
    (random stalls ``p_out``); stop ``settle`` cycles after the last item or error. Returns the
    items with their cycle numbers and the final status outputs."""
    rng = rng or make_rng(0)
    dut = BagSequencer()
    items, status = [], {}

    async def feed(ctx, s, seq):
        gap = Stall(rng, p_in)
        for x in seq:
            while gap():
                ctx.set(s.valid, 0)
                await ctx.tick()
            ctx.set(s.payload, dict(x) if isinstance(x, dict) else x)
            ctx.set(s.valid, 1)
            while True:
                *_, r = await ctx.tick().sample(s.ready)
                if r:
                    break
        ctx.set(s.valid, 0)

    async def bags_tb(ctx):
        await feed(ctx, dut.bags, entries)

    async def indices_tb(ctx):
        await feed(ctx, dut.indices, indices)

    async def items_tb(ctx):
        for e in entries:
            if isinstance(e, marker):
                ctx.set(dut.marker_value, e.value)
        ctx.set(dut.table_rows, table_rows)
        ctx.set(dut.n_bags, n_bags)
        stall = Stall(rng, p_out)
        t, quiet = 0, 0
        while quiet < settle:
            ctx.set(dut.items.ready, 0 if stall() else 1)
            *_, v, r, p, err, done = await ctx.tick().sample(
                dut.items.valid, dut.items.ready, dut.items.payload, dut.err, dut.done)
            if v and r:
                items.append((t, (p.index, p.first, p.last, p.empty)))
                quiet = 0
            elif err or done:
                quiet += 1
            t += 1
        for k in ("done", "err", "err_code", "err_value", "bag", "rows"):
            status[k] = ctx.get(getattr(dut, k))

    simulate(dut, [items_tb], [bags_tb, indices_tb, check_stream(dut.items, "items")],
             max_cycles=5000, name=name)
    return items, status


def test_sequencer_items_for_mixed_bags_including_empty():
    """Bags 2,0,3,1,0,0,2: one item per index with first/last at the bag ends, one empty item
    per empty bag; done, bag = 7, rows = 8, no error; indices table_rows-1 and 0 pass."""
    lens = [2, 0, 3, 1, 0, 0, 2]
    idx = [5, 99, 0, 7, 7, 42, 1, 2]
    items, st = run_sequencer([bag(n) for n in lens], idx, 100, len(lens))
    assert [it for _, it in items] == expected_items(lens, idx)
    assert st == {"done": 1, "err": 0, "err_code": 0, "err_value": 0, "bag": 7, "rows": 8}


@pytest.mark.parametrize("seed", [41, 42])
def test_sequencer_random_bags_with_stalls_match_reference(seed):
    """Random bag lengths 0..5 (30 bags), random input gaps and output stalls: items equal the
    reference, done with rows = number of indices."""
    rng = make_rng(seed)
    lens = [rng.choice([0, 1, 2, 3, 5]) for _ in range(30)]
    idx = [rng.randrange(1000) for _ in range(sum(lens))]
    items, st = run_sequencer([bag(n) for n in lens], idx, 1000, len(lens), rng=rng,
                              p_in=0.3, p_out=0.3, name=f"seq_random_{seed}")
    assert [it for _, it in items] == expected_items(lens, idx)
    assert (st["done"], st["err"], st["bag"], st["rows"]) == (1, 0, 30, len(idx))


def test_sequencer_zero_bubble_pooling_3():
    """Contract: with always-valid inputs and always-ready output, 10 bags of 3 rows produce
    one item per cycle: 30 items in 30 consecutive cycles."""
    lens = [3] * 10
    idx = list(range(30))
    items, st = run_sequencer([bag(n) for n in lens], idx, 100, len(lens))
    assert [it for _, it in items] == expected_items(lens, idx)
    cycles = [t for t, _ in items]
    assert cycles == list(range(cycles[0], cycles[0] + 30)), f"item cycles {cycles}"


def test_sequencer_zero_bubble_across_empty_bags():
    """Contract ("transitions between bags cost no cycle when the next entry is ready; an empty
    bag takes one cycle"): bags 3,0,3,0,0,3,0,2 with always-valid inputs and always-ready output
    give their 15 items in 15 consecutive cycles."""
    lens = [3, 0, 3, 0, 0, 3, 0, 2]
    idx = list(range(11))
    items, st = run_sequencer([bag(n) for n in lens], idx, 100, len(lens))
    assert [it for _, it in items] == expected_items(lens, idx)
    cycles = [t - items[0][0] for t, _ in items]
    assert cycles == list(range(len(items))), \
        f"item cycles (from the first) {cycles}: a bubble after each empty bag"


@pytest.mark.parametrize("bad_at,value", [(0, 100), (1, 0xFFFF_FFFF), (2, 100)])
def test_sequencer_index_range_stops_at_first_bad_index(bad_at, value):
    """Check 7: bags 1,0,3,2 with index ``value`` >= table_rows=100 at position ``bad_at`` of bag
    2: items before it come out, nothing after; err INDEX_RANGE, err_value = the index, bag = 2,
    rows counts only completed bags (1), done stays low."""
    lens = [1, 0, 3, 2]
    bag2 = [7, 8, 9]
    bag2[bad_at] = value
    idx = [5] + bag2 + [10, 11]
    items, st = run_sequencer([bag(n) for n in lens], idx, 100, len(lens))
    exp = expected_items(lens, idx)[:2 + bad_at]
    assert [it for _, it in items] == exp
    assert st == {"done": 0, "err": 1, "err_code": E.INDEX_RANGE, "err_value": value,
                  "bag": 2, "rows": 1}


@pytest.mark.parametrize("code,value", [(E.OFFSETS_ORDER, 3), (E.BAG_TOO_LONG, 17),
                                        (E.ADDR_RANGE, STAGING_END + 4)])
def test_sequencer_reports_walker_marker_with_bag_number(code, value):
    """A walker error marker for bag 3 (after bags 2,0,1) is reported with its code and value,
    bag = 3, rows = 3, after the items of bags 0-2 and none later."""
    lens = [2, 0, 1]
    idx = [1, 2, 3, 4]
    entries = [bag(n) for n in lens] + [marker(code, value), bag(1)]
    items, st = run_sequencer(entries, idx, 100, 5)
    assert [it for _, it in items] == expected_items(lens, idx)
    assert st == {"done": 0, "err": 1, "err_code": code, "err_value": value, "bag": 3,
                  "rows": 3}


def test_sequencer_no_bags_is_done_at_once():
    """n_bags = 0: done with no items."""
    items, st = run_sequencer([], [], 100, 0)
    assert items == [] and st["done"] == 1 and st["err"] == 0


# ---- OffsetsWalker ---------------------------------------------------------------------------

def run_walker(offsets, n_bags, indices_addr, *, rng=None, p_in=0.0, p_out=0.0, name="walker"):
    """Start the walker and feed ``offsets``; returns the bag entries, the idx_start strobes,
    the idx_limit seen after each entry, the offsets consumed and busy at the end."""
    rng = rng or make_rng(0)
    dut = OffsetsWalker(ADDR_BITS, staging_end=STAGING_END, max_bag=MAX_BAG)
    res = {"bags": [], "starts": [], "limits": [], "consumed": 0}

    async def tb(ctx):
        ctx.set(dut.n_bags, n_bags)
        ctx.set(dut.indices_addr, indices_addr)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        gap, stall = Stall(rng, p_in), Stall(rng, p_out)
        oi, quiet, offered, fill = 0, 0, False, False
        limit_hist = []
        while quiet < 20:
            offered = offered or (oi < len(offsets) and not gap())
            ctx.set(dut.offsets.valid, offered)
            if offered:
                ctx.set(dut.offsets.payload, offsets[oi])
            ctx.set(dut.bags.ready, 0 if stall() else 1)
            *_, orr, bv, br, bp, st, sa, lim, busy = await ctx.tick().sample(
                dut.offsets.ready, dut.bags.valid, dut.bags.ready, dut.bags.payload,
                dut.idx_start, dut.idx_start_addr, dut.idx_limit, dut.busy)
            if st:
                res["starts"].append(sa)
            limit_hist.append(lim)
            if offered and orr:
                oi, offered = oi + 1, False
            if fill:      # the limit sampled now is the one set by the previous edge
                res["limits"][-1], fill = lim, False
            if bv and br:
                res["bags"].append((bp.len, bp.err, bp.code, 0))
                res["limits"].append(None)
                fill = True
            quiet = quiet + 1 if not busy else 0
        if res["bags"] and res["bags"][-1][1]:    # error marker: value held in err_value
            res["bags"][-1] = res["bags"][-1][:3] + (ctx.get(dut.err_value),)
        res["consumed"] = oi
        res["busy"] = ctx.get(dut.busy)
        res["final_limit"] = ctx.get(dut.idx_limit)
        res["max_limit"] = max(limit_hist)

    simulate(dut, [tb], [check_stream(dut.bags, "bags")], max_cycles=2000, name=name)
    return res


IA = 0x10_0000_1000


def ok(n):
    return (n, 0, 0, 0)


def test_walker_valid_offsets_open_index_range_bag_by_bag():
    """Offsets 5,7,7,10,26 (lengths 2,0,3,16 = max_bag): four bag entries, idx_start once at
    indices_addr + 4*5, idx_limit = indices_addr + 4*e after each bag, busy falls after the last,
    and an extra offset is not consumed."""
    offs = [5, 7, 7, 10, 26, 99]
    r = run_walker(offs, 4, IA)
    assert r["bags"] == [ok(2), ok(0), ok(3), ok(16)]
    assert r["starts"] == [IA + 20]
    assert r["limits"] == [IA + 4 * e for e in (7, 7, 10, 26)]
    assert r["consumed"] == 5 and r["busy"] == 0


@pytest.mark.parametrize("seed", [43, 44])
def test_walker_random_valid_offsets_with_stalls(seed):
    """40 random valid bags (lengths 0..MAX_BAG) with input gaps and output stalls: entries
    equal the offset differences and idx_limit ends at indices_addr + 4*offsets[-1]."""
    rng = make_rng(seed)
    offs = [rng.randrange(1000)]
    for _ in range(40):
        offs.append(offs[-1] + rng.choice([0, 1, 3, MAX_BAG]))
    r = run_walker(offs, 40, IA, rng=rng, p_in=0.3, p_out=0.3, name=f"walker_random_{seed}")
    assert r["bags"] == [ok(b - a) for a, b in zip(offs, offs[1:])]
    assert r["final_limit"] == IA + 4 * offs[-1] and r["busy"] == 0


@pytest.mark.parametrize("offs,ia,want", [
    # check 4: e < s, value = e
    ([3, 5, 4, 9], IA, (E.OFFSETS_ORDER, 4)),
    # check 5: e - s > max_bag, value = e - s
    ([0, 17], IA, (E.BAG_TOO_LONG, 17)),
    ([10, 10, 27], IA, (E.BAG_TOO_LONG, 17)),
    # check 6: indices_addr + 4e > staging_end, value = that address (== staging_end is fine)
    ([0, 2, 3], STAGING_END - 8, (E.ADDR_RANGE, STAGING_END + 4)),
    # order: 4 before 6, 5 before 6
    ([20, 10], STAGING_END - 36, (E.OFFSETS_ORDER, 10)),
    ([0, 1, 40], STAGING_END - 8, (E.BAG_TOO_LONG, 39)),
])
def test_walker_check_markers(offs, ia, want):
    """The first failing bag yields one error marker (code, value per docs/lookup.md checks 4-6,
    first failing check wins); the walker stops there, and idx_limit never covers the failing
    bag."""
    n_bags = len(offs) - 1
    r = run_walker(offs + [1, 2, 3], n_bags, ia)
    code, value = want
    good = r["bags"][:-1]
    assert r["bags"][-1][1:] == (1, code, value), f"last entry {r['bags'][-1]}"
    assert all(b[1] == 0 for b in good)
    assert r["consumed"] == 1 + len(r["bags"]), "walker consumed offsets after the error"
    last_ok = offs[len(good)]
    assert r["final_limit"] == (ia + 4 * last_ok if good else 0)
    assert r["max_limit"] == r["final_limit"]
    assert r["busy"] == 0


def test_walker_indices_at_staging_end_empty_bag_is_fine():
    """indices_addr = staging_end with offsets 0,0: one empty bag, no error (end inclusive)."""
    r = run_walker([0, 0], 1, STAGING_END)
    assert r["bags"] == [ok(0)] and r["starts"] == [STAGING_END]


def test_walker_no_bags_reads_one_offset():
    """n_bags = 0: consumes offsets[0] only, strobes idx_start, pushes nothing, not busy."""
    r = run_walker([4, 8, 9], 0, IA)
    assert r["bags"] == [] and r["starts"] == [IA + 16] and r["consumed"] == 1
    assert r["busy"] == 0 and r["final_limit"] == 0
