"""LOOKUP slice top: CXL.mem channels, LOOKUP command stream, AXI4 media port.

The gather engine alone behind the DCOH, driven by a command stream instead of the command
ring (the full device is :mod:`hw.top`); the LOOKUP cosim tests, the Icarus comparison and the
LOOKUP benchmark use it, so they do not pay for the CSR/ring path.

Only wiring: GatherReduce's device request port goes through the request register slice (as
in the device, :mod:`hw.req_slice`) and the DCOH (which snoops the host before device reads and
writes, docs/coherence.md) to the media adapter. The full device puts the CSRs and
the command processor in front (:mod:`hw.top`).

Verilog ports: ``clk``, ``rst`` (active high), ``m2s_req``/``m2s_rwd``/``m2s_birsp`` (in),
``s2m_ndr``/``s2m_drs``/``s2m_bisnp`` (out) as ``<ch>__{payload,valid,ready}``,
``cmd__{payload,valid,ready}``, ``cpl__{payload,valid,ready}``, ``m_axi__*`` (AXI4 master),
``busy``, ``ready`` (DCOH initialised), DCOH error report ``err``/``err_code``/``err_addr`` and
counters ``bisnp_sent``/``conflicts``/``proto_errors``.
"""
from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import DeviceConfig
from ..cxl.messages import connect_host_channels, host_channel_members
from ..dcoh import DCOH, forward_status, status_members
from ..gather.layouts import cmd_layout, cpl_layout
from ..gather import GatherReduce
from ..media_axi import MediaAXI, media_axi_signature
from ..req_slice import DeviceRequestSlice

__all__ = ["LookupSlice", "SLICE_NAME"]

SLICE_NAME = "lookup_slice"


class LookupSlice(wiring.Component):
    """The gather engine behind the DCOH and the media adapter, fed by a command stream.

    A bench-only top (LOOKUP cosim tests, the Icarus comparison, ``trainingcxl lookup-demo``
    and the LOOKUP benchmark): no CSRs, no command ring.

    Parameters
    ----------
    cfg : DeviceConfig
        Engine, DCOH and media port sizes.

    Members
    -------
    m2s_req, m2s_rwd, m2s_birsp : In(stream.Signature)
        Host to device CXL.mem channels.
    s2m_ndr, s2m_drs, s2m_bisnp : Out(stream.Signature)
        Device to host CXL.mem channels.
    cmd : In(stream.Signature(cmd_layout))
        LOOKUP commands.
    cpl : Out(stream.Signature(cpl_layout))
        LOOKUP completions, in command order.
    m_axi : Out(media_axi_signature(cfg))
        Media port.
    busy : Out(1)
        A command is in flight.
    ready, err, err_code, err_addr, bisnp_sent, conflicts, proto_errors : Out
        The DCOH's status (``hw.dcoh.status_members``).

    Raises
    ------
    TypeError
        If ``cfg`` is not a :class:`DeviceConfig`.
    """

    def __init__(self, cfg: DeviceConfig = DeviceConfig()):
        if not isinstance(cfg, DeviceConfig):
            raise TypeError(f"cfg must be a DeviceConfig, got {cfg!r}")
        self.cfg = cfg
        ab = cfg.addr_bits
        super().__init__({
            "cmd": In(stream.Signature(cmd_layout(ab))),
            "cpl": Out(stream.Signature(cpl_layout(ab))),
            "m_axi": Out(media_axi_signature(cfg)),
            "busy": Out(1),
            **host_channel_members(),
            **status_members(ab),
        })

    def elaborate(self, platform):
        m = Module()
        # engines
        m.submodules.gather = gather = GatherReduce(self.cfg)
        # coherency engine: host CXL.mem channels, engine requests → media requests
        m.submodules.dcoh = dcoh = DCOH(self.cfg)
        connect_host_channels(m, self, dcoh)
        m.submodules.req_slice = req_slice = DeviceRequestSlice(self.cfg.addr_bits)
        wiring.connect(m, gather.mem, req_slice.s)
        wiring.connect(m, req_slice.m, dcoh.dev)
        forward_status(m, self, dcoh)
        # media port
        m.submodules.media = media = MediaAXI(self.cfg)
        wiring.connect(m, dcoh.mem, media.port)
        wiring.connect(m, wiring.flipped(self.m_axi), media.axi)
        # host-facing command/completion streams
        wiring.connect(m, wiring.flipped(self.cmd), gather.cmd)
        wiring.connect(m, gather.cpl, wiring.flipped(self.cpl))
        m.d.comb += self.busy.eq(gather.busy)
        return m
