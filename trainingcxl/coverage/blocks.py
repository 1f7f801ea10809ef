"""Which hw block a module of the generated Verilog belongs to, and where its source lives.

Amaranth names every Verilog module by its instance path (``trainingcxl_device.dcoh.sf``), one
module per instance, so the path decides the block. The instance names are the ones
``hw/top.py`` (and the bench tops in ``hw/testtops/``) give the engines.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Block", "BLOCKS", "block_of", "OTHER", "module_sources"]


@dataclass(frozen=True)
class Block:
    name: str          # the block as the issue and docs/verification.md name it
    instance: str      # its instance name under a top (hw/top.py, hw/testtops/)
    source: str        # its Amaranth source, relative to the repository


BLOCKS = (
    Block("DCOH", "dcoh", "hw/dcoh/"),
    Block("gather", "gather", "hw/gather/"),
    Block("update", "update", "hw/update/"),
    Block("undo logger", "logger", "hw/undolog/"),
    Block("persist", "persist", "hw/persist/"),
    Block("snapshot", "snapshot", "hw/snapshot/"),
    Block("command processor", "cp", "hw/cmdproc/"),
    Block("CSR", "csr", "hw/csr/"),
    Block("media port", "media", "hw/media_axi.py"),
    Block("request port mux", "mux", "hw/port_mux.py"),
)
# Tops that are a block on their own (the CSR bench builds the register block as its top).
_TOP_BLOCKS = {"trainingcxl_csr": "CSR"}
OTHER = Block("top", "", "hw/top.py")
_BY_INSTANCE = {b.instance: b for b in BLOCKS}
_BY_NAME = {b.name: b for b in BLOCKS}


def block_of(module: str) -> tuple[Block, str]:
    """(block, path inside the block) of a Verilog module name such as
    ``trainingcxl_device.dcoh.routing.rd_merge`` (-> DCOH, ``routing.rd_merge``). Amaranth's
    ``$N`` suffixes (``ring$206``) are dropped so the path does not depend on elaboration order.
    The first path component under the top that names a block decides; a top listed in
    ``_TOP_BLOCKS`` is that block; anything else is ``top``."""
    parts = [p.split("$", 1)[0] for p in module.strip("\\ ").split(".")]
    if len(parts) == 1 and parts[0] in _TOP_BLOCKS:
        return _BY_NAME[_TOP_BLOCKS[parts[0]]], ""
    for i, p in enumerate(parts[1:], 1):
        if p in _BY_INSTANCE:
            return _BY_INSTANCE[p], ".".join(parts[i + 1:])
    return OTHER, ".".join(parts[1:])


def module_sources(component, top: str) -> dict[str, str]:
    """Verilog module name -> the Amaranth source file (relative to the repository) of the
    component it was elaborated from, by walking the design's fragment tree the way
    ``amaranth.back.verilog`` names modules (``<top>.<instance>...``). Modules whose origin is a
    library component (FIFOs, memories) name the library file."""
    import inspect
    from pathlib import Path

    from amaranth.hdl import Fragment

    root = Path(__file__).resolve().parents[2]
    out = {}

    def where(frag):
        # origins: the elaboratables that produced the fragment, outermost first (a component,
        # a DomainRenamer around it, the Memory it returned): prefer one of the project's own
        found = []
        for origin in getattr(frag, "origins", None) or ():
            try:
                found.append(Path(inspect.getfile(type(origin))).resolve())
            except TypeError:
                continue
        for f in found:
            if "site-packages" not in f.parts and f.is_relative_to(root):
                return f.relative_to(root).as_posix()
        for f in found:              # a library component: name it from its package on
            if "amaranth" in f.parts:
                return "/".join(f.parts[f.parts.index("amaranth"):])
        return found[0].name if found else ""

    def walk(frag, path):
        # an unnamed subfragment (a memory) is emitted inside its parent's module: the parent
        # keeps the name
        out.setdefault(path, where(frag))
        for sub, name, *_ in frag.subfragments:
            walk(sub, f"{path}.{name}" if name else path)

    walk(Fragment.get(component, None), top)
    return out
