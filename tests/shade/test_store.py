"""Sample store: per-sample reads equal the click log, fetches/bytes/modelled time counted, and
every bad-shard case (missing, truncated, wrong version, wrong sample count, index out of range
inside a shard, sample id out of range) raises a ShardError naming the shard or the id."""
import json

import numpy as np
import pytest

from sw_model.clicklog import ClickLogConfig, ClickLogGenerator, save_npz
from trainingcxl.shade.store import IOModel, SampleStore, ShardError, gather, write_store


@pytest.fixture
def log():
    return ClickLogGenerator(ClickLogConfig(table_rows=(50, 70), alphas=(1.1, 1.0),
                                            pooling=(0, 3))).generate(5, 20)


@pytest.fixture
def store_dir(tmp_path, log):
    return write_store(log, tmp_path / "store", shard_size=32)


def same(a, b):
    assert np.array_equal(a.dense, b.dense) and np.array_equal(a.labels, b.labels)
    for x, y in zip(a.offsets + a.indices, b.offsets + b.indices):
        assert np.array_equal(x, y)


def test_reads_equal_the_click_log(store_dir, log, seed):
    st = SampleStore(store_dir).verify()
    assert st.n == log.n == 100 and len(st.shards) == 4
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, st.n, size=40)
    got = st.peek(ids)
    for j, i in enumerate(ids):
        same(got.slice(j, j + 1), log.slice(int(i), int(i) + 1))
    same(gather(log, [3, 3, 0]), log.slice(3, 4).concat([log.slice(3, 4), log.slice(3, 4),
                                                         log.slice(0, 1)]))
    same(st.all_data(), log)


def test_fetch_counts_bytes_and_modelled_time(store_dir, log):
    st = SampleStore(store_dir, IOModel(latency_s=1e-3, bandwidth=1e6))
    nnz = sum(int(o[8] - o[7]) for o in log.offsets)
    expect = 4 * (13 + 1) + 8 * (2 + nnz)
    assert st.fetch(7) == expect
    st.peek([1, 2, 3])                               # cached data: not counted
    st.fetch(7)
    assert st.counters.fetches == 2 and st.counters.bytes == 2 * expect
    assert st.counters.seconds == pytest.approx(2 * (1e-3 + expect / 1e6))


def test_missing_shard(store_dir):
    (store_dir / "shard-00002.npz").unlink()
    st = SampleStore(store_dir)
    st.peek([0, 40])                                  # shards 0 and 1 are fine
    with pytest.raises(ShardError, match=r"shard 2 \(.*shard-00002.npz\): missing"):
        st.fetch(70)


def test_truncated_shard(store_dir):
    p = store_dir / "shard-00001.npz"
    p.write_bytes(p.read_bytes()[:300])
    with pytest.raises(ShardError, match=r"shard 1 \(.*shard-00001.npz\): truncated"):
        SampleStore(store_dir).verify()


def test_wrong_version_shard(store_dir):
    p = store_dir / "shard-00003.npz"
    with np.load(p) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["version"] = np.int64(2)
    with open(p, "wb") as f:
        np.savez(f, **arrays)
    with pytest.raises(ShardError,
                       match=r"shard 3 \(.*shard-00003.npz\): wrong version 2, expected 1"):
        SampleStore(store_dir).peek([99])


def test_shard_with_other_samples_than_the_manifest(store_dir, log):
    save_npz(store_dir / "shard-00000.npz", log.slice(0, 31))
    with pytest.raises(ShardError, match=r"shard 0 .*holds 31 samples, the manifest says 32"):
        SampleStore(store_dir).verify()


def test_embedding_index_out_of_range_in_a_shard(store_dir):
    p = store_dir / "shard-00001.npz"
    with np.load(p) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["indices_1"] = arrays["indices_1"].copy()
    arrays["indices_1"][0] = 70                      # table 1 has 70 rows
    with open(p, "wb") as f:
        np.savez(f, **arrays)
    with pytest.raises(ShardError, match=r"shard 1 .*table 1: indices\[0\] = 70 outside"):
        SampleStore(store_dir).verify()


def test_sample_id_out_of_range(store_dir):
    st = SampleStore(store_dir)
    for bad in (100, -1):
        with pytest.raises(ShardError, match=rf"sample {bad} outside 0..99"):
            st.fetch(bad)
    assert st.counters.fetches == 0


def test_bad_manifest(store_dir):
    m = json.loads((store_dir / "manifest.json").read_text())
    m["version"] = 7
    (store_dir / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ShardError, match="version 7"):
        SampleStore(store_dir)
    (store_dir / "manifest.json").unlink()
    with pytest.raises(ShardError, match="no store manifest"):
        SampleStore(store_dir)
