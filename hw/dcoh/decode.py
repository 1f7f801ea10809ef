"""Decode of a host M2S Req into the DCOH's action (docs/coherence.md, message table)."""
from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..cxl_encodings import ReqOpcode, MetaField, MetaValue, SnpType, DcohError

__all__ = ["ReqDecode", "A_SPEC", "A_ERR_RD", "A_ERR_ND", "A_RDCUR", "A_RD_S", "A_RD_A",
           "A_INV_A", "A_INV_I"]

# Req actions
(A_SPEC, A_ERR_RD, A_ERR_ND, A_RDCUR, A_RD_S, A_RD_A, A_INV_A, A_INV_I) = range(8)


class ReqDecode(wiring.Component):
    """What the host lane does with a Req: the action of its opcode, SnpType, MetaField and
    MetaValue (docs/coherence.md), checked against the region of its line.

    Combinational, no state. Legal combinations: MemRd SnpInv Meta0-State A → ``A_RD_A``,
    MemRd SnpData Meta0-State S → ``A_RD_S``, MemRd SnpCur NoOp → ``A_RDCUR``, MemRdData
    SnpData → ``A_RD_A``, MemInv/MemInvNT SnpInv Meta0-State A / I → ``A_INV_A`` / ``A_INV_I``,
    MemClnEvct NoSnp Meta0-State I → ``A_INV_I``, MemSpecRd → ``A_SPEC`` (no region check).

    Members
    -------
    opcode : In(4), snp : In(3), mf : In(2), mv : In(2)
        The Req's header fields.
    rw, ro, nxm : In(1)
        The line is in a read-write region, in a read-only region, in no region (or the
        address has bits above the device's).
    act : Out(range(8))
        The action (``A_*``); an error is ``A_ERR_RD`` (answered on DRS, MemRd/MemRdData) or
        ``A_ERR_ND`` (answered with NDR Cmp).
    err : Out(4)
        With an error action: ``DcohError.ILLEGAL_REQ`` (illegal combination), ``NXM`` or
        ``REFUSED`` (a legal Req to a region that does not allow it: only ``A_RDCUR`` may read
        a read-only region); else 0.
    is_rd : Out(1)
        MemRd or MemRdData.
    """

    def __init__(self):
        super().__init__({"opcode": In(4), "snp": In(3), "mf": In(2), "mv": In(2),
                          "rw": In(1), "ro": In(1), "nxm": In(1),
                          "act": Out(range(8)), "err": Out(4), "is_rd": Out(1)})

    def elaborate(self, platform):
        m = Module()
        legal = self._legal(m)
        m.d.comb += self.act.eq(legal)
        with m.If((legal == A_ERR_RD) | (legal == A_ERR_ND)):
            m.d.comb += self.err.eq(DcohError.ILLEGAL_REQ)
        with m.Elif(legal != A_SPEC):
            ok_region = self.rw | ((legal == A_RDCUR) & self.ro)
            with m.If(self.nxm | ~ok_region):
                m.d.comb += [self.act.eq(Mux(self.is_rd, A_ERR_RD, A_ERR_ND)),
                             self.err.eq(Mux(self.nxm, DcohError.NXM, DcohError.REFUSED))]
        return m

    def _legal(self, m):
        """The action if the combination is legal, else ``A_ERR_*`` (a comb signal)."""
        op, snp, mf, mv = self.opcode, self.snp, self.mf, self.mv
        legal = Signal(range(8))
        meta0 = mf == MetaField.META0_STATE
        m.d.comb += self.is_rd.eq((op == ReqOpcode.MEM_RD) | (op == ReqOpcode.MEM_RD_DATA))
        m.d.comb += legal.eq(Mux(self.is_rd, A_ERR_RD, A_ERR_ND))
        with m.Switch(op):
            with m.Case(ReqOpcode.MEM_RD):
                with m.If((snp == SnpType.SNP_INV) & meta0 & (mv == MetaValue.A)):
                    m.d.comb += legal.eq(A_RD_A)
                with m.Elif((snp == SnpType.SNP_DATA) & meta0 & (mv == MetaValue.S)):
                    m.d.comb += legal.eq(A_RD_S)
                with m.Elif((snp == SnpType.SNP_CUR) & (mf == MetaField.NO_OP)):
                    m.d.comb += legal.eq(A_RDCUR)
            with m.Case(ReqOpcode.MEM_RD_DATA):
                with m.If(snp == SnpType.SNP_DATA):
                    m.d.comb += legal.eq(A_RD_A)
            with m.Case(ReqOpcode.MEM_INV, ReqOpcode.MEM_INV_NT):
                with m.If((snp == SnpType.SNP_INV) & meta0 & (mv == MetaValue.A)):
                    m.d.comb += legal.eq(A_INV_A)
                with m.Elif((snp == SnpType.SNP_INV) & meta0 & (mv == MetaValue.I)):
                    m.d.comb += legal.eq(A_INV_I)
            with m.Case(ReqOpcode.MEM_CLN_EVCT):
                with m.If((snp == SnpType.NO_OP) & meta0 & (mv == MetaValue.I)):
                    m.d.comb += legal.eq(A_INV_I)
            with m.Case(ReqOpcode.MEM_SPEC_RD):
                m.d.comb += legal.eq(A_SPEC)
        return legal
