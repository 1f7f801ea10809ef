"""LOOKUP through the DCOH with a caching host that holds the lists dirty and the outputs shared
(cosim/coherent_lookup_tests.py): result and memory image equal the golden model."""
import pytest

from cosim import build as cb
from hw.config import DeviceConfig
from hw.lookup_slice import SLICE_NAME, LookupSlice


@pytest.mark.cosim
def test_coherent_lookup_cosim(seed, tmp_path):
    cfg = DeviceConfig()
    b = cb.build(cb.generate_verilog(LookupSlice(cfg), name=SLICE_NAME), top=SLICE_NAME)
    res = cb.run(b, "cosim.coherent_lookup_tests", seed=seed, test_dir=tmp_path,
                 extra_env={"TCXL_CONFIG": cfg.to_json()})
    assert res.n_tests == 2 and res.n_failed == 0
