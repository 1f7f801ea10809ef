"""Counters stepped by late signals against Python arithmetic, every cycle: hw/counting.py's
step() and the command processor's error count (hw/cmdproc/errors.py).

Random steps (a seeded draw, the seed printed); step() over narrow counters, so that both
wraps happen many times; the model is the plain sum the RTL replaces, modulo the width.
"""
import pytest

from amaranth.hdl import Elaboratable, Module, Signal

from hw.cmdproc.errors import ERROR_SOURCES, ErrorRegisters
from hw.counting import step

from pysim_util import make_rng, simulate

CYCLES = 600


class StepTop(Elaboratable):
    """A 4-bit counter under ``step`` (``up_by`` a 3-bit input) and a 2-bit one (``up_by`` 1);
    the ``hold`` input leaves the first unchanged through an outer ``If`` and ``clear`` zeroes
    both after the helper (the two ways callers nest it)."""

    def __init__(self):
        self.up, self.down, self.up_by = Signal(), Signal(), Signal(3)
        self.hold, self.clear = Signal(), Signal()
        self.a, self.b = Signal(4), Signal(2)

    def elaborate(self, platform):
        m = Module()
        with m.If(~self.hold):
            step(m, self.a, up=self.up, down=self.down, up_by=self.up_by)
        step(m, self.b, up=self.down, down=self.up)
        with m.If(self.clear):
            m.d.sync += [self.a.eq(0), self.b.eq(0)]
        return m


@pytest.mark.parametrize("seed_offset", [0, 1])
def test_step_matches_the_sum(seed, seed_offset):
    rng = make_rng(seed + seed_offset)
    dut = StepTop()

    async def bench(ctx):
        a = b = 0
        for cycle in range(CYCLES):
            up, down, by = rng.getrandbits(1), rng.getrandbits(1), rng.randrange(8)
            hold, clear = rng.random() < 0.1, rng.random() < 0.02
            for sig, v in ((dut.up, up), (dut.down, down), (dut.up_by, by), (dut.hold, hold),
                           (dut.clear, clear)):
                ctx.set(sig, v)
            await ctx.tick()
            if clear:
                a = b = 0
            else:
                if not hold:
                    a = (a + (by if up else 0) - down) % 16
                b = (b + down - up) % 4
            assert (ctx.get(dut.a), ctx.get(dut.b)) == (a, b), \
                f"cycle {cycle}: up={up} down={down} up_by={by} hold={hold}"

    simulate(dut, [bench], max_cycles=CYCLES + 10, name="counting")


def test_error_count_counts_every_event_from_the_next_cycle(seed):
    """ErrorRegisters adds its events' registered number a cycle late; ``err_count`` must still
    be, in every cycle, the number of events of all earlier cycles (as the plain sum was)."""
    rng = make_rng(seed)
    dut = ErrorRegisters()

    async def bench(ctx):
        total = 0
        for cycle in range(CYCLES):
            assert ctx.get(dut.err_count) == total % 2**32, f"cycle {cycle}"
            evs = [rng.random() < 0.4 for _ in ERROR_SOURCES]
            for src, v in zip(ERROR_SOURCES, evs):
                ctx.set(getattr(dut, src).valid, v)
            await ctx.tick()
            total += sum(evs)
        assert ctx.get(dut.err_count) == total

    simulate(dut, [bench], max_cycles=CYCLES + 10, name="error_count")
