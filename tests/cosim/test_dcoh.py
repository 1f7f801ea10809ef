"""DCOH cosim tier: the DCOH test top under Verilator against the host model and checkers.

Two configurations, one Verilator build each: the default DCOH (64 x 4 snoop filter, 8 BITags)
for directed tests and the random stress, and a small one (2 x 2 snoop filter, 2 BITags) where
every third request needs a victim and the tracker fills. Sizes are smoke sizes
(``TCXL_DCOH_MESSAGES`` host messages per random test); ``python -m cosim.stress`` runs long.
"""
import pytest

from cosim import build as cb
from hw.config import DeviceConfig
from hw.dcoh.testtop import DcohTestTop, TEST_TOP_NAME

CONFIGS = {
    "main": DeviceConfig(),
    "small": DeviceConfig().with_(sf_sets=2, sf_ways=2, bi_tags=2, park_slots=2),
}


@pytest.fixture(scope="session", params=sorted(CONFIGS))
def dcoh_build(request):
    cfg = CONFIGS[request.param]
    return request.param, cfg, cb.build(cb.generate_verilog(DcohTestTop(cfg), name=TEST_TOP_NAME),
                                        top=TEST_TOP_NAME)


@pytest.mark.cosim
def test_dcoh_cosim(dcoh_build, seed, tmp_path):
    """All DCOH cocotb tests of the configuration's set pass with zero violations."""
    name, cfg, b = dcoh_build
    res = cb.run(b, "cosim.dcoh_tests", seed=seed, test_dir=tmp_path,
                 extra_env={"TCXL_CONFIG": cfg.to_json(), "TCXL_DCOH_SET": name,
                            "TCXL_DCOH_MESSAGES": "1500"})
    assert res.n_tests >= (3 if name == "small" else 8)
