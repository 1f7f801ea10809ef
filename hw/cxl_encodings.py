"""CXL.mem encodings (CXL 3.1, 256B-flit field widths) shared by RTL, golden model and cosim.

Pure Python (no Amaranth): numbers and field lists only. Field lists are LSB first and leave
out the spec's per-message Valid bit (it is the stream's ``valid``); architecture 3.1 lists the
header widths including Valid, hence ``HEADER_BITS[x] == sum(widths) + 1``.
"""
import enum


class MetaField(enum.IntEnum):
    META0_STATE = 0b00
    NO_OP = 0b11


class MetaValue(enum.IntEnum):
    I = 0b00
    A = 0b10
    S = 0b11


class SnpType(enum.IntEnum):
    NO_OP = 0b000
    SNP_DATA = 0b001
    SNP_CUR = 0b010
    SNP_INV = 0b011


class ReqOpcode(enum.IntEnum):
    MEM_INV = 0b0000
    MEM_RD = 0b0001
    MEM_RD_DATA = 0b0010
    MEM_SPEC_RD = 0b1000
    MEM_INV_NT = 0b1001
    MEM_CLN_EVCT = 0b1010


class RwDOpcode(enum.IntEnum):
    MEM_WR = 0b0001
    MEM_WR_PTL = 0b0010
    BI_CONFLICT = 0b0100


class BIRspOpcode(enum.IntEnum):
    BIRSP_I = 0b0000
    BIRSP_S = 0b0001
    BIRSP_E = 0b0010
    BIRSP_I_BLK = 0b0100
    BIRSP_S_BLK = 0b0101
    BIRSP_E_BLK = 0b0110


class BISnpOpcode(enum.IntEnum):
    BISNP_CUR = 0b0000
    BISNP_DATA = 0b0001
    BISNP_INV = 0b0010
    BISNP_CUR_BLK = 0b0100
    BISNP_DATA_BLK = 0b0101
    BISNP_INV_BLK = 0b0110


class NDROpcode(enum.IntEnum):
    CMP = 0b000
    CMP_S = 0b001
    CMP_E = 0b010
    BI_CONFLICT_ACK = 0b100


class DRSOpcode(enum.IntEnum):
    MEM_DATA = 0b000
    MEM_DATA_NXM = 0b001


M2S_REQ_FIELDS = (("opcode", 4), ("snp_type", 3), ("meta_field", 2), ("meta_value", 2),
                  ("tag", 16), ("addr", 46), ("ld_id", 4), ("ckid", 13), ("rsvd", 7), ("tc", 2))
M2S_RWD_FIELDS = (("opcode", 4), ("snp_type", 3), ("meta_field", 2), ("meta_value", 2),
                  ("tag", 16), ("addr", 46), ("poison", 1), ("trp", 1), ("ld_id", 4),
                  ("ckid", 13), ("rsvd", 9), ("tc", 2))
M2S_BIRSP_FIELDS = (("opcode", 4), ("bi_id", 12), ("bi_tag", 12), ("low_addr", 2), ("rsvd", 9))
S2M_BISNP_FIELDS = (("opcode", 4), ("bi_id", 12), ("bi_tag", 12), ("addr", 46), ("rsvd", 9))
S2M_NDR_FIELDS = (("opcode", 3), ("meta_field", 2), ("meta_value", 2), ("tag", 16),
                  ("ld_id", 4), ("dev_load", 2), ("rsvd", 10))
S2M_DRS_FIELDS = (("opcode", 3), ("meta_field", 2), ("meta_value", 2), ("tag", 16),
                  ("poison", 1), ("ld_id", 4), ("dev_load", 2), ("trp", 1), ("rsvd", 8))

# Header widths of architecture 3.1 (including the Valid bit)
HEADER_BITS = {"m2s_req": 100, "m2s_rwd": 104, "m2s_birsp": 40, "s2m_bisnp": 84,
               "s2m_ndr": 40, "s2m_drs": 40}
CHANNEL_FIELDS = {"m2s_req": M2S_REQ_FIELDS, "m2s_rwd": M2S_RWD_FIELDS,
                  "m2s_birsp": M2S_BIRSP_FIELDS, "s2m_bisnp": S2M_BISNP_FIELDS,
                  "s2m_ndr": S2M_NDR_FIELDS, "s2m_drs": S2M_DRS_FIELDS}
# Channels that carry a 64 B data payload beside the header (RwD also 64 byte enables)
DATA_CHANNELS = ("m2s_rwd", "s2m_drs")


class DcohError(enum.IntEnum):
    """Errors the DCOH reports (``err_code`` with the line address; docs/coherence.md)."""
    NONE = 0
    NXM = 1              # host access outside every region: reads get MemData-NXM, rest Cmp
    REFUSED = 2          # host access the region does not allow (log; writes/caching reads of
                         # superblock and slots): answered like NXM, nothing written
    ILLEGAL_REQ = 3      # Req opcode/SnpType/meta combination not in the legal table
    ILLEGAL_RWD = 4      # RwD opcode/SnpType/meta combination not in the legal table
    BIRSP_TAG = 5        # BIRsp for a BITag with no BISnp outstanding (rule 7)
    BIRSP_KIND = 6       # BIRsp opcode not allowed for the BISnp it answers (incl. Blk)
    # 7 is reserved: no error of poisoned writes exists (the media keeps poison per line, so
    # nothing can run out of room); the code stays unused so the others keep their values
    SF_MISS_OWNED = 8    # MemWr keeping A/S for a line the snoop filter does not hold
    MEDIA = 9            # media error on a host read (data sent with poison)


# Device request port ids the DCOH reserves for its own media traffic (engines use 0..14)
HOST_MEDIA_ID = 15
