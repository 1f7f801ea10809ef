"""Register map model: the compiled SystemRDL reduced to what the register block, the JSON
description and cosim need.

``RegMap.from_rdl(path)`` compiles a SystemRDL file with systemrdl-compiler and keeps only the
subset the register block implements; anything else raises ``ValueError`` naming the field, so
the RDL cannot promise behaviour the hardware lacks. ``default_regmap()`` is the project's map
(``hw/csr/trainingcxl.rdl``), compiled once per process. ``RegMap.to_json()`` /
``RegMap.from_json()`` round-trip the description written to ``hw/csr/regmap.json``.

This module is the one loader of the register map: both files are package data of ``hw.csr``,
read through :mod:`importlib.resources` (so a wheel install works), and
:func:`regmap_document` / :func:`packaged_regmap` give the generated JSON to everyone who reads
the map as data (``cosim.csr``, ``sw_model``). It imports neither Amaranth nor (until an RDL is
compiled) systemrdl, so the golden model may use it as a shared encoding.

Field kinds (``Field.kind``):

- ``const``:   sw=r, hw=na. Reads return the reset value.
- ``wire``:    sw=r, hw=w. Reads return the hardware input ``<port>``; nothing is stored.
- ``storage``: sw=rw or sw=w, hw=na/r/rw. A flip-flop, reset to ``reset`` (0 if absent), written
  by software (``onwrite = woclr``: write 1 to clear; ``singlepulse``: high one cycle after a
  write of 1, otherwise 0), by hardware through ``we`` (``<port>_next``/``<port>_we``) and/or
  ``hwset`` (``<port>_set``). ``precedence`` says who wins when both write in one cycle.

Names: a register's ``name`` is its path in upper case joined by ``_`` with array indices
appended to the array name (``TABLE[3].ROWS`` -> ``TABLE3_ROWS``). A field's ``port`` is the
register name in lower case, plus ``_<field>`` unless the field is called ``value``
(``table3_rows``, ``status_busy``).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

__all__ = ["Field", "Register", "RegMap", "RDL_PATH", "default_regmap", "packaged_regmap",
           "regmap_document"]

_PACKAGE = resources.files(__package__)          # hw.csr: the RDL and the generated JSON
# A regular file in a checkout and in an installed wheel (systemrdl compiles from a path).
RDL_PATH = Path(str(_PACKAGE / "trainingcxl.rdl"))
REGWIDTH = 32

# Field properties the block implements; any other explicitly set property is refused.
_SUPPORTED_FIELD_PROPS = {"name", "desc", "sw", "hw", "reset", "onwrite", "singlepulse", "hwset",
                          "we", "swmod", "precedence", "fieldwidth"}
_SUPPORTED_REG_PROPS = {"name", "desc", "regwidth", "accesswidth"}
_SUPPORTED_CONTAINER_PROPS = {"name", "desc", "space_bytes"}


@dataclass(frozen=True)
class Field:
    """One field of a register (bit range, access, reset value, description)."""

    name: str            # RDL field name ("value" in single-field registers)
    lsb: int
    width: int
    sw: str              # "r", "w" or "rw"
    hw: str              # "na", "r", "w" or "rw"
    reset: int | None
    onwrite: str | None  # None or "woclr"
    singlepulse: bool
    hwset: bool
    we: bool
    swmod: bool
    precedence: str      # "sw" or "hw": who wins a same-cycle write
    port: str            # base name of the field's hardware ports
    desc: str

    @property
    def kind(self) -> str:
        if "w" in self.sw:
            return "storage"
        return "wire" if self.hw == "w" else "const"

    @property
    def sw_readable(self) -> bool:
        """Reads return the field (write-only and single-pulse fields read as 0)."""
        return "r" in self.sw and not self.singlepulse

    @property
    def sw_writable(self) -> bool:
        return "w" in self.sw

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb


@dataclass(frozen=True)
class Register:
    """One 32-bit register of the map, with its fields."""

    name: str            # TABLE3_ROWS
    path: str            # RDL path below the address map: TABLE[3].ROWS
    offset: int          # byte offset
    fields: tuple
    desc: str

    @property
    def sw(self) -> str:
        """"r" if no field is writable, "w" if no field is readable, else "rw"."""
        r = any("r" in f.sw for f in self.fields)
        w = any(f.sw_writable for f in self.fields)
        return "rw" if r and w else ("w" if w else "r")

    @property
    def writable(self) -> bool:
        return any(f.sw_writable for f in self.fields)

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"register {self.name} has no field {name!r} "
                       f"(fields: {', '.join(f.name for f in self.fields)})")


@dataclass(frozen=True)
class RegMap:
    """The device's register map, compiled from the RDL (or read back from its JSON)."""

    name: str
    desc: str
    space_bytes: int
    regwidth: int
    registers: tuple

    @property
    def addr_width(self) -> int:
        return self.space_bytes.bit_length() - 1

    def register(self, name: str) -> Register:
        for r in self.registers:
            if r.name == name:
                return r
        raise KeyError(f"no register {name!r} in {self.name}")

    # ---- JSON ------------------------------------------------------------------------------
    def to_json(self) -> str:
        regs = []
        for r in self.registers:
            fields = []
            for f in r.fields:
                d = asdict(f)
                d["access"] = d.pop("sw")
                # name, position and software access first, as a reader scans them
                fields.append({k: d[k] for k in ("name", "lsb", "width", "access", *(
                    k for k in d if k not in ("name", "lsb", "width", "access")))})
            regs.append({"name": r.name, "path": r.path, "offset": r.offset, "sw": r.sw,
                         "desc": r.desc, "fields": fields})
        doc = {"name": self.name, "desc": self.desc, "space_bytes": self.space_bytes,
               "regwidth": self.regwidth, "source": "hw/csr/trainingcxl.rdl",
               "registers": regs}
        return json.dumps(doc, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "RegMap":
        doc = json.loads(text)
        regs = []
        for r in doc["registers"]:
            fields = []
            for d in r["fields"]:
                d = dict(d)
                d["sw"] = d.pop("access")
                fields.append(Field(**d))
            regs.append(Register(name=r["name"], path=r["path"], offset=r["offset"],
                                 fields=tuple(fields), desc=r["desc"]))
        return cls(name=doc["name"], desc=doc["desc"], space_bytes=doc["space_bytes"],
                   regwidth=doc["regwidth"], registers=tuple(regs))

    # ---- SystemRDL -------------------------------------------------------------------------
    @classmethod
    def from_rdl(cls, path=RDL_PATH, *, root=None) -> "RegMap":
        """Compile ``path`` (or take an already elaborated ``root``) and check it is in the
        implemented subset."""
        if root is None:
            root = compile_rdl(path)
        return _from_root(root)


def compile_rdl(path=RDL_PATH):
    """Elaborated systemrdl ``RootNode`` of ``path`` (raises RDLCompileError on bad input)."""
    from systemrdl import RDLCompiler
    rdlc = RDLCompiler()
    rdlc.compile_file(str(path))
    return rdlc.elaborate()


def _text(node, prop) -> str:
    v = node.get_property(prop)
    return " ".join(v.split()) if v else ""


def _reg_name(node, top) -> tuple[str, str]:
    parts, path = [], []
    n = node
    while n is not top:
        seg = n.inst_name
        idx = "".join(str(i) for i in (n.current_idx or ())) if n.is_array else ""
        parts.append(seg + idx)
        path.append(seg + "".join(f"[{i}]" for i in (n.current_idx or ())))
        n = n.parent
    return "_".join(reversed(parts)).upper(), ".".join(reversed(path))


def _from_root(root) -> RegMap:
    from systemrdl.node import AddrmapNode, FieldNode, MemNode, RegfileNode, RegNode
    top = root.top
    space = top.get_property("space_bytes") if "space_bytes" in top.list_properties() else None
    if not space or space & (space - 1):
        raise ValueError(f"{top.inst_name}: space_bytes must be set to a power of two, "
                         f"got {space!r}")
    regs = []
    for node in top.descendants(unroll=True):
        if isinstance(node, MemNode):
            raise ValueError(f"{node.get_path()}: mem is not supported")
        if isinstance(node, (AddrmapNode, RegfileNode)):
            extra = set(node.list_properties()) - _SUPPORTED_CONTAINER_PROPS
            if extra or node.external:
                raise ValueError(f"{node.get_path()}: unsupported properties {sorted(extra)}"
                                 + (" (external)" if node.external else ""))
            continue
        if not isinstance(node, RegNode):
            continue
        name, path = _reg_name(node, top)
        extra = set(node.list_properties()) - _SUPPORTED_REG_PROPS
        if extra or node.external:
            raise ValueError(f"{path}: unsupported register properties {sorted(extra)}"
                             + (" (external)" if node.external else ""))
        if node.get_property("regwidth") != REGWIDTH or \
                node.get_property("accesswidth") != REGWIDTH:
            raise ValueError(f"{path}: regwidth and accesswidth must be {REGWIDTH}")
        if node.absolute_address + 4 > space:
            raise ValueError(f"{path}: offset {node.absolute_address:#x} outside space_bytes")
        fields = []
        for f in node.fields():
            assert isinstance(f, FieldNode)
            fields.append(_field(f, name, path))
        regs.append(Register(name=name, path=path, offset=node.absolute_address,
                             fields=tuple(fields), desc=_text(node, "desc")))
    regs.sort(key=lambda r: r.offset)
    seen = {}
    for r in regs:
        if r.name in seen:
            raise ValueError(f"register name {r.name} used by {seen[r.name]} and {r.path}")
        seen[r.name] = r.path
    return RegMap(name=top.inst_name, desc=_text(top, "desc"), space_bytes=space,
                  regwidth=REGWIDTH, registers=tuple(regs))


def _field(f, reg_name: str, reg_path: str) -> Field:
    where = f"{reg_path}.{f.inst_name}"
    extra = set(f.list_properties()) - _SUPPORTED_FIELD_PROPS
    if extra:
        raise ValueError(f"{where}: unsupported field properties {sorted(extra)}")
    sw, hw = f.get_property("sw").name, f.get_property("hw").name
    onwrite = f.get_property("onwrite")
    onwrite = onwrite.name if onwrite is not None else None
    reset = f.get_property("reset")
    if reset is not None and not isinstance(reset, int):
        raise ValueError(f"{where}: reset must be a constant")
    fld = Field(
        name=f.inst_name, lsb=f.lsb, width=f.width, sw=sw, hw=hw, reset=reset, onwrite=onwrite,
        singlepulse=bool(f.get_property("singlepulse")), hwset=bool(f.get_property("hwset")),
        we=bool(f.get_property("we")), swmod=bool(f.get_property("swmod")),
        precedence=f.get_property("precedence").name,
        port=reg_name.lower() + ("" if f.inst_name == "value" else "_" + f.inst_name.lower()),
        desc=_text(f, "desc"))

    def need(cond, msg):
        if not cond:
            raise ValueError(f"{where}: {msg}")
    need(sw in ("r", "w", "rw"), f"sw={sw} is not supported")
    need(onwrite in (None, "woclr"), f"onwrite={onwrite} is not supported (only woclr)")
    need(onwrite is None or sw == "rw", "woclr needs sw=rw")
    need(not fld.singlepulse or "w" in sw, "singlepulse needs a software-writable field")
    need(not fld.swmod or "w" in sw, "swmod needs a software-writable field")
    if fld.kind == "const":
        need(hw == "na" and reset is not None and not (fld.we or fld.hwset),
             "a read-only field must be a constant (hw=na with a reset value) or hw=w")
    elif fld.kind == "wire":
        need(not (fld.we or fld.hwset), "we/hwset on a sw=r, hw=w field is not supported")
    else:
        need(hw in ("na", "r") or fld.we,
             f"hw={hw} on a software-writable field needs `we` (hardware writes only when "
             "<port>_we is high)")
        need(not (fld.we and fld.hwset), "we and hwset on one field is not supported")
    return fld


def regmap_document() -> dict:
    """The generated ``regmap.json`` (package data of ``hw.csr``) as parsed JSON: ``name``,
    ``space_bytes``, ``registers`` (each with ``name``, ``offset``, ``fields``...). A fresh copy
    per call."""
    return json.loads((_PACKAGE / "regmap.json").read_text())


@lru_cache(maxsize=1)
def packaged_regmap() -> RegMap:
    """:class:`RegMap` of the generated ``regmap.json`` (no SystemRDL compile)."""
    return RegMap.from_json((_PACKAGE / "regmap.json").read_text())


@lru_cache(maxsize=1)
def default_regmap() -> RegMap:
    """The project's register map, compiled from ``hw/csr/trainingcxl.rdl``."""
    return RegMap.from_rdl(RDL_PATH)
