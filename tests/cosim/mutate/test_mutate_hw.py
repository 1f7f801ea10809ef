"""Smoke test of the mutant build (cosim.mutants, cosim/build.py's TRAININGCXL_MUTANTS variant)
and the pure parts of ``trainingcxl.mutate.hw``.

A tiny accumulator (:class:`Accumulator`, defined here) is converted with three mutants in one
Verilator build. The cocotb test below checks it against a Python model for 200 cycles; run
with mutant 0 (none active) it must pass, with the mutant that inverts a bit of the ``total``
register it must fail, and so the selector, the plusarg and the mutation itself are all shown
to work, and the bench to be able to fail.
"""
import json
import random

import cocotb
import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge

from cosim import build as cb, mutants as mu

TOP = "mutate_smoke"


class Accumulator(wiring.Component):
    """``total`` += ``a`` on every cycle ``en`` is high (8 bits, wrapping)."""
    a: In(8)
    en: In(1)
    total: Out(8)

    def elaborate(self, platform):
        m = Module()
        with m.If(self.en):
            m.d.sync += self.total.eq(self.total + self.a)
        return m


@cocotb.test()
async def accumulator_matches_model(dut):
    """200 cycles of random ``a``/``en``: ``total`` equals the model every cycle."""
    rng = random.Random(cocotb.RANDOM_SEED)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value, dut.a.value, dut.en.value = 1, 0, 0
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    total = 0
    for _ in range(200):
        a, en = rng.randrange(256), rng.random() < 0.7
        dut.a.value, dut.en.value = a, int(en)
        await RisingEdge(dut.clk)
        if en:
            total = (total + a) & 0xFF
        dut.en.value = 0
        await RisingEdge(dut.clk)
        assert int(dut.total.value) == total, (int(dut.total.value), total)


# ---- pytest launcher ----------------------------------------------------------------------------
def _smoke_list(tmp_path):
    """Three mutants of the accumulator: the first inverts a bit of ``total`` (killable)."""
    rtlil, key = mu.design_rtlil(Accumulator(), TOP)
    cands = mu.list_candidates(rtlil, TOP, 50, seed=1)
    killable = next(c for c in cands if c["wire"] == "total" and c["mode"] == "inv")
    others = [c for c in cands if c["cmd"] != killable["cmd"]][:2]
    muts = [[1, killable["cmd"]]] + [[i, c["cmd"]] for i, c in enumerate(others, 2)]
    path = tmp_path / "mutants.json"
    path.write_text(json.dumps({"designs": {key: {"top": TOP, "mutants": muts}}}))
    return path, killable


@pytest.mark.cosim
def test_mutant_build_kills_a_killable_mutant_and_passes_mutant_0(seed, tmp_path, monkeypatch):
    """Mutant 0 of the mutant build passes the bench; the ``total``-bit inversion fails it."""
    path, killable = _smoke_list(tmp_path)
    assert killable["src"] and killable["src"][-1].startswith("tests/cosim/mutate/")
    plain = cb.generate_verilog(Accumulator(), name=TOP)
    monkeypatch.setenv(cb.MUTANTS_ENV, str(path))
    text = cb.generate_verilog(Accumulator(), name=TOP)
    assert cb.MUTANT_MARKER in text and cb.MUTANT_MARKER not in plain
    assert "input [15:0] mutsel" not in text       # the selector is internal, not a port
    b = cb.build(text, top=TOP)
    monkeypatch.delenv(cb.MUTANTS_ENV)
    monkeypatch.setenv(cb.MUTANT_ENV, "0")
    res = cb.run(b, __name__, seed=seed, test_dir=tmp_path / "m0")
    assert res.n_ran == 1 and res.n_failed == 0
    monkeypatch.setenv(cb.MUTANT_ENV, "1")
    with pytest.raises(cb.CosimError, match="tests failed"):
        cb.run(b, __name__, seed=seed, test_dir=tmp_path / "m1")


def test_mutant_env_must_be_an_id(monkeypatch, tmp_path):
    monkeypatch.setenv(cb.MUTANT_ENV, "one")
    build = cb.Build(build_dir=tmp_path, top=TOP, key="x", waves=False)
    with pytest.raises(cb.CosimError, match="mutant id"):
        cb.run(build, __name__, seed=1, test_dir=tmp_path)


def test_internal_mutsel_rewrites_port_into_plusarg_register():
    v = ("module t(a, y, mutsel);\n  input a;\n  wire a;\n  input [15:0] mutsel;\n"
         "  wire [15:0] mutsel;\n  output y;\n  assign y = a ^ (mutsel == 16'h0001);\nendmodule\n")
    out = mu._internal_mutsel(v, "t")
    assert out.startswith("module t(a, y);")
    assert "reg [15:0] mutsel;" in out and '$value$plusargs("mutsel=%d", mutsel)' in out
    with pytest.raises(mu.MutantError):
        mu._internal_mutsel(v.replace("mutsel", "other"), "t")


def test_bad_list_is_reported(tmp_path):
    p = tmp_path / "l.json"
    p.write_text(json.dumps({"designs": {"k": {"top": "t", "mutants": [["1", "-mode inv"]]}}}))
    with pytest.raises(mu.MutantError, match="bad mutant list"):
        mu.load_list(p)


@pytest.mark.parametrize("argv, message", [
    (["--targets", "nope"], "unknown"),
    (["--mutants", "1"], "at least the number of targets"),
    (["--timeout-factor", "1"], "must be > 1"),
    (["--only", "x"], "comma-separated mutant ids"),
    (["--workers", "0"], "--workers must be >= 1"),
])
def test_runner_rejects_bad_arguments(argv, message, capsys):
    from trainingcxl.mutate import hw
    with pytest.raises(SystemExit) as e:
        hw.main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_summary_score_counts_timeouts_as_killed_and_leaves_equivalent_out():
    from trainingcxl.mutate.hw import summarise
    table = [{"block": "DCOH", "outcome": o} for o in
             ["killed"] * 7 + ["timeout"] + ["survived"] * 2 + ["equivalent"] * 3]
    s = summarise(table)
    assert s["blocks"]["DCOH"] == {"killed": 7, "timeout": 1, "survived": 2, "equivalent": 3,
                                   "score_pct": 80.0}
    assert s["total"]["score_pct"] == 80.0


@pytest.mark.parametrize("src, block", [
    ("hw/dcoh/tracker.py:12", "DCOH"), ("hw/media_axi.py:40", "media port"),
    ("hw/csr/regblock.py:155", "CSR"), ("hw/axi.py:69", None)])
def test_block_of_src(src, block):
    from trainingcxl.mutate.hw import block_of_src
    assert block_of_src(src) == block


def test_device_target_is_not_in_the_default_draw_and_its_benches_cover_its_blocks():
    """The full-device target (update, undo logger, persist, snapshot, command processor) is
    chosen with ``--targets device``; the default draw stays over csr, dcoh and lookup, so a
    campaign of the default command draws the mutants it drew before."""
    from trainingcxl.coverage.blocks import BLOCKS
    from trainingcxl.mutate.hw import DEFAULT_TARGETS, TARGETS, _parser, block_of_src
    assert _parser().parse_args([]).targets == "csr,dcoh,lookup" == ",".join(DEFAULT_TARGETS)
    dev = TARGETS["device"]
    names = {b.name for b in BLOCKS}
    for src in dev.sources:
        block = block_of_src(src + "x.py:1")
        assert block in names and any(block in b.blocks for b in dev.benches), src
