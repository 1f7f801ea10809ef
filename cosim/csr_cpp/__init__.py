"""The AXI4-Lite CSR master compiled into the simulator: :class:`CppCsrMaster`.

The per-cycle work of a CSR access (offering AW/W or AR, taking B or R) is C++
(``csr_dpi.cpp``) called from the Verilog :mod:`cosim.csr_cpp.wrapper` puts on the device's
CSR port (every ``cosim.build.device_build(cfg)`` has it). Python works at transaction level:
one job of accesses, one sleep until the job is done (the wire ``csr_cpp_busy`` falls), the
results read back with ``ctypes``. Register names, response checks and every by-name helper
are :class:`cosim.csr.CsrAccess`'s, the same as the cocotbext-axi master's
(:class:`cosim.csr.CsrMaster`); :meth:`CppCsrMaster.poll` adds the device driver's completion
wait as one job (write-1-to-clear, read, sleep on ``irq``, again), so a wait costs Python two
wake-ups instead of two accesses per completion.
"""
from __future__ import annotations

import ctypes
import functools

from cosim.csr import OKAY, CsrAccess, CsrMap, CsrResponseError
from cosim.csr_cpp.wrapper import BUSY, SELECT_PORT
from cosim.model_top import simulator_functions

__all__ = ["CppCsrMaster", "CSR_MODELS", "CsrProtocolError"]

CSR_MODELS = ("python", "cpp")
WRITE, READ, POLL = 0, 1, 2
_OP_FIELDS = 11         # kind, addr, data, strb, want, clear, clear_addr, clear_data, wait,
                        # timeout, mask (csr_dpi.cpp's order)
_RESULT_FIELDS = 7      # done, resp, rdata, matched, reads, t_start, t_done


class CsrProtocolError(AssertionError):
    """The device broke the AXI4-Lite protocol on the CSR port, or a job did not finish."""


@functools.cache
def _lib():
    """The simulator process's compiled-master functions."""
    return simulator_functions({
        "tcxl_csr_submit": (ctypes.c_int, [ctypes.c_uint, ctypes.c_void_p, ctypes.c_ulonglong]),
        "tcxl_csr_reset": (None, []),
        "tcxl_csr_busy": (ctypes.c_int, []),
        "tcxl_csr_error": (ctypes.c_char_p, []),
        "tcxl_csr_results": (None, [ctypes.c_void_p]),
        "tcxl_csr_stats": (None, [ctypes.c_void_p]),
    }, "this simulator has no compiled CSR master: build the device with "
       "cosim.build.device_build(cfg)")


