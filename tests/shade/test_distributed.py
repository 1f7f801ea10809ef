"""Several data-parallel worker processes on a small dataset: each worker reads its slice of
every global batch through its own cache, and the run equals the same workers simulated in
one process (an independent reference); with importance shared, every worker ends with the
same score table."""
import numpy as np
import pytest

from sw_model.clicklog import ClickLogGenerator
from sw_model.dlrm import DLRM, DLRMConfig, make_float_device, train
from trainingcxl.shade.datapath import DataPath, DataPathConfig
from trainingcxl.shade.distributed import DistributedDataPath, WorkerError
from trainingcxl.shade.importance import sample_losses
from trainingcxl.shade.store import SampleStore, write_store

MCFG = DLRMConfig(table_rows=(64, 96), alphas=(1.05, 1.1), batch_size=8, bottom_mlp=(16, 16),
                  top_mlp=(8, 1), lag_k=4)
WORLD = 4


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    data = ClickLogGenerator(MCFG.clicklog()).generate(16, MCFG.batch_size)
    return write_store(data, tmp_path_factory.mktemp("dist") / "store", shard_size=32)


class InProcess:
    """The same four workers in this process, exchanging losses the same way."""

    def __init__(self, store_dir, cfg):
        self.dps = [DataPath(SampleStore(store_dir), DataPathConfig(**{**cfg.__dict__,
                                                                       "rank": r,
                                                                       "world": WORLD}))
                    for r in range(WORLD)]

    def __call__(self, b):
        from sw_model.clicklog import ClickData
        self.ids = [dp.ids(b) for dp in self.dps]
        return ClickData.concat([dp.store.peek(i) for dp, i in zip(self.dps, self.ids)])

    def losses(self, b, logits, labels):
        loss = sample_losses(logits, labels)
        cuts = np.cumsum([len(i) for i in self.ids])[:-1]
        slices = list(zip(self.ids, np.split(loss, cuts)))
        for dp in self.dps:
            dp.feedback(b, slices)

    def snapshot(self, b):
        pass

    def recover(self, c, m):
        raise AssertionError("no failures here")


@pytest.mark.parametrize("share", [True, False])
def test_workers_match_an_in_process_reference(store_dir, share):
    cfg = DataPathConfig(sampler="importance", cache="shade", cache_size=20,
                         batch_size=MCFG.batch_size, seed=2, share_importance=share,
                         shadows=("lru",))
    n = 3 * 16
    with DistributedDataPath(store_dir, cfg, WORLD) as dist:
        assert dist.batches_per_epoch == 16
        model_d = DLRM(MCFG)
        res_d = train(make_float_device(MCFG), model_d, dist, n, MCFG, data_feedback=dist)
        got = dist.stats()
    ref = InProcess(store_dir, cfg)
    model_r = DLRM(MCFG)
    res_r = train(make_float_device(MCFG), model_r, ref, n, MCFG, data_feedback=ref)
    assert res_d.loss_log == res_r.loss_log
    for r, (g, dp) in enumerate(zip(got, ref.dps)):
        assert g["trace"] == dp.trace, f"worker {r}"
        assert g["caches"]["shade"]["hits"] == dp.s.caches["shade"].hits
        assert g["io"] == dp.store.counters.as_dict()
        assert len(g["trace"]) == n * MCFG.batch_size // WORLD
    # every worker read its own slice: the global batches are the workers' ids, disjoint in
    # epoch 0 (a shuffle)
    first = np.concatenate([g["trace"][:16 * 2] for g in got])
    assert sorted(first.tolist()) == list(range(128))
    tables = [dp.s.scores.weights for dp in ref.dps]
    same = all(np.array_equal(tables[0], t) for t in tables[1:])
    assert same == share


def test_worker_errors_reach_the_coordinator(store_dir):
    cfg = DataPathConfig(batch_size=MCFG.batch_size)
    with DistributedDataPath(store_dir, cfg, 2) as dist:
        dist.batch(1)
        with pytest.raises(WorkerError, match="worker 0: ValueError: batch 5 asked"):
            dist.batch(5)
