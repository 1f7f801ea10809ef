"""CXL.mem message layouts match architecture 3.1 (widths with Valid, encodings)."""
import pytest

from hw.cxl import messages
from hw.cxl_encodings import HEADER_BITS, NDROpcode, ReqOpcode, RwDOpcode, SnpType, MetaValue


@pytest.mark.parametrize("channel", messages.CHANNELS)
def test_header_width_matches_architecture_table(channel):
    """Header layout + the stream's valid bit = the width in architecture 3.1."""
    assert messages.header_layout(channel).size + 1 == HEADER_BITS[channel]


def test_data_channels_carry_a_line():
    """RwD: header + 512 data + 64 byte enables; DRS: header + 512 data; others header only."""
    assert messages.message_layout("m2s_rwd").size == 103 + 512 + 64
    assert messages.message_layout("s2m_drs").size == 39 + 512
    assert messages.message_layout("m2s_req").size == 99


def test_field_positions_lsb_first():
    """Opcode is the lowest field; addr sits after tag (Req: bits 30..75)."""
    f = dict(iter(messages.header_layout("m2s_req")))
    assert f["opcode"].offset == 0 and f["addr"].offset == 4 + 3 + 2 + 2 + 16
    assert f["tc"].offset + 2 == 99


def test_encodings_follow_cxl_3_1():
    """Spot checks of architecture 3.1's encodings."""
    assert (ReqOpcode.MEM_RD, ReqOpcode.MEM_SPEC_RD, ReqOpcode.MEM_CLN_EVCT) == (1, 8, 10)
    assert (RwDOpcode.MEM_WR_PTL, RwDOpcode.BI_CONFLICT) == (2, 4)
    assert (NDROpcode.CMP_E, NDROpcode.BI_CONFLICT_ACK) == (2, 4)
    assert (SnpType.SNP_INV, MetaValue.S) == (3, 3)


def test_unknown_channel_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown CXL.mem channel 'm2s_foo'"):
        messages.header_layout("m2s_foo")
