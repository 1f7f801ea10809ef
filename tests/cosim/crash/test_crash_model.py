"""The crash campaign's legal outcomes, checked on the golden model's own run (no simulator).

The model's write stream of the campaign's workload (SNAPSHOT in every batch) is cut at seeded
write boundaries; the model recovers each cut image. Its outcome must lie in what the campaign
accepts from the RTL: C in [batches read, batches rung], the tables after C, and (MLP_SLOT,
MLP_EPOCH) in ``TrainingWorkload.legal_mlp``. And a second cut inside that recovery's own
writes, recovered again, must give one of the campaign's two nested outcomes ("again": the
first recovery's image, "done": a recovery of it). A legal set off by one batch fails here
(``test_wrong_legal_set_is_caught``).
"""
import random

import pytest

from cosim.training_workload import make_workload
from hw.config import CONFIGS, DeviceConfig
from hw.encodings import DescKind
from trainingcxl.crash.campaign import EXTENDED_LOG_SIZE, EXTENDED_WORKLOAD

N_CUTS = 40


def _nonstaging(cfg, mem):
    s0, s1 = cfg.staging_base, cfg.staging_base + cfg.staging_size
    return {a: bytes(v) for a, v in mem._lines.items() if not s0 <= a < s1}


def _write_stream(wl):
    """[(addr, data, batch)] of the model's run of ``wl`` from its initial image (batch 0:
    the format)."""
    writes = []
    mem = wl.initial.copy()
    dev = wl.model(mem)
    cur = [0]
    dev.on_write = lambda a, d, what: writes.append((a, d, cur[0]))
    dev.recover()
    for b in wl.batches:
        cur[0] = b.batch
        for a, data in b.staging:
            mem.write(a, data)
        for d in b.descs:
            dev.execute(d)
    return writes


def _cut(wl, writes, p):
    mem = wl.initial.copy()
    for a, d, _b in writes[:p]:
        mem.write(a, d)
    return mem


def _recovered_cut(wl, writes, p):
    """The model's recovery of the image cut after ``p`` writes: (batches rung, COMMIT
    completions read, image, device)."""
    b = writes[p][2] if p < len(writes) else wl.n_batches + 1
    rung, read = min(b, wl.n_batches), max(0, b - 1)
    mem = _cut(wl, writes, p)
    dev = wl.model(mem)
    dev.recover()
    return rung, read, mem, dev


def _mlp_violations(wl, writes, cuts, legal):
    """Cuts whose model recovery reports an (MLP_SLOT, MLP_EPOCH) outside ``legal(c, rung,
    read)``."""
    out = []
    for p in cuts:
        rung, read, _, dev = _recovered_cut(wl, writes, p)
        if (dev.mlp_slot, dev.mlp_epoch) not in legal(dev.committed, rung, read):
            out.append(p)
    return out


def _check_cuts(cfg, wl, seed, tag, n_cuts=N_CUTS, n_snap_cuts=10):
    """Cut the model's run of ``wl`` at seeded writes (``n_snap_cuts`` of them inside snapshot
    copies), recover each, check the outcome and a second cut inside that recovery; returns
    the (MLP_SLOT, MLP_EPOCH) pairs seen."""
    writes = _write_stream(wl)
    rng = random.Random(f"model-cuts-{seed}-{tag}")
    snap_cuts = [p for p, w in enumerate(writes) if cfg.slots_base <= w[0] <
                 cfg.slots_base + cfg.slots_size]
    cuts = sorted(set(rng.sample(range(len(writes) + 1), n_cuts)
                      + rng.sample(snap_cuts, n_snap_cuts)))
    seen = set()
    for p in cuts:
        rung, read, mem, dev = _recovered_cut(wl, writes, p)
        c = dev.committed
        assert read <= c <= rung, (seed, tag, p, c, rung, read)
        assert not wl.table_diffs(mem, wl.tables_after(c)), (seed, tag, p)
        got = (dev.mlp_slot, dev.mlp_epoch)
        legal = wl.legal_mlp(c, rung, read)
        assert got in legal, (seed, tag, p, c, rung, read, got, legal)
        seen.add(got)
        # a second failure inside this recovery: cut its own writes, recover again
        first = _cut(wl, writes, p)
        rec_writes = []
        d1 = wl.model(first)
        d1.on_write = lambda a, d, what: rec_writes.append((a, d))
        d1.recover()
        again = _nonstaging(cfg, first)
        done_mem = first.copy()
        wl.model(done_mem).recover()
        done = _nonstaging(cfg, done_mem)
        q = rng.randrange(0, len(rec_writes) + 1)
        mem2 = _cut(wl, writes, p)
        for a, d in rec_writes[:q]:
            mem2.write(a, d)
        d2 = wl.model(mem2)
        d2.recover()
        assert _nonstaging(cfg, mem2) in (again, done), (seed, tag, p, q, len(rec_writes))
        assert (d2.committed, d2.mlp_slot, d2.mlp_epoch) == (c, *got), (seed, tag, p, q)
    return seen


