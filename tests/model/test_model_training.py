"""sw_model.training implements docs/training.md: UPDATE arithmetic, undo log, logged set, COMMIT,
recovery (crash campaigns at every device write, recovery epoch), rings and every error code of
sections 2-4.

References are independent: UPDATE by a plain Python-int loop, the record layout by struct and a
bitwise CRC-32, the logged set by a dict-based re-implementation, tables "at commit C" by
snapshots taken by the test, CSR addresses by reading hw/csr/regmap.json here.
"""
import json
import pathlib
import struct
import zlib

import numpy as np
import pytest

from hw.config import DEFAULT
from hw.encodings import (CPL_FIELDS, DESC_FIELDS, FLAG_LOG, LOG_MAGIC, LOG_SLOT_BYTES, SB_MAGIC,
                          SB_VERSION, SNAP_MAGIC, DescKind, DeviceError as E, pack_fields,
                          unpack_fields)
from sw_model.memory import MemoryImage
from sw_model.training import CSR_ADDR, TrainingDevice, read_records
from sw_model.workload import RegionAllocator

I32_MIN, I32_MAX = -2**31, 2**31 - 1
CFG = DEFAULT.with_(acc_bits=36)                  # max_bag = 16
S1 = CFG.staging_base + CFG.staging_size
SB_EPOCH = CFG.superblock_base + 32               # recovery_epoch word (SB_FIELDS)
HDR = "<IHHQIIQQ"                                 # magic table dim batch row crc addr epoch


def host_reset(dev):
    """A device reset as the host does it: ``reset()`` (the table directory and LR go to their
    reset values, as the RTL's CSR block does), then the host programs the same tables and LR
    again."""
    tables, lr = list(dev.tables), dev.lr
    dev.reset()
    for tid, (base, rows, dim) in enumerate(tables):
        if dim:
            dev.set_table(tid, base, rows, dim)
    dev.lr = lr


def sb_epoch(mem):
    return int.from_bytes(mem.read(SB_EPOCH, 8), "little")


# ---- independent references ---------------------------------------------------------------------

def rhe_shift(p: int, f: int) -> int:
    """round_half_even(p / 2^f) with Python ints (divmod floors for negatives too)."""
    if f == 0:
        return p
    q, r = divmod(p, 1 << f)
    if 2 * r > (1 << f) or (2 * r == (1 << f) and q & 1):
        q += 1
    return q


def ref_update(table, offsets, indices, grads, lr, f, rows_limit=None):
    """Apply UPDATE in place on a list-of-lists int table; returns (applied, sat)."""
    applied = sat = 0
    for b in range(len(offsets) - 1):
        for j in range(offsets[b], offsets[b + 1]):
            r = indices[j]
            if rows_limit is not None and applied == rows_limit:
                return applied, sat
            for e in range(len(table[r])):
                v = table[r][e] - rhe_shift(lr * int(grads[b][e]), f)
                c = min(max(v, I32_MIN), I32_MAX)
                sat += c != v
                table[r][e] = c
            applied += 1
    return applied, sat


