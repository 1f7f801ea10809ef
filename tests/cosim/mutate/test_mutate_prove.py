"""Equivalence proofs of mutants (``cosim.mutants.prove_equivalent``), module-local and whole
design, on a two-level design (:class:`Pair`, an :class:`Inner` instance in an outer top).

Each mutation is written on the flattened design exactly as ``mutate -list`` names it
(``$flatten\\inner.$N``, checked against the list) and proven three ways: a mutation that
is equivalent in the inner module alone (proven by both scopes), one the outputs show
(proven by neither) and one that is equivalent only because of what the parent drives
(the module proof must not prove it, the whole-design proof does): the module proof is
shown able to fail, and conservative.
"""
import inspect
import json
import re

import pytest
from amaranth.hdl import Module, Mux
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from cosim import mutants as mu

TOP = "mutate_pair"


class Inner(wiring.Component):
    """``y = a & (a | b)`` (which is ``a``); ``z`` accumulates ``a``; ``w`` is ``a`` when
    ``a == c``, else 0; ``r`` reads a 4-word memory written with ``b`` at ``a``: the
    module holds a memory, which the proofs must map (the SAT passes have no model of one)."""
    a: In(8)
    b: In(8)
    c: In(8)
    y: Out(8)
    z: Out(8)
    w: Out(8)
    r: Out(8)

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=8, depth=4, init=[])
        wr, rd = mem.write_port(), mem.read_port()
        m.d.comb += [wr.addr.eq(self.a), wr.data.eq(self.b), wr.en.eq(1),
                     rd.addr.eq(self.b), self.r.eq(rd.data)]
        m.d.comb += self.y.eq(self.a & (self.a | self.b))           # marker: absorbed
        m.d.sync += self.z.eq(self.z + self.a)                        # marker: accumulated
        m.d.comb += self.w.eq(Mux(self.a == self.c, self.a, 0))      # marker: compared
        return m


class Pair(wiring.Component):
    """The parent drives ``inner.c = ~a``, so ``a == c`` never holds here and ``w`` is 0
    (Amaranth keeps the inverter: a constant or ``a`` itself would be folded into the
    child and the context would be gone)."""
    a: In(8)
    b: In(8)
    y: Out(8)
    z: Out(8)
    w: Out(8)
    r: Out(8)

    def elaborate(self, platform):
        m = Module()
        m.submodules.inner = inner = Inner()
        m.d.comb += [inner.a.eq(self.a), inner.b.eq(self.b), inner.c.eq(~self.a),
                     self.y.eq(inner.y), self.z.eq(inner.z), self.w.eq(inner.w),
                     self.r.eq(inner.r)]
        return m


def _line_of(marker):
    lines, first = inspect.getsourcelines(Inner)
    return next(first + i for i, line in enumerate(lines) if f"# marker: {marker}" in line)


@pytest.fixture(scope="module")
def design():
    """(RTLIL, the flattened design's candidates, {(marker, cell type): local cell name})."""
    rtlil, _ = mu.design_rtlil(Pair(), TOP)
    cells, module, src = {}, None, None
    for line in rtlil.splitlines():
        w = line.split()
        if w[:1] == ["module"]:
            module = w[1]
        elif w[:2] == ["attribute", "\\src"]:
            src = w[2].strip('"')
        elif w[:1] == ["cell"] and module == f"\\{TOP}.inner":
            cells[("any", w[1])] = w[2]
            for marker in ("absorbed", "accumulated", "compared"):
                if src and src.endswith(f":{_line_of(marker)}"):
                    cells[(marker, w[1])] = w[2]
            src = None
    return rtlil, mu.list_candidates(rtlil, TOP, 1000, seed=1), cells


def _cmd(design, marker, cell_type, rest):
    """The flattened design's mutation of the inner cell, named as ``mutate -list`` names
    its cells (checked: the list holds a candidate on that cell)."""
    _, cands, cells = design
    cell = f"$flatten\\inner.{cells[(marker, cell_type)]}"
    assert any(c["cell"] == cell for c in cands), (cell, [c["cell"] for c in cands][:10])
    return f"-mode {rest[0]} -module {TOP} -cell {cell} {rest[1]}"


def test_local_mutation_names_the_inner_module_and_its_own_cell(design):
    rtlil, cands, _ = design
    inner = memory = 0
    for c in cands:
        module, path, options = mu.local_mutation(rtlil, TOP, c["cmd"])
        # a private cell of the instance, or its memory (public: listed without backslash)
        local = c["cell"].removeprefix("$flatten\\inner.")
        if c["cell"] == "inner.mem":
            local, memory = "\\mem", memory + 1
        inner += local != c["cell"]
        assert (module, path) == ((f"\\{TOP}.inner", "inner") if local != c["cell"]
                                  else (f"\\{TOP}", "")), c["cmd"]
        assert options == c["cmd"].replace(f"-module {TOP}", "-module gate").replace(
            f"-cell {c['cell']} ", f"-cell {local} ")
    assert inner > len(cands) // 2         # the parent's inverter is the only cell of the top
    assert memory > 0
    for cell, why in [("$flatten\\nope.$4", "names no instance"),
                      ("$flatten\\inner.\\nope.$4", "does not resolve")]:
        with pytest.raises(mu.MutantError, match=why):
            mu.local_mutation(rtlil, TOP, f"-mode inv -module {TOP} -cell {cell} -port A "
                                          f"-portbit 0")


@pytest.mark.parametrize("scope", ["module", "design"])
def test_mutation_equivalent_in_the_inner_module_is_proven(design, scope):
    """``a & (a | b)``: a bit of ``b`` into the ``$or`` forced to 1 leaves ``y == a``."""
    cmd = _cmd(design, "absorbed", "$or", ("const1", "-port B -portbit 3"))
    assert mu.prove_equivalent(design[0], TOP, cmd, scope=scope, timeout=120)


