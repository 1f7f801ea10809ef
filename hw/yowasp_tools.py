"""Finding the YoWASP (WebAssembly) tools the FPGA flow and the formal flow run (pure Python).

The tools are console scripts of PyPI packages installed in this interpreter's environment; they
are looked up next to ``sys.executable`` first, so a virtual environment need not be activated.
Each WebAssembly binary is compiled to machine code at its first run (about two minutes of CPU
for Yosys) and cached under ``XDG_CACHE_HOME``; the formal, FPGA-memory and mutation flows share
one such cache, :data:`TOOL_CACHE` (:func:`tool_cache_env`, :func:`warm_tool_cache`).
"""
import os
import pathlib
import shutil
import subprocess
import sys

__all__ = ["ToolMissing", "TOOL_CACHE", "find_tool", "check_tools", "dist_versions",
           "tool_cache_env", "warm_tool_cache"]

TOOL_CACHE = pathlib.Path("build") / "formal-cache"   # under the working directory


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


def tool_cache_env(env: dict | None = None) -> dict:
    """``env`` (default: this process's environment) with ``XDG_CACHE_HOME`` at
    :data:`TOOL_CACHE` (absolute), where YoWASP keeps its compiled tools."""
    return dict(os.environ if env is None else env, XDG_CACHE_HOME=str(TOOL_CACHE.resolve()))


def warm_tool_cache(tool: str) -> None:
    """Compile ``tool`` (a YoWASP WebAssembly binary) into :data:`TOOL_CACHE` once: about two
    minutes of CPU the first time, nothing after. Under a file lock, so concurrent users (test
    workers of one run: the formal proofs, the FPGA memory tests, the mutant builds) wait for
    one compilation instead of each doing their own."""
    from filelock import FileLock
    TOOL_CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(str(TOOL_CACHE / f"{pathlib.Path(tool).name}.lock")):
        subprocess.run([tool, "-V"], env=tool_cache_env(), stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)
