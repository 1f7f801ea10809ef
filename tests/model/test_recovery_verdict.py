"""The main job's recovery verdict (``trainingcxl.train.twin.recovery_problems``) judges a
recovered device from the host's own run, so it catches what a twin reseeded from the device's
crash image cannot: here a device whose crash image lost its undo log (a logging bug) recovers
to tables that its reseeded twin agrees with, and the verdict refuses them."""
import numpy as np
import pytest

from sw_model.embedding_device import ModelDevice, PowerFailure, StagingLayout
from hw.config import DEFAULT
from trainingcxl.train.twin import recovery_problems


def _device(seed, rows=(40, 70), dims=(16, 32)):
    rng = np.random.default_rng(seed)
    tabs = [rng.integers(-2**27, 2**27, size=(r, d), dtype=np.int64).astype(np.int32)
            for r, d in zip(rows, dims)]
    L = StagingLayout(DEFAULT, rows, dims, 24, 100, 256)
    return (lambda: ModelDevice(L, tabs, mlp_lag=1, seed=seed)), tabs, rng


def _bags(rng, rows, n=12, max_len=4):
    lens = rng.integers(1, max_len + 1, n)
    o = np.concatenate(([0], np.cumsum(lens)))
    return o, rng.integers(0, rows, int(o[-1]))


def _verdict(host, c, dev, tables_committed, blobs, commit_in_flight=False):
    return recovery_problems(c=c, committed=host.dev.committed,
                             commit_in_flight=commit_in_flight, tables=dev.tables(),
                             tables_committed=tables_committed, tables_open=host.tables(),
                             slot=dev.dev.mlp_slot, epoch=dev.dev.mlp_epoch,
                             slot_payload=(dev.read_slot(dev.dev.mlp_slot - 1)
                                           if dev.dev.mlp_slot else None),
                             blobs=blobs, lag=1)


@pytest.mark.parametrize("wipe_log", [False, True])
def test_verdict_from_the_hosts_run_catches_a_lost_log(seed, wipe_log):
    make, tabs, rng = _device(seed)
    host, dut = make(), make()        # the host's twin and the "device" run the same batches
    bags = [_bags(rng, t.shape[0]) for t in tabs]
    grads = [rng.standard_normal((12, t.shape[1])).astype(np.float32) for t in tabs]
    blobs = {}
    for d in (host, dut):
        d.lookup(1, bags)
        d.update(1, bags, grads, 0.5)
        d.snapshot(1, b"mlp-1")
        d.commit(1)
    blobs[1] = [b"mlp-1"]
    committed_tables = host.tables()
    for d in (host, dut):
        d.lookup(2, bags)
    dut.schedule_power_failure(after_writes=7)      # inside batch 2's UPDATE (rows written)
    with pytest.raises(PowerFailure):
        dut.update(2, bags, grads, 0.5)
    image = dut.mem
    if wipe_log:            # the device's crash image lost its undo records
        L = DEFAULT
        for a in [a for a in image._lines if L.log_base <= a < L.log_base + L.log_size]:
            del image._lines[a]
    rec = make()
    rec.restart_from(image)           # the device recovers its own image ...
    twin = make()
    twin.restart_from(image)          # ... and a twin reseeded from that image agrees with it
    assert [np.array_equal(a, b) for a, b in zip(rec.tables(), twin.tables())] == [True, True]
    assert rec.dev.committed == 1 and rec.dev.mlp_epoch == 1
    problems = _verdict(host, rec.dev.committed, rec, committed_tables, blobs)
    if wipe_log:
        assert problems and "table" in problems[0], (seed, problems)
    else:
        assert problems == [], (seed, problems)


def test_verdict_checks_committed_mlp_and_lag(seed):
    t = [np.arange(32, dtype=np.int32).reshape(2, 16)]
    t2 = [t[0] + 1]
    base = dict(committed=3, commit_in_flight=False, tables=t, tables_committed=t,
                tables_open=t2, slot=1, epoch=3, slot_payload=b"m3", blobs={3: [b"m3"]},
                lag=1)
    assert recovery_problems(c=3, **base) == []
    assert "allows [3]" in recovery_problems(c=4, **base)[0]
    # the power failed during COMMIT 4: C = 4 is legal, with the open batch's tables
    assert recovery_problems(c=4, **{**base, "commit_in_flight": True, "tables": t2}) == []
    assert "table 0 row 0 element 0" in recovery_problems(
        c=4, **{**base, "commit_in_flight": True})[0]
    assert "does not hold" in recovery_problems(c=3, **{**base, "slot_payload": b"m2"})[0]
    assert "older than" in recovery_problems(c=3, **{**base, "epoch": 1,
                                                     "blobs": {1: [b"m3"]}})[0]
    assert "older than" in recovery_problems(c=3, **{**base, "slot": 0})[0]
    assert "> COMMITTED" in recovery_problems(c=3, **{**base, "epoch": 4,
                                                     "blobs": {4: [b"m3"]}})[0]
