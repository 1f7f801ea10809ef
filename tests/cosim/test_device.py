"""Device-top cosim tier: the full TrainingCXL device under Verilator against the golden model
(cosim/device_tests.py): training batches (LOOKUP+LOG, UPDATE, COMMIT, recovery) with PMEM
latency and AXI stall variants, every documented bad input (descriptor, doorbell, ring and CSR
errors, partial UPDATE rolled back by recovery) and the interrupt line.

One Verilator build of ``DeviceConfig()`` (the same as the crash campaign's, so the build is
shared through the content-hash cache), one simulator run.
"""
import pytest

from cosim import build as cb
from hw.config import DeviceConfig

MIN_TESTS = 14     # cocotb tests in cosim/device_tests.py, parametrized variants counted


@pytest.fixture(scope="module")
def device_build():
    cfg = DeviceConfig()
    return cfg, cb.device_build(cfg)


@pytest.mark.cosim
def test_device_cosim(device_build, seed, tmp_path):
    """All device cocotb tests pass (completions, memory image and CSRs equal to the model)."""
    cfg, b = device_build
    res = cb.run(b, "cosim.device_tests", seed=seed, test_dir=tmp_path,
                 extra_env={"TCXL_CONFIG": cfg.to_json()})
    assert res.n_tests >= MIN_TESTS and res.n_failed == 0, (res, seed)
