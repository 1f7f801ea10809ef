"""Smoke version of ``make shade``: a tiny study (float32 embeddings, 2 epochs, 2 workers,
shared and local caches, the variants) writes its report; on every recorded sequence Belady
is the ceiling of every policy; the SHADE cache replayed on the cache views the study
rebuilds from the workers' reads (shards or local caches) hits exactly as the run's own
cache did."""
import argparse
import json

import pytest

from trainingcxl.shade import study


def test_tiny_study(tmp_path):
    ap = argparse.ArgumentParser()
    study.add_arguments(ap)
    a = ap.parse_args(["--samples", "128", "--eval-samples", "128", "--val-samples", "64",
                       "--epochs", "3", "--sizes", "5", "--variant-sizes", "10", "--workers",
                       "2", "--device", "float32", "--shard-size", "32", "--out",
                       str(tmp_path)])
    rep = study.run_study(a)
    md = (tmp_path / "report.md").read_text()
    assert md.count("SHADE/LRU") >= 2 and "Shared against local caches" in md
    for f in ("study.json", "hit_ratio_W2.png", "hit_ratio_W2_local.png", "accuracy.png",
              "bytes.png"):
        assert (tmp_path / f).stat().st_size > 0
    assert json.loads((tmp_path / "study.json").read_text())["n_samples"] == 128
    res = rep["runs"]["W2"]
    assert res["modes"] == ["shared", "local"]
    for mode in res["modes"]:
        run = res["importance"][mode]["5"]
        for pol in (run["policies"], res["shuffle"][mode]["5"]):
            ceiling = pol["belady"]["hit_ratio"]
            for name, p in pol.items():
                assert 0 <= p["hit_ratio"] <= ceiling + 1e-12, (mode, name)
                assert p["accesses"] == 3 * 128
        # the rebuilt views replay to the live cache's hits (shards: the reconstruction of
        # the order the shards applied the reads is right)
        assert run["policies"]["shade"]["hit_ratio"] == run["live"]["served_ratio"]
    assert res["importance"]["shared"]["5"]["live"]["messages"] > 0
    assert res["importance"]["local"]["5"]["live"]["messages"] == 0
    assert set(res["variants"]) == {"auto", "aggressive", "icache-sub"}
    auto = res["variants"]["auto"]["10"]
    assert list(auto["validations"]) == ["0", "1"] and auto["epoch_modes"]["1"] == "relaxed"
    assert res["variants"]["aggressive"]["10"]["epoch_modes"] == {"1": "aggressive",
                                                                  "2": "aggressive"}
    sub = res["variants"]["icache-sub"]["10"]
    hits = sum(c["icache"]["hits"] for c in sub["live"]["caches"])
    substituted = sum(c["icache"]["substituted"] for c in sub["live"]["caches"])
    assert sub["live"]["served_ratio"] == pytest.approx((hits + substituted) / (3 * 128))
    assert 0 < res["shuffle_run"]["train"]["auc"] < 1


def test_study_options_are_checked(capsys):
    for bad in (["--cache-modes", "remote"], ["--variants", "lifo"],
                ["--variant-sizes", "0"]):
        with pytest.raises(SystemExit):
            study.main(bad)
        assert "error" in capsys.readouterr().err
