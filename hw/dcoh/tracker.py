"""BITag tracker: one entry per outstanding BISnp (docs/coherence.md, architecture 5.3 rule 7).

Entry ``t`` = ``{valid, line, op}``; the BISnp's ``bi_tag`` is ``t``. ``n_cam`` line lookups
(``cam[i].line`` → ``cam[i].hit``, combinational). Allocation takes the lowest free entry
(``alloc_en`` with ``alloc_line``/``alloc_op``; ``free_idx`` is that entry, ``full`` when none);
``rel_en``/``rel_idx`` frees an entry; both apply at the clock edge. Entry lookup by tag:
``q_idx`` → ``q_valid``/``q_line``/``q_op`` (combinational; a tag ≥ ``n`` reads as not valid).
In-RTL assertions: an allocation never targets a valid entry, and no two valid entries hold the
same line.
"""
from amaranth.hdl import Module, Signal, Assert, Array, Cat
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["BITracker"]


class CamSignature(wiring.Signature):
    """A CAM query: ``line`` out, ``hit`` in."""

    def __init__(self, line_bits):
        super().__init__({"line": Out(line_bits), "hit": In(1)})


class BITracker(wiring.Component):
    """One entry per outstanding BISnp (see the module docstring).

    Parameters
    ----------
    n : int
        Entries (1 .. ``2 ** tag_bits``).
    line_bits : int
        Line address width.
    n_cam : int
        Line lookup ports.
    tag_bits : int
        Width of a BISnp tag.

    Members
    -------
    cam : In(CamSignature(line_bits)).array(n_cam)
        ``cam[i].line`` -> ``cam[i].hit`` (combinational): a valid entry holds the line.
    alloc_en : In(1), alloc_line : In(line_bits), alloc_op : In(4)
        Allocate ``free_idx`` (at the clock edge).
    free_idx : Out(range(n)), full : Out(1)
        The lowest free entry; no free entry.
    rel_en : In(1), rel_idx : In(range(n))
        Free an entry.
    q_idx : In(tag_bits); q_valid, q_line, q_op : Out
        Entry lookup by tag (combinational; a tag >= ``n`` reads as not valid).
    valid : Out(n)
        The valid bits.

    Raises
    ------
    ValueError
        If ``n`` is out of range.
    """

    def __init__(self, *, n, line_bits, n_cam, tag_bits=12):
        if not 1 <= n <= (1 << tag_bits):
            raise ValueError(f"tracker size must be 1..{1 << tag_bits}, got {n!r}")
        self._n, self._lb = n, line_bits
        super().__init__({
            "cam": In(CamSignature(line_bits)).array(n_cam),
            "alloc_en": In(1), "alloc_line": In(line_bits), "alloc_op": In(4),
            "free_idx": Out(range(n)), "full": Out(1),
            "rel_en": In(1), "rel_idx": In(range(n)),
            "q_idx": In(tag_bits), "q_valid": Out(1), "q_line": Out(line_bits), "q_op": Out(4),
            "valid": Out(n),
        })

    def elaborate(self, platform):
        m = Module()
        n = self._n
        valid = Signal(n)
        lines = Array(Signal(self._lb, name=f"line{t}") for t in range(n))
        ops = Array(Signal(4, name=f"op{t}") for t in range(n))
        m.d.comb += self.valid.eq(valid)

        m.d.comb += self.full.eq(valid.all())
        for t in reversed(range(n)):
            with m.If(~valid[t]):
                m.d.comb += self.free_idx.eq(t)

        for c in self.cam:
            m.d.comb += c.hit.eq(Cat(valid[t] & (lines[t] == c.line) for t in range(n)).any())

        in_range = self.q_idx < n
        m.d.comb += [self.q_valid.eq(in_range & valid.bit_select(self.q_idx, 1)),
                     self.q_line.eq(lines[self.q_idx]), self.q_op.eq(ops[self.q_idx])]

        for t in range(n):
            with m.If(self.rel_en & (self.rel_idx == t)):
                m.d.sync += valid[t].eq(0)
            with m.If(self.alloc_en & (self.free_idx == t)):
                m.d.sync += [valid[t].eq(1), lines[t].eq(self.alloc_line), ops[t].eq(self.alloc_op)]

        m.d.sync += Assert(~self.alloc_en | ~self.full, "BITracker: allocation while full")
        for a in range(n):
            for b in range(a + 1, n):
                m.d.sync += Assert(~(valid[a] & valid[b] & (lines[a] == lines[b])),
                                   f"BITracker: entries {a} and {b} hold the same line")
        return m
