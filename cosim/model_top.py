"""A simulation top that puts compiled models (C++ through DPI-C) on ports of a design.

:func:`model_top` takes the Verilog of a design and a list of :class:`ModelSlot` and returns
the same text plus each model's module and a new top: every port of the design except the
signals a slot connects to, the design, the models, and for each slot a select input choosing at
run time who drives the design inputs the slot drives:

* select high: the model (its module's outputs);
* select low (the initial value): the top's inputs ``ext_<signal>``, where a testbench model in
  Python writes.

Either way every port signal of the design is a wire of the top under its own name, so cocotb
(and the boundary trace) reads what the design sees as ``dut.<signal>``. One simulator build
serves both kinds of model.

With ``clock_ns`` the top makes its own clock: ``clk`` is a register of the top toggled every
half period (high from time 0, first falling edge at half a period, as a cocotb ``Clock``
started at time 0), and the wire :data:`CLOCK_PERIOD_SIGNAL` holds the period. Build it with
Verilator's ``--timing``. The simulator then steps the clock itself, with no call into cocotb on
every edge (on the device, a cocotb ``Clock`` costs about as much as the whole device idle:
docs/benchmarks.md); :func:`start_clock` starts a cocotb ``Clock`` only on a top without one.
On such a top a coroutine woken by ``RisingEdge(dut.clk)`` runs after the simulator evaluated
the edge (the clock changes inside the evaluation), not before it as with a cocotb ``Clock``,
whose write of the clock wakes coroutines first: a Python model that samples handshakes on
the edge would see the next cycle's values. Those models (the Python PMEM model, CXL.mem host
and CSR master, the trace and stimulus recorders) refuse such a top
(:func:`require_cocotb_clock`); the compiled models sample inside the simulator and do not
care. Code that waits for an edge and then reads the state after it (``RisingEdge`` followed
by a one-step ``Timer``, as the power-failure injection does) behaves the same on both; a
compiled model's job started right after ``RisingEdge``/``ClockCycles`` begins an edge later
on the top with its own clock (docs/crash.md, "The top's own clock").

The slots: :func:`cosim.pmem_cpp.wrapper.pmem_slot` (media port),
:func:`cosim.host_cpp.wrapper.host_slot` (CXL.mem host channels),
:func:`cosim.csr_cpp.wrapper.csr_slot` (CSR port). At run time the models' C++ functions are
reached with :func:`simulator_functions`.
"""
from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass

__all__ = ["ModelSlot", "model_top", "design_ports", "slot_ports", "EXT_PREFIX",
           "CLOCK_PERIOD_SIGNAL", "start_clock", "require_cocotb_clock", "outside_input",
           "redirect_bus", "simulator_functions"]

EXT_PREFIX = "ext_"        # the top's inputs for a model outside the simulator
CLOCK_PERIOD_SIGNAL = "clock_period_ns"   # on a top with its own clock: the period in ns

_DECL = re.compile(r"^\s*(input|output)\s+(?:wire\s+|reg\s+)?(\[[^\]]+\]\s*)?([A-Za-z_][\w$]*)\s*;",
                   re.M)
_FUNCTION = re.compile(r"^\s*function\b.*?^\s*endfunction\b", re.M | re.S)
_WIDTH = re.compile(r"\[\s*(\d+)\s*:\s*0\s*\]")


@dataclass(frozen=True)
class ModelSlot:
    """One compiled model on some of a design's ports.

    ``module``/``text``: the model's Verilog module and its source; ``instance``: its instance
    name in the top; ``select``: the top input choosing it; ``ports``: design port signal ->
    the model module's port connected to it; ``drives``: the design's input signals the model
    drives (the others in ``ports`` it only reads); ``wires``: outputs of the model that are
    no design port, as wires of the top (``(name, module port, width)``); ``inputs``: inputs of
    the model that are no design port, as inputs of the top a testbench drives (same form);
    ``select_port``: the model module's input that sees its own select (None: none)."""
    module: str
    text: str
    instance: str
    select: str
    ports: dict
    drives: tuple
    wires: tuple = ()       # (name, module port, width): the model's own outputs, top wires
    inputs: tuple = ()      # (name, module port, width): the model's own inputs, top inputs
    select_port: str | None = None


