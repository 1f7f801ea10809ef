"""Generated Verilog is Verilator-lint clean with only the three waivers Amaranth output needs."""
import subprocess

import pytest

from cosim import build as cb
from hw.config import CONFIGS, DeviceConfig
from hw.top import TOP_NAME
from trainingcxl.crash.campaign import EXTENDED_LOG_SIZE

# Each distinct named configuration once ("sim" is the default: linting it twice costs ~35 s of
# CI). fpga-ecp5 is linted with the extended crash smoke's 136-slot log (tests/cosim/crash),
# which changes nothing but the log region's size: both then share one elaboration (cosim.build's
# Verilog cache) instead of paying 25-30 s each. The 128-bit media port is linted with it; the
# narrow LOOKUP path (acc_bits 36, 16 reads outstanding) by the Verilator build of
# tests/cosim/gather's narrow slice, which fails on any warning the same three waivers leave.
LINT_CONFIGS = {}
for _name, _cfg in CONFIGS.items():
    if _name == "fpga-ecp5":
        _name, _cfg = "fpga-ecp5-log136", _cfg.with_(log_size=EXTENDED_LOG_SIZE)
    if _cfg not in LINT_CONFIGS.values():
        LINT_CONFIGS[_name] = _cfg


@pytest.mark.parametrize("name", sorted(LINT_CONFIGS))
def test_verilator_lint_clean(name, tmp_path):
    """`verilator --lint-only` with exactly the three waivers reports nothing for each config."""
    env = cb.verilator_env()
    v = tmp_path / f"{TOP_NAME}.v"
    v.write_text(cb.device_verilog(LINT_CONFIGS[name], name=TOP_NAME))
    r = subprocess.run(["verilator", "--lint-only", *cb.WAIVERS, "--top-module", TOP_NAME,
                        str(v)], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "%Warning" not in r.stderr, r.stderr[-4000:]


def test_lint_catches_a_warning(tmp_path):
    """The lint run can fail: with the same three waivers, an always-false unsigned compare (the
    warning this design once had for a region based at 0) is reported."""
    env = cb.verilator_env()
    v = tmp_path / "bad.v"
    v.write_text("module bad(input [3:0] a, output y); assign y = a < 4'd0; endmodule\n")
    r = subprocess.run(["verilator", "--lint-only", *cb.WAIVERS, str(v)], capture_output=True,
                       text=True, env=env)
    assert r.returncode != 0 and "%Warning" in r.stderr


@pytest.mark.parametrize("model", ["pmem", "host", "csr"])
def test_compiled_model_wrappers_lint_clean(model, tmp_path):
    """The Verilog that puts a compiled model on the device's ports (the C++ PMEM model on the
    media port, the compiled CXL.mem host on the host channels, the compiled AXI4-Lite master
    on the CSR port) adds no warning: each model's
    module itself under ``-Wall`` (for the default and the 128-bit media width). The device
    with them in the new top is verilated under the three waivers by every simulator build of
    the device, which fails on a warning (tests/cosim/infra:
    test_build_fails_on_a_lint_warning)."""
    from cosim.csr_cpp.wrapper import CSR_MODULE, csr_slot
    from cosim.host_cpp.wrapper import HOST_MODULE, host_slot
    from cosim.pmem_cpp.wrapper import PMEM_MODULE, pmem_slot
    module, slot = {"pmem": (PMEM_MODULE, pmem_slot), "host": (HOST_MODULE, host_slot),
                    "csr": (CSR_MODULE, csr_slot)}[model]
    env = cb.verilator_env()
    for name, cfg in (("default", DeviceConfig()), ("fpga-ecp5-log136",
                                                     LINT_CONFIGS["fpga-ecp5-log136"])):
        text = slot(cb.device_verilog(cfg, name=TOP_NAME), TOP_NAME).text
        assert f"module {module}" in text
        mod = tmp_path / f"{module}.sv"
        mod.write_text(text)
        r = subprocess.run(["verilator", "--lint-only", "-Wall", "--top-module", module,
                            str(mod)], capture_output=True, text=True, env=env)
        assert r.returncode == 0 and "%Warning" not in r.stderr, (name, r.stderr[-4000:])