@pytest.mark.parametrize("scope", ["module", "design"])
def test_observable_mutation_is_not_proven(design, scope):
    """A bit of the accumulator's sum inverted: ``z`` shows it. A bit of the memory's write
    data inverted (its cell named as ``mutate -list`` names a public cell): ``r`` shows it;
    unproven, not an error, so the memory was found in the module."""
    cmd = _cmd(design, "accumulated", "$add", ("inv", "-port Y -portbit 2"))
    assert mu.equivalence(design[0], TOP, cmd, scope=scope, timeout=120) == "unproven"
    mem = f"-mode inv -module {TOP} -cell inner.mem -port WR_DATA -portbit 3"
    assert any(c["cell"] == "inner.mem" for c in design[1])
    assert mu.equivalence(design[0], TOP, mem, scope=scope, timeout=120) == "unproven"


def test_mutation_equivalent_only_in_context_is_not_proven_by_the_module_proof(design):
    """The compare ``a == c`` forced to 0: the parent's ``c = ~a`` never makes it 1, so the
    whole design is unchanged (proven), but the inner module alone, with ``c`` free, shows
    it: the module proof must not claim it."""
    cmd = _cmd(design, "compared", "$eq", ("const0", "-port Y -portbit 0"))
    assert mu.prove_equivalent(design[0], TOP, cmd, scope="design", timeout=120)
    assert not mu.prove_equivalent(design[0], TOP, cmd, scope="module", timeout=120)


@pytest.mark.parametrize("scope", ["module", "design"])
def test_clock_and_missing_cells_are_never_proven(design, scope):
    """A flip-flop's clock inverted (equiv_* steps every flip-flop together and would not
    see it) and a cell that is not in the design (``mutate`` fails): both unproven."""
    rtlil, _, cells = design
    dff = cells[("any", "$dff")]                  # z's register, the only one
    clk = f"-mode inv -module {TOP} -cell $flatten\\inner.{dff} -port CLK -portbit 0"
    assert not mu.prove_equivalent(rtlil, TOP, clk, scope=scope, timeout=120)
    assert mu.equivalence(rtlil, TOP, clk, scope=scope, timeout=120) == "clock"
    gone = re.sub(r"\$flatten\\inner\.\$\d+", r"$flatten\\inner.$9999", _cmd(
        design, "absorbed", "$or", ("const1", "-port B -portbit 3")))
    assert not mu.prove_equivalent(rtlil, TOP, gone, scope=scope, timeout=120)
    assert mu.equivalence(rtlil, TOP, gone, scope=scope, timeout=120) == (
        "error: Cell $9999 not found in module gate." if scope == "module" else
        "error: Cell $flatten\\inner.$9999 not found in module gate.")


def test_a_yosys_failure_without_an_error_line_keeps_its_last_line(monkeypatch):
    """A Yosys exit without an ``ERROR:`` line (the WebAssembly build's trap at its heap limit)
    is reported with its first and last lines, not with the first alone ("yosys failed (exit
    1):", which said nothing); an ``ERROR:`` line, when there is one, is the reason."""
    trap = ("yosys failed (exit 1):\nTraceback (most recent call last):\n"
            "wasmtime._trap.Trap: error while executing at wasm backtrace:\n"
            "    0: yosys.wasm!main\nCaused by:\n    thrown Wasm exception\n")

    def fail(message):
        def run(*args, **kwargs):
            raise mu.MutantError(message)
        return run
    monkeypatch.setattr(mu, "_run_yosys", fail(trap))
    assert mu._prove("", [], 4, 10) == "error: yosys failed (exit 1): ... thrown Wasm exception"
    monkeypatch.setattr(mu, "_run_yosys", fail("yosys failed (exit 1):\nERROR: first\n"
                                               "ERROR: Cell $9 not found\nafter\n"))
    assert mu._prove("", [], 4, 10) == "error: Cell $9 not found"


def test_runner_proves_survivors_module_first_and_the_whole_design_only_when_asked(
        design, monkeypatch, tmp_path):
    """``mutate.hw._prove_survivors``: the locally equivalent survivor becomes equivalent by
    the module proof; the one equivalent only in context stays a survivor unless the
    whole-design proof is asked for; the cache keeps each proof by scope."""
    from trainingcxl.mutate import hw
    monkeypatch.setitem(hw.TARGETS, "pair", hw.Target("pair", TOP, (), (), 0.0))
    rtlil = {"pair": (design[0], "k")}

    def table():
        return [{"id": 1, "target": "pair", "src": "s", "outcome": "survived",
                 "cmd": _cmd(design, "absorbed", "$or", ("const1", "-port B -portbit 3"))},
                {"id": 2, "target": "pair", "src": "s", "outcome": "survived",
                 "cmd": _cmd(design, "compared", "$eq", ("const0", "-port Y -portbit 0"))}]
    cache = tmp_path / "proofs.json"
    t = table()
    hw._prove_survivors(t, rtlil, 60, cache, log=lambda *_: None)
    assert [m["outcome"] for m in t] == ["equivalent", "survived"]
    assert t[0]["proof"] == "proven (module inner)"
    assert t[1]["proof"] == "module inner: not proven (matches left unproven)"
    t = table()
    hw._prove_survivors(t, rtlil, 60, cache, whole_design=True, log=lambda *_: None)
    assert [m["outcome"] for m in t] == ["equivalent", "equivalent"]
    assert t[1]["proof"] == "proven (whole design)"
    assert sorted(json.loads(cache.read_text())) == sorted(
        [f"k module {t[0]['cmd']}", f"k module {t[1]['cmd']}", f"k {t[1]['cmd']}"])
