"""The crash campaign's checks can fail (each a mutation of every crash image, so a device
that breaks the rule is seen to fail):

* ``wipe_log`` (a device that never logged): the points that crashed after a row of the open
  batch was written fail with tables or images that differ from the model;
* ``wipe_slots`` (snapshots that never persisted): the points whose cut the model's run says
  must recover an MLP snapshot fail the MLP-slot verdict (``TrainingWorkload.legal_mlp``).
"""
import pytest

from trainingcxl.crash.campaign import run_campaign

N_POINTS = 6


@pytest.mark.cosim
@pytest.mark.parametrize("mutate, message", [("wipe_log", "differ"),
                                             ("wipe_slots", "(MLP_SLOT, MLP_EPOCH)")])
def test_mutated_images_fail(crash_build, self_check_seed, tmp_path, mutate, message):
    cfg, b = crash_build
    seed = self_check_seed
    rep = run_campaign(points=f"random:{N_POINTS}", seed=seed, cfg=cfg, progress=False,
                       build=b, mutate=mutate, nested=0.0, out=tmp_path)
    assert rep["tried"] == N_POINTS, (seed, rep)
    assert not rep["ok"] and rep["failed"] >= 1, (seed, rep)
    assert all(message in f["error"] for f in rep["failures"]), (seed, rep["failures"])
