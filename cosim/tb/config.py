"""The one bench configuration every bench environment reads (:class:`BenchConfig`).

A launcher puts a ``BenchConfig`` into its run parameters (itself, or as a field named
``bench`` of its own parameter dataclass, see :mod:`cosim.params`); the benches
(:mod:`cosim.tb.device`, :mod:`cosim.tb.dcoh`, :mod:`cosim.tb.gather`) read it with
:func:`bench_config`. A run without parameters gets the defaults.
"""
from __future__ import annotations

from dataclasses import dataclass

from cosim import params
from hw.config import DeviceConfig

__all__ = ["BenchConfig", "bench_config", "PMEM_MODELS"]

# the PMEM models a device build can run on its media port (BenchConfig.pmem)
PMEM_MODELS = ("python", "cpp")


@dataclass(frozen=True)
class BenchConfig:
    """What every bench needs to know about the simulated device and its surroundings.

    ``device``: the hardware configuration the simulator was built from. ``latency`` /
    ``write_latency``: PMEM read / write latency in cycles (None: the bench's own default; the
    write latency defaults to the read latency). ``trace``: a path to record the device's
    boundary trace and host action log to (``cosim.tb.device`` only, docs/traces.md).
    ``stimulus``: a directory to record the full device's per-cycle port values to
    (:mod:`cosim.trace.stimulus`; the training job only). ``host_trace``: log every message of
    the host model and the device agent (``cosim.tb.dcoh``). ``strict_media``: also check
    ``HostPermission.device_access`` at each device AW/AR (``cosim.tb.dcoh``; stricter than
    the contract, see cosim.coherence_check).
    ``pmem``: the PMEM model on the media port, ``"python"`` (:class:`cosim.pmem.PmemModel`)
    or ``"cpp"`` (:class:`cosim.pmem_cpp.CppPmemModel`, compiled into every
    ``cosim.build.device_build(cfg)``; no stalls;
    ``cosim.tb.device`` and the training job only). ``host``: the CXL.mem host of the
    device driver, ``"python"`` (:mod:`cosim.cxl_host`) or ``"cpp"`` (:mod:`cosim.host_cpp`,
    compiled into every ``cosim.build.device_build(cfg)``; uncached traffic only, no action
    log). ``csr``: the device driver's AXI4-Lite CSR master, ``"python"``
    (:class:`cosim.csr.CsrMaster`, cocotbext-axi) or ``"cpp"`` (:mod:`cosim.csr_cpp`, compiled
    into every ``cosim.build.device_build(cfg)``).
    :attr:`compiled_only`: nothing in Python samples the ports on clock edges.
    """
    device: DeviceConfig = DeviceConfig()
    latency: int | None = None
    write_latency: int | None = None
    trace: str | None = None
    stimulus: str | None = None
    host_trace: bool = False
    strict_media: bool = False
    pmem: str = "python"
    host: str = "python"
    csr: str = "python"

    @property
    def compiled_only(self) -> bool:
        """All three models compiled and no trace, stimulus or host trace recorded: nothing in
        Python samples the device's ports on clock edges, so the run may use the top that
        makes its own clock (``cosim.build.device_build(cfg, own_clock=True)``)."""
        return (self.pmem == self.host == self.csr == "cpp" and not self.trace
                and not self.stimulus and not self.host_trace)


def bench_config() -> BenchConfig:
    """The running simulation's bench configuration (defaults when it has no parameters)."""
    p = params.load_any()
    if p is None:
        return BenchConfig()
    if isinstance(p, BenchConfig):
        return p
    bench = getattr(p, "bench", None)
    if isinstance(bench, BenchConfig):
        return bench
    raise params.ParamsError(f"run parameters {type(p).__name__} carry no BenchConfig "
                             "(a field named 'bench')")
