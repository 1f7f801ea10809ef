"""Finding the YoWASP (WebAssembly) tools the FPGA flow and the formal flow run (pure Python).

The tools are console scripts of PyPI packages installed in this interpreter's environment; they
are looked up next to ``sys.executable`` first, so a virtual environment need not be activated.
"""
import pathlib
import shutil
import sys

__all__ = ["ToolMissing", "find_tool", "check_tools", "dist_versions"]


class ToolMissing(RuntimeError):
    """A required tool is not installed; the message says how to install it."""


def find_tool(name: str, bindir: pathlib.Path | None = None) -> str | None:
    """The tool next to this interpreter (so a venv need not be activated), else on PATH."""
    here = (bindir or pathlib.Path(sys.executable).parent) / name
    if here.exists():
        return str(here)
    return shutil.which(name)


def check_tools(tools, install_hint: str, bindir: pathlib.Path | None = None,
                error=ToolMissing) -> dict:
    """Paths of ``tools`` by name; raises ``error`` naming the missing ones and ``install_hint``."""
    found = {t: find_tool(t, bindir) for t in tools}
    missing = [t for t, p in found.items() if p is None]
    if missing:
        raise error(f"{', '.join(missing)} not found: {install_hint}")
    return found


def dist_versions(dists) -> dict:
    """Installed version of each distribution (None when absent), for reports."""
    from importlib import metadata
    vers = {}
    for dist in dists:
        try:
            vers[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            vers[dist] = None
    return vers
