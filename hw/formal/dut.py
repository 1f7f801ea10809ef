"""The DCOH as the proof sees it: elaborated up front, storage as registers, internals by name.

:func:`build_dcoh` elaborates ``hw.dcoh.DCOH(cfg, observe=True)`` inside the harness (rather
than letting the conversion do it later), so that the harness can state invariants over the
DCOH's internal state (k-induction needs them) without any hook in the RTL:

- Storage the proof must talk about is built from register models (:mod:`.models`): every
  ``SyncFIFOBuffered`` of the DCOH becomes a :class:`~.models.RegFIFO` and the ``Memory`` of the
  snoop filter and of the write-bucket counters a :class:`~.models.RegMemory` (patched into the
  RTL modules' namespaces only while the DCOH elaborates; ``python -m trainingcxl.formal --design
  models`` checks each model against the library original).
- :class:`Internals` gives the elaborated DCOH's submodules, FIFO entries, memory rows and any
  named signal of its fragment tree (``pk_valid``, ``trk/line0``, ...). A name the RTL no longer
  has raises :class:`MissingInternal` naming it, so a refactoring shows up as such and not as a
  silently weaker proof.

Broken variants (:data:`BROKEN`) swap one submodule for a faulty one, the same way.
"""
import sys
from contextlib import ExitStack
from types import SimpleNamespace
from unittest import mock

from amaranth.hdl import Const, Fragment, Module, Mux, Signal
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out

from ..cxl_encodings import NDROpcode
from .models import RegFIFO, RegMemory

__all__ = ["build_dcoh", "Internals", "MissingInternal", "BROKEN", "AckFirstFIFO"]


class MissingInternal(LookupError):
    """A signal the proof names was not found in the elaborated DCOH (renamed or removed)."""


# ---- broken variants -----------------------------------------------------------------------

