"""Named formal properties and free values for SymbiYosys harnesses.

Amaranth 0.5 exports ``Assert``/``Assume``/``Cover`` but gives them no name in RTLIL: SymbiYosys
reports a failed assertion by its source location (``at hw/formal/harness.py:123``). A
:class:`Props` registry gives every property it creates a location whose file name carries the
property's name (``harness.py@rule1.sf_inclusive:123``), so the runner can print
"rule1.sf_inclusive failed at step 12" even for properties declared in a loop.

Free values: ``AnySeq`` (a new unconstrained value every cycle) and ``AnyConst`` (one
unconstrained value for the whole trace), and ``Initial`` (1 in the first step only), are not
re-exported by ``amaranth.hdl`` in 0.5; they are imported from ``amaranth.hdl._ast`` here, in one
place. Free values are always assigned to a *named* signal, so counterexample traces show them.
"""
import os
import sys

from amaranth.hdl import Assert, Assume, Cover, Signal
from amaranth.hdl._ast import AnyConst, AnySeq, Initial

__all__ = ["Props", "free", "free_const", "Initial"]

KINDS = {"assert": Assert, "assume": Assume, "cover": Cover}


def free(m, shape, name):
    """A signal that takes an arbitrary value every cycle (``AnySeq``)."""
    s = Signal(shape, name=name)
    m.d.comb += s.eq(AnySeq(s.shape()))
    return s


def free_const(m, shape, name):
    """A signal with one arbitrary value for the whole trace (``AnyConst``)."""
    s = Signal(shape, name=name)
    m.d.comb += s.eq(AnyConst(s.shape()))
    return s


class Props:
    """Creates named properties.

    ``props.check(m, "rule1.sf_inclusive", cond)`` adds ``Assert(cond)`` to ``m`` (comb domain:
    checked in every step) with the caller's source location, its file name suffixed with
    ``@<name>``; ``assume`` and ``cover`` likewise. Names are unique; ``names`` lists
    ``(kind, name)`` in declaration order.
    """

    def __init__(self):
        self.names = []
        self.names_set = set()

    def _add(self, m, kind, name, cond):
        if name in self.names_set:
            raise ValueError(f"property {name!r} declared twice")
        self.names_set.add(name)
        frame = sys._getframe(2)
        # the source file carries the name ("harness.py@rule1.sf_inclusive"), so a property
        # declared in a loop is still told apart in SymbiYosys's "failed assertion ... at"
        path = f"{os.path.abspath(frame.f_code.co_filename)}@{name}"
        self.names.append((kind, name))
        prop = KINDS[kind](cond, name)
        prop.src_loc = (path, frame.f_lineno)
        m.d.comb += prop

    def check(self, m, name, cond):
        self._add(m, "assert", name, cond)

    def assume(self, m, name, cond):
        self._add(m, "assume", name, cond)

    def cover(self, m, name, cond):
        self._add(m, "cover", name, cond)

    def name_at(self, src: str) -> str | None:
        """The property name in a SymbiYosys source location (``<file>@<name>:<line>``, possibly
        with a column range), or None for a location that is not one of ours (the DCOH's own
        assertions)."""
        if not src or "@" not in src:
            return None
        name = src.rsplit("@", 1)[1].rsplit(":", 1)[0]
        return name if name in self.names_set else None
