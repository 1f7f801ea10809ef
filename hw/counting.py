"""Counters stepped by signals that settle late in the cycle.

``counter + up - down`` puts ``up`` and ``down`` in front of a carry chain: the chain waits for
them, and its last bit ends the path. :func:`step` computes every candidate next value from the
counter register alone and lets the late signals pick one, so they are followed by a
multiplexer, not by an adder. It gives the same value in every cycle as the sum it replaces
(wrapping to the counter's width).
"""
from amaranth.hdl import Mux

__all__ = ["step"]


def step(m, counter, *, up=0, down=0, up_by=1, domain="sync"):
    """``counter`` += ``up_by`` when ``up``, -= 1 when ``down`` (both: += ``up_by`` - 1).

    Parameters
    ----------
    m : Module
        Where the assignment goes (its current ``If`` context, like ``m.d.sync +=``).
    counter : Signal
        The register; the result wraps to its width.
    up, down : Value
        1-bit steps; may settle late in the cycle.
    up_by : Value or int
        The increment of ``up``; should come from registers (it feeds the adders).
    domain : str
        The clock domain of ``counter``.
    """
    d = m.d[domain]
    plus = counter + up_by
    with m.If(up):
        d += counter.eq(Mux(down, plus - 1, plus))
    with m.Elif(down):
        d += counter.eq(counter - 1)
