"""Several data-parallel worker processes on a small dataset, in both cache modes.

Local caches: each worker reads its slice of every global batch through its own cache.
Shared cache (SHADE as published): one cache of the full size sharded over the workers'
processes by sample id; every read goes to the owner. Either way the run equals the same
workers simulated in one process by an independent reference (for the shared cache: one
object holding every shard, its own CRC16 and slot map, applying the reads in worker order);
with importance shared, every worker ends with the same score table."""
import numpy as np
import pytest

from sw_model.clicklog import ClickData, ClickLogGenerator
from sw_model.dlrm import DLRM, DLRMConfig, make_float_device, train
from trainingcxl.shade.datapath import DataPath, DataPathConfig
from trainingcxl.shade.distributed import DistributedDataPath, WorkerError
from trainingcxl.shade.importance import rank_scores, sample_losses
from trainingcxl.shade.policies import make_policy
from trainingcxl.shade.shards import owner, shard_capacity
from trainingcxl.shade.store import SampleStore, write_store

MCFG = DLRMConfig(table_rows=(64, 96), alphas=(1.05, 1.1), batch_size=8, bottom_mlp=(16, 16),
                  top_mlp=(8, 1), lag_k=4)
WORLD = 4


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    data = ClickLogGenerator(MCFG.clicklog()).generate(16, MCFG.batch_size)
    return write_store(data, tmp_path_factory.mktemp("dist") / "store", shard_size=32)