def crc32_bitwise(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def ref_hash(sets, table, row):
    s = sets.bit_length() - 1
    return (row ^ (row >> s) ^ table) & (sets - 1)


# ---- rig ----------------------------------------------------------------------------------------

class Rig:
    """Fresh memory, recovered device, random tables (and staged inputs via helpers)."""

    def __init__(self, seed, cfg=CFG, shapes=((48, 32), (40, 16)), extreme=0.0, recover=True):
        self.cfg, self.rng = cfg, np.random.default_rng(seed)
        self.mem = MemoryImage(1 << cfg.addr_bits)
        self.dev = TrainingDevice(cfg, self.mem)
        if recover:
            self.dev.recover()
        ta = RegionAllocator(cfg.table_base, cfg.table_size)
        self.sa = RegionAllocator(cfg.staging_base, cfg.staging_size)
        self.shapes = shapes
        for t, (rows, dim) in enumerate(shapes):
            tab = self.rng.integers(-2**28, 2**28, size=(rows, dim), dtype=np.int64)
            if extreme:
                pick = self.rng.random((rows, dim)) < extreme
                near = self.rng.integers(0, 1 << 20, size=(rows, dim))
                rails = np.where(self.rng.random((rows, dim)) < 0.5, I32_MAX - near, I32_MIN + near)
                tab = np.where(pick, rails, tab)
            base = ta.alloc(tab.size * 4)
            self.mem.write_i32(base, tab.ravel())
            self.dev.set_table(t, base, rows, dim)
        self.dev.lr = max(1, (1 << cfg.frac_bits) // 4)

    def stage_bags(self, offsets, indices):
        o = self.sa.alloc(4 * len(offsets))
        i = self.sa.alloc(4 * max(1, len(indices)))
        self.mem.write_u32(o, np.asarray(offsets, dtype=np.uint32))
        self.mem.write_u32(i, np.asarray(indices, dtype=np.uint32))
        return o, i

    def random_bags(self, n_bags, rows, max_len=5, pool=None):
        lens = self.rng.integers(0, max_len + 1, size=n_bags)
        offsets = [0] + np.cumsum(lens).tolist()
        choices = np.arange(rows) if pool is None else np.asarray(pool)
        indices = self.rng.choice(choices, size=offsets[-1]).tolist()
        return offsets, indices

    def stage_grads(self, n_bags, dim, big=False):
        lim = 2**31 if big else 2**26
        g = self.rng.integers(-lim, lim, size=(n_bags, dim), dtype=np.int64)
        if big:
            g[self.rng.random((n_bags, dim)) < 0.2] = I32_MIN
            g[self.rng.random((n_bags, dim)) < 0.2] = I32_MAX
        a = self.sa.alloc(max(64, g.size * 4))
        self.mem.write_i32(a, g.ravel())
        return a, g

    def stage_update(self, t, offsets, indices, big=False):
        o, i = self.stage_bags(offsets, indices)
        g, grads = self.stage_grads(len(offsets) - 1, self.shapes[t][1], big)
        return dict(table=t, n_bags=len(offsets) - 1, offsets_addr=o, indices_addr=i,
                    grads_addr=g), grads

    def stage_lookup(self, t, offsets, indices):
        o, i = self.stage_bags(offsets, indices)
        out = self.sa.alloc(max(64, (len(offsets) - 1) * self.shapes[t][1] * 4))
        return dict(table=t, n_bags=len(offsets) - 1, offsets_addr=o, indices_addr=i,
                    out_addr=out)

    def table_list(self, t):
        return self.dev.table_array(t).astype(np.int64).tolist()


def fresh_device(cfg, img, rig):
    d = TrainingDevice(cfg, img)
    for t, entry in enumerate(rig.dev.tables):
        d.set_table(t, *entry)
    return d


# ---- UPDATE arithmetic --------------------------------------------------------------------------

@pytest.mark.parametrize("nolog", [False, True])
@pytest.mark.parametrize("frac_bits", [24, 0, 30])
def test_update_matches_loop(seed, nolog, frac_bits):
    cfg = CFG.with_(frac_bits=frac_bits)
    rig = Rig(seed, cfg, extreme=0.3)
    dev = rig.dev
    for step in range(6):
        t = step % 2
        rows, dim = rig.shapes[t]
        offsets, indices = rig.random_bags(7, rows, max_len=6, pool=range(0, rows, 3))  # repeats
        d, grads = rig.stage_update(t, offsets, indices, big=step % 3 == 0)
        use_desc_lr = step % 2 == 1
        lr = int(rig.rng.integers(0, 2**32)) if step % 3 == 0 else int(rig.rng.integers(0, 2**26))
        if use_desc_lr:
            dev.lr = 12345
        else:
            dev.lr = lr
        exp = rig.table_list(t)
        applied, sat = ref_update(exp, offsets, indices, grads, lr, frac_bits)
        c = dev.update(**d, lr=lr if use_desc_lr else None, nolog=nolog, tag=0xABCD0000 + step)
        msg = f"seed={seed} step={step}"
        assert c["status"] == E.OK, msg
        assert (c["rows"], c["sat"], c["lines"]) == (applied, sat, applied * dim // 16), msg
        assert c["tag"] == 0xABCD0000 + step and c["kind"] == DescKind.UPDATE, msg
        assert c["batch"] == dev.committed + 1 and c["cycles"] == 0, msg
        assert rig.table_list(t) == exp, msg
        if nolog:
            assert c["log_records"] == 0 and dev.next_slot == 0, msg
    if not nolog:
        assert dev.next_slot > 0


def test_update_saturation_rails(seed):
    """A lane pushed past a rail is clamped and counted; one landing exactly on a rail is not."""
    rig = Rig(seed, shapes=((4, 16),))
    base = rig.dev.tables[0][0]
    row = np.array([I32_MAX - 5] * 8 + [I32_MIN + 5] * 8, dtype=np.int64)
    rig.mem.write_i32(base, row)
    d, _ = rig.stage_update(0, [0, 1], [0])
    grads = np.array([-10] * 4 + [-5] * 4 + [10] * 4 + [5] * 4, dtype=np.int64)
    rig.mem.write_i32(d["grads_addr"], grads)
    c = rig.dev.update(**d, lr=1 << CFG.frac_bits)        # lr = 1.0: delta = grad
    assert (c["status"], c["rows"], c["sat"]) == (E.OK, 1, 8), c
    assert rig.dev.table_array(0)[0].tolist() == [I32_MAX] * 8 + [I32_MIN] * 8


def test_update_partial_failure(seed):
    """INDEX_RANGE at row j of bag b: everything before applied, nothing after; bag-level errors."""
    rig = Rig(seed)
    dev = rig.dev
    rows, dim = rig.shapes[0]
    offsets, indices = [0, 3, 7, 9], [1, 2, 1, 4, 5, rows + 3, 6, 7, 8]
    d, grads = rig.stage_update(0, offsets, indices)
    exp = rig.table_list(0)
    applied, sat = ref_update(exp, offsets, indices, grads, dev.lr, CFG.frac_bits, rows_limit=5)
    c = dev.update(**d)
    assert (c["status"], c["err_bag"], c["err_value"]) == (E.INDEX_RANGE, 1, rows + 3)
    assert (c["rows"], c["sat"], c["lines"], c["log_records"]) == (5, sat, 5 * dim // 16, 4)
    assert rig.table_list(0) == exp
    assert (dev.err_code, dev.err_value, dev.err_count) == (E.INDEX_RANGE, rows + 3, 1)
    # bag-level: offsets out of order at bag 1 -> only bag 0 applied
    exp = rig.table_list(0)
    offsets2, indices2 = [0, 2, 1, 3], [10, 11, 12]
    d2, grads2 = rig.stage_update(0, offsets2, indices2)
    ref_update(exp, offsets2[:2], indices2, grads2, dev.lr, CFG.frac_bits)
    c = dev.update(**d2)
    assert (c["status"], c["err_bag"], c["err_value"], c["rows"]) == (E.OFFSETS_ORDER, 1, 1, 2)
    assert rig.table_list(0) == exp
    # abort by recovery: state of the last commit (the initial tables)
    host_reset(dev)
    assert dev.recover() == 6
    img = Rig(seed)                      # same seed -> same initial tables
    assert dev.snapshot_tables() == img.dev.snapshot_tables()


def test_update_command_checks(seed):
    rig = Rig(seed, shapes=((8, 16), (8, 16), (4, 20)))
    dev = rig.dev
    d, _ = rig.stage_update(0, [0, 1], [0])
    before = rig.mem.copy()
    assert dev.update(**{**d, "table": 2})["status"] == E.BAD_DIM
    c = dev.update(**{**d, "grads_addr": d["grads_addr"] + 4})
    assert (c["status"], c["err_value"]) == (E.ALIGN, d["grads_addr"] + 4)
    c = dev.update(**{**d, "grads_addr": S1 - 32})
    assert (c["status"], c["err_value"]) == (E.ALIGN, S1 - 32)
    c = dev.update(**{**d, "grads_addr": S1 - 64, "n_bags": 2})
    assert (c["status"], c["err_value"]) == (E.ADDR_RANGE, S1 - 64)
    c = dev.update(**{**d, "grads_addr": S1 - 64, "n_bags": 2, "offsets_addr": S1 - 8})
    assert (c["status"], c["err_value"]) == (E.ADDR_RANGE, S1 - 8)     # offsets before grads
    c = dev.update(**{**d, "indices_addr": S1 + 4})
    assert (c["status"], c["err_value"]) == (E.ADDR_RANGE, S1 + 4)
    dev.set_table(1, CFG.table_base + CFG.table_size - 64 * 7, 8, 16)
    c = dev.update(**{**d, "table": 1})
    assert (c["status"], c["err_value"]) == (E.ADDR_RANGE, CFG.table_base + CFG.table_size - 448)
    assert rig.mem == before and dev.next_slot == 0 and dev.err_count == 7
    c = dev.update(**{**d, "grads_addr": S1 - 64, "n_bags": 1})      # grads ending at S1: fine
    assert (c["status"], c["rows"], c["log_records"]) == (E.OK, 1, 1)


# ---- undo log: records, logged set, CRC ----------------------------------------------------------

def test_record_layout_hand_built(seed):
    rig = Rig(seed, shapes=((10, 32),))
    dev = rig.dev
    base = dev.tables[0][0]
    old = rig.mem.read(base + 7 * 128, 128)
    d, _ = rig.stage_update(0, [0, 1], [7])
    assert dev.update(**d, tag=5)["log_records"] == 1
    # epoch 0 after formatting
    hdr0 = struct.pack(HDR, LOG_MAGIC, 0, 32, 1, 7, 0, base + 7 * 128, 0) + bytes(24)
    crc = crc32_bitwise(old + hdr0)
    hdr = struct.pack(HDR, LOG_MAGIC, 0, 32, 1, 7, crc, base + 7 * 128, 0) + bytes(24)
    assert rig.mem.read(CFG.log_base, 64 + 128) == hdr + old
    assert rig.mem.read(CFG.log_base + 192, LOG_SLOT_BYTES - 192) == bytes(LOG_SLOT_BYTES - 192)
    # a large epoch E in the superblock: recovery ignores the epoch-0 record, writes E+1, and the
    # next record carries E+1 (all 8 bytes)
    e = int(rig.rng.integers(1, 2**63)) | (1 << 63)
    rig.mem.write(SB_EPOCH, e.to_bytes(8, "little"))
    host_reset(dev)
    assert dev.recover() == 0 and dev.recovery_epoch == e + 1 and sb_epoch(rig.mem) == e + 1
    old = rig.mem.read(base + 3 * 128, 128)
    assert dev.update(**rig.stage_update(0, [0, 1], [3])[0])["log_records"] == 1
    hdr0 = struct.pack(HDR, LOG_MAGIC, 0, 32, 1, 3, 0, base + 3 * 128, e + 1) + bytes(24)
    crc = crc32_bitwise(old + hdr0)
    hdr = struct.pack(HDR, LOG_MAGIC, 0, 32, 1, 3, crc, base + 3 * 128, e + 1) + bytes(24)
    assert rig.mem.read(CFG.log_base, 64 + 128) == hdr + old, f"seed={seed}"
    # E = 2^64 - 1 wraps to 0 (model choice 8)
    rig.mem.write(SB_EPOCH, (2**64 - 1).to_bytes(8, "little"))
    host_reset(dev)
    assert dev.recover() == 0 and dev.recovery_epoch == 0 and sb_epoch(rig.mem) == 0


def records_of(rig, n):
    return [(h["table"], h["row"], h["data"]) for h in read_records(rig.cfg, rig.mem, n)]


def test_lookup_log_then_update_one_record_per_row(seed):
    rig = Rig(seed)
    dev = rig.dev
    snap = {t: rig.dev.table_array(t).copy() for t in (0, 1)}
    issue = []                                   # (table, row) in issue order
    lk = []
    for t in (0, 1):
        rows, dim = rig.shapes[t]
        offsets, indices = rig.random_bags(6, rows, max_len=4)
        d = rig.stage_lookup(t, offsets, indices)
        c = dev.lookup(**d, log=True)
        exp_out = np.array([snap[t][indices[offsets[b]:offsets[b + 1]]].astype(np.int64).sum(0)
                            for b in range(6)]).reshape(6, dim)
        out = rig.mem.read_i32(d["out_addr"], 6 * dim).reshape(6, dim)
        assert np.array_equal(out, np.clip(exp_out, I32_MIN, I32_MAX)), f"seed={seed}"
        firsts = [x for k, x in enumerate(indices) if x not in indices[:k]]
        assert c["status"] == E.OK and c["log_records"] == len(firsts)
        assert c["rows"] == len(indices) and c["lines"] == 6 * dim // 16
        issue += [(t, x) for x in firsts]
        lk.append((t, offsets, indices))
    # updates touch the looked-up rows and a few new ones
    for t, offsets, indices in lk:
        rows = rig.shapes[t][0]
        upd_idx = indices + [int(x) for x in rig.rng.integers(0, rows, 5)]
        d, _ = rig.stage_update(t, list(offsets) + [len(upd_idx)], upd_idx)
        c = dev.update(**d)
        new = [x for k, x in enumerate(upd_idx) if x not in upd_idx[:k] and (t, x) not in issue]
        assert c["status"] == E.OK and c["log_records"] == len(new), f"seed={seed}"
        issue += [(t, x) for x in new]
    assert dev.logged.overflows == 0, "pick a seed without set overflow"
    recs = records_of(rig, dev.next_slot)
    assert [(t, r) for t, r, _ in recs] == issue, f"seed={seed}"
    for t, r, data in recs:
        assert data == snap[t][r].astype("<i4").tobytes()
    c = dev.commit()
    assert (c["status"], c["log_records"], c["batch"]) == (E.OK, len(issue), 1)
    assert dev.next_slot == 0 and dev.committed == 1


def simulate_set(cfg, items):
    """Independent logged-set simulation: which items of ``items`` (in order) write a record."""
    sets = {}
    out = []
    for t, r in items:
        h = ref_hash(cfg.log_set_sets, t, r)
        ways = sets.setdefault(h, [])
        if (t, r) in ways:
            continue
        out.append((t, r))
        if len(ways) < cfg.log_set_ways:
            ways.append((t, r))
    return out


@pytest.mark.parametrize("sets,ways", [(2, 1), (4, 2), (1, 3)])
def test_set_overflow_relogs(seed, sets, ways):
    cfg = CFG.with_(log_set_sets=sets, log_set_ways=ways)
    rig = Rig(seed, cfg)
    dev = rig.dev
    snap = dev.snapshot_tables()
    items = []
    for k in range(4):
        t = k % 2
        rows = rig.shapes[t][0]
        offsets, indices = rig.random_bags(4, rows, max_len=4, pool=range(10))
        if k < 2:
            c = dev.lookup(**rig.stage_lookup(t, offsets, indices), log=True)
        else:
            c = dev.update(**rig.stage_update(t, offsets, indices)[0])
        assert c["status"] == E.OK
        items += [(t, x) for x in indices]
    exp = simulate_set(cfg, items)
    recs = records_of(rig, dev.next_slot)
    assert [(t, r) for t, r, _ in recs] == exp, f"seed={seed}"
    assert dev.logged.overflows > 0
    host_reset(dev)
    dev.recover()
    assert dev.snapshot_tables() == snap, f"seed={seed}: oldest record must win"


# ---- crash campaigns -----------------------------------------------------------------------------

class Recorder:
    def __init__(self):
        self.writes = []

    def __call__(self, addr, data, what):
        self.writes.append((addr, data, what))


def crash_images(base, writes, every=1):
    img = base.copy()
    for k, (a, d, _) in enumerate(writes):
        if k % every == 0:
            yield k, img.copy()
        img.write(a, d)
    yield len(writes), img


def run_training(rig, batches, retry_abort=False):
    """Run batches of (kind, table, offsets, indices); record device writes; returns
    (base image, writes, snapshots by committed batch)."""
    dev = rig.dev
    staged = []
    for batch in batches:
        staged.append([(kind, (rig.stage_lookup(t, o, i) if kind == "L" else
                               rig.stage_update(t, o, i)[0])) for kind, t, o, i in batch])
    base = rig.mem.copy()
    rec = Recorder()
    dev.on_write = rec
    snaps = {dev.committed: dev.snapshot_tables()}
    for bi, batch in enumerate(staged):
        last = bi == len(staged) - 1
        for attempt in range(2 if retry_abort and bi == 1 else 1):
            for kind, d in batch:
                c = dev.lookup(**d, log=True) if kind == "L" else dev.update(**d)
                assert c["status"] == E.OK, c
                if attempt == 0 and retry_abort and bi == 1 and kind == "U":
                    host_reset(dev)                   # host aborts the batch: reset + RECOVER
                    dev.on_write = rec
                    dev.recover()
                    assert dev.snapshot_tables() == snaps[dev.committed]
                    break
        if not last:
            assert dev.commit()["status"] == E.OK
            snaps[dev.committed] = dev.snapshot_tables()
    return base, rec.writes, snaps


def check_campaign(rig, base, writes, snaps, seed, every=1):
    n_commits = 0
    for k, img in crash_images(base, writes, every):
        n_commits = sum(w == "commit" for _, _, w in writes[:k])
        d = fresh_device(rig.cfg, img, rig)
        d.recover()
        msg = f"seed={seed} crash after write {k}/{len(writes)}"
        assert d.committed == n_commits, msg
        assert d.snapshot_tables() == snaps[n_commits], msg
    assert n_commits == len(snaps) - 1


def batches_for(rig, n_batches, pool=None):
    out = []
    for _ in range(n_batches):
        b = []
        for kind in ("L", "U", "L", "U"):
            t = int(rig.rng.integers(0, 2))
            b.append((kind, t, *rig.random_bags(3, rig.shapes[t][0], max_len=4, pool=pool)))
        out.append(b)
    return out


def test_crash_campaign_every_write(seed):
    """Crash after every device write (including a host abort + recovery + retry of batch 2):
    recovery gives exactly the tables of the last COMMIT persisted."""
    rig = Rig(seed, extreme=0.1)
    base, writes, snaps = run_training(rig, batches_for(rig, 4), retry_abort=True)
    assert any(w == "recover_row" for _, _, w in writes)
    assert rig.dev.logged.overflows == 0
    check_campaign(rig, base, writes, snaps, seed)


def test_crash_campaign_set_overflow(seed):
    cfg = CFG.with_(log_set_sets=2, log_set_ways=1)
    rig = Rig(seed + 1000, cfg)
    base, writes, snaps = run_training(rig, batches_for(rig, 4, pool=range(8)), retry_abort=True)
    assert rig.dev.logged.overflows > 0
    assert sum(w == "sb_epoch" for _, _, w in writes) == 1
    check_campaign(rig, base, writes, snaps, seed)


def crash_mid_batch(seed, cfg=CFG):
    """Image with batch 1 committed and batch 2 half applied; plus the snapshot at commit 1."""
    rig = Rig(seed, cfg)
    dev = rig.dev
    for t in (0, 1):
        dev.update(**rig.stage_update(t, *rig.random_bags(4, rig.shapes[t][0]))[0])
    dev.commit()
    snap = dev.snapshot_tables()
    for t in (0, 1, 0):
        offsets, indices = rig.random_bags(4, rig.shapes[t][0], max_len=5)
        dev.lookup(**rig.stage_lookup(t, offsets, indices), log=True)
        dev.update(**rig.stage_update(t, offsets, indices)[0])
    assert dev.snapshot_tables() != snap
    return rig, snap


def test_recovery_idempotent_and_crash_during_recovery(seed):
    """Recovery = rollback writes then the epoch write (E=0 -> 1). A crash before the epoch write
    re-runs it to the same image; once it has landed, the records are stale and a second recovery
    only moves the epoch on."""
    rig, snap = crash_mid_batch(seed)
    crash = rig.mem.copy()
    assert sb_epoch(crash) == 0
    d1 = fresh_device(CFG, rig.mem, rig)
    rec = Recorder()
    d1.on_write = rec
    n = d1.recover()
    assert n == rig.dev.next_slot and d1.recovered_records == n and d1.committed == 1
    assert d1.snapshot_tables() == snap
    assert [w for _, _, w in rec.writes] == ["recover_row"] * n + ["sb_epoch"]
    assert rec.writes[-1][:2] == (SB_EPOCH, (1).to_bytes(8, "little"))
    assert d1.recovery_epoch == 1
    once = rig.mem.copy()
    d2 = fresh_device(CFG, rig.mem, rig)
    assert d2.recover() == 0 and d2.recovery_epoch == 2
    twice = once.copy()
    twice.write(SB_EPOCH, (2).to_bytes(8, "little"))
    assert rig.mem == twice, rig.mem.diff(twice)
    for k, img in crash_images(crash, rec.writes):
        d = fresh_device(CFG, img, rig)
        applied = d.recover()
        exp = once if k < len(rec.writes) else twice
        msg = f"seed={seed}: crash after recovery write {k}"
        assert applied == (n if k < len(rec.writes) else 0), msg
        assert img == exp, f"{msg}: {img.diff(exp)}"


def test_torn_records_ignored(seed):
    """A record whose CRC fails (any corrupted word) is skipped; the rest still apply."""
    rig = Rig(seed, shapes=((16, 64),))
    dev = rig.dev
    d, _ = rig.stage_update(0, [0, 3], [2, 5, 9])
    rec = Recorder()
    dev.on_write = rec
    dev.update(**d)
    # crash right after the third record persisted, before row 9 is written
    k = [i for i, w in enumerate(rec.writes) if w[2] == "log_header"][2] + 1
    img0 = Rig(seed, shapes=((16, 64),)).mem       # image before the UPDATE (same seed)
    for a, dd, _ in rec.writes[:k]:
        img0.write(a, dd)
    snap0 = Rig(seed, shapes=((16, 64),)).dev.snapshot_tables()
    for victim in range(3):
        for where in ("data", "crc", "addr"):
            img = img0.copy()
            slot = CFG.log_base + victim * LOG_SLOT_BYTES
            off = {"data": 64 + 4 * int(rig.rng.integers(0, 64)), "crc": 20, "addr": 24}[where]
            word = int.from_bytes(img.read(slot + off, 4), "little")
            img.write(slot + off, ((word ^ (1 << int(rig.rng.integers(0, 6)))) & 0xFFFFFFFF)
                      .to_bytes(4, "little"))
            d2 = fresh_device(CFG, img, rig)
            assert d2.recover() == 2, f"seed={seed} victim={victim} {where}"
            if victim == 2:                       # row 9 never written in place: still state C
                assert d2.snapshot_tables() == snap0, f"seed={seed} {where}"


def test_stale_records_of_earlier_attempt(seed):
    """Attempt 1 of batch 2 logs many rows and crashes; after recovery attempt 2 logs fewer and
    crashes: the records of attempt 1 above attempt 2's (same batch, older epoch) end the q scan
    and are not applied."""
    rig, snap = crash_mid_batch(seed)
    n1 = rig.dev.next_slot
    d = fresh_device(CFG, rig.mem, rig)
    d.lr = rig.dev.lr
    assert d.recover() == n1 and d.snapshot_tables() == snap
    rig.dev = d
    d.update(**rig.stage_update(0, [0, 2], [3, 4])[0])
    n2 = d.next_slot
    assert 0 < n2 < n1
    stale = read_records(CFG, rig.mem, n1)[n2:]
    assert all(h["magic"] == LOG_MAGIC and h["batch"] == 2 and h["epoch"] == 0 for h in stale)
    assert all(h["epoch"] == 1 for h in read_records(CFG, rig.mem, n2))
    d2 = fresh_device(CFG, rig.mem, rig)
    assert d2.recover() == n2, f"seed={seed}: only attempt 2's records are current"
    assert d2.snapshot_tables() == snap and d2.recovery_epoch == 2


def test_records_of_other_epoch_ignored(seed):
    """A record that is valid in every other way (magic, batch C+1, CRC) but carries an epoch
    other than the superblock's is neither applied nor counted in q."""
    rig = Rig(seed, shapes=((16, 64),))
    dev = rig.dev
    e = int(rig.rng.integers(1, 2**62))
    rig.mem.write(SB_EPOCH, e.to_bytes(8, "little"))
    host_reset(dev)
    assert dev.recover() == 0 and dev.recovery_epoch == e + 1
    snap = dev.snapshot_tables()
    dev.update(**rig.stage_update(0, [0, 3], [2, 5, 9])[0])
    after = dev.table_array(0).copy()
    crash = rig.mem.copy()
    hdrs = read_records(CFG, crash, 3)
    assert [h["epoch"] for h in hdrs] == [e + 1] * 3

    def with_epoch(img, slot, epoch):
        """Rewrite slot's epoch and re-seal it with an independent CRC (a valid record)."""
        a = CFG.log_base + slot * LOG_SLOT_BYTES
        hdr = bytearray(img.read(a, 64))
        hdr[32:40] = epoch.to_bytes(8, "little")
        hdr[20:24] = bytes(4)
        crc = crc32_bitwise(img.read(a + 64, 256) + bytes(hdr))
        hdr[20:24] = crc.to_bytes(4, "little")
        img.write(a, bytes(hdr))

    snap_tab = np.frombuffer(snap[0], dtype="<i4").reshape(16, 64)
    for other in (e, e + 2, 0, 2**64 - 1):
        for slot in (0, 1, 2):
            img = crash.copy()
            with_epoch(img, slot, other)
            d = fresh_device(CFG, img, rig)
            msg = f"seed={seed} epoch={other} slot={slot}"
            assert d.recover() == 2, msg
            exp = snap_tab.copy()
            row = (2, 5, 9)[slot]
            exp[row] = after[row]                # its record was ignored: the update stays
            assert np.array_equal(d.table_array(0), exp), msg
            assert d.recovery_epoch == e + 2 and sb_epoch(img) == e + 2, msg
    # control: re-sealing with the same epoch keeps it current
    img = crash.copy()
    with_epoch(img, 1, e + 1)
    assert img == crash
    d = fresh_device(CFG, img, rig)
    assert d.recover() == 3 and d.snapshot_tables() == snap


def test_crash_right_after_epoch_write(seed):
    """Crash with recovery's epoch write as the last persistent write: the next recovery applies
    nothing (all records stale), keeps state C, and a new attempt of the batch crashed at any
    write (then committed) recovers to state C (or C+1 once committed)."""
    rig, snap = crash_mid_batch(seed)
    crash = rig.mem.copy()
    d1 = fresh_device(CFG, rig.mem, rig)
    rec = Recorder()
    d1.on_write = rec
    d1.recover()
    assert rec.writes[-1][2] == "sb_epoch"
    img = crash.copy()
    for a, data, _ in rec.writes:               # everything up to and including the epoch write
        img.write(a, data)
    d2 = fresh_device(CFG, img, rig)
    d2.lr = rig.dev.lr
    rec2 = Recorder()
    d2.on_write = rec2
    assert d2.recover() == 0, f"seed={seed}"
    assert (d2.committed, d2.recovery_epoch, sb_epoch(img)) == (1, 2, 2)
    assert d2.snapshot_tables() == snap
    assert [w for _, _, w in rec2.writes] == ["sb_epoch"]
    # a second attempt of batch 2, committed at the end; crash after each of its writes
    rig.mem = img                                # stage the inputs into this image first
    staged = []
    for t in (1, 0):
        offsets, indices = rig.random_bags(3, rig.shapes[t][0], max_len=4)
        staged.append((rig.stage_lookup(t, offsets, indices),
                       rig.stage_update(t, offsets, indices)[0]))
    start = img.copy()
    rec3 = Recorder()
    d2.on_write = rec3
    for dl, du in staged:
        assert d2.lookup(**dl, log=True)["status"] == E.OK
        assert d2.update(**du)["status"] == E.OK
    n3 = d2.next_slot
    assert n3 > 0 and [h["epoch"] for h in read_records(CFG, img, n3)] == [2] * n3
    assert d2.commit()["status"] == E.OK
    snap2 = d2.snapshot_tables()
    assert snap2 != snap
    for k, cimg in crash_images(start, rec3.writes):
        d = fresh_device(CFG, cimg, rig)
        d.recover()
        committed = any(w == "commit" for _, _, w in rec3.writes[:k])
        msg = f"seed={seed} crash after attempt-2 write {k}/{len(rec3.writes)}"
        assert d.committed == (2 if committed else 1), msg
        assert d.snapshot_tables() == (snap2 if committed else snap), msg


def test_stale_older_batch_ignored_and_window(seed):
    """Records of the committed batch are ignored; valid records beyond q + log_window are not
    scanned, those within are."""
    cfg = CFG.with_(log_window=2)
    rig, snap = crash_mid_batch(seed, cfg)
    dev = rig.dev
    n = dev.next_slot
    assert n >= 5
    # punch a hole at slot 1: q = 1, scan covers slots 0..2 only
    rig.mem.write(cfg.log_base + LOG_SLOT_BYTES, bytes(4))
    d = fresh_device(cfg, rig.mem, rig)
    assert d.recover() == 2
    # a committed batch's records (batch 1 after commit 1) are never applied
    rig2, snap2 = crash_mid_batch(seed, CFG)
    sb = CFG.superblock_base + 8
    rig2.mem.write(sb, (2).to_bytes(8, "little"))         # pretend batch 2 committed
    d2 = fresh_device(CFG, rig2.mem, rig2)
    tabs = rig2.dev.snapshot_tables()
    assert d2.recover() == 0 and d2.committed == 2 and d2.snapshot_tables() == tabs


def test_stale_relogged_record_gap(seed):
    """The hole the recovery epoch closes: a row re-logged in an earlier attempt (logged-set
    overflow) leaves a record holding a mid-batch value above the current attempt's records; it
    carries the older epoch and must not be applied."""
    cfg = CFG.with_(log_set_sets=1, log_set_ways=1)
    rig = Rig(seed, cfg)
    dev = rig.dev
    snap = dev.snapshot_tables()
    # attempt 1: x logged (slot 0, inserted), r logged (slot 1, set full), r updated,
    # r re-logged with its updated value (slot 2), crash
    dev.update(**rig.stage_update(0, [0, 3], [1, 5, 5])[0])
    assert dev.next_slot == 3
    d = fresh_device(cfg, rig.mem, rig)
    d.lr = dev.lr
    assert d.recover() == 3
    assert d.snapshot_tables() == snap
    # attempt 2 logs two other rows (slots 0, 1) and crashes; slot 2 (row 5, mid value) is stale
    d.update(**rig.stage_update(0, [0, 2], [7, 8])[0])
    assert d.next_slot == 2
    h = read_records(cfg, rig.mem, 3)[2]
    snap_row5 = snap[0][5 * 128:6 * 128]
    assert (h["magic"], h["batch"], h["row"], h["epoch"]) == (LOG_MAGIC, 1, 5, 0)
    assert h["data"] != snap_row5, f"seed={seed}: slot 2 must hold a mid-batch value of row 5"
    d2 = fresh_device(cfg, rig.mem, rig)
    assert d2.recover() == 2
    assert d2.snapshot_tables() == snap, f"seed={seed}"


# ---- superblock ---------------------------------------------------------------------------------

def test_fresh_superblock_formatting(seed):
    sb_line = struct.pack("<IIQ", SB_MAGIC, SB_VERSION, 0) + bytes(48)
    for garbage in (None, "version", "magic"):
        mem = MemoryImage(1 << CFG.addr_bits)
        if garbage:
            g = np.random.default_rng(seed).integers(0, 256, 64, dtype=np.uint8).tobytes()
            head = (struct.pack("<II", SB_MAGIC, SB_VERSION + 1) if garbage == "version"
                    else struct.pack("<II", SB_MAGIC ^ 1, SB_VERSION))
            mem.write(CFG.superblock_base, head + g[8:])
        dev = TrainingDevice(CFG, mem)
        rec = Recorder()
        dev.on_write = rec
        assert not dev.ready and dev.recover() == 0
        assert dev.ready and dev.committed == 0 and dev.recovered_records == 0
        assert dev.recovery_epoch == 0
        assert mem.read(CFG.superblock_base, 64) == sb_line
        assert [(a, d) for a, d, _ in rec.writes] == [
            (CFG.superblock_base + 8, bytes(56)),          # magic/version word untouched
            (CFG.superblock_base, struct.pack("<II", SB_MAGIC, SB_VERSION))]
    # a formatted superblock is read, not rewritten
    mem.write(CFG.superblock_base + 8, (5).to_bytes(8, "little"))
    dev = TrainingDevice(CFG, mem)
    rec = Recorder()
    dev.on_write = rec
    assert dev.recover() == 0 and dev.committed == 5
    assert rec.writes == [(SB_EPOCH, (1).to_bytes(8, "little"), "sb_epoch")]
    assert dev.recovery_epoch == 1
    c = dev.commit(batch=6)
    assert (c["status"], c["batch"], c["log_records"]) == (E.OK, 6, 0)
    assert mem.read(CFG.superblock_base, 16) == struct.pack("<IIQ", SB_MAGIC, SB_VERSION, 6)


# ---- errors of sections 2-4 ----------------------------------------------------------------------

def test_descriptor_errors_leave_state_intact(seed):
    rig = Rig(seed)
    dev = rig.dev
    d, _ = rig.stage_update(0, [0, 2], [1, 2])
    dl = rig.stage_lookup(0, [0, 2], [1, 2])
    dev.update(**d)
    assert dev.commit()["status"] == E.OK
    dev.update(**d)                                  # batch 2 open with one record per row
    mem0, slot0, n0 = rig.mem.copy(), dev.next_slot, dev.err_count
    mk = TrainingDevice.make_desc
    cases = [
        (mk(kind=0, table=9, batch=7, tag=1), E.UNKNOWN_KIND, 0, 0),
        (mk(kind=DescKind.SNAPSHOT, table=9, batch=7), E.BAD_EPOCH, 7, 4),   # 7 > C + 1
        (mk(kind=255), E.UNKNOWN_KIND, 255, 255),
        (mk(kind=DescKind.UPDATE, table=8, batch=7), E.BAD_TABLE, 8, 2),
        (mk(kind=DescKind.LOOKUP, table=0xFFFF, batch=7), E.BAD_TABLE, 0xFFFF, 1),
        (mk(kind=DescKind.UPDATE, table=0, batch=1, **{k: v for k, v in d.items()
                                                       if k not in ("table",)}),
         E.WRONG_BATCH, 1, 2),
        (mk(kind=DescKind.UPDATE, table=0, batch=3), E.WRONG_BATCH, 3, 2),
        (mk(kind=DescKind.COMMIT, table=9, batch=1), E.WRONG_BATCH, 1, 3),
        (mk(kind=DescKind.COMMIT, batch=2**64 - 1), E.WRONG_BATCH, 2**64 - 1, 3),
        (mk(kind=DescKind.LOOKUP, flags=FLAG_LOG, batch=0, **{k: v for k, v in dl.items()
                                                              if k != "table"}),
         E.WRONG_BATCH, 0, 1),
    ]
    for i, (desc, code, value, kind) in enumerate(cases):
        c = TrainingDevice.parse_cpl(dev.execute(desc))
        assert (c["status"], c["err_value"], c["kind"]) == (code, value, kind), f"case {i}: {c}"
        assert (c["rows"], c["sat"], c["lines"], c["log_records"], c["err_bag"]) == (0,) * 5
        assert c["batch"] == unpack_fields(DESC_FIELDS, desc)["batch"]
        assert (dev.err_code, dev.err_value, dev.err_count) == (code, value, n0 + i + 1)
        assert dev.status_error and "ERR" in dev.irq_status
        assert rig.mem == mem0, rig.mem.diff(mem0)
        assert dev.committed == 1 and dev.next_slot == slot0
    dev.err_clear()
    assert not dev.status_error
    # LOOKUP without LOG does not check the batch
    c = dev.lookup(**dl, batch=12345)
    assert (c["status"], c["batch"], c["log_records"]) == (E.OK, 12345, 0)
    # the open batch is still abortable to state 1
    host_reset(dev)
    assert dev.recover() == slot0 and dev.committed == 1
    snap1 = dev.snapshot_tables()
    r2 = Rig(seed)
    r2.dev.update(**r2.stage_update(0, [0, 2], [1, 2])[0])
    assert snap1 == r2.dev.snapshot_tables()


def test_width_checks_before_engine_checks(seed):
    """Section 2: DIM >= 2^16 (BAD_DIM), then table base, offsets, indices, data >= 2^addr_bits
    (ADDR_RANGE, value = that address) before the engine's lookup.md / section 4 checks. The
    cases are those of tests/cosim/device/test_device.py device_width_checks; expectations are read off the
    contract text, not the model."""
    rig = Rig(seed, shapes=((32, 16),))
    dev = rig.dev
    ab = CFG.addr_bits
    t0 = dev.tables[0][0]
    for tid, base, rows, dim in [(3, t0, 8, 48), (4, t0, 8, 1 << 16), (5, t0 + 4, 8, 16),
                                 (6, 1 << ab, 4, 16), (7, t0, 8, 0xFFFF)]:
        dev.set_table(tid, base, rows, dim)
    o, i = rig.stage_bags([0, 1, 2], [1, 2])
    out = rig.sa.alloc(2 * 16 * 4)
    g, _ = rig.stage_grads(2, 16)
    wide = (1 << ab) + CFG.staging_base        # in staging modulo 2^addr_bits, but too wide
    lk = dict(n_bags=2, offsets_addr=o, indices_addr=i, out_addr=out, log=True)
    up = dict(n_bags=2, offsets_addr=o, indices_addr=i, grads_addr=g)
    cases = [
        # (name, op, args, status, value)
        ("dim 48 + offsets >= 2^ab", "L", dict(lk, table=3, offsets_addr=wide),
         E.ADDR_RANGE, wide),
        ("dim 48 + offsets = 2^41", "L", dict(lk, table=3, offsets_addr=1 << 41),
         E.ADDR_RANGE, 0x20000000000),
        ("out unaligned + indices >= 2^ab", "L", dict(lk, table=0, indices_addr=wide,
                                                        out_addr=out + 32), E.ADDR_RANGE, wide),
        ("out in the table region + indices >= 2^ab", "L",
         dict(lk, table=0, indices_addr=wide, out_addr=t0), E.ADDR_RANGE, wide),
        ("UPDATE grads unaligned + offsets >= 2^ab", "U",
         dict(up, table=0, offsets_addr=wide, grads_addr=g + 16), E.ADDR_RANGE, wide),
        ("UPDATE dim 48 + grads >= 2^ab", "U", dict(up, table=3, grads_addr=wide),
         E.ADDR_RANGE, wide),
        ("table base >= 2^ab + offsets unaligned", "L", dict(lk, table=6, offsets_addr=o + 2),
         E.ADDR_RANGE, 1 << ab),
        ("table base >= 2^ab before offsets >= 2^ab", "U", dict(up, table=6, offsets_addr=wide),
         E.ADDR_RANGE, 1 << ab),
        ("table base unaligned + out >= 2^ab", "L", dict(lk, table=5, out_addr=wide),
         E.ADDR_RANGE, wide),
        ("dim 2^16 + offsets >= 2^ab", "L", dict(lk, table=4, offsets_addr=wide),
         E.BAD_DIM, 1 << 16),
        ("dim 2^16 + table base >= 2^ab (UPDATE)", "U", dict(up, table=4), E.BAD_DIM, 1 << 16),
        ("indices >= 2^ab before data >= 2^ab", "L",
         dict(lk, table=0, indices_addr=wide, out_addr=wide + 64), E.ADDR_RANGE, wide),
        ("offsets >= 2^ab before indices, data (UPDATE)", "U",
         dict(up, table=0, offsets_addr=wide + 8, indices_addr=wide + 4, grads_addr=wide),
         E.ADDR_RANGE, wide + 8),
        ("LOOKUP without LOG is width-checked too", "L",
         dict(lk, table=0, log=False, batch=999, out_addr=2**64 - 64), E.ADDR_RANGE, 2**64 - 64),
        # boundaries: just below the limits the engine's own checks decide
        ("dim 0xFFFF passes the DIM width: offsets >= 2^ab", "L",
         dict(lk, table=7, offsets_addr=wide), E.ADDR_RANGE, wide),
        ("dim 0xFFFF, addresses fine: engine BAD_DIM", "L", dict(lk, table=7), E.BAD_DIM,
         0xFFFF),
        ("dim 48 + offsets = 2^ab - 4: engine BAD_DIM", "L",
         dict(lk, table=3, offsets_addr=(1 << ab) - 4), E.BAD_DIM, 48),
        ("dim 48 + data = 2^ab - 64: engine BAD_DIM", "U",
         dict(up, table=3, grads_addr=(1 << ab) - 64), E.BAD_DIM, 48),
        ("out = 2^ab - 32: engine ALIGN", "L", dict(lk, table=0, out_addr=(1 << ab) - 32),
         E.ALIGN, (1 << ab) - 32),
    ]
    mem0, n0 = rig.mem.copy(), dev.err_count
    for k, (name, op, args, code, value) in enumerate(cases):
        c = dev.lookup(**args) if op == "L" else dev.update(**args)
        msg = f"seed {seed}, case {k} ({name}): {c}"
        assert (c["status"], c["err_value"]) == (code, value), msg
        assert (c["rows"], c["sat"], c["lines"], c["log_records"], c["err_bag"]) == (0,) * 5, msg
        assert (dev.err_code, dev.err_value, dev.err_count) == (code, value, n0 + k + 1), msg
        assert rig.mem == mem0, msg + "\n" + rig.mem.diff(mem0)
        assert dev.next_slot == 0 and dev.committed == 0, msg
    # order against the earlier checks: kind, table id, batch come first
    mk = TrainingDevice.make_desc
    for desc, code, value in [
            (mk(kind=7, table=4, batch=1, offsets_addr=wide), E.UNKNOWN_KIND, 7),
            (mk(kind=DescKind.LOOKUP, table=8, batch=1, offsets_addr=wide), E.BAD_TABLE, 8),
            (mk(kind=DescKind.UPDATE, table=4, batch=5, offsets_addr=wide), E.WRONG_BATCH, 5),
            (mk(kind=DescKind.LOOKUP, flags=FLAG_LOG, table=6, batch=0), E.WRONG_BATCH, 0)]:
        c = TrainingDevice.parse_cpl(dev.execute(desc))
        assert (c["status"], c["err_value"]) == (code, value), f"seed {seed}: {c}"
    # COMMIT ignores the address fields
    c = TrainingDevice.parse_cpl(dev.execute(mk(kind=DescKind.COMMIT, batch=1, table=6,
                                                offsets_addr=wide, data_addr=wide)))
    assert (c["status"], c["batch"]) == (E.OK, 1), f"seed {seed}: {c}"
    # the good LOOKUP+LOG of the cosim list still works (batch 2 now open)
    c = dev.lookup(**dict(lk, table=0))
    assert (c["status"], c["rows"], c["log_records"]) == (E.OK, 2, 2), f"seed {seed}: {c}"


def test_width_checks_follow_addr_bits(seed):
    """The width limit is 2^cfg.addr_bits: with addr_bits = 44 an offsets address of 2^41
    passes the width check and the engine reports BAD_DIM (dim 48) first."""
    for ab, code, value in [(40, E.ADDR_RANGE, 1 << 41), (44, E.BAD_DIM, 48)]:
        rig = Rig(seed, cfg=CFG.with_(addr_bits=ab), shapes=((8, 16),))
        rig.dev.set_table(3, rig.dev.tables[0][0], 8, 48)
        dl = rig.stage_lookup(0, [0, 1], [1])
        c = rig.dev.lookup(**{**dl, "table": 3, "offsets_addr": 1 << 41})
        assert (c["status"], c["err_value"]) == (code, value), f"seed {seed}, ab {ab}: {c}"


def test_log_full(seed):
    cfg = CFG.with_(log_size=LOG_SLOT_BYTES * 3 + 128)
    assert cfg.log_slots == 3
    rig = Rig(seed, cfg)
    dev = rig.dev
    snap = dev.snapshot_tables()
    rows, dim = rig.shapes[0]
    # LOOKUP + LOG of 5 distinct rows: 3 records, LOG_FULL (row 4, in bag 1, found the log
    # full; a LOOKUP's LOG_FULL is the command's status: err_bag 0), outputs all written
    dl = rig.stage_lookup(0, [0, 2, 5], [1, 2, 3, 4, 1])
    c = dev.lookup(**dl, log=True)
    assert (c["status"], c["err_value"], c["err_bag"]) == (E.LOG_FULL, 3, 0), c
    assert (c["rows"], c["lines"], c["log_records"]) == (5, 2 * dim // 16, 3)
    t = snap[0]
    out = rig.mem.read_i32(dl["out_addr"], 2 * dim).reshape(2, dim).astype(np.int64)
    tab = np.frombuffer(t, dtype="<i4").reshape(rows, dim).astype(np.int64)
    assert np.array_equal(out[1], tab[[3, 4, 1]].sum(0))
    # a later LOOKUP whose rows are all logged already: OK; one with an unlogged row: LOG_FULL
    c = dev.lookup(**rig.stage_lookup(0, [0, 0, 3], [3, 1, 2]), log=True)
    assert (c["status"], c["log_records"], c["rows"]) == (E.OK, 0, 3), c
    c = dev.lookup(**rig.stage_lookup(0, [0, 1], [7]), log=True)
    assert (c["status"], c["err_bag"], c["log_records"]) == (E.LOG_FULL, 0, 0), c
    # a lookup error wins over LOG_FULL
    c = dev.lookup(**rig.stage_lookup(0, [0, 2], [9, rows]), log=True)
    assert (c["status"], c["err_value"], c["err_bag"], c["log_records"]) == \
        (E.INDEX_RANGE, rows, 0, 0)
    # UPDATE: rows 1, 2, 3 are logged (applied), row 4 is not: stop before it
    d, grads = rig.stage_update(0, [0, 1, 4], [2, 1, 4, 3])
    exp = rig.table_list(0)
    ref_update(exp, [0, 1, 4], [2, 1, 4, 3], grads, dev.lr, cfg.frac_bits, rows_limit=2)
    c = dev.update(**d)
    assert (c["status"], c["err_value"], c["err_bag"], c["rows"], c["log_records"]) == \
        (E.LOG_FULL, 3, 1, 2, 0)
    assert rig.table_list(0) == exp
    host_reset(dev)
    assert dev.recover() == 3 and dev.snapshot_tables() == snap


def test_lookup_log_partial_rows(seed):
    """Choice 1: INDEX_RANGE in bag b logs bag b's rows before the bad index; a bag-level error
    of bag b logs none of bag b."""
    rig = Rig(seed)
    dev = rig.dev
    rows = rig.shapes[0][0]
    c = dev.lookup(**rig.stage_lookup(0, [0, 2, 5, 6], [1, 2, 3, rows, 4, 5]), log=True)
    assert (c["status"], c["err_bag"], c["log_records"], c["rows"]) == (E.INDEX_RANGE, 1, 3, 2)
    assert [r for _, r, _ in records_of(rig, 3)] == [1, 2, 3]
    c = dev.lookup(**rig.stage_lookup(0, [0, 2, 1, 3], [6, 7, 8]), log=True)
    assert (c["status"], c["err_bag"], c["log_records"]) == (E.OFFSETS_ORDER, 1, 2)
    assert [r for _, r, _ in records_of(rig, 5)] == [1, 2, 3, 6, 7]


# ---- rings --------------------------------------------------------------------------------------

def test_ring_processing_and_wrap(seed):
    rig = Rig(seed)
    dev = rig.dev
    cmd, cpl = rig.sa.alloc(4 * 64), rig.sa.alloc(4 * 64)
    assert dev.configure_ring(cmd, 4, cpl) == E.OK
    descs = []
    for k in range(7):
        if k % 3 == 2:
            descs.append(TrainingDevice.make_desc(kind=DescKind.COMMIT, batch=len(
                [x for x in descs if x[0] == DescKind.COMMIT]) + 1, tag=k))
        else:
            d, _ = rig.stage_update(k % 2, *rig.random_bags(2, 30))
            descs.append(TrainingDevice.make_desc(kind=DescKind.UPDATE, tag=k,
                                                  batch=len([x for x in descs
                                                             if x[0] == DescKind.COMMIT]) + 1,
                                                  **d))
    ref = fresh_device(CFG, rig.mem.copy(), rig)    # same image; descriptors via execute()
    ref.lr = dev.lr
    ref.recover()
    ref_cpls = [TrainingDevice.parse_cpl(ref.execute(x)) for x in descs]
    i = 0
    seq = 0
    while i < len(descs):
        n = min(3, len(descs) - i)         # at most size-1 pending
        for j in range(n):
            rig.mem.write(cmd + 64 * ((i + j) % 4), descs[i + j])
        assert dev.doorbell((i + n) % 4) == E.OK
        assert dev.pending == n
        out = dev.process()
        for j in range(n):
            seq += 1
            slot = (i + j) % 4
            rec = TrainingDevice.parse_cpl(rig.mem.read(cpl + 64 * slot, 64))
            assert rec == out[j] and rec["seq"] == seq and rec["tag"] == i + j
            assert {**rec, "seq": 0} == {**ref_cpls[i + j], "seq": 0}
            assert rec["status"] == E.OK
        assert dev.head == dev.tail == (i + n) % 4 and "CPL" in dev.irq_status
        i += n
    assert dev.committed == 2
    assert dev.snapshot_tables() == ref.snapshot_tables()


def test_ring_errors(seed):
    rig = Rig(seed, recover=False)
    dev = rig.dev
    s0 = CFG.staging_base
    assert dev.doorbell(1) == E.NOT_READY and dev.err_value == 1
    dev.recover()
    cases = [((s0, 3, s0 + 4096), 3), ((s0, 1, s0 + 4096), 1), ((s0, 1 << 17, s0 + 4096), 1 << 17),
             ((s0, 0, s0 + 4096), 0),
             ((s0 + 32, 4, s0 + 4096), s0 + 32), ((s0 - 64, 4, s0 + 4096), s0 - 64),
             ((S1 - 192, 4, s0 + 4096), S1 - 192), ((s0, 4, s0 + 4097), s0 + 4097),
             ((s0, 4, S1 - 64), S1 - 64)]
    for regs, bad in cases:
        assert dev.configure_ring(*regs) == E.OK
        assert dev.doorbell(1) == E.RING_CONFIG and dev.err_value == bad, regs
        assert dev.tail == 0
    assert dev.configure_ring(S1 - 256, 4, s0) == E.OK and dev.doorbell(0) == E.OK
    assert dev.configure_ring(s0, 4, s0 + 4096) == E.OK
    n = dev.err_count
    assert dev.doorbell(4) == E.DOORBELL_RANGE and dev.err_value == 4 and dev.tail == 0
    assert dev.doorbell(3) == E.OK and dev.pending == 3
    assert dev.doorbell(0) == E.RING_OVERFLOW and dev.err_value == 0 and dev.tail == 3
    assert dev.err_count == n + 2
    # ring configuration and RECOVER while pending: CSR_BUSY per 32-bit register write (LO then
    # HI), registers kept
    errs = []
    orig = dev._error
    dev._error = lambda code, value: (errs.append((code, value)), orig(code, value))
    n = dev.err_count
    assert dev.configure_ring(s0 + 8192, 8, s0 + 16384) == E.CSR_BUSY
    assert (dev.cmd_base, dev.cmd_size, dev.cpl_base, dev.tail) == (s0, 4, s0 + 4096, 3)
    ring = [REGMAP[r] for r in ("CMD_BASE_LO", "CMD_BASE_HI", "CMD_SIZE", "CPL_BASE_LO",
                                "CPL_BASE_HI")]
    assert errs == [(E.CSR_BUSY, a) for a in ring] and dev.err_count == n + 5
    assert dev.err_value == REGMAP["CPL_BASE_HI"]
    assert dev.recover() == -1 and dev.err_code == E.CSR_BUSY
    assert errs[-1] == (E.CSR_BUSY, REGMAP["CONTROL"])
    dev._error = orig
    out = dev.process()                      # the ring holds zero descriptors: UNKNOWN_KIND
    assert [c["status"] for c in out] == [E.UNKNOWN_KIND] * 3
    assert [c["seq"] for c in out] == [1, 2, 3]
    assert dev.doorbell(1) == E.OK and dev.doorbell(2) == E.OK and dev.pending == 3
    dev.process()
    assert dev.configure_ring(s0 + 8192, 8, s0 + 16384) == E.OK and dev.head == dev.tail == 0
    assert dev.seq == 0


REGMAP = {r["name"]: r["offset"] for r in json.loads(
    (pathlib.Path(__file__).resolve().parents[2] / "hw" / "csr" / "regmap.json").read_text())
    ["registers"]}


def test_csr_addr_from_regmap():
    names = ("CONTROL", "CMD_BASE_LO", "CMD_BASE_HI", "CMD_SIZE", "CPL_BASE_LO", "CPL_BASE_HI",
             "MLP_EPOCH_LO", "MLP_EPOCH_HI", "MLP_SLOT", "MLP_LAG")
    assert CSR_ADDR == {n: REGMAP[n] for n in names}
    assert len(set(CSR_ADDR.values())) == len(names) and all(a % 4 == 0 for a in CSR_ADDR.values())
    assert CSR_ADDR["CMD_BASE_HI"] == CSR_ADDR["CMD_BASE_LO"] + 4
    assert CSR_ADDR["CPL_BASE_HI"] == CSR_ADDR["CPL_BASE_LO"] + 4


def test_cpl_layout_roundtrip():
    vals = {n: (1 << (8 * w - 1)) + off for n, off, w in CPL_FIELDS}
    assert unpack_fields(CPL_FIELDS, pack_fields(CPL_FIELDS, vals, 64)) == vals


# ---- MLP snapshots (docs/training.md section 9) --------------------------------------------------
# References: slot addresses, header layout (struct) and CRC (zlib) computed here from the contract.

SNAP_HDR = "<IIQI"                                 # magic crc epoch length, then 44 zero bytes
SB_MLP_SLOT = CFG.superblock_base + 16             # SB_FIELDS mlp_slot word
SMALL = CFG.with_(slots_size=64 * 41)              # slot_bytes = (1312 // 64) * 64 = 1280


def ref_slot(cfg, i):
    slot_bytes = (cfg.slots_size // 2) // 64 * 64
    return cfg.slots_base + i * slot_bytes, slot_bytes - 64     # (slot address, capacity)


def ref_snap_header(epoch, payload):
    pad = bytes(-len(payload) % 64)
    hdr0 = struct.pack(SNAP_HDR, SNAP_MAGIC, 0, epoch, len(payload)) + bytes(44)
    crc = zlib.crc32(bytes(payload) + pad + hdr0) & 0xFFFFFFFF
    return struct.pack(SNAP_HDR, SNAP_MAGIC, crc, epoch, len(payload)) + bytes(44)


def guard_fill(mem, cfg, lines=70, byte=0xA5):
    """Pattern over the first ``lines`` lines of both slots and the superblock's spare bytes."""
    for i in (0, 1):
        a, _ = ref_slot(cfg, i)
        mem.write(a, bytes([byte]) * 64 * lines)


def snap_rig(seed, cfg=CFG, **kw):
    rig = Rig(seed, cfg, **kw)
    rig.dev.on_write = rig.rec = Recorder()
    return rig


def stage_params(rig, n, offset=0):
    """``n`` random bytes staged at a line + ``offset`` (any alignment) with junk around."""
    a = rig.sa.alloc(n + 192) + 64 + offset
    rig.mem.write(a - 64 - offset, rig.rng.integers(0, 256, n + 192, dtype=np.uint8).tobytes())
    payload = rig.rng.integers(0, 256, n, dtype=np.uint8).tobytes()
    rig.mem.write(a, payload)
    return a, payload


@pytest.mark.parametrize("length,offset", [(0, 0), (1, 5), (63, 1), (64, 0), (65, 63),
                                           (200, 37), (1216, 13), (4099, 0)])
def test_snapshot_writes_slot_header_flip(seed, length, offset):
    """SNAPSHOT writes payload line j with only payload bytes (guard bytes after it and the other
    slot untouched), then the header (magic, zlib CRC over padded payload + header, epoch,
    length), then the superblock mlp_slot word = slot + 1; completion OK, batch = epoch,
    lines = ceil(length/64), counters 0."""
    cfg = SMALL if length <= 1216 else CFG
    rig = snap_rig(seed, cfg)
    dev = rig.dev
    guard_fill(rig.mem, cfg)
    src, payload = stage_params(rig, length, offset)
    before = rig.mem.copy()
    c = dev.snapshot(1, src, length, tag=0x77)
    msg = f"seed={seed} length={length} offset={offset}"
    assert (c["status"], c["kind"], c["tag"], c["batch"]) == (E.OK, DescKind.SNAPSHOT, 0x77, 1), msg
    assert (c["lines"], c["rows"], c["sat"], c["log_records"], c["err_bag"], c["err_value"]) == \
        (-(-length // 64), 0, 0, 0, 0, 0), msg
    a, _ = ref_slot(cfg, 0)
    exp = before.copy()
    exp.write(a + 64, payload)
    exp.write(a, ref_snap_header(1, payload))
    exp.write(SB_MLP_SLOT, (1).to_bytes(8, "little"))
    assert rig.mem == exp, f"{msg}: {rig.mem.diff(exp)}"
    whats = [w for _, _, w in rig.rec.writes]
    n_lines = -(-length // 64)
    assert whats == ["snap_data"] * n_lines + ["snap_header", "snap_flip"], msg
    for j, (wa, wd, _) in enumerate(rig.rec.writes[:n_lines]):
        assert (wa, len(wd)) == (a + 64 + 64 * j, min(64, length - 64 * j)), msg
    assert (dev.mlp_slot, dev.mlp_epoch, dev.mlp_accepted) == (1, 1, 1), msg
    assert (dev.csr_read("MLP_SLOT"), dev.csr_read("MLP_EPOCH_LO"), dev.csr_read("SNAP_BUSY")) \
        == (1, 1, 0)
    assert dev.read_mlp_slot() is None, msg            # epoch 1 > C = 0: not recoverable yet
    assert dev.commit()["status"] == E.OK
    assert dev.read_mlp_slot() == (1, payload), msg
    assert not dev.status_error and dev.err_count == 0


def test_snapshot_checks_in_order(seed):
    """BAD_EPOCH (A < e <= C+1), ADDR_RANGE (>= 2^addr_bits), SNAP_LENGTH (> capacity),
    ADDR_RANGE (staging), in that order; an error writes nothing and changes no MLP state;
    table/flags/n_bags/lr are ignored, the batch check does not apply."""
    cfg = SMALL
    rig = snap_rig(seed, cfg)
    dev = rig.dev
    _, cap = ref_slot(cfg, 0)
    s0, s1 = cfg.staging_base, cfg.staging_base + cfg.staging_size
    wide = 1 << cfg.addr_bits
    src, payload = stage_params(rig, 100, 3)
    assert dev.snapshot(1, src, 100)["status"] == E.OK          # A = 1, C = 0
    for _ in range(2):
        dev.commit()                                            # C = 2, open batch 3
    assert dev.snapshot(2, src, 50)["status"] == E.OK           # A = 2 (slot B)
    mk = TrainingDevice.make_desc
    K4 = DescKind.SNAPSHOT
    cases = [  # (descriptor, status, value)
        (mk(kind=K4, batch=2, data_addr=src, length=10), E.BAD_EPOCH, 2),        # e == A
        (mk(kind=K4, batch=1, data_addr=src, length=10), E.BAD_EPOCH, 1),        # e < A
        (mk(kind=K4, batch=4, data_addr=src, length=10), E.BAD_EPOCH, 4),        # e > C + 1
        (mk(kind=K4, batch=0, data_addr=wide, length=cap + 1), E.BAD_EPOCH, 0),
        (mk(kind=K4, batch=2**64 - 1, data_addr=src), E.BAD_EPOCH, 2**64 - 1),
        (mk(kind=K4, batch=3, data_addr=wide, length=cap + 1), E.ADDR_RANGE, wide),
        (mk(kind=K4, batch=3, data_addr=2**64 - 1, length=1), E.ADDR_RANGE, 2**64 - 1),
        (mk(kind=K4, batch=3, data_addr=wide + s0, length=0), E.ADDR_RANGE, wide + s0),
        (mk(kind=K4, batch=3, data_addr=cfg.table_base, length=cap + 1), E.SNAP_LENGTH, cap + 1),
        (mk(kind=K4, batch=3, data_addr=src, length=2**32 - 1), E.SNAP_LENGTH, 2**32 - 1),
        (mk(kind=K4, batch=3, data_addr=s0 - 1, length=4), E.ADDR_RANGE, s0 - 1),
        (mk(kind=K4, batch=3, data_addr=cfg.slots_base, length=4), E.ADDR_RANGE, cfg.slots_base),
        (mk(kind=K4, batch=3, data_addr=s1 - 99, length=100), E.ADDR_RANGE, s1 - 99),
        (mk(kind=K4, batch=3, data_addr=s1, length=0), E.ADDR_RANGE, s1),
        (mk(kind=K4, batch=3, data_addr=s0 - 64, length=0), E.ADDR_RANGE, s0 - 64),
    ]
    mem0, n0 = rig.mem.copy(), dev.err_count
    for i, (desc, code, value) in enumerate(cases):
        c = TrainingDevice.parse_cpl(dev.execute(desc))
        assert (c["status"], c["err_value"], c["kind"]) == (code, value, K4), f"case {i}: {c}"
        assert (c["rows"], c["sat"], c["lines"], c["log_records"], c["err_bag"]) == (0,) * 5
        assert c["batch"] == unpack_fields(DESC_FIELDS, desc)["batch"]
        assert (dev.err_code, dev.err_value, dev.err_count) == (code, value, n0 + i + 1)
        assert rig.mem == mem0, f"case {i}: {rig.mem.diff(mem0)}"
        assert (dev.mlp_slot, dev.mlp_epoch, dev.mlp_accepted, dev.committed) == (2, 2, 2, 2)
    # edges that pass: the end of staging (length 0 at its last byte), capacity exactly,
    # ignored fields; each alternates the slot
    rig.mem.write(s1 - 100, bytes(range(100)))
    ok = [(mk(kind=K4, batch=3, data_addr=s1 - 100, length=100, table=0xFFFF, flags=0xFF,
              n_bags=7, lr=9, offsets_addr=wide), 2),
          (mk(kind=K4, batch=3, data_addr=s0, length=cap), 1)]
    for desc, lines in ok[:1]:
        c = TrainingDevice.parse_cpl(dev.execute(desc))
        assert (c["status"], c["lines"]) == (E.OK, lines), c
    assert (dev.mlp_slot, dev.mlp_epoch) == (1, 3)
    assert rig.mem.read(ref_slot(cfg, 0)[0] + 64, 100) == bytes(range(100))
    dev.commit()                                                # C = 3
    for e, (a, n) in ((4, (s0, cap)), (5, (s1 - 1, 0))):
        if e == 5:
            dev.commit()
        c = dev.snapshot(e, a, n)
        assert (c["status"], c["lines"]) == (E.OK, -(-n // 64)), (e, c)
    assert (dev.mlp_slot, dev.mlp_epoch) == (1, 5)
    assert rig.mem.read(ref_slot(cfg, 0)[0], 64) == ref_snap_header(5, b"")
    assert rig.mem.read(ref_slot(cfg, 1)[0], 64) == ref_snap_header(4, rig.mem.read(s0, cap))


def test_snapshot_slots_alternate(seed):
    """Slots A, B, A, ...; the other slot keeps its complete older snapshot."""
    rig = snap_rig(seed)
    dev = rig.dev
    kept = {}
    for e in range(1, 6):
        src, payload = stage_params(rig, int(rig.rng.integers(0, 300)), int(rig.rng.integers(64)))
        assert dev.snapshot(e, src, len(payload))["status"] == E.OK
        slot = (e - 1) % 2
        kept[slot] = (e, payload)
        assert (dev.mlp_slot, dev.mlp_epoch) == (slot + 1, e)
        assert rig.mem.read(SB_MLP_SLOT, 8) == (slot + 1).to_bytes(8, "little")
        for i, (ke, kp) in kept.items():
            a, _ = ref_slot(CFG, i)
            assert rig.mem.read(a, 64) == ref_snap_header(ke, kp), (seed, e, i)
            assert rig.mem.read(a + 64, len(kp)) == kp, (seed, e, i)
        assert dev.commit()["status"] == E.OK


def test_commit_lag_check(seed):
    """k = MLP_LAG (reset 0xFFFFFFFF = no bound): COMMIT(b) proceeds iff b - P <= k, else
    MLP_LAG (value b - P) after the batch check, nothing written, the batch stays open."""
    rig = snap_rig(seed)
    dev = rig.dev
    assert dev.mlp_lag == dev.csr_read("MLP_LAG") == 0xFFFFFFFF
    d, _ = rig.stage_update(0, [0, 2], [1, 2])
    for _ in range(3):                                     # no bound: commits without snapshots
        dev.update(**d)
        assert dev.commit()["status"] == E.OK
    dev.csr_write("MLP_LAG", 2)
    assert dev.mlp_lag == 2
    dev.update(**d)                                        # batch 4 open, P = 0: lag 4
    mem0, slot0, n0 = rig.mem.copy(), dev.next_slot, dev.err_count
    c = dev.commit(batch=5)
    assert (c["status"], c["err_value"]) == (E.WRONG_BATCH, 5)      # batch check first
    c = dev.commit()
    assert (c["status"], c["err_value"], c["batch"], c["log_records"]) == (E.MLP_LAG, 4, 4, 0)
    assert (dev.err_code, dev.err_value, dev.err_count) == (E.MLP_LAG, 4, n0 + 2)
    assert rig.mem == mem0 and dev.committed == 3 and dev.next_slot == slot0
    src, payload = stage_params(rig, 70)
    assert dev.snapshot(2, src, 70)["status"] == E.OK       # P = 2: lag 2 <= 2
    c = dev.commit()
    assert (c["status"], c["batch"], c["log_records"]) == (E.OK, 4, slot0)
    assert dev.commit()["status"] == E.MLP_LAG              # b = 5, lag 3
    dev.csr_write("MLP_LAG", 3)
    assert dev.commit()["status"] == E.OK
    dev.csr_write("MLP_LAG", 0)                             # k = 0: snapshot of b itself
    c = dev.commit()
    assert (c["status"], c["err_value"]) == (E.MLP_LAG, 4)
    assert dev.snapshot(6, src, 0)["status"] == E.OK
    assert dev.commit()["status"] == E.OK and dev.committed == 6
    # reset brings the CSR back to no bound; recovery restores P from the slot
    host_reset(dev)
    dev.recover()
    assert (dev.mlp_lag, dev.mlp_slot, dev.mlp_epoch, dev.mlp_accepted) == (0xFFFFFFFF, 2, 6, 6)
    dev.csr_write("MLP_LAG", 1)
    assert dev.commit()["status"] == E.OK                   # 7 - 6 = 1
    c = dev.commit()
    assert (c["status"], c["err_value"]) == (E.MLP_LAG, 2)
    # read-only MLP registers: CSR_RO with the register's address
    for name in ("MLP_SLOT", "MLP_EPOCH_LO", "MLP_EPOCH_HI"):
        dev.csr_write(name, 1)
        assert (dev.err_code, dev.err_value) == (E.CSR_RO, REGMAP[name])
    assert dev.mlp_slot == 2
    with pytest.raises(ValueError):
        dev.csr_write("MLP_LAG", 1 << 32)


def write_slot(mem, cfg, i, epoch, payload, tail=b""):
    a, _ = ref_slot(cfg, i)
    mem.write(a + 64, payload + tail)
    mem.write(a, ref_snap_header(epoch, payload))


def test_recovery_slot_choice(seed):
    """Valid = magic, length <= capacity, epoch <= C, CRC (bytes past length in the last line
    taken as 0); the larger epoch wins, A on a tie; none -> 0/0; fresh format reports none; the
    superblock mlp_slot word is not trusted; recovery writes no slot byte."""
    cfg = SMALL
    rng = np.random.default_rng(seed)
    _, cap = ref_slot(cfg, 0)
    pa = rng.integers(0, 256, 130, dtype=np.uint8).tobytes()
    pb = rng.integers(0, 256, 64, dtype=np.uint8).tobytes()
    junk = rng.integers(1, 256, 62, dtype=np.uint8).tobytes()

    def recover(mem):
        dev = TrainingDevice(cfg, mem)
        dev.on_write = rec = Recorder()
        dev.recover()
        slots0, slots1 = cfg.slots_base, cfg.slots_base + cfg.slots_size
        assert all(not slots0 <= a < slots1 for a, _, _ in rec.writes)
        return dev

    # a fresh superblock reports none even over valid-looking slots
    mem = MemoryImage(1 << cfg.addr_bits)
    write_slot(mem, cfg, 0, 0, pa)
    dev = recover(mem)
    assert (dev.mlp_slot, dev.mlp_epoch, dev.read_mlp_slot()) == (0, 0, (0, pa))
    # formatted, C = 7, slots empty
    mem.write(cfg.superblock_base + 8, (7).to_bytes(8, "little"))
    mem.write(ref_slot(cfg, 0)[0], bytes(64 * 4))

    def case(ea, eb, word=0, corrupt=None, exp=None, what=""):
        m = mem.copy()
        if ea is not None:
            write_slot(m, cfg, 0, ea, pa, junk)           # junk after the payload's last byte
        if eb is not None:
            write_slot(m, cfg, 1, eb, pb)
        if corrupt:
            corrupt(m)
        m.write(SB_MLP_SLOT, word.to_bytes(8, "little"))
        img = m.copy()
        dev = recover(m)
        got = (dev.mlp_slot, dev.mlp_epoch, dev.mlp_accepted)
        assert got == exp, f"seed={seed} {what}: {got} != {exp}"
        assert dev.csr_read("MLP_SLOT") == exp[0]
        want = None if exp[0] == 0 else (exp[1], pa if exp[0] == 1 else pb)
        assert dev.read_mlp_slot() == want, what
        d2 = recover(m)                                     # idempotent
        assert (d2.mlp_slot, d2.mlp_epoch) == exp[:2], what
        diff = m.diff(img)
        assert all(a // 64 * 64 == cfg.superblock_base for a, _ in diff), what
        return dev

    def flip(i, off, bit=1):
        def f(m):
            a = ref_slot(cfg, i)[0] + off
            m.write(a, bytes([m.read(a, 1)[0] ^ bit]))
        return f

    case(None, None, exp=(0, 0, 0), what="none written")
    case(3, 5, word=1, exp=(2, 5, 5), what="B newer, word says A")
    case(6, 5, word=2, exp=(1, 6, 6), what="A newer, word says B")
    case(7, 7, exp=(1, 7, 7), what="tie -> A")
    case(8, 5, exp=(2, 5, 5), what="A epoch > C")
    case(8, 9, exp=(0, 0, 0), what="both > C")
    case(6, 5, corrupt=flip(0, 64 + 17), exp=(2, 5, 5), what="torn A payload")
    case(6, 5, corrupt=flip(0, 64 + 129, 0x80), exp=(2, 5, 5), what="torn A last payload byte")
    case(6, 5, corrupt=flip(0, 4), exp=(2, 5, 5), what="A crc")
    case(6, 5, corrupt=flip(0, 0), exp=(2, 5, 5), what="A magic")
    case(6, 5, corrupt=flip(0, 8), exp=(2, 5, 5), what="A epoch")
    case(6, 5, corrupt=flip(0, 30), exp=(2, 5, 5), what="A spare header byte")
    case(6, 5, corrupt=flip(1, 64), exp=(1, 6, 6), what="torn B")
    case(6, 5, corrupt=lambda m: (flip(0, 70)(m), flip(1, 70)(m)), exp=(0, 0, 0), what="both")
    case(6, 5, corrupt=flip(0, 64 + 130), exp=(1, 6, 6), what="byte past length ignored")

    def too_long(m):            # a header claiming more than the capacity, CRC made to match
        a = ref_slot(cfg, 0)[0]
        m.write(a, struct.pack(SNAP_HDR, SNAP_MAGIC, 0, 6, cap + 1) + bytes(44))
    case(6, 5, corrupt=too_long, exp=(2, 5, 5), what="length > capacity")
    # capacity exactly is valid
    m = mem.copy()
    big = rng.integers(0, 256, cap, dtype=np.uint8).tobytes()
    write_slot(m, cfg, 1, 4, big)
    assert recover(m).read_mlp_slot() == (4, big)
    # after recovery A = P = the recovered epoch; the next snapshot uses the other slot
    m = mem.copy()
    write_slot(m, cfg, 0, 6, pa)
    dev = recover(m)
    src = cfg.staging_base + 4096
    m.write(src, pb)
    c = dev.snapshot(6, src, 64)
    assert (c["status"], c["err_value"]) == (E.BAD_EPOCH, 6)
    assert dev.snapshot(8, src, 64)["status"] == E.OK and dev.mlp_slot == 2
    assert m.read(ref_slot(cfg, 0)[0] + 64, 130) == pa


def test_mlp_epoch_csr_hi(seed):
    """MLP_EPOCH_HI:LO hold a 64-bit epoch (recovered from a slot with epoch >= 2^32)."""
    e = (5 << 32) | 0x1234 | (seed & 0xFF)
    mem = MemoryImage(1 << CFG.addr_bits)
    TrainingDevice(CFG, mem).recover()
    mem.write(CFG.superblock_base + 8, e.to_bytes(8, "little"))
    write_slot(mem, CFG, 1, e, b"xyz")
    dev = TrainingDevice(CFG, mem)
    dev.recover()
    assert (dev.csr_read("MLP_EPOCH_HI"), dev.csr_read("MLP_EPOCH_LO")) == (5, e & 0xFFFFFFFF)
    assert (dev.mlp_slot, dev.read_mlp_slot()) == (2, (e, b"xyz"))


def test_snapshot_through_ring(seed):
    """SNAPSHOT via the ring: its completion record is written after the snapshot's writes."""
    rig = snap_rig(seed)
    dev = rig.dev
    cmd, cpl = rig.sa.alloc(4 * 64), rig.sa.alloc(4 * 64)
    dev.configure_ring(cmd, 4, cpl)
    src, payload = stage_params(rig, 99, 7)
    dev.csr_write("MLP_LAG", 0)
    descs = [TrainingDevice.make_desc(kind=DescKind.SNAPSHOT, batch=1, data_addr=src, length=99,
                                      tag=1),
             TrainingDevice.make_desc(kind=DescKind.COMMIT, batch=1, tag=2),
             TrainingDevice.make_desc(kind=DescKind.SNAPSHOT, batch=1, data_addr=src, tag=3)]
    for i, d in enumerate(descs):
        rig.mem.write(cmd + 64 * i, d)
    rig.rec.writes.clear()
    assert dev.doorbell(3) == E.OK
    out = dev.process()
    assert [(c["status"], c["lines"], c["seq"]) for c in out] == [
        (E.OK, 2, 1), (E.OK, 0, 2), (E.BAD_EPOCH, 0, 3)]
    assert [w for _, _, w in rig.rec.writes] == ["snap_data", "snap_data", "snap_header",
                                                 "snap_flip", "cpl", "commit", "cpl", "cpl"]
    assert dev.read_mlp_slot() == (1, payload)


@pytest.mark.parametrize("k", [0, 1, 3])
def test_crash_campaign_with_snapshots(seed, k):
    """Host protocol of section 9 (params alternate between two staging buffers, SNAPSHOT(b)
    when b - A >= max(k, 1), then COMMIT(b)) over 7 batches of LOOKUP+LOG / UPDATE, one batch
    aborted by reset + RECOVER and retried. Crash after every device write: recovery gives the
    tables of the last COMMIT that landed, C - k <= m <= C for the recovered epoch m, and the
    recovered slot's payload equals what the host wrote for epoch m (m = 0: no slot)."""
    seed = seed * 10 + k
    rig = Rig(seed, extreme=0.05)
    dev = rig.dev
    dev.csr_write("MLP_LAG", k)
    bufs = [rig.sa.alloc(600) + int(rig.rng.integers(0, 64)) for _ in range(2)]
    batches = batches_for(rig, 7)
    staged = [[(kind, (rig.stage_lookup(t, o, i) if kind == "L" else
                       rig.stage_update(t, o, i)[0])) for kind, t, o, i in b] for b in batches]
    base = rig.mem.copy()
    rec = Recorder()
    dev.on_write = rec
    snaps = {0: dev.snapshot_tables()}
    params = {}
    n_snap = 0
    for b, batch in enumerate(staged, start=1):
        for attempt in range(2 if b == 4 else 1):
            for kind, d in batch:
                c = dev.lookup(**d, log=True) if kind == "L" else dev.update(**d)
                assert c["status"] == E.OK, c
            if attempt == 0 and b == 4:
                host_reset(dev)                          # abort after the batch's updates
                dev.on_write = rec
                dev.recover()
                dev.csr_write("MLP_LAG", k)
                assert dev.snapshot_tables() == snaps[3]
        if b - dev.mlp_accepted >= max(k, 1):
            p = rig.rng.integers(0, 256, int(rig.rng.integers(0, 520)), dtype=np.uint8).tobytes()
            src = bufs[n_snap % 2]
            n_snap += 1
            rig.mem.write(src, p)
            params[b] = p
            assert dev.snapshot(b, src, len(p))["status"] == E.OK
        assert dev.commit()["status"] == E.OK, (seed, b)
        snaps[b] = dev.snapshot_tables()
    whats = [w for _, _, w in rec.writes]
    assert whats.count("snap_flip") == n_snap >= 7 // max(k, 1) - 1
    img = base.copy()
    seen = set()
    for cut in range(len(rec.writes) + 1):
        d = fresh_device(rig.cfg, img.copy(), rig)
        d.recover()
        msg = f"seed={seed} k={k} crash after write {cut}/{len(rec.writes)}"
        C, m = d.committed, d.mlp_epoch
        assert C == whats[:cut].count("commit"), msg
        assert d.snapshot_tables() == snaps[C], msg
        assert C - k <= m <= C, f"{msg}: C={C} m={m}"
        got = d.read_mlp_slot()
        assert got == (None if m == 0 else (m, params[m])), msg
        assert d.mlp_slot == (0 if m == 0 else d.mlp_slot) and (d.mlp_slot == 0) == (m == 0)
        seen.add((C, m))
        if cut < len(rec.writes):
            img.write(*rec.writes[cut][:2])
    assert len(seen) >= 7, seen


def test_reset_clears_the_table_directory_and_lr():
    """A device reset puts the table directory and LR at their reset values (0), as the RTL's
    CSR block does (docs/registers.md; the device bench's CSR sweep checks the RTL side)."""
    rig = Rig(1)
    dev = rig.dev
    dev.lr = 123
    assert any(d for _, _, d in dev.tables)
    dev.reset()
    assert dev.tables == [(0, 0, 0)] * len(dev.tables) and dev.lr == 0
