"""Smoke version of ``make shade``: a tiny study (float32 embeddings, 2 epochs, 2 workers) writes its report, and on every recorded sequence Belady is the ceiling of every
policy and the SHADE cache's replayed hits equal the run's own."""
import argparse
import json

from trainingcxl.shade import study


def test_tiny_study(tmp_path):
    ap = argparse.ArgumentParser()
    study.add_arguments(ap)
    a = ap.parse_args(["--samples", "256", "--eval-samples", "256", "--epochs", "2",
                       "--sizes", "5", "--workers", "2", "--device", "float32",
                       "--shard-size", "64", "--out", str(tmp_path)])
    rep = study.run_study(a)
    assert (tmp_path / "report.md").read_text().count("SHADE/LRU") >= 1
    for f in ("study.json", "hit_ratio_W2.png", "accuracy.png", "bytes.png"):
        assert (tmp_path / f).stat().st_size > 0
    assert json.loads((tmp_path / "study.json").read_text())["n_samples"] == 256
    for key in ("W2",):
        res = rep["runs"][key]
        for size in ("5",):
            for pol in (res["importance"][size]["policies"], res["shuffle"][size]):
                ceiling = pol["belady"]["hit_ratio"]
                for name, p in pol.items():
                    assert 0 <= p["hit_ratio"] <= ceiling + 1e-12, (key, size, name)
                    assert p["accesses"] == 2 * 256
        assert 0.5 < res["shuffle"]["train"]["auc"] < 1
