"""MLP snapshot cosim tier: SNAPSHOT on the full TrainingCXL device under Verilator against the
golden model (cosim/snapshot_tests.py): copy over lengths x source offsets with guard bytes,
background overlap with later descriptors, a second SNAPSHOT and a k = 0 COMMIT waiting for the
one in flight, MLP_LAG refusals, BAD_EPOCH / SNAP_LENGTH / ADDR_RANGE, recovery's slot choice
(also with a corrupted slot and after a power failure during a copy) and the section-9 CSRs.

Same ``DeviceConfig()`` and Verilog as tests/cosim/test_device.py, so the Verilator build is
shared through the content-hash cache; one simulator run.
"""
import pytest

from cosim import build as cb
from hw.config import DeviceConfig
from hw.top import TOP_NAME, TrainingCXLDevice

MIN_TESTS = 10     # cocotb tests in cosim/snapshot_tests.py, parametrized variants counted


@pytest.fixture(scope="module")
def device_build():
    cfg = DeviceConfig()
    return cfg, cb.build(cb.generate_verilog(TrainingCXLDevice(cfg), name=TOP_NAME))


@pytest.mark.cosim
def test_snapshot_cosim(device_build, seed, tmp_path):
    """All snapshot cocotb tests pass (completions, memory image, CSRs equal to the model; the
    contract's layout, ordering and error values asserted on the RTL)."""
    cfg, b = device_build
    res = cb.run(b, "cosim.snapshot_tests", seed=seed, test_dir=tmp_path,
                 extra_env={"TCXL_CONFIG": cfg.to_json()})
    assert res.n_tests >= MIN_TESTS and res.n_failed == 0, (res, seed)
