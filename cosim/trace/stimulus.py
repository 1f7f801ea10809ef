"""Per-cycle stimulus of the full device, recorded for replay without a testbench.

    rec = StimulusRecorder(dut, "build/stim", cfg=cfg)   # before the clock starts
    ...                                                  # run the bench
    rec.close()                                          # writes the manifest

Records, for every clock cycle from the start of the simulation, the value of every input port of
``trainingcxl_device`` (except ``clk``) as the next rising edge sees it, and the value of every
output port at that moment, sampled in the read-only phase after each falling edge (the benches
drive inputs at rising edges). ``trainingcxl.bench.verilator_speed --load DIR`` replays the
inputs into a C++-only Verilator model and checks every output of every cycle against the
recording: a replay that matches is the device under the bench's real load, without any Python.

Files in the directory:

- ``stimulus.json``: ``{"format": "trainingcxl-stimulus", "version": 1, "top", "config",
  "inputs": [{"name", "width", "words"}], "outputs": [...], "cycles", "init"}``; ``words`` is
  the number of 32-bit words of a port, ``init`` the input words in effect at the clock's
  first rising edge (time 0).
- ``inputs.bin``: per cycle, every input's words (little-endian ``uint32``) in manifest order.
- ``outputs.bin``: the same for the outputs.

An X or Z on a port (not produced by Verilator, a two-state simulator) raises
:class:`StimulusError` naming the port and the cycle.
"""
from __future__ import annotations

import json
from pathlib import Path

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly, Timer

from cosim.model_top import require_cocotb_clock

__all__ = ["StimulusRecorder", "StimulusError", "FORMAT", "load_manifest"]

FORMAT = "trainingcxl-stimulus"
_FLUSH_CYCLES = 4096


class StimulusError(RuntimeError):
    """A port value that cannot be recorded (X/Z), or a recording that cannot be read."""


def _getter(handle):
    raw = getattr(getattr(handle, "_handle", None), "get_signal_val_binstr", None)
    return raw if raw is not None else (lambda: str(handle.value))


def _ports(cfg) -> list[dict]:
    from hw.gen import ports_manifest
    from hw.top import TrainingCXLDevice
    return ports_manifest(TrainingCXLDevice(cfg), cfg)["ports"]


def load_manifest(directory) -> dict:
    """The ``stimulus.json`` of a recording, checked for its format and both data files' sizes."""
    d = Path(directory)
    try:
        man = json.loads((d / "stimulus.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise StimulusError(f"{d}: not a stimulus recording ({e})") from None
    if man.get("format") != FORMAT or man.get("version") != 1:
        raise StimulusError(f"{d / 'stimulus.json'}: format {man.get('format')!r} version "
                            f"{man.get('version')!r}, expected {FORMAT!r} 1")
    for name, ports in (("inputs.bin", man["inputs"]), ("outputs.bin", man["outputs"])):
        want = 4 * man["cycles"] * sum(p["words"] for p in ports)
        got = (d / name).stat().st_size if (d / name).exists() else None
        if got != want:
            raise StimulusError(f"{d / name}: {got} bytes, expected {want} for "
                                f"{man['cycles']} cycles")
    return man


class StimulusRecorder:
    """Records the device's ports every cycle (see the module docstring).

    Parameters
    ----------
    dut : cocotb handle of ``trainingcxl_device``
    directory : path, created if missing; its files are replaced.
    cfg : hw.config.DeviceConfig the simulator was built from (gives the port list).
    clock : the clock handle (default ``dut.clk``).
    """

    def __init__(self, dut, directory, *, cfg, clock=None):
        require_cocotb_clock(dut, "the stimulus recorder (cosim.trace.stimulus)")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        ports = [p for p in _ports(cfg) if p["name"] != "clk"]
        for p in ports:
            p["words"] = (p["width"] + 31) // 32
        self._inputs = [p for p in ports if p["dir"] == "in"]
        self._outputs = [p for p in ports if p["dir"] == "out"]
        self._in_get = [(p["name"], _getter(getattr(dut, p["name"])), 4 * p["words"])
                        for p in self._inputs]
        self._out_get = [(p["name"], _getter(getattr(dut, p["name"])), 4 * p["words"])
                         for p in self._outputs]
        self._clock = clock if clock is not None else dut.clk
        self._cfg_json = json.loads(cfg.to_json())
        self._fin = open(self.dir / "inputs.bin", "wb")
        self._fout = open(self.dir / "outputs.bin", "wb")
        self.cycles = 0
        self._init = None
        self._closed = False
        self._task = cocotb.start_soon(self._run())

    def _sample(self, getters, what) -> bytes:
        out = bytearray()
        for name, get, nbytes in getters:
            s = get()
            try:
                out += int(s, 2).to_bytes(nbytes, "little")
            except ValueError:
                raise StimulusError(f"stimulus: {what} {name} is {s!r} at cycle "
                                    f"{self.cycles}") from None
        return bytes(out)

    async def _run(self):
        await ReadOnly()                   # time 0, after the bench's first writes
        init = self._sample(self._in_get, "input")
        self._init = [int.from_bytes(init[i:i + 4], "little") for i in range(0, len(init), 4)]
        await Timer(1, "step")
        edge, ro = FallingEdge(self._clock), ReadOnly()
        bin_, bout = bytearray(), bytearray()
        while True:
            await edge
            await ro
            bin_ += self._sample(self._in_get, "input")
            bout += self._sample(self._out_get, "output")
            self.cycles += 1
            if self.cycles % _FLUSH_CYCLES == 0:
                self._fin.write(bin_)
                self._fout.write(bout)
                bin_.clear()
                bout.clear()
                self._pending = None
            else:
                self._pending = (bin_, bout)

    def close(self) -> Path:
        """Stop recording and write the manifest; returns the directory."""
        if self._closed:
            return self.dir
        self._closed = True
        self._task.cancel()
        pending = getattr(self, "_pending", None)
        if pending:
            self._fin.write(pending[0])
            self._fout.write(pending[1])
        self._fin.close()
        self._fout.close()
        man = {"format": FORMAT, "version": 1, "top": "trainingcxl_device",
               "config": self._cfg_json, "inputs": self._inputs, "outputs": self._outputs,
               "cycles": self.cycles, "init": self._init}
        (self.dir / "stimulus.json").write_text(json.dumps(man, indent=1) + "\n")
        return self.dir
