"""Power-failure model (cosim.powerfail) without a simulator: fake pending writes.

Checked against independently computed expectations: acknowledged bytes always kept, each
in-flight (write, 8-byte word) either fully new or fully old, the survival rate near 1/2,
overlapping in-flight writes resolved as "newest surviving write wins", staging garbage
(written and never-written lines) and determinism per seed.
"""
import random
from types import SimpleNamespace

import pytest

from cosim.powerfail import GarbageMemory, crash_memory, load_image, word_chunks
from sw_model.memory import MemoryImage

STAGING = (0x10000, 0x4000)


def _apply(mem, segments, poison=False):
    """Apply a write to ``mem`` the way the PMEM model does (data, then the poison rule of
    ``cosim.pmem.poison_update`` written out here: a poisoned write marks its lines, a clean
    one clears the lines it writes completely); returns a fake PendingWrite."""
    old = [(a, mem.read(a, len(d))) for a, d in segments]
    for a, d in segments:
        mem.write(a, d)
    lines = sorted({(a + i) // 64 * 64 for a, d in segments for i in range(len(d))})
    if poison:
        poison_old = [(la, mem.is_poisoned(la)) for la in lines]
        for la in lines:
            mem.set_poison(la)
    else:
        full = [la for la in lines if all(any(a <= la + i < a + len(d) for a, d in segments)
                                          for i in range(64))]
        poison_old = [(la, True) for la in full if mem.is_poisoned(la)]
        for la, _ in poison_old:
            mem.set_poison(la, False)
    return SimpleNamespace(segments=segments, old=old, poison=poison, poison_old=poison_old)


def _base_mem():
    mem = MemoryImage(1 << 20)
    mem.write(0, bytes(range(256)) * 4)          # acknowledged contents of [0, 1024)
    return mem


def test_word_chunks_split_at_8_byte_words():
    w = word_chunks([(5, b"abcdefghij"), (30, b"xy")])
    assert sorted(w) == [0, 8, 24]
    assert w[0] == [(5, b"abc")] and w[8] == [(8, b"defghij")]
    assert w[24] == [(30, b"xy")]
    # two runs of one write inside one word: one entry (one coin)
    w = word_chunks([(64, b"a"), (66, b"b")])
    assert list(w) == [64] and w[64] == [(64, b"a"), (66, b"b")]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_applied_unacked_words_all_or_nothing(seed):
    mem = _base_mem()
    acked = mem.copy()
    pws = []
    addrs = [64 * k for k in range(8)]
    for a in addrs:                        # eight full-line in-flight writes (64 words)
        pws.append(_apply(mem, [(a, bytes([0xA0 + a // 64]) * 64)]))
    img, st = crash_memory(mem, pws, [], random.Random(seed), staging=STAGING)
    assert st["words_survived"] + st["words_lost"] == 64
    for a in addrs:
        for w in range(a, a + 64, 8):
            got = img.read(w, 8)
            assert got in (bytes([0xA0 + a // 64]) * 8, acked.read(w, 8)), (seed, w)
    # bytes no write touched stay acknowledged
    assert img.read(512, 512) == acked.read(512, 512), seed
    survived = sum(img.read(w, 8) != acked.read(w, 8) for w in range(0, 512, 8))
    assert survived == st["words_survived"], seed


def test_survival_rate_is_about_half():
    mem = MemoryImage(1 << 24)
    pws = [_apply(mem, [(64 * k, b"\xff" * 64)]) for k in range(1000)]   # 8000 words
    _, st = crash_memory(mem, pws, [], random.Random(7))
    n = st["words_survived"] + st["words_lost"]
    assert n == 8000
    assert 0.46 < st["words_survived"] / n < 0.54, st     # binomial sd = 0.0056


def test_p_survive_extremes():
    mem = _base_mem()
    acked = mem.copy()
    pw = _apply(mem, [(0, b"\x11" * 64)])
    img, st = crash_memory(mem, [pw], [], random.Random(1), p_survive=0.0)
    assert img.read(0, 64) == acked.read(0, 64) and st["words_lost"] == 8
    img, st = crash_memory(mem, [pw], [], random.Random(1), p_survive=1.0)
    assert img.read(0, 64) == b"\x11" * 64 and st["words_survived"] == 8


def test_partial_byte_enables_keep_untouched_bytes():
    mem = _base_mem()
    acked = mem.copy()
    pw = _apply(mem, [(8, b"\xee\xee"), (12, b"\xdd")])      # bytes 8,9 and 12 of word 8
    for s in range(20):
        img, st = crash_memory(mem, [pw], [], random.Random(s), p_survive=0.5)
        got = img.read(8, 8)
        new = bytearray(acked.read(8, 8))
        new[0:2] = b"\xee\xee"
        new[4] = 0xdd
        assert got in (acked.read(8, 8), bytes(new)), s      # one coin for the whole word
        assert st["words_survived"] + st["words_lost"] == 1


def test_overlapping_inflight_writes_newest_survivor_wins():
    # three in-flight writes to word 0: value = newest surviving write, else acknowledged
    for s in range(40):
        mem = _base_mem()
        acked = mem.read(0, 8)
        pws = [_apply(mem, [(0, bytes([v]) * 8)]) for v in (0x01, 0x02, 0x03)]
        rng = random.Random(s)
        img, st = crash_memory(mem, pws, [], rng, p_survive=0.5)
        coins = random.Random(s)
        flips = [coins.random() < 0.5 for _ in range(3)]
        want = acked
        for v, keep in zip((0x01, 0x02, 0x03), flips):
            if keep:
                want = bytes([v]) * 8
        assert img.read(0, 8) == want, (s, flips)
        assert st["words_survived"] == sum(flips)


def test_unapplied_bursts_take_new_data_or_keep_old():
    mem = _base_mem()
    acked = mem.copy()
    segs = [(128, b"\x77" * 64)]        # accepted, not applied: mem still holds the old bytes
    img, st = crash_memory(mem, [], [segs], random.Random(3))
    assert st["words_survived"] + st["words_lost"] == 8
    for w in range(128, 192, 8):
        assert img.read(w, 8) in (b"\x77" * 8, acked.read(w, 8))
    assert sum(img.read(w, 8) == b"\x77" * 8 for w in range(128, 192, 8)) == st["words_survived"]


def test_input_memory_unchanged_and_deterministic():
    mem = _base_mem()
    pws = [_apply(mem, [(64 * k, b"\x42" * 64)]) for k in range(4)]
    before = mem.copy()
    a, sa = crash_memory(mem, pws, [], random.Random(9), staging=STAGING)
    b, sb = crash_memory(mem, pws, [], random.Random(9), staging=STAGING)
    assert mem == before
    assert a == b and sa == sb
    c, _ = crash_memory(mem, pws, [], random.Random(10), staging=STAGING)
    assert a.read(0, 256) != c.read(0, 256) or a.read(*STAGING) != c.read(*STAGING)


def test_staging_becomes_garbage_written_and_unwritten():
    mem = _base_mem()
    base, size = STAGING
    mem.write(base, b"\x00" * 256)                     # written staging lines
    img, st = crash_memory(mem, [], [], random.Random(5), staging=STAGING)
    assert st["staging_lines"] == 4
    assert img.read(base, 256) != b"\x00" * 256
    never = base + 0x1000                              # never written: garbage, stable
    g1 = img.read(never, 64)
    assert g1 != bytes(64) and img.read(never, 64) == g1
    assert img.copy().read(never, 64) == g1
    assert img.read(base + size, 64) == bytes(64)      # outside staging: fill
    assert img.read(0, 1024) == mem.read(0, 1024)      # non-staging untouched


def test_garbage_memory_reads_are_line_stable_and_seeded():
    g = GarbageMemory(1 << 20, regions=[(0x1000, 0x1000)], seed=1)
    h = GarbageMemory(1 << 20, regions=[(0x1000, 0x1000)], seed=2)
    x = g.read(0x1010, 100)
    assert g.read(0x1000, 0x80)[0x10:0x10 + 100] == x
    assert h.read(0x1010, 100) != x
    g.write(0x1000, b"\x01" * 64)
    assert g.read(0x1000, 64) == b"\x01" * 64
    assert g.gather_lines([0x1040]) == g.read(0x1040, 64)
    with pytest.raises(ValueError):
        GarbageMemory(1 << 20, regions=[(3, 64)])


def test_load_image_replaces_media_and_clears_queues():
    cleared = []
    pmem = SimpleNamespace(mem=None, drop_in_flight=lambda: cleared.append("in flight"))
    mem = _base_mem()
    img, _ = crash_memory(mem, [], [], random.Random(1), staging=STAGING)
    load_image(pmem, img)
    assert pmem.mem == img and pmem.mem is not img
    assert cleared == ["in flight"]


def _fake_pmem(mem, byte_lanes=16):
    """The attributes of cosim.pmem.PmemModel that power_fail reads, with the real burst
    segmentation (PmemModel._segments) on a 128-bit bus."""
    from collections import deque
    from cosim.pmem import PmemModel
    p = SimpleNamespace(mem=mem, unacked=deque(), _aw_waiting=deque(), _w_waiting=deque(),
                        _w_beats=[], byte_lanes=byte_lanes, strb_mask=(1 << byte_lanes) - 1,
                        writes_in_flight=0)
    p._segments = lambda addr, size, beats: PmemModel._segments(p, addr, size, beats)
    return p


def test_power_fail_reads_the_pmem_queues():
    from cosim.powerfail import power_fail
    mem = _base_mem()
    acked = mem.copy()
    p = _fake_pmem(mem)
    full = (1 << 16) - 1
    # applied, unacknowledged: line 0 (one 64-byte burst)
    p.unacked.append(_apply(mem, [(0, b"\x10" * 64)]))
    # AW at 0x100 (4 beats of 16 B), two W beats received, not applied
    p._aw_waiting.append((1, 0x100, 4, 4, 0, 0))
    p._aw_waiting.append((2, 0x200, 4, 4, 0, 0))    # no data yet: cannot survive
    p._w_beats = [(int.from_bytes(b"\x20" * 16, "little"), full),
                  (int.from_bytes(b"\x21" * 16, "little"), full)]
    p.writes_in_flight = 3
    img = power_fail(p, random.Random(4), staging=STAGING, cycle=123)
    st = img.stats()
    assert st["applied_unacked"] == 1 and st["unapplied"] == 1
    assert st["bursts_without_data"] == 1 and st["cycle"] == 123
    assert st["words_survived"] + st["words_lost"] == 8 + 4     # 8 words + 2 beats of 2 words
    for w in range(0, 64, 8):
        assert img.mem.read(w, 8) in (b"\x10" * 8, acked.read(w, 8))
    for w, v in zip(range(0x100, 0x120, 8), (0x20, 0x20, 0x21, 0x21)):
        assert img.mem.read(w, 8) in (bytes([v]) * 8, acked.read(w, 8))
    assert img.mem.read(0x120, 0x20) == acked.read(0x120, 0x20)     # beats never received
    assert img.mem.read(0x200, 64) == acked.read(0x200, 64)
    assert mem.read(0x100, 64) == acked.read(0x100, 64)             # model memory untouched


def test_power_fail_w_without_aw_cannot_survive():
    from cosim.powerfail import power_fail
    mem = _base_mem()
    p = _fake_pmem(mem)
    p._w_waiting.append(([(1, (1 << 16) - 1)] * 4, 0))
    p._w_beats = [(2, 1)]
    img = power_fail(p, random.Random(1))
    assert img.bursts_without_data == 2 and img.words_survived == img.words_lost == 0
    assert img.mem == mem


# ---- poison bits (docs/coherence.md "Poison", cosim/powerfail.py): acknowledged bits kept,
# in-flight poisoned writes keep their poison whatever data survived, in-flight clears lost


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_poison_errs_towards_poisoned(seed):
    """Lines 0..3 acknowledged poisoned, line 4 acknowledged clean. In flight: a clean
    full-line write over line 0 (its clear is lost), a poisoned partial write of line 4 (its
    poison survives even if none of its words does), a clean partial write of line 1 (no
    change). Lines 2 and 3 stay poisoned with no write in flight; line 5 is never poisoned."""
    mem = _base_mem()
    for la in (0, 64, 128, 192):
        mem.set_poison(la)
    pws = [_apply(mem, [(0, b"\x11" * 64)]),
           _apply(mem, [(4 * 64 + 8, b"\x22" * 8)], poison=True),
           _apply(mem, [(64, b"\x33" * 16)])]
    assert not mem.is_poisoned(0) and mem.is_poisoned(256)      # the live rule applied
    for p_survive in (0.0, 0.5, 1.0):
        img, _ = crash_memory(mem, pws, [], random.Random(seed), p_survive=p_survive)
        assert img.poisoned_lines() == [0, 64, 128, 192, 256], (p_survive, seed)
    assert mem.poisoned_lines() == [64, 128, 192, 256]           # the model is not modified


def test_poison_of_acknowledged_writes_and_unapplied_aw():
    """An acknowledged clear and set are kept (nothing in flight); an accepted poisoned AW
    with no data applied yet poisons its lines (128-bit bus: 4 beats, one line); a clean AW
    changes nothing; staging lines lose their poison with their contents."""
    from cosim.powerfail import power_fail
    mem = _base_mem()
    mem.set_poison(0x40)
    mem.set_poison(STAGING[0] + 0x80)
    p = _fake_pmem(mem)
    p._aw_waiting.append((1, 0x100, 4, 4, 0, 1))
    p._aw_waiting.append((2, 0x180, 4, 4, 0, 0))
    img = power_fail(p, random.Random(2), staging=STAGING)
    assert img.mem.poisoned_lines() == [0x40, 0x100]
    assert img.mem.copy().poisoned_lines() == [0x40, 0x100]
    assert mem.poisoned_lines() == [0x40, STAGING[0] + 0x80]


def test_image_equality_includes_poison():
    """Two images with the same bytes differ when a poison bit differs (diff names it)."""
    a = _base_mem()
    b = a.copy()
    assert a == b
    b.set_poison(0x1000)
    assert a != b
    (addr, desc), = a.diff(b)
    assert addr == 0x1000 and "poison self=0 other=1" in desc


def test_golden_model_recovers_every_single_inflight_write_crash():
    """Model-level campaign: the golden model's own write stream of the crash workload, cut
    before every write with that write in flight (torn per word by crash_memory); the model's
    recovery must give the tables after the committed batch. Independent of the RTL: checks
    the workload, the power-failure model and the model's recovery fit together."""
    from cosim.training_workload import make_workload
    from hw.config import DeviceConfig
    from hw.encodings import SB_FIELDS, unpack_fields

    cfg = DeviceConfig()
    seed = 3
    wl = make_workload(cfg, seed, n_batches=3)
    mem = wl.initial.copy()
    dev = wl.model(mem)
    writes = []
    dev.on_write = lambda a, d, what: writes.append((a, d, what))
    dev.recover()
    for b in wl.batches:
        for a, d in b.staging:
            mem.write(a, d)
        for d in b.descs:
            dev.execute(d)
    assert wl.read_tables(mem) == wl.final_tables
    staging = (cfg.staging_base, cfg.staging_size)
    cur = wl.initial.copy()
    commits = 0
    rng = random.Random(seed)
    checked = 0
    for k, (a, d, what) in enumerate(writes):
        if k % 2 == 0:
            probe = cur.copy()
            pw = _apply(probe, [(a, d)])
            img, _ = crash_memory(probe, [pw], [], rng, staging=staging)
            m = wl.model(img)
            m.recover()
            c = m.committed
            sb = unpack_fields(SB_FIELDS, img.read(cfg.superblock_base, 64))
            assert c in (commits, commits + (what == "commit")), (k, what, c, commits, sb)
            diffs = wl.table_diffs(img, wl.tables_after(c))
            assert not diffs, f"write {k} ({what}) in flight: C={c}, diffs {diffs} (seed {seed})"
            checked += 1
        cur.write(a, d)
        commits += what == "commit"
    assert commits == 3 and checked > 100


def test_campaign_points_and_report_counts():
    """Crash-point specs are seeded and in range; the report counts what the results say."""
    from trainingcxl.crash.campaign import summarize
    from trainingcxl.crash.tb import crash_points
    a = crash_points("random:50", 7, 1000)
    assert a == crash_points("random:50", 7, 1000) and a != crash_points("random:50", 8, 1000)
    assert len(a) == 50 and all(0 <= c <= 1000 for c in a)
    assert crash_points("range:5:9", 1, 10) == [5, 6, 7, 8]
    assert crash_points("3, 1,4", 1, 10) == [3, 1, 4]
    recs = [{"event": "reference", "cycles": 900, "batches": 4},
            {"event": "point", "i": 0, "cycle": 5, "seed": 1, "ok": True, "recovered": True,
             "identical": True, "committed": 0, "words_survived": 2, "words_lost": 1,
             "writes_in_flight": 1, "wall_s": 1.0},
            {"event": "point", "i": 1, "cycle": 9, "seed": 1, "ok": False, "recovered": True,
             "identical": False, "committed": 2, "error": "x", "wall_s": 3.0}]
    rep = summarize(recs, requested=2)
    assert (rep["tried"], rep["recovered"], rep["identical"], rep["failed"]) == (2, 2, 1, 1)
    assert rep["committed_histogram"] == {"0": 1, "2": 1}
    assert rep["failures"][0]["cycle"] == 9 and rep["point_wall_s_mean"] == 2.0
