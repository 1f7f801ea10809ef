"""Device top (current slice): LOOKUP command stream in, completions out, AXI4 media port.

Only wiring: GatherReduce's device request port goes to the media adapter. Later slices put the
DCOH between them and the CXL.mem channels and CSRs in front.

Verilog ports: ``clk``, ``rst`` (active high), ``cmd__{payload,valid,ready}``,
``cpl__{payload,valid,ready}``, ``m_axi__*`` (AXI4 master), ``busy``.
"""
from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .axi import AXI4Signature
from .config import DeviceConfig
from .gather.layouts import cmd_layout, cpl_layout
from .gather import GatherReduce
from .media_axi import MediaAXI

__all__ = ["TrainingCXLDevice", "TOP_NAME"]

TOP_NAME = "trainingcxl_device"


class TrainingCXLDevice(wiring.Component):
    def __init__(self, cfg: DeviceConfig = DeviceConfig()):
        if not isinstance(cfg, DeviceConfig):
            raise TypeError(f"cfg must be a DeviceConfig, got {cfg!r}")
        self.cfg = cfg
        ab = cfg.addr_bits
        super().__init__({
            "cmd": In(stream.Signature(cmd_layout(ab))),
            "cpl": Out(stream.Signature(cpl_layout(ab))),
            "m_axi": Out(AXI4Signature(addr_width=ab, data_width=cfg.media_data_bits,
                                       id_width=cfg.axi_id_bits)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        # engines
        m.submodules.gather = gather = GatherReduce(self.cfg)
        # media port
        m.submodules.media = media = MediaAXI(self.cfg)
        wiring.connect(m, gather.mem, media.port)
        wiring.connect(m, wiring.flipped(self.m_axi), media.axi)
        # host-facing command/completion streams
        wiring.connect(m, wiring.flipped(self.cmd), gather.cmd)
        wiring.connect(m, gather.cpl, wiring.flipped(self.cpl))
        m.d.comb += self.busy.eq(gather.busy)
        return m
