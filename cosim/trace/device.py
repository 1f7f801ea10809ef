"""Boundary trace of the full device (``hw/top.py``, toplevel ``trainingcxl_device``).

    recorder = record_device_trace(dut, "trace.jsonl", drv=tb.drv)   # after the clock starts
    ...                                                                # run the bench
    recorder.write()          # also done automatically when the test ends

Records, as JSON lines with cycle numbers (``cosim.trace.boundary.TraceRecorder``, passive): the six
CXL.mem channels (``m2s_req``, ``m2s_rwd``, ``m2s_birsp``, ``s2m_ndr``, ``s2m_drs``,
``s2m_bisnp``; header fields nested under ``hdr``, ``data``/``be`` as hex of the payload
integer), the AXI media port (``ar``, ``r``, ``aw``, ``w``, ``b``), the CSR AXI4-Lite port
(``csr_ar`` ... ``csr_b``) and reset edges (``{"ch": "reset", "rst": 0/1}``). The file starts
with a header ``{"trace": "trainingcxl-raw", "section": ..., "cfg": ..., "period_ns": ...}``.

With ``drv`` (a ``cosim.device_driver.DeviceDriver``) an action log (``cosim.trace.action_log``) is
kept too and written next to the trace (``<path>`` with ``.jsonl`` replaced by
``.actions.jsonl``): the input of ``sw_model.expected_trace``. ``trainingcxl compare
trace.jsonl trace.actions.jsonl`` then checks the RTL against the golden model.

Several recorders in one simulator process (one per test) write sections of the same
file: the first one truncates it, the others append (``append`` overrides).

``cosim.tb.device.DeviceTB`` records when its bench configuration names a trace path
(``BenchConfig.trace``).
"""
from __future__ import annotations

import json
from pathlib import Path

import cocotb
from cocotb.triggers import Event

from cosim.trace.action_log import ActionLog
from cosim.trace.boundary import TraceRecorder, _now

__all__ = ["record_device_trace", "DeviceTraceRecorder", "RAW",
           "actions_path"]

RAW = "trainingcxl-raw"
CXL_CHANNELS = ("m2s_req", "m2s_rwd", "m2s_birsp", "s2m_ndr", "s2m_drs", "s2m_bisnp")
_files_written: set = set()


def actions_path(path) -> Path:
    p = Path(path)
    stem = p.name[:-len(".jsonl")] if p.name.endswith(".jsonl") else p.name
    return p.with_name(stem + ".actions.jsonl")


class DeviceTraceRecorder:
    """A running recording (see the module docstring). ``trace``: the TraceRecorder;
    ``actions``: the ActionLog or None."""

    def __init__(self, dut, path, *, clock, reset, period_ns, strict, drv, section, seed,
                 cfg, append):
        from hw.cxl.messages import message_layout
        self.path = Path(path) if path is not None else None
        self.section = section
        self.header = {"trace": RAW, "version": 1, "section": section, "seed": seed,
                       "period_ns": period_ns}
        if cfg is not None:
            self.header["cfg"] = cfg.to_json()
        self.append = append
        self.trace = TraceRecorder(dut, clock=clock, reset=reset, period_ns=period_ns,
                                   streams={ch: message_layout(ch) for ch in CXL_CHANNELS},
                                   axi_prefix="m_axi_", axi_ports={"csr": "s_axil_"},
                                   strict=strict, hex_fields=("data", "be"))
        self._t0, self._period = self.trace._t0, self.trace._period
        self.resets: list[tuple[int, int]] = []
        self.actions = None
        if drv is not None:
            self.actions = ActionLog(cycle=self.cycle).attach(drv)
        self.written = False
        if reset is not None:
            cocotb.start_soon(self._watch_reset(reset))
        cocotb.start_soon(self._write_at_end())

    def cycle(self) -> int:
        return (_now() - self._t0) // self._period

    async def _watch_reset(self, reset):
        last = None
        while True:
            v = str(reset.value)
            if v != last and v in ("0", "1"):
                self.resets.append((self.cycle(), int(v)))
                last = v
            await reset.value_change

    async def _write_at_end(self):
        try:
            await Event().wait()           # never set: cancelled when the test ends
        finally:
            if not self.written and self.path is not None:
                self.write()

    def records(self) -> list[dict]:
        """Boundary transactions and reset edges, in cycle order."""
        resets = [{"cycle": c, "ch": "reset", "rst": v} for c, v in self.resets]
        recs = self.trace.records
        if not resets:
            return list(recs)
        out, j = [], 0
        for r in recs:
            while j < len(resets) and resets[j]["cycle"] <= r["cycle"]:
                out.append(resets[j])
                j += 1
            out.append(r)
        return out + resets[j:]

    def write(self, path=None) -> Path:
        """Write the trace (and the action log, if kept). Returns the trace path."""
        path = Path(path) if path is not None else self.path
        if path is None:
            raise ValueError("no path to write the trace to")
        key = str(path.resolve())
        append = self.append if self.append is not None else key in _files_written
        _files_written.add(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a" if append else "w") as f:
            f.write(json.dumps(self.header) + "\n")
            for r in self.records():
                f.write(json.dumps(r) + "\n")
        if self.actions is not None:
            hdr = {k: v for k, v in self.header.items() if k in ("section", "seed", "cfg")}
            self.actions.write(actions_path(path), append=append, header=hdr)
        self.written = True
        return path


def record_device_trace(dut, path=None, *, clock=None, reset=None, period_ns=10, strict=True,
                        drv=None, section="", seed=None, cfg=None,
                        append=None) -> DeviceTraceRecorder:
    """Start recording the device's boundary (create it right after the bench's clock, so
    cycle k is the k-th rising edge). ``drv``: keep the host action log too. ``path``: where
    ``write()`` (and the automatic write at the end of the test) puts it."""
    clock = clock if clock is not None else dut.clk
    reset = reset if reset is not None else getattr(dut, "rst", None)
    if cfg is None and drv is not None:
        cfg = getattr(drv, "cfg", None)
    return DeviceTraceRecorder(dut, path, clock=clock, reset=reset, period_ns=period_ns,
                               strict=strict, drv=drv, section=section, seed=seed, cfg=cfg,
                               append=append)
