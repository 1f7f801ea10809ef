"""trainingcxl.logic_depth on hand-built netlists: depths by the documented weights, the deepest
path with its source lines, one path per block pair, and a refused hierarchical netlist."""
import pytest

from trainingcxl.logic_depth import depth_markdown, logic_depth
from trainingcxl.synth import REPO_ROOT, clean_source

BB = {"attributes": {"blackbox": "1"}}


def cell(kind, **ports):
    dirs = {"Z": "output", "Q": "output", "COUT": "output", "S0": "output", "S1": "output"}
    return {"type": kind, "connections": ports,
            "port_directions": {p: dirs.get(p, "input") for p in ports}}


def net(bits, src=""):
    return {"bits": bits, "attributes": {"src": src}}


def netlist():
    """ff a (bit 2) -> LUT (3) -> LUT (4) -> CCU2C A0 -> COUT (5) -> CCU2C CIN -> COUT (6)
    -> LUT (7) -> ff b; ff c (bit 10) -> LUT (11) -> ff d."""
    cells = {
        "ff_a": cell("TRELLIS_FF", CLK=[1], DI=[20], Q=[2]),
        "l1": cell("LUT4", A=[2], B=["0"], Z=[3]),
        "l2": cell("LUT4", A=[3], Z=[4]),
        "c1": cell("CCU2C", A0=[4], CIN=["0"], COUT=[5]),
        "c2": cell("CCU2C", A0=["0"], CIN=[5], COUT=[6]),
        "l3": cell("LUT4", D=[6], Z=[7]),
        "ff_b": cell("TRELLIS_FF", CLK=[1], DI=[7], Q=[8]),
        "ff_c": cell("TRELLIS_FF", CLK=[1], DI=[21], Q=[10]),
        "l4": cell("LUT4", A=[10], Z=[11]),
        "ff_d": cell("TRELLIS_FF", CLK=[1], DI=[11], Q=[12]),
    }
    nets = {
        "dev.gather.q": net([2], f"{REPO_ROOT}/hw/gather/engine.py:10.1-10.5"),
        "dev.gather.sel": net([3, 4], f"{REPO_ROOT}/hw/gather/engine.py:12.3-12.9"),
        "dev.mux.grant": net([5], f"{REPO_ROOT}/hw/port_mux.py:63.1-63.2"),
        "$auto$carry": net([6], "/share/lattice/arith_map_ccu2c.v:63.2-63.3"),
        "dev.persist.stop": net([7], f"{REPO_ROOT}/hw/persist/engine.py:99.1-99.2"),
        "dev.persist.q": net([8]),
        "dev.cp.a": net([10], f"{REPO_ROOT}/hw/cmdproc/ring.py:5.1-5.2"),
        "dev.cp.b": net([11], f"{REPO_ROOT}/hw/cmdproc/ring.py:6.1-6.2"),
        "dev.cp.q": net([12]),
    }
    return {"modules": {"top": {"cells": cells, "netnames": nets}, "LUT4": BB,
                        "TRELLIS_FF": BB, "CCU2C": BB}}


def test_deepest_path_depth_and_source_lines():
    d = logic_depth(netlist(), "top", source=clean_source)
    # LUT 1 + LUT 1 + carry entry 1 + one carry cell rippled 0.05 + LUT 1
    assert d["max_depth"] == pytest.approx(4.05)
    p = d["paths"][0]
    assert (p["start"], p["end"]) == ("dev.gather.q", "dev.persist.stop")
    assert [s["src"] for s in p["steps"]] == [
        "hw/gather/engine.py:10", "hw/gather/engine.py:12", "hw/port_mux.py:63",
        "hw/persist/engine.py:99"]
    assert [s["depth"] for s in p["steps"]] == [0, 1, 3, 4.05]


def test_one_path_per_block_pair_and_histogram():
    d = logic_depth(netlist(), "top", source=clean_source)
    assert [(p["start"], p["end"], p["depth"]) for p in d["paths"]] == [
        ("dev.gather.q", "dev.persist.stop", 4.05), ("dev.cp.a", "dev.cp.b", 1.0)]
    # endpoint bits: the flip-flops' data inputs (clocks aside; two driven by nothing, at 0)
    assert d["histogram"] == {0: 2, 1: 1, 4: 1}
    md = "\n".join(depth_markdown(d))
    assert "**4.05 levels**" in md and "`hw/port_mux.py:63`" in md


def test_hierarchical_netlist_is_refused():
    nl = netlist()
    nl["modules"]["top"]["cells"]["sub"] = {"type": "child", "connections": {},
                                            "port_directions": {}}
    nl["modules"]["child"] = {"cells": {}, "netnames": {}}
    with pytest.raises(ValueError, match="not flattened: it instantiates child"):
        logic_depth(nl, "top", source=clean_source)
