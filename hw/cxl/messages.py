"""CXL.mem channel payloads as ``lib.data`` layouts, one definition for RTL, pysim and cocotb.

Each channel is a valid/ready stream of one message per cycle. Header fields come from
``hw.cxl_encodings`` (LSB first, without the Valid bit). RwD and DRS carry the 64 B line as
``data`` (byte 0 in bits 7:0); RwD also carries ``be`` (64 byte enables, meaningful for
MemWrPtl; all ones for MemWr).
"""
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..cxl_encodings import CHANNEL_FIELDS, DATA_CHANNELS

__all__ = ["header_layout", "message_layout", "channel_signature", "CHANNELS",
           "host_channel_members", "connect_host_channels"]

CHANNELS = tuple(CHANNEL_FIELDS)


def header_layout(channel: str) -> data.StructLayout:
    try:
        return data.StructLayout(dict(CHANNEL_FIELDS[channel]))
    except KeyError:
        raise ValueError(f"unknown CXL.mem channel {channel!r}; known: {', '.join(CHANNELS)}") \
            from None


def message_layout(channel: str) -> data.StructLayout:
    """Header, plus ``data`` (and ``be`` for RwD) on the data channels."""
    fields = {"hdr": header_layout(channel)}
    if channel in DATA_CHANNELS:
        fields["data"] = 512
        if channel == "m2s_rwd":
            fields["be"] = 64
    return data.StructLayout(fields)


def channel_signature(channel: str) -> stream.Signature:
    return stream.Signature(message_layout(channel))


def host_channel_members() -> dict:
    """The six channels as members of a device-side component: M2S in, S2M out."""
    return {ch: (In if ch.startswith("m2s") else Out)(channel_signature(ch)) for ch in CHANNELS}


def connect_host_channels(m, outer, inner):
    """Forward the six channel ports of component ``outer`` (its own ports) to ``inner``."""
    for ch in CHANNELS:
        if ch.startswith("m2s"):
            wiring.connect(m, wiring.flipped(getattr(outer, ch)), getattr(inner, ch))
        else:
            wiring.connect(m, getattr(inner, ch), wiring.flipped(getattr(outer, ch)))