def design_ports(verilog_text: str, top: str) -> list[tuple[str, str, int]]:
    """(direction, name, width) of every port of module ``top``, in declaration order."""
    m = re.search(rf"^module\s+{re.escape(top)}\s*\(", verilog_text, re.M)
    if m is None:
        raise ValueError(f"module {top} not found in the Verilog")
    end = verilog_text.index("endmodule", m.end())
    # declarations inside functions are not ports (Yosys writes a netlist's $pmux cells as
    # functions with inputs a, b, s)
    functions = [(f.start(), f.end()) for f in _FUNCTION.finditer(verilog_text, m.end(), end)]
    out = []
    for d in _DECL.finditer(verilog_text, m.end(), end):
        if any(a <= d.start() < b for a, b in functions):
            continue
        rng = d.group(2)
        if rng is None:
            width = 1
        else:
            w = _WIDTH.search(rng)
            if w is None:
                raise ValueError(f"port {d.group(3)} of {top}: unexpected range {rng!r}")
            width = int(w.group(1)) + 1
        out.append((d.group(1), d.group(3), width))
    if not out:
        raise ValueError(f"module {top}: no port declarations in its body (expected the form "
                         "Amaranth's Verilog has: `input [n:0] name;`)")
    return out


def slot_ports(verilog_text: str, top: str, wanted: dict, model: str) -> dict:
    """The widths of the ports of ``top`` a model connects to: ``wanted`` maps each design
    signal to the direction the design must give it (``"input"``: the model drives it,
    ``"output"``: the model reads it). Raises ValueError naming ``model`` when a signal is
    missing or has the other direction."""
    by_name = {n: (d, w) for d, n, w in design_ports(verilog_text, top)}
    missing = [sig for sig in wanted if sig not in by_name]
    if missing:
        raise ValueError(f"{top} lacks the port signals {missing} ({model})")
    for sig, direction in wanted.items():
        if by_name[sig][0] != direction:
            raise ValueError(f"{top}.{sig} is an {by_name[sig][0]}, the {model} needs an "
                             f"{direction}")
    return {sig: by_name[sig][1] for sig in wanted}


def _rng(n):
    return f"[{n - 1}:0] " if n > 1 else ""


def model_top(verilog_text: str, top: str, new_top: str, slots, *,
              clock_ns: int | None = None) -> str:
    """``verilog_text`` plus every slot's module and the top ``new_top`` (module docstring);
    with ``clock_ns`` (an even number of ns) the top makes its own clock of that period."""
    ports = design_ports(verilog_text, top)
    by_name = {n: (d, w) for d, n, w in ports}
    if "clk" not in by_name or "rst" not in by_name:
        raise ValueError(f"{top} has no clk/rst ports")
    if clock_ns is not None and (not isinstance(clock_ns, int) or clock_ns < 2 or clock_ns % 2):
        raise ValueError(f"clock_ns must be an even number of ns >= 2, got {clock_ns!r}")
    driven = {}
    for s in slots:
        for sig in s.ports:
            if sig not in by_name:
                raise ValueError(f"{top} lacks port {sig} ({s.module})")
        for sig in s.drives:
            if by_name[sig][0] != "input":
                raise ValueError(f"{top}.{sig} is an {by_name[sig][0]}; {s.module} drives it")
            if sig in driven:
                raise ValueError(f"{sig} driven by both {driven[sig].module} and {s.module}")
            driven[sig] = s
    inner = {sig: None for s in slots for sig in s.ports}      # wires of the top, in order
    outer = [(d, n, w) for d, n, w in ports
             if n not in inner and not (clock_ns and n == "clk")]
    names = ([n for _, n, _ in outer] + [f"{EXT_PREFIX}{sig}" for sig in driven] +
             [s.select for s in slots] + [name for s in slots for name, _, _ in s.inputs])
    lines = [f"\n// {top} with compiled models or outside inputs on its ports, each chosen by "
             "a select input (cosim/model_top.py).",
             f"module {new_top} ({', '.join(names)});"]
    lines += [f"  {d} wire {_rng(w)}{n};" for d, n, w in outer]
    lines += [f"  input wire {_rng(by_name[sig][1])}{EXT_PREFIX}{sig};" for sig in driven]
    lines += [f"  input wire {s.select};" for s in slots]
    lines += [f"  input wire {_rng(w)}{name};" for s in slots for name, _, w in s.inputs]
    if clock_ns:
        # rising edges at multiples of the period, as a cocotb Clock started at time 0: set in
        # an initial block (Verilator --timing starts an `always #` loop from 0 whatever a
        # declaration initialiser says)
        half = clock_ns // 2
        lines += ["  reg clk;", f"  initial begin clk = 1'b1; forever #{half} clk = ~clk; end",
                  f"  wire [31:0] {CLOCK_PERIOD_SIGNAL} = 32'd{clock_ns};"]
    lines += [f"  wire {_rng(by_name[sig][1])}{sig};" for sig in inner]
    lines += [f"  wire {_rng(by_name[sig][1])}cpp_{sig};" for sig in driven]
    lines += [f"  wire {_rng(w)}{name};" for s in slots for name, _, w in s.wires]
    lines += [f"  assign {sig} = {s.select} ? cpp_{sig} : {EXT_PREFIX}{sig};"
              for sig, s in driven.items()]
    conns = [f"    .{n}({n})" for _, n, _ in ports]
    lines.append(f"  {top} device (\n" + ",\n".join(conns) + "\n  );")
    for s in slots:
        pc = ["    .clk(clk)", "    .rst(rst)"]
        pc += [f"    .{mp}({'cpp_' + sig if sig in s.drives else sig})"
               for sig, mp in s.ports.items()]
        pc += [f"    .{mp}({name})" for name, mp, _ in s.wires + s.inputs]
        if s.select_port:
            pc.append(f"    .{s.select_port}({s.select})")
        lines.append(f"  {s.module} {s.instance} (\n" + ",\n".join(pc) + "\n  );")
    lines.append("endmodule\n")
    return verilog_text + "".join(s.text for s in slots) + "\n".join(lines)


