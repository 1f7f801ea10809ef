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


# ---- mutants removed by synthesis (cosim.mutants.selector_values, mutate.hw.mark_removed) --------
TINY = "mutate_removed"


class SumAndCheck(wiring.Component):
    """``y`` is bits 7..4 of ``a + 3`` (bits 3..0 of the sum are read by nothing); the
    compare ``t != 0xFF`` is read only by an RTL ``Assert``."""
    a: In(8)
    y: Out(4)

    def elaborate(self, platform):
        from amaranth.hdl import Assert, Signal
        m = Module()
        s = Signal(9)
        t = Signal(8)
        m.d.comb += s.eq(self.a + 3)                # marker: sum
        m.d.comb += self.y.eq(s[4:8])
        m.d.comb += t.eq(self.a ^ 0x5A)
        m.d.comb += Assert(t != 0xFF)               # marker: checked
        return m


def _line_of(marker):
    import inspect
    lines, first = inspect.getsourcelines(SumAndCheck)
    return next(first + i for i, line in enumerate(lines) if f"# marker: {marker}" in line)


def _pick(cands, marker, bits, port="Y"):
    """The first candidate on the line of ``marker`` on ``port`` with its bit in ``bits``."""
    line = f"tests/cosim/mutate/test_mutate_hw.py:{_line_of(marker)}"
    for c in cands:
        opts = c["cmd"].split()
        p, bit = opts[opts.index("-port") + 1], int(opts[opts.index("-portbit") + 1])
        if line in c["src"] and p == port and bit in bits:
            return c["cmd"]
    raise AssertionError(f"no candidate on {line} with {port} bit in {bits}")


def test_mutant_with_no_logic_left_is_equivalent_and_the_others_are_not(tmp_path, monkeypatch):
    """Mutant 1 (a bit of the sum that nothing reads) has no selection left after the mutant
    build's opt_clean and is marked equivalent without a run; mutant 2 (a bit of the sum that
    ``y`` reads) and mutant 3 (an input of the compare that only an ``Assert`` reads) keep
    theirs and stay to run."""
    from trainingcxl.mutate import hw
    rtlil, _ = mu.design_rtlil(SumAndCheck(), TINY)
    cands = mu.list_candidates(rtlil, TINY, 1000, seed=1)
    muts = [(1, _pick(cands, "sum", range(0, 4))), (2, _pick(cands, "sum", range(4, 8))),
            (3, _pick(cands, "checked", range(0, 8), port="A"))]
    verilog = mu.mutant_verilog(rtlil, TINY, muts)
    assert mu.selector_values(verilog, TINY) == {2, 3}
    # as in a build's Verilog: the design, then the modules of a wrapper top
    (tmp_path / "wrapper.v").write_text(verilog + "\nmodule wrapper(input x);\nendmodule\n")
    build = {"build_dir": str(tmp_path), "top": "wrapper"}
    assert hw.removed_by_synthesis(build, TINY, [1, 2, 3]) == {1}
    assert hw.removed_by_synthesis(build, TINY, [1, 2]) is None     # 3 is compared: unknown
    monkeypatch.setitem(hw.TARGETS, "tiny", hw.Target("tiny", TINY, (), (), 0.0))
    table = [{"id": 1, "target": "tiny", "outcome": "survived"}, {"id": 2, "target": "tiny"},
             {"id": 3, "target": "tiny", "outcome": "killed"}]
    assert hw.mark_removed(table, {"tiny": build}, log=lambda *_: None) == [1]
    assert table[0] == {"id": 1, "target": "tiny", "outcome": "equivalent",
                        "first_outcome": "survived", "why": hw.REMOVED_WHY, "bench": None}
    assert table[1] == {"id": 2, "target": "tiny"}
    assert table[2]["outcome"] == "killed"


_EQ = """  cell $eq $eq{n}
    parameter \\A_SIGNED 0
    parameter \\B_SIGNED 0
    parameter \\A_WIDTH {w}
    parameter \\B_WIDTH {w}
    parameter \\Y_WIDTH 1
    connect \\A {a}
    connect \\B {b}
    connect \\Y $eq{n}_Y
  end
"""
_HEAD = "autoidx 9\n\nattribute \\top 1\nmodule \\t\n  wire width 16 \\mutsel\n"


def _eq(n, a="\\mutsel", w=16, value=None):
    return _EQ.format(n=n, a=a, w=w, b=f"{w}'{format(n if value is None else value, f'0{w}b')}")


@pytest.mark.parametrize("body, values", [
    (_eq(1) + _eq(2), {1, 2}),
    ("", set()),                                               # no mutant left at all
    (_eq(1) + "  wire width 16 \\other\n" + _eq(4, a="\\other") + "  connect \\other \\mutsel\n",
     None),                                                    # an alias of the selector
    (_eq(1) + _eq(3, a="\\mutsel [3:0]", w=4), None),          # a slice compared
    (_eq(1) + "  cell $pmux $p\n    connect \\S \\mutsel\n  end\n", None),
    (_eq(1) + "  cell $shiftx $s\n    connect \\B \\mutsel\n  end\n", None),
    (_eq(1) + "  process $proc\n  end\n", None),
    (_eq(1).replace("\\Y_WIDTH 1", "\\Y_WIDTH 2"), None),
    (_eq(1).replace("\\A_SIGNED 0", "\\A_SIGNED 1"), None),
])
def test_selector_values_read_only_one_full_comparison_per_mutant(body, values):
    """Only ``$eq`` cells of all of ``mutsel`` with a constant count; any other reader makes
    the answer unknown (None), so that no mutant is said removed when it might not be."""
    assert mu._selector_values_of(_HEAD + body + "end\n") == values