def crc16_xmodem(data: bytes) -> int:
    """Bit by bit, as in the Redis cluster specification (poly 0x1021, init 0)."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def ref_owner(s, world):
    slot = crc16_xmodem(str(s).encode()) % 16384
    return min(q for q in range(world) if slot < (q + 1) * 16384 // world)


def test_owner_is_redis_cluster_slot_map():
    assert crc16_xmodem(b"123456789") == 0x31C3          # the Redis spec's check value
    for s in range(300):
        for w in (1, 2, 3, 4):
            assert owner(s, w) == ref_owner(s, w)
    assert [shard_capacity(10, r, 4) for r in range(4)] == [3, 3, 2, 2]


class CentralShards:
    """Every shard of the shared cache in one object: reads applied as they come (the
    reference driver asks worker 0's batch first, then worker 1's, ...), the contents the
    importance sampler sees taken before any read of the batch."""

    def __init__(self, cfg, n):
        total = int(round(cfg.cache_size / 100 * n))
        caps = [total // WORLD + (r < total % WORLD) for r in range(WORLD)]
        self.cfg = cfg
        self.shards = [{name: make_policy(name, caps[r], seed=cfg.seed * 1000 + r)
                        for name in (cfg.cache, *cfg.shadows)} for r in range(WORLD)]
        self._snap = (None, None)
        self.remote = 0

    def client(self, rank):
        central = self

        class Client:
            def contents(self, b, own):
                if central._snap[0] != b:
                    central._snap = (b, set().union(*(s[central.cfg.cache].contents()
                                                      for s in central.shards)))
                return central._snap[1]

            def access(self, b, ids):
                out = []
                for i in ids:
                    o = ref_owner(i, WORLD)
                    central.remote += o != rank
                    hs = [c.access(i) for c in central.shards[o].values()]
                    out.append((hs[0], -1))
                return out
        return Client()

    def observe(self, ids, scores):
        for shard in self.shards:
            for c in shard.values():
                c.observe(ids, scores)


class InProcess:
    """The same four workers in this process, exchanging losses the same way."""

    def __init__(self, store_dir, cfg):
        n = SampleStore(store_dir).n
        self.central = CentralShards(cfg, n) if cfg.cache_mode == "shared" else None
        self.dps = []
        for r in range(WORLD):
            c = DataPathConfig(**{**cfg.__dict__, "rank": r, "world": WORLD})
            self.dps.append(DataPath(SampleStore(store_dir), c,
                                     shards=self.central.client(r) if self.central else None))

    def __call__(self, b):
        self.ids = [dp.ids(b) for dp in self.dps]
        return ClickData.concat([dp.store.peek(i) for dp, i in zip(self.dps, self.ids)])

    def losses(self, b, logits, labels):
        loss = sample_losses(logits, labels)
        cuts = np.cumsum([len(i) for i in self.ids])[:-1]
        slices = list(zip(self.ids, np.split(loss, cuts)))
        for dp in self.dps:
            dp.feedback(b, slices)
        if self.central:
            for ids, ls in slices:
                self.central.observe(ids, rank_scores(ls))

    def snapshot(self, b):
        pass

    def recover(self, c, m):
        raise AssertionError("no failures here")


@pytest.mark.parametrize("mode,share,sampling", [("local", True, "relaxed"),
                                                 ("local", False, "relaxed"),
                                                 ("shared", True, "relaxed"),
                                                 ("shared", True, "aggressive")])
def test_workers_match_an_in_process_reference(store_dir, mode, share, sampling):
    cfg = DataPathConfig(sampler="importance", cache="shade", cache_size=20,
                         batch_size=MCFG.batch_size, seed=2, share_importance=share,
                         shadows=("lru",), cache_mode=mode, sampling=sampling)
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
        assert g["served"] == dp.stats(belady=False)["served"], f"worker {r}"
        assert g["io"] == dp.store.counters.as_dict()
        assert len(g["trace"]) == n * MCFG.batch_size // WORLD
        if mode == "local":
            assert g["caches"]["shade"]["hits"] == dp.s.caches["shade"].hits
            assert g["messages"] == 0
        else:
            # the shard worker r owns saw exactly the reference's shard r
            for name in ("shade", "lru"):
                c = ref.central.shards[r][name]
                assert (g["caches"][name]["hits"], g["caches"][name]["misses"]) == \
                    (c.hits, c.misses), f"shard {r} {name}"
            assert all(owner(i, WORLD) == r for i in g["view"]["trace"])
            assert g["messages"] > 0
    tot = DistributedDataPath.totals(got)
    assert tot["reads"] == n * MCFG.batch_size == tot["served"] + tot["missed"]
    assert tot["fetches"] == tot["missed"] and tot["bytes"] == sum(g["io"]["bytes"] for g in got)
    assert tot["caches"]["shade"]["hits"] == sum(g["caches"]["shade"]["hits"] for g in got)
    if mode == "shared":
        # every read reached its owner: the shards' reads are the workers' reads
        assert sum(len(g["view"]["trace"]) for g in got) == sum(len(g["trace"]) for g in got)
        remote = sum(q != r for r, g in enumerate(got) for q in g["view"]["requester"])
        assert remote == ref.central.remote > 0
        served = sum(g["served"]["hits"] for g in got)
        assert served == sum(g["caches"]["shade"]["hits"] for g in got) > 0
    # epoch 0 is a shuffle: the workers' slices are disjoint
    first = np.concatenate([g["trace"][:16 * 2] for g in got])
    assert sorted(first.tolist()) == list(range(128))
    if sampling == "aggressive":
        # later epochs: every worker reads the same most-drawn samples
        e1 = [sorted(g["trace"][16 * 2:32 * 2]) for g in got]
        assert all(e == e1[0] for e in e1[1:])
    tables = [dp.s.scores.weights for dp in ref.dps]
    same = all(np.array_equal(tables[0], t) for t in tables[1:])
    assert same == share


def test_shared_cache_needs_shared_importance_and_a_transport(store_dir):
    with pytest.raises(ValueError, match="needs share_importance"):
        DataPathConfig(cache="shade", cache_size=10, batch_size=8, world=4, rank=0,
                       share_importance=False)
    with pytest.raises(ValueError, match="needs a transport"):
        DataPath(SampleStore(store_dir), DataPathConfig(cache="shade", cache_size=10,
                                                        batch_size=8, world=4, rank=1))


@pytest.mark.parametrize("mode", ["local", "shared"])
def test_worker_errors_reach_the_coordinator(store_dir, mode):
    cfg = DataPathConfig(batch_size=MCFG.batch_size, cache="lru", cache_size=10,
                         cache_mode=mode)
    with DistributedDataPath(store_dir, cfg, 2) as dist:
        dist.batch(1)
        with pytest.raises(WorkerError, match="worker 0: ValueError: batch 5 asked"):
            dist.batch(5)


def test_shared_cache_replay_after_a_power_failure(store_dir):
    """Golden model, 4 worker processes, shared SHADE cache: a power failure in epoch 1 is
    recovered by every worker (restore its shard's and sampler's state of MLP epoch m,
    re-read m+1..C through the shards) and two runs with the same failure are identical."""
    from sw_model.dlrm import make_model_device
    cfg = DataPathConfig(sampler="importance", cache="shade", cache_size=20,
                         batch_size=MCFG.batch_size, seed=2, shadows=("lru",))
    n = 16 + 12

    def run(fail=None):
        dev = make_model_device(MCFG, seed=5)
        if fail is not None:
            dev.schedule_power_failure(fail)
        with DistributedDataPath(store_dir, cfg, WORLD) as dist:
            res = train(dev, DLRM(MCFG), dist, n, MCFG, data_feedback=dist)
            st = dist.stats()
        return res, st, dev
    ref, ref_st, ref_dev = run()
    fail = int(ref_dev.writes * (16 + 6.5) / n)
    a, a_st, _ = run(fail)
    b, b_st, _ = run(fail)
    assert len(a.crashes) == 1
    crash = a.crashes[0]
    m = crash.mlp_epoch or 0
    assert 16 < m < crash.committed
    assert a.loss_log == b.loss_log
    for ga, gb, gr in zip(a_st, b_st, ref_st):
        assert ga["trace"] == gb["trace"] and ga["view"]["trace"] == gb["view"]["trace"]
        assert ga["caches"] == gb["caches"]
        replays = sorted({r.batch for r in ga["log"] if r.replay})
        assert replays == list(range(m + 1, crash.committed + 1))
        # before the failure: the failure-free run
        k = (crash.batch - 1) * MCFG.batch_size // WORLD
        assert ga["trace"][:k] == gr["trace"][:k]


def test_a_shard_applies_reads_in_worker_order_hand_sequence(store_dir):
    """The shard of worker 1 of 2 (LRU, 1 sample: a 2-sample cache over 2 shards; samples 0
    and 1 are owned by shard 1, 2 by shard 0), fed the reads of two batches by hand."""
    assert [owner(i, 2) for i in range(3)] == [1, 1, 0]
    cfg = DataPathConfig(cache="lru", cache_size=100 * 2 / 128, batch_size=8, rank=1, world=2)
    dp = DataPath(SampleStore(store_dir), cfg, shards=object())
    assert dp.capacity == 1
    # batch 1: worker 0 reads 0 (miss, admitted); worker 1 reads 0 (hit), then 1 (miss,
    # evicts 0). batch 2: worker 0 reads 1 (hit); worker 1 reads 0 (miss, evicts 1)
    assert dp.serve_shard(1, [[0], [0, 1]]) == [[(False, -1)], [(True, -1), (False, -1)]]
    assert dp.serve_shard(2, [[1], [0]]) == [[(True, -1)], [(False, -1)]]
    assert (dp.view.trace, dp.view.requester, dp.view.batch) == (
        [0, 0, 1, 1, 0], [0, 1, 1, 0, 1], [1, 1, 1, 2, 2])
    assert dp.driving.contents() == {0}
    with pytest.raises(ValueError, match="worker 0 asked shard 1 for sample 2, owned by "
                                         "shard 0"):
        dp.serve_shard(3, [[2], []])