def start_clock(dut, period_ns: int):
    """The clock of ``dut`` at ``period_ns``: a cocotb ``Clock`` on ``dut.clk`` started now, or
    nothing on a top of :func:`model_top` that makes its own clock (it must have that period;
    ValueError otherwise)."""
    try:
        own = getattr(dut, CLOCK_PERIOD_SIGNAL)
    except AttributeError:
        from cocotb.clock import Clock
        Clock(dut.clk, period_ns, unit="ns").start()
        return
    if int(own.value) != period_ns:
        raise ValueError(f"the simulation top makes its own clock of {int(own.value)} ns; "
                         f"this bench runs at {period_ns} ns")


def require_cocotb_clock(dut, what: str) -> None:
    """Refuse (RuntimeError naming ``what``) a top of :func:`model_top` that makes its own
    clock: ``what`` samples the ports on ``RisingEdge`` and needs the values from before the
    edge, which only a cocotb ``Clock`` gives (module docstring)."""
    if hasattr(dut, CLOCK_PERIOD_SIGNAL):
        raise RuntimeError(f"{what} needs a top clocked by cocotb; this simulator's top makes "
                           "its own clock (cosim.build.device_build(cfg, own_clock=True) is for "
                           "runs whose models are all compiled: BenchConfig.compiled_only)")


def outside_input(dut, select: str, handle):
    """Where a Python model writes ``handle`` (a signal of ``dut``): on a top of
    :func:`model_top` with the select input ``select``, the ``ext_`` input of that name (and
    the select is set low); elsewhere the handle itself."""
    try:
        sel = getattr(dut, select)
    except AttributeError:
        return handle
    sel.value = 0
    try:
        return getattr(dut, f"{EXT_PREFIX}{handle._name}")
    except AttributeError:        # a signal the model only reads
        return handle


def redirect_bus(dut, select: str, parts) -> None:
    """Point every signal of the cocotb-bus ``parts`` (e.g. an AXI bus's channels) that the
    top of :func:`model_top` lets the outside drive (``outside_input``) at its ``ext_`` input,
    so a Python model built on them drives the top's inputs; the others stay as they are."""
    for part in parts:
        for attr, handle in list(part._signals.items()):
            ext = outside_input(dut, select, handle)
            if ext is not handle:
                part._signals[attr] = ext
                setattr(part, attr, ext)


def simulator_functions(signatures: dict, missing: str):
    """The running simulator's own C++ functions (the compiled models are linked with
    -rdynamic) as a ``ctypes`` library, each of ``signatures`` (name -> (restype, argtypes))
    typed. Raises ``RuntimeError(missing)`` when the first name is absent: a simulator built
    without that model."""
    lib = ctypes.CDLL(None)
    if not hasattr(lib, next(iter(signatures))):
        raise RuntimeError(missing)
    for name, (res, args) in signatures.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib
