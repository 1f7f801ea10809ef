"""A small design of our own that exercises the formal flow end to end.

A credit counter between a producer and a consumer: ``credits`` starts at ``DEPTH``, a send
takes one (only when one is left), a return gives one back (only for a send in flight). The
property ``credits + in_flight == DEPTH`` holds; ``credits <= DEPTH`` is proved by k-induction
only with that invariant as a helper assertion, which is the shape of the DCOH proof.

Broken variants (``build(broken=...)``):

- ``leak``: a send and a return in the same cycle count the return twice: BMC finds the
  counterexample.
- ``no_helper``: drops the helper invariant: BMC still passes but k-induction cannot prove
  ``credits <= DEPTH`` (an UNKNOWN, not a counterexample), which shows the runner tells the two
  apart.
"""
from amaranth.hdl import Elaboratable, Module, ResetSignal, Signal

from .props import Props, free

__all__ = ["Toy", "build", "BROKEN", "DEPTH"]

DEPTH = 5
# name -> (what is broken, the outcome the runner must see: "fail" = a counterexample,
# "unknown" = an inconclusive induction)
BROKEN = {
    "leak": ("a send and a return in the same cycle count the return twice", "fail"),
    "no_helper": ("no helper invariant: induction cannot close", "unknown"),
}


class Toy(Elaboratable):
    """The credit counter of the module docstring with its properties (``broken``: a variant
    from ``BROKEN``)."""

    def __init__(self, broken=None):
        if broken is not None and broken not in BROKEN:
            raise ValueError(f"unknown toy variant {broken!r}; known: {', '.join(BROKEN)}")
        self.broken = broken
        self.props = Props()

    def elaborate(self, platform):
        m = Module()
        p = self.props
        credits = Signal(range(2 * DEPTH + 1), init=DEPTH)
        in_flight = Signal(range(2 * DEPTH + 1))
        want_send = free(m, 1, "want_send")
        want_ret = free(m, 1, "want_ret")
        send = Signal()
        ret = Signal()
        m.d.comb += [send.eq(want_send & (credits != 0)), ret.eq(want_ret & (in_flight != 0))]
        extra = ret & send if self.broken == "leak" else 0
        m.d.sync += [credits.eq(credits - send + ret + extra), in_flight.eq(in_flight + send - ret)]
        p.assume(m, "no_reset", ~ResetSignal())
        p.check(m, "credits_bounded", credits <= DEPTH)
        if self.broken != "no_helper":
            p.check(m, "helper.conservation", credits + in_flight == DEPTH)
        p.cover(m, "all_credits_out", in_flight == DEPTH)
        return m


def build(broken=None, **_):
    """The design for :mod:`trainingcxl.formal`: top, top name, property registry, signals to show in
    counterexample summaries."""
    top = Toy(broken)
    return {"top": top, "name": "formal_toy", "props": top.props,
            "trace": ["want_send", "want_ret", "send", "ret", "credits", "in_flight"],
            "config": {"depth": DEPTH}}
