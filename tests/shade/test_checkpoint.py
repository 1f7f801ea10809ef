"""The data path's sidecar (state saved with each MLP snapshot): JSON + npz, no pickle; a
resumed data path continues exactly; a missing, truncated, corrupt, wrong-version or
foreign sidecar gives an error naming the file."""
import io
import json
import pickle
import zipfile

import numpy as np
import pytest

from sw_model.clicklog import ClickLogGenerator
from sw_model.dlrm import DLRMConfig
from trainingcxl.shade.checkpoint import SidecarError, SidecarStore
from trainingcxl.shade.datapath import DataPath, DataPathConfig
from trainingcxl.shade.store import SampleStore, write_store

MCFG = DLRMConfig(table_rows=(64, 96), alphas=(1.05, 1.1), batch_size=8)
CFG = DataPathConfig(sampler="importance", cache="shade", cache_size=25, batch_size=8, seed=1,
                     shadows=("lru", "lfu", "random", "icache"))


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    data = ClickLogGenerator(MCFG.clicklog()).generate(4, 8)
    return write_store(data, tmp_path_factory.mktemp("ck") / "store", shard_size=16)


def drive(dp, first, last, seed=0):
    """Batches first..last with made-up logits (a fixed function of the batch)."""
    out = []
    for b in range(first, last + 1):
        ids = dp.ids(b)
        logits = np.random.default_rng(b + seed).normal(size=ids.size)
        labels = (ids % 2).astype(np.float32)
        dp.losses(b, logits, labels)
        out.append((ids.tolist(), dp.log[-1].hits.tolist()))
    return out


def test_resume_from_a_sidecar_file_continues_exactly(store_dir, tmp_path):
    a = DataPath(SampleStore(store_dir), CFG, sidecar=SidecarStore(tmp_path))
    drive(a, 1, 6)                              # into epoch 1 (4 batches per epoch)
    a.snapshot(6)
    f = tmp_path / "datapath-6.npz"
    with zipfile.ZipFile(f) as z:               # JSON + npy members, nothing pickled
        assert sorted(z.namelist()) == ["freq.npy", "meta.json", "plan.npy", "weights.npy"]
        meta = json.loads(z.read("meta.json"))
        assert (meta["format"], meta["version"]) == ("trainingcxl-datapath-state", 1)
    with np.load(f, allow_pickle=False) as npz:
        assert npz["weights.npy"].shape == (32,)
    rest = drive(a, 7, 12)
    b = DataPath(SampleStore(store_dir), CFG, sidecar=SidecarStore(tmp_path))
    b.recover(6, 6)                             # a new process: only the file is left
    assert b.state() == f.read_bytes()
    assert drive(b, 7, 12) == rest
    assert b.state() == a.state()               # equal states, equal bytes




def rewrite(blob, **changes):
    """The sidecar ``blob`` with meta.json fields replaced."""
    src = zipfile.ZipFile(io.BytesIO(blob))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for n in src.namelist():
            data = src.read(n)
            if n == "meta.json":
                meta = json.loads(data)
                meta.update(changes)
                data = json.dumps(meta).encode()
            z.writestr(n, data)
    return out.getvalue()


def test_bad_sidecars_name_the_file(store_dir, tmp_path):
    good = DataPath(SampleStore(store_dir), CFG)
    drive(good, 1, 3)
    blob = good.state()
    path = tmp_path / "datapath-3.npz"
    cases = {
        "missing": (None, "datapath-3.npz: missing data-path checkpoint for MLP epoch 3"),
        "truncated": (blob[:len(blob) // 2], "corrupt or truncated npz"),
        "pickle": (pickle.dumps({"weights": [1.0]}), "corrupt or truncated npz"),
        "version": (rewrite(blob, version=2), "version 2, this reader reads version 1"),
        "format": (rewrite(blob, format="other"), "format 'other'"),
        "caches": (rewrite(blob, caches={"shade": {"name": "shade"}}),
                   "corrupt data-path checkpoint"),
        "foreign": (rewrite(blob, config={**json.loads(zipfile.ZipFile(io.BytesIO(blob))
                                                       .read("meta.json"))["config"],
                                          "cache": "lru"}),
                    "written by another data-path configuration"),
    }
    for case, (data, msg) in cases.items():
        path.unlink(missing_ok=True)
        if data is not None:
            path.write_bytes(data)
        dp = DataPath(SampleStore(store_dir), CFG, sidecar=SidecarStore(tmp_path))
        with pytest.raises(SidecarError, match=msg) as e:
            dp.recover(3, 3)
        assert str(path) in str(e.value), case
    no_meta = io.BytesIO()
    with zipfile.ZipFile(no_meta, "w") as z:
        z.writestr("weights.npy", b"")
    path.write_bytes(no_meta.getvalue())
    with pytest.raises(SidecarError, match="no meta.json"):
        DataPath(SampleStore(store_dir), CFG, sidecar=SidecarStore(tmp_path)).recover(3, 3)