@pytest.mark.parametrize("lag, hot", [(0, 0), (1, 0), (2, 0), (1, 12)])
def test_model_cuts_land_in_legal_outcomes(seed, lag, hot):
    """``hot``: rows of one logged-set set per batch (``make_workload(hot_set=...)``), so the
    set overflows and rows get duplicate undo records."""
    cfg = DeviceConfig()
    rows = (300, 200, 160) if not hot else (hot * cfg.log_set_sets, 200, 160)
    wl = make_workload(cfg, seed, snap_bytes=300, snap_lag=lag, n_batches=4, hot_set=hot,
                       rows=rows)
    seen = _check_cuts(cfg, wl, seed, lag)
    assert len(seen) >= 3, (seed, lag, seen)       # the cuts reached several snapshot states


def test_model_cuts_extended_workload(seed):
    """The extended campaign (``make crash-extended``): fpga-ecp5 with a 136-slot log, tables
    of 2^20 rows written only where read, error completions expected. Batches end in
    LOG_FULL (a LOOKUP that could not log a row, UPDATEs stopped before a row they could not
    log, COMMITs of what was applied), and cuts anywhere still recover to the legal outcomes."""
    cfg = CONFIGS["fpga-ecp5"].with_(log_size=EXTENDED_LOG_SIZE)
    wl = make_workload(cfg, seed, **EXTENDED_WORKLOAD)
    assert cfg.log_slots == 136
    errs = wl.cpl_errors
    assert set(errs) == {"LOG_FULL"} and errs["LOG_FULL"] >= 4, (seed, errs)
    # LOG_FULL completions stop where the model says: an UPDATE that could not log wrote fewer
    # rows than its bags hold, and a later batch still starts with an empty log
    assert all(sum(c["log_records"] for c in b.expect if c["kind"] != DescKind.COMMIT)
               <= cfg.log_slots for b in wl.batches), seed
    assert max(t.rows for t in wl.tables) == 1 << 20
    assert len(wl.initial._lines) < 10_000, len(wl.initial._lines)   # only rows read are held
    _check_cuts(cfg, wl, seed, "extended", n_cuts=30, n_snap_cuts=5)


def test_wrong_legal_set_is_caught(seed):
    """The cut enumeration has teeth: a legal set off by one batch (slots of epoch <= C-1
    only) is contradicted by the model's own recoveries."""
    cfg = DeviceConfig()
    wl = make_workload(cfg, seed, snap_bytes=300, snap_lag=1, n_batches=3)
    writes = _write_stream(wl)
    cuts = list(range(0, len(writes) + 1, 7))
    assert not _mlp_violations(wl, writes, cuts, wl.legal_mlp), seed
    assert _mlp_violations(wl, writes, cuts,
                           lambda c, rung, read: wl.legal_mlp(max(0, c - 1), rung, read)), seed


def test_model_cuts_late_lookup_workload(seed):
    """The late-LOOKUP workload (``make_workload(late_lookup=..., split_doorbell=True)``): the
    extra LOOKUP+LOG reads only rows its batch has not read, so it logs every one of them; each
    batch is two doorbells, the second its SNAPSHOT and COMMIT; cuts anywhere still recover to
    the legal outcomes. More bags than fresh rows are refused."""
    cfg = DeviceConfig()
    wl = make_workload(cfg, seed, snap_bytes=300, snap_lag=1, n_batches=3, late_lookup=20,
                       split_doorbell=True)
    for b in wl.batches:
        kinds = [DescKind(c["kind"]).name for c in b.expect]
        assert kinds == ["LOOKUP"] * 3 + ["UPDATE"] * 3 + ["LOOKUP", "SNAPSHOT", "COMMIT"], kinds
        assert [(k, len(d)) for k, d in b.parts] == [(0, 7), (7, 2)], b.doorbells
        late = b.expect[6]
        assert late["rows"] == late["log_records"] == 20 * 3, (seed, b.batch, late)
    plain = make_workload(cfg, seed, snap_bytes=300, snap_lag=1, n_batches=3)
    assert [(k, len(d)) for k, d in plain.batches[0].parts] == [(0, 8)]
    _check_cuts(cfg, wl, seed, "late-lookup", n_cuts=30, n_snap_cuts=5)
    with pytest.raises(ValueError, match="not read in batch"):
        make_workload(cfg, seed, n_batches=1, late_lookup=60)
