"""Run parameters (cosim/params.py): one typed object per simulator run survives the trip through
JSON exactly (nested dataclasses, tuples, None), and a file of another type, an unknown field, a
missing or malformed file are refused with a message naming them."""
import json

import pytest

from cosim import params
from cosim.tb.config import BenchConfig, bench_config
from hw.config import DeviceConfig
from sw_model.dlrm import DLRMConfig
from trainingcxl.crash.tb import CrashParams
from trainingcxl.train.tb import TrainParams


def test_round_trip_nested_and_typed(tmp_path):
    small = DeviceConfig().with_(sf_sets=2, sf_ways=2, bi_tags=2, park_slots=2)
    p = TrainParams(bench=BenchConfig(small, latency=9, trace="t.jsonl"),
                    model=DLRMConfig(lag_k=2, table_rows=(10, 20), alphas=(1.1, 0.9)), batches=3,
                    crashes=[[2, 0.25]], latency=8, mlp_cycles=10, seed=3, out="o.json")
    f = params.write(p, tmp_path / "p.json")
    back = params.load(TrainParams, f)
    assert back == p
    assert isinstance(back.model, DLRMConfig) and back.model.table_rows == (10, 20)
    assert isinstance(back.bench.device, DeviceConfig) and back.bench.device == small
    assert params.load_any(f) == p


def test_refuses_other_type_unknown_field_and_bad_file(tmp_path):
    f = params.write(CrashParams(seed=5), tmp_path / "p.json")
    with pytest.raises(params.ParamsError, match="CrashParams, not a .*TrainParams"):
        params.load(TrainParams, f)
    doc = json.loads(f.read_text())
    doc["fields"]["bogus"] = 1
    f.write_text(json.dumps(doc))
    with pytest.raises(params.ParamsError, match=r"unknown fields \['bogus'\]"):
        params.load(CrashParams, f)
    f.write_text("{not json")
    with pytest.raises(params.ParamsError, match="bad run parameter file"):
        params.load(CrashParams, f)
    with pytest.raises(TypeError, match="dataclass instance"):
        params.dump({"a": 1})


def test_environment_names_the_file(tmp_path, monkeypatch):
    monkeypatch.delenv(params.PARAMS_ENV, raising=False)
    assert params.current(CrashParams) == CrashParams()      # outside a run: the defaults
    assert params.load_any() is None and bench_config() == BenchConfig()
    with pytest.raises(params.ParamsError, match=params.PARAMS_ENV):
        params.load(CrashParams)
    f = params.write(CrashParams(bench=BenchConfig(latency=4), seed=7), tmp_path / "p.json")
    monkeypatch.setenv(params.PARAMS_ENV, str(f))
    assert params.current(CrashParams).seed == 7
    assert bench_config() == BenchConfig(latency=4)          # the bench reads its field