def _override(cls, overrides):
    """A subclass of component ``cls`` that wraps a real ``cls`` and passes every port through,
    except the ports named in ``overrides`` (``"cam.0.hit"`` -> ``f(value)``), whose value is
    ``f`` of what would have passed."""
    class Overridden(cls):
        """``cls`` with the ports in ``overrides`` replaced (see :func:`_override`)."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._ctor = (args, kwargs)

        def elaborate(self, platform):
            m = Module()
            m.submodules.inner = inner = cls(*self._ctor[0], **self._ctor[1])
            used = set()
            for (path, member, outer), (_, _, inn) in zip(self.signature.flatten(self),
                                                          inner.signature.flatten(inner)):
                key = ".".join(str(p) for p in path)
                src, dst = (outer, inn) if member.flow == In else (inn, outer)
                f = overrides.get(key)
                if f:
                    used.add(key)
                m.d.comb += dst.eq(f(src) if f else src)
            unknown = set(overrides) - used
            if unknown:
                raise MissingInternal(f"{cls.__name__} has no port(s) "
                                      f"{', '.join(sorted(unknown))}")
            return m
    Overridden.__name__ = f"Broken{cls.__name__}"
    return Overridden


class AckFirstFIFO(wiring.Component):
    """A FIFO with the ``SyncFIFOBuffered`` interface that puts an entry whose low 3 bits are
    BI-ConflictAck right behind the head (which may be on offer already, so it stays) instead of at
    the tail: it overtakes queued Cmps (breaks rule 6). A broken variant for the formal proofs.

    Parameters
    ----------
    width, depth : int
        Entry width and count.

    Members
    -------
    w_data : In(width), w_en : In(1), w_rdy : Out(1)
        Write side.
    r_data : Out(width), r_en : In(1), r_rdy : Out(1)
        Read side.
    level : Out(range(depth + 1))
        Entries held.
    w_stream, r_stream
        Stream views of the two sides, as the library FIFOs have.
    """

    def __init__(self, *, width, depth):
        self.width, self.depth = width, depth
        super().__init__({"w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
                          "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1),
                          "level": Out(range(depth + 1))})
        self._e = [Signal(width, name=f"e{k}") for k in range(depth)]

    # the stream views of the library FIFOs (the DCOH connects its FIFOs through them)
    w_stream = fifo.FIFOInterface.w_stream
    r_stream = fifo.FIFOInterface.r_stream

    def entries(self):
        return [(self.level > k, e) for k, e in enumerate(self._e)]

    def elaborate(self, platform):
        m = Module()
        d, e = self.depth, self._e
        cnt = self.level
        pop = self.r_en & self.r_rdy
        push = self.w_en & self.w_rdy
        jump = self.w_data[:3] == NDROpcode.BI_CONFLICT_ACK
        ap = [Mux(pop, e[k + 1] if k + 1 < d else 0, e[k]) for k in range(d)]
        c1 = cnt - pop
        for k in range(d):
            with m.If(push & jump & (c1 != 0) & (k >= 1)):
                m.d.sync += e[k].eq(self.w_data if k == 1 else ap[k - 1])
            with m.Elif(push & (c1 == k)):
                m.d.sync += e[k].eq(self.w_data)
            with m.Else():
                m.d.sync += e[k].eq(ap[k])
        m.d.sync += cnt.eq(c1 + push)
        m.d.comb += [self.r_rdy.eq(cnt != 0), self.r_data.eq(e[0]), self.w_rdy.eq(cnt != d)]
        return m


NDR_FIFO_WIDTH = 3 + 16     # opcode + tag: the one DCOH FIFO of this width is the NDR FIFO

# name -> (what is broken, expected outcome, {"tracker"|"sf": port overrides, "ndr_fifo": cls})
_VARIANTS = {
    "no_bi_block": ("the host lane does not see a BISnp outstanding to a Req's line (rule 5)",
                    {"tracker": {"cam.0.hit": lambda v: Const(0, 1)}}),
    "sf_owned_as_shared": ("the snoop filter records A as S (rule 1: Cmp-E without SF A)",
                           {"sf": {"wr_state": lambda v: Mux(v == 2, 1, v)}}),
    "ack_jumps_cmp": ("BI-ConflictAck overtakes the Cmps queued in the NDR FIFO (rule 6)",
                      {"ndr_fifo": AckFirstFIFO}),
    "tag_reuse": ("the tracker always hands out BITag 0 (rule 7)",
                  {"tracker": {"free_idx": lambda v: Const(0, 1)}}),
}
BROKEN = {k: (doc, "fail") for k, (doc, _) in _VARIANTS.items()}


# ---- elaboration ---------------------------------------------------------------------------

def build_dcoh(cfg, broken=None, platform="formal"):
    """``(dut, internals)``: a DCOH component whose ``elaborate`` returns the fragment built
    here, and the :class:`Internals` of that fragment."""
    import hw.dcoh.dcoh as dcoh_mod
    import hw.dcoh.hazards as hazards_mod
    import hw.dcoh.routing as routing_mod
    import hw.dcoh.snoop_filter as sf_mod
    if broken is not None and broken not in _VARIANTS:
        raise ValueError(f"unknown broken variant {broken!r}; known: {', '.join(_VARIANTS)}")
    variant = _VARIANTS[broken][1] if broken else {}

    class ElaboratedDCOH(dcoh_mod.DCOH):
        """The DCOH whose fragment was elaborated once here (its internals are named)."""

        def elaborate(self, platform):
            return self.fragment

    memories = []

    def memory(*args, **kwargs):
        mem = RegMemory(*args, **kwargs)
        f = sys._getframe(1).f_locals
        memories.append((f.get("self"), f.get("name", f.get("w")), mem))
        return mem

    def sync_fifo(*, width, depth):
        if width == NDR_FIFO_WIDTH and "ndr_fifo" in variant:
            return variant["ndr_fifo"](width=width, depth=depth)
        return RegFIFO(width=width, depth=depth)

    fifo_ns = SimpleNamespace(**{k: getattr(fifo, k) for k in dir(fifo) if not k.startswith("_")})
    fifo_ns.SyncFIFOBuffered = sync_fifo

    dut = ElaboratedDCOH(cfg, observe=True)
    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(dcoh_mod, "fifo", fifo_ns))
        stack.enter_context(mock.patch.object(routing_mod, "fifo", fifo_ns))
        stack.enter_context(mock.patch.object(sf_mod, "Memory", memory))
        stack.enter_context(mock.patch.object(hazards_mod, "Memory", memory))
        if "tracker" in variant:
            stack.enter_context(mock.patch.object(
                dcoh_mod, "BITracker", _override(dcoh_mod.BITracker, variant["tracker"])))
        if "sf" in variant:
            stack.enter_context(mock.patch.object(
                dcoh_mod, "SnoopFilter", _override(dcoh_mod.SnoopFilter, variant["sf"])))
        module = dcoh_mod.DCOH.elaborate(dut, platform)
        dut.fragment = Fragment.get(module, platform)
    return dut, Internals(module, dut.fragment, memories, sf_mod.SnoopFilter)


class Internals:
    """Named access to the elaborated DCOH."""

    def __init__(self, module, fragment, memories, sf_cls):
        self.module = module
        self.fragment = fragment
        self._memories = memories
        self._sf_cls = sf_cls
        self._signals = {}
        self._origins = {}          # path of a fragment -> the elaboratable it came from
        self._walk(fragment, ())

    def _walk(self, frag, path):
        if path and getattr(frag, "origins", None):
            self._origins[path] = frag.origins[0]
        for stmts in frag.statements.values():
            for st in stmts:
                for s in st._lhs_signals():
                    self._signals.setdefault(path + (s.name,), s)
        for sub, name, _ in frag.subfragments:
            self._walk(sub, path + ((name or "?"),))

    def signal(self, path):
        """The signal ``"pk_valid"`` (DCOH level) or ``"trk/line0"`` (in submodule ``trk``)."""
        key = tuple(path.split("/"))
        # a broken variant wraps a submodule: its own signals are one level down ("inner")
        for k in (key, key[:1] + ("inner",) + key[1:]):
            if k in self._signals:
                return self._signals[k]
        raise MissingInternal(f"the DCOH has no signal {path!r} any more: update "
                              f"hw/formal/invariants.py")

    def sub(self, name):
        """Submodule ``"trk"`` of the DCOH, or ``"routing/rd_ctx"`` of one of its
        components."""
        try:
            if "/" in name:
                return self._origins[tuple(name.split("/"))]
            return self.module.submodules[name]
        except (KeyError, AttributeError, NameError):
            raise MissingInternal(f"the DCOH has no submodule {name!r} any more: update "
                                  f"hw/formal/harness.py") from None

    def fifo(self, name):
        f = self.sub(name)
        if not hasattr(f, "entries"):
            raise MissingInternal(f"DCOH submodule {name!r} is not a modelled FIFO")
        return f

    def sf_rows(self):
        """``{way: [row per set]}`` of the snoop filter (``state``/``tag`` views)."""
        ways = {w: mem.rows for owner, w, mem in self._memories
                if isinstance(owner, self._sf_cls)}
        if not ways:
            raise MissingInternal("no snoop-filter memory was built")
        return ways

    def bucket_rows(self, owner):
        """``{"issued": rows, "retired": rows}`` of a WriteBuckets submodule."""
        rows = {name: mem.rows for o, name, mem in self._memories if o is owner}
        if set(rows) != {"issued", "retired"}:
            raise MissingInternal(f"write-bucket memories of {owner!r}: {sorted(rows)}")
        return rows
