"""Register models of ``SyncFIFOBuffered`` and ``Memory`` whose contents the harness can name.

The DCOH's queues are ``amaranth.lib.fifo.SyncFIFOBuffered``: entries live in a ``Memory``,
which no Amaranth expression can read, so no invariant can say "every Cmp in the NDR FIFO
answers a served Req". For the proof the harness builds the DCOH with :class:`RegFIFO` in their
place: the same structure cycle for cycle (inner queue of ``depth - 1`` entries with
``produce``/``consume`` pointers and a synchronous, non-transparent read into the output
register ``r_data``/``r_rdy``), the same ``level``, ``w_rdy``, ``r_rdy`` and the same formal
invariants lib.fifo adds under ``platform="formal"``, but with the inner entries as registers.
``entries()`` lists ``(valid, data)`` in queue order, head (the output register) first;
``queue(j)`` is the ``j``-th entry counted from the head.

:class:`RegMemory` stands in for ``amaranth.lib.memory.Memory`` with asynchronous (``comb``)
read ports and one synchronous write port, as the snoop filter and the write-bucket counters use
it: ``rows`` are registers (initial value as ``init``, zeros by default, as the memory's).

:class:`ModelMiter` (``python -m trainingcxl.formal --design models``) drives each model and the
library original alike and checks that their outputs agree, cycle for cycle (bounded: BMC to
depth 20 from reset; the library's memory contents cannot be named, so not by induction).
"""
from amaranth.hdl import Array, Assert, Assume, Elaboratable, Module, Mux, ResetSignal, Signal
from amaranth.lib import fifo
from amaranth.lib.memory import Memory

from .props import Initial, Props, free, free_const

__all__ = ["RegFIFO", "RegMemory", "ModelMiter", "build", "BROKEN"]


def _incr(v, modulo):
    return Mux(v == modulo - 1, 0, v + 1)


def _wrap(v, modulo):
    """``v % modulo`` for ``0 <= v < 2 * modulo``."""
    return Mux(v >= modulo, v - modulo, v)


class RegFIFO(Elaboratable, fifo.FIFOInterface):
    """``SyncFIFOBuffered(width=, depth=)`` with register storage (depth >= 2)."""

    def __init__(self, *, width, depth):
        if depth < 2:
            raise ValueError(f"RegFIFO models depth >= 2, got {depth}")
        super().__init__(width=width, depth=depth)
        self.level = Signal(range(depth + 1))
        self.inner_depth = depth - 1
        self.storage = [Signal(width, name=f"storage{k}") for k in range(self.inner_depth)]
        self.produce = Signal(range(self.inner_depth), name="produce")
        self.consume = Signal(range(self.inner_depth), name="consume")
        self.inner_level = Signal(range(self.inner_depth + 1), name="inner_level")

    def entries(self):
        """``[(valid, data)]`` in queue order: the output register, then the inner queue."""
        store = Array(self.storage)
        out = [(self.r_rdy, self.r_data)]
        for j in range(self.inner_depth):
            out.append((self.inner_level > j, store[_wrap(self.consume + j, self.inner_depth)]))
        return out

    def queue(self, j):
        """``(valid, data)`` of the ``j``-th entry in queue order (0 = next to be read)."""
        store = Array(self.storage)
        inner = lambda k: store[_wrap(self.consume + k, self.inner_depth)]   # noqa: E731
        if j == 0:
            word = Mux(self.r_rdy, self.r_data, inner(0))
        else:
            word = Mux(self.r_rdy, inner(j - 1), inner(j) if j < self.inner_depth else 0)
        return self.level > j, word

    def _has_room(self):
        return self.inner_level != self.inner_depth

    def elaborate(self, platform):
        m = Module()
        d = self.inner_depth
        m.d.comb += [self.w_level.eq(self.level), self.r_level.eq(self.level),
                     self.w_rdy.eq(self._has_room())]
        do_write = self.w_rdy & self.w_en
        inner_r_rdy = self.inner_level != 0
        do_inner_read = inner_r_rdy & (~self.r_rdy | self.r_en)
        store = Array(self.storage)
        with m.If(do_write):
            m.d.sync += [store[self.produce].eq(self.w_data),
                         self.produce.eq(_incr(self.produce, d))]
        with m.If(do_inner_read):
            m.d.sync += [self.r_data.eq(store[self.consume]),
                         self.consume.eq(_incr(self.consume, d))]
        with m.If(do_write & ~do_inner_read):
            m.d.sync += self.inner_level.eq(self.inner_level + 1)
        with m.If(do_inner_read & ~do_write):
            m.d.sync += self.inner_level.eq(self.inner_level - 1)
        with m.If(do_inner_read):
            m.d.sync += self.r_rdy.eq(1)
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        m.d.comb += self.level.eq(self.inner_level + self.r_rdy)
        if platform == "formal":
            # the invariants lib.fifo states for its own pointers
            produce, consume, level = self.produce, self.consume, self.inner_level
            with m.If(Initial()):
                m.d.comb += [Assume(produce < d), Assume(consume < d)]
                with m.If(produce == consume):
                    m.d.comb += Assume((level == 0) | (level == d))
                with m.If(produce > consume):
                    m.d.comb += Assume(level == (produce - consume))
                with m.If(produce < consume):
                    m.d.comb += Assume(level == (d + produce - consume))
            with m.Else():
                m.d.comb += [Assert(produce < d), Assert(consume < d)]
                with m.If(produce == consume):
                    m.d.comb += Assert((level == 0) | (level == d))
                with m.If(produce > consume):
                    m.d.comb += Assert(level == (produce - consume))
                with m.If(produce < consume):
                    m.d.comb += Assert(level == (d + produce - consume))
        return m


