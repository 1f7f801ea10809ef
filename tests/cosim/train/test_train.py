"""Smoke size of the main job (`make demo`, trainingcxl/train/job.py): DLRM training with the RTL in
the loop.

* Without failures, the RTL run's final tables and MLP parameters are bit-identical to an
  independent golden-model run (sw_model only, no simulator) of the same job, and so are its
  held-out metrics.
* With a power failure, the run completes, its golden-model twin agreed on every completion,
  host read, recovery and the final memory, and recovery reported C - k <= m <= C.

Both use the default DeviceConfig, so the Verilator build is shared with the other device
tests.
"""
import json

import numpy as np
import pytest

from trainingcxl.train import job
from sw_model.dlrm import DLRM, make_model_device, synthetic_data, train


def _run(tmp_path, name, *args):
    out = tmp_path / name
    rc = job.main(["--eval-batches", "2", "--mlp-cycles", "200", "--quiet",
                          "--out", str(out), *args])
    rep = json.loads((out / "summary.json").read_text())
    return rc, out, rep


@pytest.mark.cosim
def test_demo_without_failures_equals_golden_model(tmp_path):
    n = 6
    rc, out, rep = _run(tmp_path, "nofail", "--batches", str(n), "--crashes", "0",
                        "--lag", "2", "--seed", "3")
    assert rc == 0 and rep["twin_equal"] and not rep["crashes"], rep
    mcfg = job._args(["--lag", "2"]).model
    dev = make_model_device(mcfg)
    model = DLRM(mcfg)
    train(dev, model, synthetic_data(mcfg), n, mcfg)
    assert (out / "rtl_run.json.mlp").read_bytes() == model.to_bytes()
    with np.load(out / "rtl_run.json.tables.npz") as z:
        for t, want in enumerate(dev.tables()):
            assert np.array_equal(z[f"arr_{t}"], want), f"table {t} differs"
    assert rep["rtl"]["eval"] == rep["golden"]["eval"]
    assert rep["n_snapshots"] == n // 2          # SNAPSHOT every k = 2 batches
    for f in ("report.md", "loss.png", "cycles.png"):
        assert (out / f).stat().st_size > 0


@pytest.mark.cosim
def test_demo_with_a_power_failure_recovers(tmp_path):
    k = 2
    rc, out, rep = _run(tmp_path, "fail", "--batches", "8", "--crashes", "1",
                        "--lag", str(k), "--seed", "5")
    assert rc == 0 and rep["twin_equal"], rep
    (c,) = rep["crashes"]
    assert c["trainer"]["batch"] == c["batch"]
    m = c["mlp_epoch"] if c["mlp_slot"] else 0
    assert c["committed"] - k <= m <= c["committed"], c
    assert c["committed"] <= c["batch"] <= c["committed"] + 1, c
    assert np.isfinite(rep["rtl"]["eval"]["logloss"])
