"""LOOKUP cosim tier: the gather-reduce device under Verilator against the golden model.

Two hardware configurations, one Verilator build each: the default build (512-bit media port)
and a small one (128-bit port = 4-beat bursts, 16 outstanding reads, 36-bit accumulator so the
BAG_TOO_LONG path is reachable with a 17-row bag).
"""
import pytest

from cosim import build as cb
from hw.config import DeviceConfig
from hw.lookup_slice import SLICE_NAME, LookupSlice

CONFIGS = {
    "default": DeviceConfig(),
    "narrow": DeviceConfig(media_data_bits=128, max_reads=16, max_writes=4, acc_bits=36,
                           table_base=0x4000_0000, table_size=1 << 26,
                           staging_base=0x1000_0000, staging_size=1 << 24),
}


@pytest.fixture(scope="session", params=sorted(CONFIGS))
def device_build(request):
    cfg = CONFIGS[request.param]
    return cfg, cb.build(cb.generate_verilog(LookupSlice(cfg), name=SLICE_NAME), top=SLICE_NAME)


@pytest.mark.cosim
def test_lookup_cosim(device_build, seed, tmp_path):
    """All LOOKUP cocotb tests pass (completion + whole memory image equal to the model)."""
    cfg, b = device_build
    res = cb.run(b, "cosim.gather_tests", seed=seed, test_dir=tmp_path,
                 extra_env={"TCXL_CONFIG": cfg.to_json()})
    assert res.n_tests >= 8 and res.n_failed == 0