class _OverwritingRegFIFO(RegFIFO):
    """Broken on purpose (for the miter's own broken run): accepts a write when full."""

    def _has_room(self):
        return 1


class _Port:
    """A port of :class:`RegMemory` (``addr``, ``data``, ``en`` for writes and sync reads:
    ``clocked``; a sync read's ``en`` starts at 1 as Amaranth's does)."""

    def __init__(self, shape, depth, name, clocked):
        self.name = name
        self.addr = Signal(range(depth), name=f"{name}_addr")
        self.data = Signal(shape, name=f"{name}_data")
        if clocked:
            self.en = Signal(name=f"{name}_en", init=name != "w")


class RegMemory(Elaboratable):
    """``Memory(shape=, depth=, init=)`` with registers; ``read_port(domain="comb")``,
    ``read_port(domain="sync", transparent_for=...)`` (with ``en``) and one ``write_port()``
    (no granularity)."""

    def __init__(self, data=None, *, shape=None, depth=None, init=None, attrs=None,
                 src_loc_at=0):
        if data is not None:
            raise ValueError("RegMemory takes shape/depth/init, not a MemoryData")
        self.shape, self.depth = shape, depth
        init = list(init or [])
        self.rows = [Signal(shape, name=f"row{k}", **({"init": init[k]} if k < len(init)
                                                        else {}))
                     for k in range(depth)]
        self._reads, self._writes = [], []

    def read_port(self, *, domain="sync", transparent_for=(), src_loc_at=0):
        if domain not in ("comb", "sync"):
            raise ValueError("RegMemory models comb and sync read ports only")
        if any(wp not in self._writes for wp in transparent_for):
            raise ValueError("RegMemory: transparent_for names a port of another memory")
        p = _Port(self.shape, self.depth, f"r{len(self._reads)}", clocked=domain == "sync")
        p.domain, p.transparent_for = domain, tuple(transparent_for)
        self._reads.append(p)
        return p

    def write_port(self, *, domain="sync", granularity=None, src_loc_at=0):
        if domain != "sync" or granularity is not None or self._writes:
            raise ValueError("RegMemory models one sync write port without granularity")
        p = _Port(self.shape, self.depth, "w", clocked=True)
        self._writes.append(p)
        return p

    def elaborate(self, platform):
        m = Module()
        rows = Array(self.rows)
        for p in self._reads:
            if p.domain == "comb":
                m.d.comb += p.data.eq(rows[p.addr])
                continue
            # a sync read: the row at the edge, or what a transparent write port writes to it;
            # arbitrary (one value) until the first read, as Amaranth's undefined initial value
            nxt = rows[p.addr]
            for wp in p.transparent_for:
                nxt = Mux(wp.en & (wp.addr == p.addr), wp.data, nxt)
            q = Signal(self.shape, name=f"{p.name}_q")
            read = Signal(name=f"{p.name}_read")
            with m.If(p.en):
                m.d.sync += [q.eq(nxt), read.eq(1)]
            m.d.comb += p.data.eq(Mux(read, q, free_const(m, self.shape, f"{p.name}_init")))
        for p in self._writes:
            with m.If(p.en):
                m.d.sync += rows[p.addr].eq(p.data)
        return m


