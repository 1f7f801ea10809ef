"""Shared helpers for the Amaranth pysim unit tests.

Timing model used throughout: a testbench drives its outputs for a cycle with ``ctx.set`` and then
observes that cycle's handshakes with ``await ctx.tick().sample(...)``, which returns the values
the DUT saw right before the clock edge (after every testbench has driven its side). A transfer
happened on an edge iff ``valid & ready`` were both sampled high there, whatever order the
testbenches run in within a timestep.

``UNIT_VCD=<dir>`` writes one VCD per simulation into ``<dir>`` (off by default).
"""
import os
import random

from amaranth.lib import data
from amaranth.sim import Simulator

__all__ = ["as_int", "simulate", "Stall", "ReadyPolicy", "send", "source", "sink", "check_stream",
           "check_channel", "make_rng", "words_of", "line_of_words"]

CLOCK_PERIOD = 1e-8


def as_int(v):
    """Integer value of a sampled signal or a ``lib.data`` view (its raw bits)."""
    if isinstance(v, data.Const):
        return v.as_bits()
    return int(v)


def make_rng(seed):
    """A seeded RNG; the seed is printed so a failing test's captured stdout names it."""
    print(f"seed={seed}")
    return random.Random(seed)


def simulate(dut, testbenches, background=(), *, max_cycles=20000, name="unit"):
    """Run ``testbenches`` (critical) with ``background`` responders/checkers until the
    testbenches finish; fail if that takes more than ``max_cycles`` clock cycles."""
    sim = Simulator(dut)
    sim.add_clock(CLOCK_PERIOD)
    for tb in testbenches:
        sim.add_testbench(tb)
    for bg in background:
        sim.add_testbench(bg, background=True)

    async def watchdog(ctx):
        for _ in range(max_cycles):
            await ctx.tick()
        raise AssertionError(f"{name}: testbenches still running after {max_cycles} cycles")
    sim.add_testbench(watchdog, background=True)

    vcd_dir = os.environ.get("UNIT_VCD")
    if vcd_dir:
        os.makedirs(vcd_dir, exist_ok=True)
        with sim.write_vcd(os.path.join(vcd_dir, f"{name}.vcd")):
            sim.run()
    else:
        sim.run()


class Stall:
    """Random stall pattern: ``stall()`` is True with probability ``p``."""

    def __init__(self, rng, p):
        self.rng, self.p = rng, p

    def __call__(self):
        return self.p > 0 and self.rng.random() < self.p


class ReadyPolicy:
    """Ready of a conforming responder: random stalls, and in about half of the transfers ready
    stays low until valid has been seen (AXI/stream sinks may wait for valid, so a source that
    waits for ready before raising valid deadlocks against this and is caught)."""

    def __init__(self, rng, p_stall, p_wait=0.5):
        self.rng, self.stall, self.p_wait = rng, Stall(rng, p_stall), p_wait
        self.wait = False
        self.saw_valid = False

    def ready(self):
        if self.wait and not self.saw_valid:
            return 0
        return 0 if self.stall() else 1

    def observe(self, valid, ready):
        if valid and ready:
            self.wait = self.rng.random() < self.p_wait
            self.saw_valid = False
        elif valid:
            self.saw_valid = True


async def send(ctx, s, payload, stall=None):
    """Drive one transfer on stream ``s`` (idle cycles first while ``stall()``), keep the payload
    until ``ready``. Leaves ``valid`` low, so back-to-back sends carry no bubble."""
    while stall is not None and stall():
        ctx.set(s.valid, 0)
        await ctx.tick()
    ctx.set(s.payload, payload)
    ctx.set(s.valid, 1)
    while True:
        *_, ready = await ctx.tick().sample(s.ready)
        if ready:
            break
    ctx.set(s.valid, 0)


async def source(ctx, s, items, stall=None):
    for it in items:
        await send(ctx, s, it, stall)


async def sink(ctx, s, out, n=None, stall=None, on_transfer=None):
    """Collect payloads of ``s`` into ``out`` (until ``len(out) == n`` if given), with ``ready``
    low while ``stall()``. ``on_transfer(payload)`` is called on each transfer."""
    while n is None or len(out) < n:
        ctx.set(s.ready, 0 if (stall is not None and stall()) else 1)
        *_, valid, ready, payload = await ctx.tick().sample(s.valid, s.ready, s.payload)
        if valid and ready:
            out.append(payload)
            if on_transfer is not None:
                on_transfer(payload)
    ctx.set(s.ready, 0)


def check_channel(valid, ready, payload, name):
    """Background checker (an async function for ``background=``) of the transfer rules on one
    valid/ready channel: once ``valid`` is high it stays high, with every ``payload`` signal
    unchanged, until ``ready``."""
    async def checker(ctx):
        held = None
        cycle = 0
        while True:
            _clk, _rst, v, r, *p = await ctx.tick().sample(valid, ready, *payload)
            p = [as_int(x) for x in p]
            if held is not None:
                assert v, f"{name}: valid dropped before ready (cycle {cycle})"
                assert p == held, \
                    f"{name}: payload changed while valid and not ready (cycle {cycle})"
            held = p if (v and not r) else None
            cycle += 1
    return checker


def check_stream(s, name):
    return check_channel(s.valid, s.ready, [s.payload], name)


def words_of(line):
    """16 little-endian 32-bit words of a 512-bit line value."""
    return [(line >> (32 * i)) & 0xFFFF_FFFF for i in range(16)]


def line_of_words(words):
    return sum((w & 0xFFFF_FFFF) << (32 * i) for i, w in enumerate(words))


class LineImage:
    """Memory for request-port responders: {line address: 64 bytes}; missing lines read as
    zeros; ``put`` applies a 64-bit byte-enable mask."""

    def __init__(self, lines=None):
        self.lines = dict(lines or {})

    def copy(self):
        return type(self)(self.lines)

    def get(self, line):
        return self.lines.get(line, bytes(64))

    def put(self, line, raw, be=(1 << 64) - 1):
        old = bytearray(self.get(line))
        for i in range(64):
            if (be >> i) & 1:
                old[i] = raw[i]
        self.lines[line] = bytes(old)
