"""Synthesis harness: the device core with pseudo-random inputs and folded outputs, for a
core-only Fmax and utilization figure on an FPGA.

The device has 400-800 input and 500-950 output bits, depending on the media port width
(LOOKUP streams and a full AXI4 master); no package has that many pins, and constant-tied
inputs would let synthesis delete most of the logic. So the harness:

- drives every device input from its own flip-flop of a wide **xorshift register** (a linear
  feedback register in Marsaglia's xorshift form, ``x ^= x << a; x ^= x >> b`` over the whole
  width, seeded with a fixed pseudo-random pattern). Each bit has its own next-state function,
  so no two inputs are equal and synthesis can neither constant-fold nor merge them, and no
  shift-register chains form (which Xilinx synthesis would pack into SRLs). Both steps are
  invertible, so the register never reaches zero;
- registers every device output once (as a register slice at the core boundary would), then
  XOR-folds them in a pipelined tree of 4-input XORs, one register per level, onto ``OUT_PINS``
  output pins. Every output bit reaches a pin, so all logic feeding an output stays alive;
- takes one clock pin ``clk`` and an active-low reset pin ``rst_n`` (a board's reset button)
  through a reset synchronizer: asynchronous assert, synchronous release.

Pins: ``clk``, ``rst_n``, ``out[OUT_PINS]``. Nothing here is meant to be functionally
meaningful: most random commands fail the engine's checks, but synthesis cannot know that,
so timing and resources are those of the real core. The harness adds about
``input + 1.3 × output bits`` flip-flops; ``SynthHarness.overhead()`` says exactly how many.
"""
import random

from amaranth.hdl import Cat, ClockDomain, ClockSignal, Module, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.cdc import ResetSynchronizer
from amaranth.lib.wiring import In, Out

from ..config import DeviceConfig
from ..top import TrainingCXLDevice, device_blocks

__all__ = ["SynthHarness", "HARNESS_NAME", "OUT_PINS", "device_io_bits", "xorshift_next",
           "fold_widths"]

HARNESS_NAME = "trainingcxl_harness"
OUT_PINS = 8
_SEED = 0x7C5D      # fixed: the same seed pattern (and so the same netlist) on every run
_SHIFT_L, _SHIFT_R = 7, 9


def device_io_bits(dev: wiring.Component):
    """(input values, output values) of the device's signature members, in signature order."""
    ins, outs = [], []
    for path, member, value in dev.signature.flatten(dev):
        (ins if member.flow == In else outs).append(Value.cast(value))
    return ins, outs


def xorshift_next(x: int, width: int) -> int:
    """Next state of the harness's xorshift register (the same function the RTL computes)."""
    mask = (1 << width) - 1
    x ^= (x << _SHIFT_L) & mask
    x ^= x >> _SHIFT_R
    return x


def fold_widths(n: int, pins: int = OUT_PINS) -> list:
    """Widths of the successive XOR-fold register levels from ``n`` captured bits down to
    ``pins``: groups of at most 4 bits (one LUT4 each) per level, the last level exactly
    ``pins`` wide (bits are dealt round-robin to groups)."""
    widths = []
    while n > pins:
        n = max(pins, -(-n // 4))
        widths.append(n)
    return widths


class SynthHarness(wiring.Component):
    """Top for FPGA synthesis of :class:`hw.top.TrainingCXLDevice` (see the module docstring): the
    device's inputs come from an xorshift register, its outputs fold into ``OUT_PINS`` pins, so
    nothing is optimized away and the I/O fits.

    Parameters
    ----------
    cfg : DeviceConfig
        The device configuration.
    block : str, optional
        One block of the device (a name of :func:`hw.top.device_blocks`: ``update``,
        ``dcoh``, ...) instead of the whole device, so that a block's own paths can be placed,
        routed and timed alone; its signature's inputs come from the stimulus register and its
        outputs are folded as the device's are. Paths that cross blocks in the device are
        not in such a figure.

    Members
    -------
    clk : In(1)
        Clock.
    rst_n : In(1)
        Active-low reset.
    out : Out(OUT_PINS)
        The XOR-folded device outputs.

    Raises
    ------
    TypeError
        If ``cfg`` is not a :class:`DeviceConfig`.
    ValueError
        If ``block`` names no block of the device.
    """

    clk: In(1)
    rst_n: In(1)
    out: Out(OUT_PINS)

    def __init__(self, cfg: DeviceConfig, block: str | None = None):
        if not isinstance(cfg, DeviceConfig):
            raise TypeError(f"cfg must be a DeviceConfig, got {cfg!r}")
        self.cfg = cfg
        self.block = block
        if block is None:
            self.dev = TrainingCXLDevice(cfg)
        else:
            self.dev = device_blocks(cfg, [block])[block]
        ins, outs = device_io_bits(self.dev)
        self.input_bits = sum(len(v) for v in ins)
        self.output_bits = sum(len(v) for v in outs)
        seed = random.Random(_SEED).getrandbits(self.input_bits) | 1
        self.stim = Signal(self.input_bits, init=seed, name="stim")   # the xorshift register
        super().__init__()

    def overhead(self) -> dict:
        """Flip-flops the harness itself adds around the device (to tell apart in utilization):
        stimulus, output capture, fold levels and the two reset synchronizer stages."""
        folds = fold_widths(self.output_bits)
        return {"input_bits": self.input_bits, "output_bits": self.output_bits,
                "fold_levels": folds,
                "flip_flops": self.input_bits + self.output_bits + sum(folds) + 2}

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = ClockDomain("sync")
        m.d.comb += ClockSignal("sync").eq(self.clk)
        m.submodules.rst_sync = ResetSynchronizer(~self.rst_n, domain="sync")

        m.submodules.dev = dev = self.dev
        ins, outs = device_io_bits(dev)

        # ---- stimulus: one xorshift register bit per device input bit ----------------------
        x, width = self.stim, len(self.stim)
        step = Signal(width, name="stim_step")
        m.d.comb += step.eq(x ^ (x << _SHIFT_L)[:width])
        m.d.sync += x.eq(step ^ (step >> _SHIFT_R))
        pos = 0
        for v in ins:
            m.d.comb += v.eq(x[pos:pos + len(v)])
            pos += len(v)

        # ---- response: capture all outputs, fold them onto the pins ------------------------
        level = Signal(sum(len(v) for v in outs), name="capture")
        m.d.sync += level.eq(Cat(*outs))
        for n, w in enumerate(fold_widths(len(level))):
            groups = [Cat(*(level[i] for i in range(g, len(level), w))) for g in range(w)]
            nxt = Signal(w, name=f"fold{n}")
            m.d.sync += nxt.eq(Cat(*(grp.xor() for grp in groups)))
            level = nxt
        m.d.comb += self.out.eq(level)
        return m