class CppCsrMaster(CsrAccess):
    """CSR access by name through the compiled master on the top ``dut`` (module docstring).

    ``prefix``: the port (as ``csr_slot`` put the master on it); ``timeout``: cycles one
    access may take before :class:`CsrProtocolError` (a device that never answers; the engine
    ends a job that overruns its cycles, so a wait never hangs). Creating one selects the
    compiled master (``csr_cpp`` = 1) and forgets what a master before it left. A job
    cancelled by its caller (a power failure) stays in the engine until the next reset, which
    drops it."""

    def __init__(self, dut, *, prefix: str = "s_axil", regmap: CsrMap | None = None,
                 timeout: int = 10_000):
        super().__init__(regmap)
        self.dut, self.timeout = dut, timeout
        self._lib = _lib()
        self._lib.tcxl_csr_reset()
        getattr(dut, SELECT_PORT).value = 1
        self._busy = getattr(dut, BUSY)
        self.addr_bits = len(getattr(dut, f"{prefix}__awaddr"))
        from cocotb.triggers import Lock
        self._lock = Lock()
        self.stats = {"jobs": 0, "accesses": 0}

    def _raise_error(self):
        err = self._lib.tcxl_csr_error().decode()
        if err:
            raise CsrProtocolError(f"compiled CSR master: {err}")

    async def _run(self, ops, timeout: int):
        """Run the operations ``ops`` (``_OP_FIELDS`` values each) after the jobs of
        other coroutines (one job at a time, in the order asked, as cocotbext-axi's master
        queues accesses); returns their results (``_RESULT_FIELDS`` values each)."""
        async with self._lock:
            return await self._run_now(ops, timeout)

    async def _run_now(self, ops, timeout: int):
        from cocotb.triggers import FallingEdge
        self._raise_error()
        n = len(ops)
        for op in ops:
            for a in (op[1], op[6]):
                if not 0 <= a < 1 << self.addr_bits:
                    raise ValueError(f"CSR address {a:#x} outside the port's "
                                     f"{self.addr_bits}-bit address space")
        flat = (ctypes.c_ulonglong * (_OP_FIELDS * n))(*[int(v) for op in ops for v in op])
        if self._lib.tcxl_csr_submit(n, flat, int(timeout) + 1) != 0:
            raise CsrProtocolError("compiled CSR master: a job is still running")
        self.stats["jobs"] += 1
        self.stats["accesses"] += n
        # busy (a registered output) is high from the next edge and falls at the edge the last
        # operation ended, a reset dropped the job or it expired: one wake-up per job
        await FallingEdge(self._busy)
        self._raise_error()
        res = (ctypes.c_longlong * (_RESULT_FIELDS * n))()
        self._lib.tcxl_csr_results(res)
        out = [tuple(res[_RESULT_FIELDS * i:_RESULT_FIELDS * (i + 1)]) for i in range(n)]
        for i, r in enumerate(out):
            if not r[0]:
                raise CsrProtocolError(f"compiled CSR master: operation {i} of {n} not done "
                                       f"after {timeout} cycles (the device did not answer)")
        return out

    # ---- raw (CsrAccess) ----------------------------------------------------------------------
    async def raw_read(self, addr: int) -> tuple[int, int]:
        (_, resp, data, *_), = await self._run([(READ, addr & ~3, 0, 0, 0, 0, 0, 0, 0, 0, 0)],
                                               self.timeout)
        return int(data), int(resp)

    async def raw_write(self, addr: int, value: int, strb: int = 0xF) -> int:
        self._check_strb(strb)
        (_, resp, *_), = await self._run(
            [(WRITE, addr & ~3, int(value) & 0xFFFF_FFFF, strb, 0, 0, 0, 0, 0, 0, 0)],
            self.timeout)
        return int(resp)

    # ---- compound -----------------------------------------------------------------------------
    async def poll(self, name: str, want: int, *, mask: int = 0xFFFF_FFFF,
                   clear: tuple[str, int] | None = None, wait: int = 4096,
                   timeout: int = 500_000) -> tuple[bool, int, int]:
        """Until register ``name`` ANDed with ``mask`` reads ``want``: [write ``clear`` =
        (register, value)], read, and if not there yet sleep until ``irq`` is high (at most
        ``wait`` cycles), again; gives up ``timeout`` cycles after it began. Returns (matched, the last value read, the number
        of reads); raises :class:`cosim.csr.CsrResponseError` on a non-OKAY response."""
        if int(want) & ~int(mask) & 0xFFFF_FFFF:
            raise ValueError(f"poll of {name}: want {want:#x} has bits outside mask {mask:#x}")
        ca, cv = (self.map.offset(clear[0]), int(clear[1])) if clear else (0, 0)
        (_, resp, data, matched, reads, *_), = await self._run(
            [(POLL, self.map.offset(name), 0, 0, int(want) & 0xFFFF_FFFF, int(bool(clear)), ca,
              cv, int(wait), int(timeout), int(mask) & 0xFFFF_FFFF)],
            int(timeout) + int(wait) + self.timeout)
        if resp != OKAY:
            what = f"read of {name}" if reads else f"write to {clear[0]}"
            raise CsrResponseError(f"{what} answered resp {resp:#04b} while polling {name}")
        return bool(matched), int(data), int(reads)

    async def write_read(self, name: str, value: int) -> int:
        """Write ``value`` to register ``name``, then read it back, as one job (a doorbell and
        the check that the device took it); returns the value read; raises
        :class:`cosim.csr.CsrResponseError` on a non-OKAY response."""
        a = self.map.offset(name)
        (_, wresp, *_), (_, rresp, data, *_) = await self._run(
            [(WRITE, a, int(value) & 0xFFFF_FFFF, 0xF, 0, 0, 0, 0, 0, 0, 0),
             (READ, a, 0, 0, 0, 0, 0, 0, 0, 0, 0)], 2 * self.timeout)
        for what, resp in ((f"write {int(value):#x} to", wresp), ("read of", rresp)):
            if resp != OKAY:
                raise CsrResponseError(f"{what} {name} ({a:#05x}) answered resp {resp:#04b}")
        return int(data)
