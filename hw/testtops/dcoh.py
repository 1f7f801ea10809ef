"""Bench top for the DCOH alone: CXL.mem channels, a device request port, the AXI media port.

Only wiring: ``dev`` (responder side of the device request port, driven by the bench as an
engine would) → DCOH → MediaAXI → ``m_axi``. Ports: ``m2s_req``, ``m2s_rwd``, ``m2s_birsp``,
``s2m_ndr``, ``s2m_drs``, ``s2m_bisnp`` (streams), ``dev__{rd_req,rd_resp,wr_req,wr_resp}``,
``m_axi__*``, ``err``, ``err_code``, ``err_addr``, ``bisnp_sent``, ``conflicts``,
``proto_errors``, ``ready``.
"""
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config import DeviceConfig
from ..cxl.messages import connect_host_channels, host_channel_members
from ..media_axi import MediaAXI, media_axi_signature
from ..reqport import DeviceRequestSignature
from ..dcoh import DCOH, forward_status, status_members

__all__ = ["DcohTestTop", "TEST_TOP_NAME"]

TEST_TOP_NAME = "dcoh_testtop"


class DcohTestTop(wiring.Component):
    """The DCOH alone between the host channels, a device request port and the AXI media port.

    A bench-only top (``cosim.tb.dcoh``, the DCOH cosim tests, ``trainingcxl stress`` and the
    DCOH benchmark); the device uses the DCOH through :class:`hw.top.TrainingCXLDevice`.

    Parameters
    ----------
    cfg : DeviceConfig
        Snoop filter, BITag and media port sizes.

    Members
    -------
    m2s_req, m2s_rwd, m2s_birsp : In(stream.Signature)
        Host to device CXL.mem channels.
    s2m_ndr, s2m_drs, s2m_bisnp : Out(stream.Signature)
        Device to host CXL.mem channels.
    dev : In(DeviceRequestSignature)
        Device request port, driven by the bench as an engine would.
    m_axi : Out(media_axi_signature(cfg))
        Media port (through :class:`hw.media_axi.MediaAXI`).
    err, err_code, err_addr, bisnp_sent, conflicts, proto_errors, ready : Out
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
            **host_channel_members(),
            "dev": In(DeviceRequestSignature(ab)),
            "m_axi": Out(media_axi_signature(cfg)),
            **status_members(ab),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.dcoh = dcoh = DCOH(self.cfg)
        m.submodules.media = media = MediaAXI(self.cfg)
        # host side
        connect_host_channels(m, self, dcoh)
        # engine side and media
        wiring.connect(m, wiring.flipped(self.dev), dcoh.dev)
        wiring.connect(m, dcoh.mem, media.port)
        wiring.connect(m, wiring.flipped(self.m_axi), media.axi)
        forward_status(m, self, dcoh)
        return m
