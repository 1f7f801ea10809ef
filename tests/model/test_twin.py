"""The main job's golden-model twin (``trainingcxl.train.twin``), inline and in its own process:
a run that agrees passes, and a wrong completion, host read, recovery or memory line is
caught (in the child process: by a later call, at the latest by ``close``), with the place it
was found. The "RTL" here is a second golden-model device whose answers can be corrupted."""
import numpy as np
import pytest

from hw.config import DEFAULT
from sw_model.embedding_device import ModelDevice, PowerFailure, StagingLayout
from sw_model.memory import LineSnapshot
from trainingcxl.train.twin import TWIN_MODES, TwinMismatch, make_twin

ROWS, DIMS = (40, 70), (16, 32)


def _setup(seed, mode):
    rng = np.random.default_rng(seed)
    tabs = [rng.integers(-2**27, 2**27, size=(r, d), dtype=np.int64).astype(np.int32)
            for r, d in zip(ROWS, DIMS)]
    L = StagingLayout(DEFAULT, ROWS, DIMS, 24, 100, 256)
    twin = make_twin(mode, L, tabs, mlp_lag=1, seed=seed)
    return L, tabs, rng, twin


class Device(ModelDevice):
    """A golden-model device standing in for the RTL: every primitive is handed to ``twin``
    with its answer, which ``corrupt`` may change first."""

    def attach(self, twin, corrupt=None):
        self.twin, self.corrupt, self.where = twin, corrupt or {}, "setup"
        return self

    def write_staging(self, chunks):
        self.twin.write_staging(chunks)
        super().write_staging(chunks)

    def read_mem(self, addr, n):
        got = super().read_mem(addr, n)
        if "read" in self.corrupt:
            got = bytes([got[0] ^ 1]) + got[1:]
        self.twin.check_read(addr, n, got, self.where)
        return got

    def submit(self, descs):
        got = super().submit(descs)
        if "cpl" in self.corrupt:
            got = [dict(c) for c in got]
            got[-1]["rows"] += 1
        self.twin.check_submit(descs, got, self.where)
        return got


def _batch(rng, n=12):
    lens = rng.integers(1, 5, n)
    o = np.concatenate(([0], np.cumsum(lens)))
    return [(o, rng.integers(0, r, int(o[-1]))) for r in ROWS]


def _train(dev, rng, batches, first=1):
    for b in range(first, first + batches):
        dev.where = f"batch {b}"
        bags = _batch(rng)
        dev.lookup(b, bags)
        grads = [rng.standard_normal((12, d)).astype(np.float32) for d in DIMS]
        dev.update(b, bags, grads, 0.5)
        dev.twin.note_update([x for _, x in bags])
        dev.snapshot(b, f"mlp-{b}".encode())
        dev.commit(b)
        dev.twin.note_commit()


@pytest.mark.parametrize("mode", TWIN_MODES)
def test_agreeing_run_passes(seed, mode):
    L, tabs, rng, twin = _setup(seed, mode)
    dev = Device(L, tabs, mlp_lag=1, seed=seed).attach(twin)
    _train(dev, rng, 3)
    twin.compare_memory("end", LineSnapshot.of(dev.mem))
    twin.close()


@pytest.mark.parametrize("mode", TWIN_MODES)
@pytest.mark.parametrize("what", ["cpl", "read"])
def test_wrong_answer_is_caught(seed, mode, what):
    L, tabs, rng, twin = _setup(seed, mode)
    dev = Device(L, tabs, mlp_lag=1, seed=seed).attach(twin, {what: True})
    with pytest.raises(TwinMismatch) as e:
        _train(dev, rng, 3)
        twin.close()                    # the child process's verdict, if not raised before
    assert "batch 1" in str(e.value), (seed, str(e.value))
    assert ("completion" if what == "cpl" else "host read") in str(e.value)
    if mode == "process":
        twin.kill()


@pytest.mark.parametrize("mode", TWIN_MODES)
def test_memory_difference_is_caught(seed, mode):
    L, tabs, rng, twin = _setup(seed, mode)
    dev = Device(L, tabs, mlp_lag=1, seed=seed).attach(twin)
    _train(dev, rng, 1)
    row = int(rng.integers(0, ROWS[1]))
    addr = L.table_base[1] + 4 * DIMS[1] * row
    dev.mem.write(addr, bytes(x ^ 0x80 for x in dev.mem.read(addr, 4)))
    with pytest.raises(TwinMismatch, match=f"memory line {addr - addr % 64:#x} differs"):
        twin.compare_memory("after the test's write", LineSnapshot.of(dev.mem))
    if mode == "process":
        twin.kill()


@pytest.mark.parametrize("mode", TWIN_MODES)
@pytest.mark.parametrize("claim", ["honest", "committed", "epoch"])
def test_recovery_judged(seed, mode, claim):
    """A power failure inside batch 2's UPDATE: the recovered device's (C, slot, epoch) and
    tables are judged from the host's run, then the twin restarts from the crash image."""
    L, tabs, rng, twin = _setup(seed, mode)
    dev = Device(L, tabs, mlp_lag=1, seed=seed).attach(twin)
    blobs = {1: [b"mlp-1"]}
    _train(dev, rng, 1)
    bags = _batch(rng)
    dev.where = "batch 2"
    dev.lookup(2, bags)
    dev.twin.note_update([x for _, x in bags])
    dev.schedule_power_failure(after_writes=7)
    with pytest.raises(PowerFailure):
        dev.update(2, bags, [rng.standard_normal((12, d)).astype(np.float32) for d in DIMS],
                   0.5)
    image = LineSnapshot.of(dev.mem)
    rec = ModelDevice(L, tabs, mlp_lag=1, seed=seed)
    rec.restart_from(image.to_image())
    c, slot, epoch = rec.dev.committed, rec.dev.mlp_slot, rec.dev.mlp_epoch
    assert (c, slot) == (1, 1) and epoch == 1, (seed, c, slot, epoch)
    if claim == "committed":
        c = 2
    elif claim == "epoch":
        epoch = 0
    kw = dict(c=c, slot=slot, epoch=epoch, tables=rec.tables(), slot_payload=b"mlp-1",
              commit_in_flight=False, blobs=blobs, lag=1, crash_image=image)
    if claim == "honest":
        twin.check_recovery(**kw)
        twin.compare_memory("after recovery", LineSnapshot.of(rec.mem))
        twin.close()
        return
    with pytest.raises(TwinMismatch, match="recovery"):
        twin.check_recovery(**kw)
    if mode == "process":
        twin.kill()


def test_child_failure_is_reported(seed):
    """An exception in the child process (here a read outside the memory) comes back with its
    traceback, not as a hang or a silent pass."""
    L, tabs, _, twin = _setup(seed, "process")
    twin.check_read(1 << 60, 4, b"\0" * 4, "nowhere")
    with pytest.raises(RuntimeError, match=r"(?s)twin process failed.*ValueError: access"):
        twin.close()
    twin.kill()
