"""A crash campaign on a local two-worker Dask cluster equals the serial campaign: the same
report (apart from the fields that measure wall-clock time, ``WALL_CLOCK_FIELDS``) and the same
merged per-point results (apart from each point's ``wall_s``), for points split into two tasks
whose index ranges do not line up with the image passes of the serial run."""
import json

import pytest

from cosim import build as cb
from hw.config import DeviceConfig
from trainingcxl.cluster import open_executor
from trainingcxl.crash.campaign import WALL_CLOCK_FIELDS, run_campaign

N_POINTS = 3


def _points(path):
    return [{k: v for k, v in json.loads(line).items() if k != "wall_s"}
            for line in (path / "points.jsonl").read_text().splitlines()]


@pytest.mark.cosim
def test_two_worker_campaign_equals_serial(seed, tmp_path):
    cfg = DeviceConfig()
    b = cb.device_build(cfg)
    kw = dict(points=f"random:{N_POINTS}", seed=seed, cfg=cfg, progress=False, build=b,
              chunk=3)
    serial = run_campaign(out=tmp_path / "serial", **kw)
    with open_executor(workers=2) as ex:
        spread = run_campaign(out=tmp_path / "cluster", executor=ex, task_points=2, **kw)
    assert sorted(p.name for p in (tmp_path / "cluster" / "parts").iterdir()) == \
        ["000000-000002", "000002-000003"]
    assert serial["ok"] and serial["tried"] == N_POINTS, (seed, serial)
    for rep in (serial, spread):
        for k in WALL_CLOCK_FIELDS:
            rep.pop(k)
    assert spread == serial, (seed, {k: (serial.get(k), spread.get(k))
                                     for k in set(serial) | set(spread)
                                     if serial.get(k) != spread.get(k)})
    assert _points(tmp_path / "cluster") == _points(tmp_path / "serial"), seed
    saved = json.loads((tmp_path / "cluster" / "report.json").read_text())
    assert saved["tried"] == N_POINTS and saved["identical"] == N_POINTS, saved
