"""CSR block alone under Verilator, driven by cosim.csr.CsrMaster (cocotbext-axi AxiLiteMaster).

One build of ``CsrBlock`` (the project register map); the cocotb tests of ``cosim.csr_tests``
run in one simulator launch and the results file is checked (cosim.build.run). Not named
test_csr.py: pytest's default import mode refuses two test modules with one basename, and
tests/unit/test_csr.py exists.
"""
import functools

import pytest

from cosim import build as cb
from hw.csr.regblock import CsrBlock

pytestmark = pytest.mark.cosim

TOP = "trainingcxl_csr"
CSR_TESTS = 6          # cocotb tests in cosim.csr_tests


@functools.cache
def csr_build():
    return cb.build(cb.generate_verilog(CsrBlock(), name=TOP), top=TOP)


def test_csr_cosim(seed, tmp_path):
    """Every cocotb CSR test passes (register reads per the map, writes, WSTRB, SLVERR and
    error reports, pulses, IRQ woclr/hwset, ring-register hooks, pipelined traffic)."""
    res = cb.run(csr_build(), "cosim.csr_tests", seed=seed, test_dir=tmp_path)
    assert (res.n_tests, res.n_skipped, res.n_failed) == (CSR_TESTS, 0, 0)
