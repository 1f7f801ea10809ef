"""The crash campaign gives the same verdicts with the C++ PMEM model (the default,
``cosim.pmem_cpp``) as with the Python one (``cosim.pmem``): the same report apart from the
wall-clock fields and ``pmem``, and the same per-point records (crash image statistics, C,
records rolled back, cycles per phase) apart from each point's ``wall_s``. Both cut at the same
settled clock edge (docs/crash.md, "When the power fails"), so their images are equal."""
import json

import pytest

from cosim import build as cb
from hw.config import DeviceConfig
from trainingcxl.crash.campaign import WALL_CLOCK_FIELDS, run_campaign

N_POINTS = 6


def _points(path):
    return [{k: v for k, v in json.loads(line).items() if k != "wall_s"}
            for line in (path / "points.jsonl").read_text().splitlines()]


@pytest.mark.cosim
def test_cpp_pmem_campaign_equals_python(seed, tmp_path):
    cfg = DeviceConfig()
    b = cb.device_build(cfg)                           # one build carries both models
    reps = {}
    for pmem in ("python", "cpp"):
        reps[pmem] = run_campaign(points=f"random:{N_POINTS}", seed=seed, cfg=cfg,
                                  progress=False, build=b, chunk=3, pmem=pmem,
                                  out=tmp_path / pmem)
    py, cpp = reps["python"], reps["cpp"]
    assert py["ok"] and py["tried"] == N_POINTS, (seed, py)
    # the points must have cut writes in flight, or equal images would prove little
    assert py["words_survived"] + py["words_lost"] > 0, (seed, py)
    assert (py.pop("pmem"), cpp.pop("pmem")) == ("python", "cpp")
    for rep in (py, cpp):
        for k in WALL_CLOCK_FIELDS:
            rep.pop(k)
    assert cpp == py, (seed, {k: (py.get(k), cpp.get(k)) for k in set(py) | set(cpp)
                              if py.get(k) != cpp.get(k)})
    assert _points(tmp_path / "cpp") == _points(tmp_path / "python"), seed
