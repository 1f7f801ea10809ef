"""The data path in the training loop on the golden model: deterministic replay after a power
failure with the SHADE cache and the importance sampler enabled, and the replay rule
(restore the state saved with MLP epoch m, re-read batches m+1..C) checked against a
failure-free run's checkpoint."""
import numpy as np
import pytest

from sw_model.clicklog import ClickLogGenerator
from sw_model.dlrm import DLRM, DLRMConfig, make_model_device, train
from trainingcxl.shade.datapath import DataPath, DataPathConfig, SidecarStore, simulate
from trainingcxl.shade.policies import make_policy
from trainingcxl.shade.store import SampleStore, write_store

MCFG = DLRMConfig(table_rows=(64, 96), alphas=(1.05, 1.1), batch_size=8, bottom_mlp=(16, 16),
                  top_mlp=(8, 1), lag_k=4)
BPE = 8                                          # 64 samples, batches of 8
N_BATCHES = 3 * BPE


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    data = ClickLogGenerator(MCFG.clicklog()).generate(BPE, MCFG.batch_size)
    return write_store(data, tmp_path_factory.mktemp("shade") / "store", shard_size=16)


def run(store_dir, fail_after=None, sidecar_dir=None):
    cfg = DataPathConfig(sampler="importance", cache="shade", cache_size=25,
                         batch_size=MCFG.batch_size, seed=3, shadows=("lru",))
    dp = DataPath(SampleStore(store_dir), cfg, sidecar=SidecarStore(sidecar_dir))
    dev = make_model_device(MCFG, seed=5)
    if fail_after is not None:
        dev.schedule_power_failure(fail_after)
    res = train(dev, DLRM(MCFG), dp, N_BATCHES, MCFG, data_feedback=dp)
    return dp, res, dev


def log_of(dp):
    return [(r.batch, r.ids.tolist(), r.hits.tolist(), r.replay) for r in dp.log]


def test_power_failure_replay_is_deterministic_and_follows_the_rule(store_dir, tmp_path):
    ref, ref_res, ref_dev = run(store_dir)
    assert not ref_res.crashes
    # fail inside batch 2 * BPE + 3 (epoch 2): the crash lands after an MLP snapshot m < C
    fail = int(ref_dev.writes * (2 * BPE + 2.5) / N_BATCHES)
    a, a_res, _ = run(store_dir, fail, tmp_path / "a")
    b, b_res, _ = run(store_dir, fail)
    assert len(a_res.crashes) == 1
    crash = a_res.crashes[0]
    C, m = crash.committed, crash.mlp_epoch or 0
    print(f"crash at batch {crash.batch} ({crash.phase}): C = {C}, m = {m}")
    assert 2 * BPE <= m < C < N_BATCHES, "the schedule must replay batches m+1..C in epoch 2"
    # 1. the same run twice: same sample order, hits, replays and losses
    assert log_of(a) == log_of(b)
    assert a_res.loss_log == b_res.loss_log
    # 2. before the failure the run is the failure-free run
    first = [r for r in log_of(a) if not r[3]][:crash.batch - 1]
    assert first == log_of(ref)[:crash.batch - 1]
    # 3. the state saved with MLP epoch m equals the failure-free run's at m, and is on disk
    assert a.sidecar.get(m) == ref.sidecar.get(m)
    assert (tmp_path / "a" / f"datapath-{m}.npz").read_bytes() == ref.sidecar.get(m)
    # 4. the replay rule, from the failure-free run's checkpoint: restore m, re-read m+1..C
    #    without scores, then C+1.. in the same epoch come in the same order with these hits
    rule = DataPath(SampleStore(store_dir), a.cfg)
    rule.restore(ref.sidecar.get(m))
    for bb in range(m + 1, C + 1):
        rule.ids(bb)
    nxt = rule.ids(C + 1)
    after = [r for r in a.log if r.batch == C + 1 and not r.replay][-1]
    assert after.ids.tolist() == nxt.tolist()
    assert after.hits.tolist() == rule.log[-1].hits.tolist()
    replays = [r.batch for r in a.log if r.replay]
    assert replays == list(range(m + 1, C + 1))
    # same epoch plan as the failure-free run: batches C+1.. of epoch 2 read the same samples
    assert after.ids.tolist() == ref.log[C].ids.tolist()


def test_shadow_replay_equals_the_run(store_dir):
    dp, _, _ = run(store_dir)
    lru = simulate(make_policy("lru", dp.capacity), dp.trace, dp.observations)
    shade = simulate(make_policy("shade", dp.capacity), dp.trace, dp.observations)
    stats = dp.stats()
    assert int(lru.sum()) == stats["caches"]["lru"]["hits"]
    assert int(shade.sum()) == stats["caches"]["shade"]["hits"]
    assert np.concatenate([r.hits for r in dp.log]).tolist() == shade.tolist()
    assert stats["caches"]["belady"]["hits"] >= max(int(lru.sum()), int(shade.sum()))
    io = stats["io"]
    assert io["fetches"] == len(dp.trace) - int(shade.sum())


def test_batches_must_come_in_order(store_dir):
    dp = DataPath(SampleStore(store_dir), DataPathConfig(batch_size=8))
    dp.batch(1)
    with pytest.raises(ValueError, match="batch 3 asked, the data path is at batch 2"):
        dp.batch(3)
    with pytest.raises(KeyError, match="no data-path checkpoint for MLP epoch 1"):
        dp.recover(2, 1)


def test_icache_substitution_changes_what_the_model_reads(store_dir):
    """With iCache's substitution a substitutable miss is served by a cached sample: the
    batch holds the substitute, counts as served from the cache and fetches nothing."""
    cfg = DataPathConfig(sampler="importance", cache="icache", substitute=True, cache_size=25,
                         batch_size=MCFG.batch_size, seed=3, shadows=("lru",))
    dp = DataPath(SampleStore(store_dir), cfg)
    dev = make_model_device(MCFG, seed=5)
    train(dev, DLRM(MCFG), dp, N_BATCHES, MCFG, data_feedback=dp)
    subs = 0
    for r in dp.log:
        changed = r.ids != r.asked
        subs += int(changed.sum())
        assert r.hits[changed].all()
    c = dp.driving
    assert subs == c.substituted > 0
    st = dp.stats()
    assert st["served"]["hits"] == c.hits + c.substituted
    assert st["io"]["fetches"] == len(dp.trace) - st["served"]["hits"]
    assert dp.trace == sum((r.asked.tolist() for r in dp.log), [])
    with pytest.raises(ValueError, match="substitution needs the icache policy"):
        DataPathConfig(cache="shade", substitute=True)


def test_auto_sampling_follows_validation(store_dir):
    cfg = DataPathConfig(sampler="importance", cache="shade", cache_size=25, batch_size=8,
                         sampling="auto")
    dp = DataPath(SampleStore(store_dir), cfg)
    for b in range(1, BPE + 1):
        dp.ids(b)
    with pytest.raises(ValueError, match="auto sampling: no validation result for epoch 0"):
        dp.ids(BPE + 1)
    metrics = iter([0.60, 0.62, 0.61, 0.58])
    dp = DataPath(SampleStore(store_dir), cfg, validator=lambda: next(metrics))
    for b in range(1, 5 * BPE + 1):
        dp.ids(b)
    # epoch 1: changes [0]; 2: [0, .02]; 3: (0 + .02 - .01) / 3; 4: (.02 - .01 - .03) / 3
    assert dp.epoch_modes == {1: "relaxed", 2: "aggressive", 3: "aggressive", 4: "relaxed"}
