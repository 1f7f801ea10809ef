"""The crash campaign can fail: with the undo log erased from every crash image
(``mutate="wipe_log"``, a device that never logged) every point that crashed after a row of
the open batch was written must fail with tables that differ from the model, and the campaign
must report it (exit status 1 for ``trainingcxl crash``)."""
import pytest

from cosim import build as cb
from hw.config import DeviceConfig
from trainingcxl.crash.campaign import DEFAULT_PMEM, run_campaign

N_POINTS = 8


@pytest.mark.cosim
def test_wipe_log_points_fail(seed, tmp_path):
    cfg = DeviceConfig()
    rep = run_campaign(points=f"random:{N_POINTS}", seed=seed, cfg=cfg, progress=False,
                       build=cb.device_build(cfg, pmem=DEFAULT_PMEM), mutate="wipe_log",
                       out=tmp_path)
    assert rep["tried"] == N_POINTS, (seed, rep)
    assert not rep["ok"] and rep["failed"] >= 1, (seed, rep)
    assert all("differ" in f["error"] for f in rep["failures"]), (seed, rep["failures"])