# ---- equivalence check ---------------------------------------------------------------------

BROKEN = {"overwrite": ("the register FIFO accepts a write when full", "fail")}
MEM_DEPTHS = (2, 4)
DEPTHS = (3, 4, 14)


class ModelMiter(Elaboratable):
    """``RegFIFO`` and ``SyncFIFOBuffered`` side by side, fed the same free writes and reads:
    ``w_rdy``, ``r_rdy``, ``level`` and (when ``r_rdy``) ``r_data`` must always agree; likewise
    ``RegMemory`` and ``Memory`` (two comb read ports, one sync read port transparent for
    the write port with a free ``en``, one write port): equal read data."""

    def __init__(self, broken=None, depths=DEPTHS, width=3):
        if broken is not None and broken not in BROKEN:
            raise ValueError(f"unknown fifo variant {broken!r}; known: {', '.join(BROKEN)}")
        self.broken, self.depths, self.width = broken, depths, width
        self.props = Props()

    def elaborate(self, platform):
        m = Module()
        p = self.props
        p.assume(m, "no_reset", ~ResetSignal())
        for depth in self.depths:
            ref = fifo.SyncFIFOBuffered(width=self.width, depth=depth)
            broken = self.broken == "overwrite" and depth == self.depths[0]
            dut = (_OverwritingRegFIFO if broken else RegFIFO)(width=self.width, depth=depth)
            m.submodules[f"ref{depth}"] = ref
            m.submodules[f"reg{depth}"] = dut
            w_en = free(m, 1, f"w_en{depth}")
            r_en = free(m, 1, f"r_en{depth}")
            w_data = free(m, self.width, f"w_data{depth}")
            for f in (ref, dut):
                m.d.comb += [f.w_en.eq(w_en), f.r_en.eq(r_en), f.w_data.eq(w_data)]
            p.check(m, f"fifo{depth}.w_rdy", ref.w_rdy == dut.w_rdy)
            p.check(m, f"fifo{depth}.r_rdy", ref.r_rdy == dut.r_rdy)
            p.check(m, f"fifo{depth}.level", ref.level == dut.level)
            p.check(m, f"fifo{depth}.r_data", ~ref.r_rdy | (ref.r_data == dut.r_data))
        for depth in MEM_DEPTHS:
            mems = (Memory(shape=self.width, depth=depth, init=[]),
                    RegMemory(shape=self.width, depth=depth, init=[]))
            ports = []
            for mem in mems:
                wp = mem.write_port()
                ports.append(([mem.read_port(domain="comb") for _ in range(2)] +
                              [mem.read_port(transparent_for=(wp,))], wp))
            for k, mem in enumerate(mems):
                m.submodules[f"mem{depth}_{k}"] = mem
            w_addr = free(m, range(depth), f"mem{depth}_w_addr")
            w_en = free(m, 1, f"mem{depth}_w_en")
            w_data = free(m, self.width, f"mem{depth}_w_data")
            r_addr = [free(m, range(depth), f"mem{depth}_r{j}_addr") for j in range(3)]
            r_en = free(m, 1, f"mem{depth}_r2_en")
            for reads, wp in ports:
                m.d.comb += [wp.addr.eq(w_addr), wp.en.eq(w_en), wp.data.eq(w_data),
                             reads[2].en.eq(r_en)]
                for j, rp in enumerate(reads):
                    m.d.comb += rp.addr.eq(r_addr[j])
            # (the sync port's data is undefined in both until its first read)
            r2_read = Signal(name=f"mem{depth}_r2_read")
            with m.If(r_en):
                m.d.sync += r2_read.eq(1)
            for j in range(3):
                p.assume(m, f"mem{depth}.r{j}_addr_range", r_addr[j] < depth)
                p.check(m, f"mem{depth}.r{j}_data", (j == 2) & ~r2_read |
                        (ports[0][0][j].data == ports[1][0][j].data))
            p.assume(m, f"mem{depth}.w_addr_range", w_addr < depth)
        return m


def build(broken=None, **_):
    top = ModelMiter(broken)
    return {"top": top, "name": "formal_models", "props": top.props, "k": 4, "tasks": ["bmc"],
            "trace": [f"{n}{d}" for d in DEPTHS for n in ("w_en", "r_en", "w_data")],
            "config": {"depths": list(DEPTHS)}}
