"""``trainingcxl train --cache shade --sampler importance``: the options reach a data path that
reads a sample store for several epochs, on the golden model (the reference runs of the job;
the RTL run builds the same data path from the same spec)."""
import json

from trainingcxl.train.job import _args, reference_runs
from sw_model.clicklog import ClickData, ClickLogGenerator
from trainingcxl.shade import job as shade_job


def test_train_options_build_a_data_path(tmp_path):
    a = _args(["--cache", "shade", "--cache-size", "25", "--sampler", "importance",
               "--batches", "12", "--crashes", "0", "--dataset-batches", "4",
               "--batch-size", "8", "--out", str(tmp_path)])
    assert shade_job.enabled(a)
    mcfg = a.model
    gen = ClickLogGenerator(mcfg.clicklog())
    spec = shade_job.prepare(a, mcfg, lambda b: gen.batch(b, mcfg.batch_size), 4, a.seed)
    json.dumps(spec)                                  # travels to the simulator as JSON
    eval_data = ClickData.concat([gen.batch(b, mcfg.batch_size, "eval") for b in range(4)])
    refs = reference_runs(mcfg, 12, None, eval_data, log=lambda *_: None, datapath=spec)
    for name in ("golden", "float32"):
        s = shade_job.summary(refs[name]["datapath"])
        assert s["n_samples"] == 32 and s["capacity"] == 8
        assert sorted(s["order"]) == list(range(1, 13))
        # three epochs of 4 batches; epoch 0 reads every sample once
        assert sorted(sum((s["order"][b] for b in range(1, 5)), [])) == list(range(32))
        st = s["stats"]
        assert st["accesses"] == 12 * 8
        assert st["io"]["fetches"] == st["caches"]["shade"]["misses"]
        assert "hit ratio" in shade_job.describe(s)
    # both reference runs read epoch 0 (a shuffle, before any loss) in the same order
    orders = [shade_job.summary(refs[n]["datapath"])["order"] for n in ("golden", "float32")]
    assert [orders[0][b] for b in range(1, 5)] == [orders[1][b] for b in range(1, 5)]
    assert not shade_job.enabled(_args(["--out", str(tmp_path)]))


def test_shade_subcommand_parser_round_trips(monkeypatch):
    import argparse
    from trainingcxl.shade import cli, study
    ap = argparse.ArgumentParser(prog="trainingcxl")
    cli.add_parser(ap.add_subparsers(dest="cmd"))
    seen = {}
    monkeypatch.setattr(study, "main", lambda argv: seen.update(argv=argv) or 0)
    a = ap.parse_args(["shade", "--sizes", "1,5", "--workers", "1", "--epochs", "3",
                       "--ablation"])
    a.func(a)
    again = argparse.ArgumentParser()
    study.add_arguments(again)
    b = again.parse_args(seen["argv"])
    assert (b.sizes, b.workers, b.epochs, b.device, b.ablation) == ([1, 5], [1], 3, "golden",
                                                                   True)
    a = ap.parse_args(["shade"])
    a.func(a)
    assert again.parse_args(seen["argv"]).ablation is False


def test_train_substitute_option(tmp_path):
    mk = lambda *x: _args(["--batches", "4", "--crashes", "0", "--dataset-batches", "2",
                           "--batch-size", "8", "--out", str(tmp_path), *x])
    a = mk("--cache", "icache", "--substitute", "--sampler", "importance")
    mcfg = a.model
    gen = ClickLogGenerator(mcfg.clicklog())
    spec = shade_job.prepare(a, mcfg, lambda b: gen.batch(b, mcfg.batch_size), 2, a.seed)
    assert spec["cfg"]["substitute"] is True
    assert shade_job.build(spec).driving.substitute
    import pytest
    with pytest.raises(ValueError, match="--substitute .* needs --cache icache"):
        shade_job.prepare(mk("--cache", "shade", "--substitute"), mcfg,
                          lambda b: gen.batch(b, mcfg.batch_size), 2, a.seed)
