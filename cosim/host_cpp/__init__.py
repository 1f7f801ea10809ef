"""The CXL.mem host compiled into the simulator: :class:`CppHost`.

The per-cycle work of the host's uncached traffic (driving ``m2s_req``/``m2s_rwd``, taking
every NDR and DRS, matching and checking them) is C++ (``host_dpi.cpp``) called from the
Verilog :mod:`cosim.host_cpp.wrapper` puts on the device's host channels (every
``cosim.build.device_build(cfg)`` has it). Python works at transaction level: one job of whole
lines (:meth:`CppHost.write_lines`, :meth:`CppHost.read_lines`), one sleep until the job is done
(the wire ``host_cpp_busy`` falls), the results read back with ``ctypes``.

What it covers is what the device driver's host does between descriptor batches: uncached
full-line ``MemWr`` and partial ``MemWrPtl`` (Meta0-State I), and ``MemRd`` with ``SnpCur``,
from a host that holds no line. Each request's header is the Python host's
(:mod:`cosim.cxl_host.protocol`: the same kinds, fields and tag sequence from the same seed),
and the answers are checked as :class:`cosim.cxl_host.HostCore` checks them: the NDR and DRS
opcodes the coherence reference (``sw_model.coherence.expected_req``/``expected_rwd``) allows
for that header, tags, duplicates, answers before the request, DRS only for reads,
MemData-NXM data; a read is complete with its DRS and, when the reference expects one, its NDR.
A violation raises :class:`cosim.cxl_host.HostViolationError`. Caching requests, snoops
(BISnp/BIRsp) and conflicts stay with the Python host: the compiled one holds ``s2m_bisnp``
not ready and raises when the device offers a BISnp. The boundary trace's host action log
needs the Python host too (its observers see each transaction as it happens).
"""
from __future__ import annotations

import ctypes
import functools
import importlib
import random

from cosim.host_cpp.wrapper import ATTACH, BUSY, SELECT_PORT
from cosim.model_top import simulator_functions

__all__ = ["CppHost", "HOST_MODELS", "prepare"]

HOST_MODELS = ("python", "cpp")
LINE = 64
_ALL_BE = (1 << LINE) - 1
_RESULT_FIELDS = 7       # done, t_sent, t_ndr, t_drs, ndr_op, drs_op, drs_poison


@functools.cache
def _lib():
    """The simulator process's compiled-host functions."""
    u, p = ctypes.c_uint, ctypes.c_void_p
    return simulator_functions({
        "tcxl_host_submit": (ctypes.c_int, [u, p, p, ctypes.c_ulonglong]),
        "tcxl_host_layout": (None, [u, u, u, u, p, u]),
        "tcxl_host_reset": (None, []),
        "tcxl_host_busy": (ctypes.c_int, []),
        "tcxl_host_error": (ctypes.c_char_p, []),
        "tcxl_host_edges": (ctypes.c_ulonglong, []),
        "tcxl_host_results": (None, [p, p]),
        "tcxl_host_stats": (None, [p]),
    }, "this simulator has no compiled CXL.mem host: build the device with "
       "cosim.build.device_build(cfg)")


class _Packer:
    """Header fields of one M2S channel to payload bits (offsets from its lib.data layout)."""

    def __init__(self, channel: str):
        from hw.cxl.messages import message_layout
        lay = message_layout(channel)
        self.width = lay.size
        self.words = (self.width + 31) // 32
        hdr = lay["hdr"]
        self.hdr = {name: (hdr.offset + f.offset, f.width) for name, f in hdr.shape}
        self.data = lay["data"].offset if channel == "m2s_rwd" else None
        self.be = lay["be"].offset if channel == "m2s_rwd" else None

    def pack(self, hdr: dict, data: bytes | None = None, be: int = 0) -> int:
        bits = 0
        for name, v in hdr.items():
            off, w = self.hdr[name]
            if not 0 <= v < 1 << w:
                raise ValueError(f"header field {name}={v} does not fit {w} bits")
            bits |= v << off
        if self.data is not None:
            bits |= int.from_bytes(data, "little") << self.data | be << self.be
        return bits


@functools.cache
def _packers() -> tuple[_Packer, _Packer]:
    """The ``m2s_req`` and ``m2s_rwd`` packers (one pair per process: a host is made at every
    power-on and attach)."""
    return _Packer("m2s_req"), _Packer("m2s_rwd")


@functools.cache
def _response_layout() -> tuple:
    """``tcxl_host_layout``'s arguments: the M2S words per message, the S2M NDR and DRS words
    and the offset and width of each field the C++ side reads, MemData-NXM's opcode."""
    from hw.cxl.messages import message_layout
    from hw.cxl_encodings import DRSOpcode
    req, rwd = _packers()
    ndr, drs = message_layout("s2m_ndr"), message_layout("s2m_drs")

    def field(lay, name):
        if name == "data":
            return (lay["data"].offset, 512)
        h = lay["hdr"]
        f = h.shape[name]
        return (h.offset + f.offset, f.width)
    fs = [field(ndr, "opcode"), field(ndr, "tag"), field(drs, "opcode"), field(drs, "tag"),
          field(drs, "poison"), field(drs, "data")]
    arr = (ctypes.c_uint * 12)(*[v for f in fs for v in f])
    return (req.words, rwd.words, (ndr.size + 31) // 32, (drs.size + 31) // 32, arr,
            int(DRSOpcode.MEM_DATA_NXM))


@functools.lru_cache(maxsize=1 << 12)
def _answer_masks(cfg, channel: str, opcode: int, snp: int, mf: int, mv: int,
                  region: str | None, poison: int) -> tuple[bool, int, int]:
    """(need_ndr, NDR opcode mask, DRS opcode mask) the coherence reference allows for a
    header of these fields in ``region`` (the reference's answer depends on the address only
    through its region: ``sw_model.coherence.host_region``)."""
    from cosim.cxl_host.protocol import Reference
    addr = (getattr(cfg, region + "_base") if region is not None else
            1 << cfg.addr_bits) // LINE       # a line of that region (or outside HDM)
    hdr = dict(opcode=opcode, snp_type=snp, meta_field=mf, meta_value=mv, addr=addr, tag=0)
    if channel == "m2s_rwd":
        hdr["poison"] = poison
    e = Reference(cfg).expect(channel, hdr)
    return e.ndr is not None, opcode_mask(e.ndr), opcode_mask(e.drs)


def opcode_mask(want) -> int:
    """A bit per opcode of ``want`` (one opcode, a collection of them, or None: none)."""
    if want is None:
        return 0
    vals = want if isinstance(want, (set, frozenset, tuple, list)) else (want,)
    return sum(1 << int(v) for v in vals)


class _Kind:
    """One request kind of :data:`cosim.cxl_host.protocol.REQ_KINDS` as the engine receives
    it: the channel, the header's constant fields, the payload bits of everything but the tag,
    line, data and byte enables (packed once) and where those go."""

    def __init__(self, name: str):
        from cosim.cxl_host.protocol import REQ_KINDS, _req_payload, _rwd_payload
        channel, op, snp, mf, mv, *_ = REQ_KINDS[name]
        self.name, self.channel = name, channel
        self.rwd = channel == "m2s_rwd"
        self.fields = (int(op), int(snp), int(mf), int(mv))
        req, rwd = _packers()
        self.packer = pk = rwd if self.rwd else req
        if self.rwd:
            self.const = pk.pack(_rwd_payload(op, snp, mf, mv, 0, 0, bytes(LINE), 0)["hdr"],
                                 bytes(LINE), 0)
        else:
            self.const = pk.pack(_req_payload(op, snp, mf, mv, 0, 0)["hdr"])
        self.tag_off = pk.hdr["tag"][0]
        self.addr_off, self.addr_bits = pk.hdr["addr"]
        self.nbytes = 4 * pk.words

    def payload(self, tag: int, line: int, data: bytes | None = None, be: int = 0) -> bytes:
        """The message's payload words (little-endian bytes)."""
        if line >> self.addr_bits:
            raise ValueError(f"line {line:#x} does not fit the {self.addr_bits}-bit addr field")
        bits = self.const | tag << self.tag_off | line << self.addr_off
        if self.rwd:
            bits |= (int.from_bytes(data, "little") << self.packer.data |
                     be << self.packer.be)
        return bits.to_bytes(self.nbytes, "little")


@functools.cache
def _kind(name: str) -> _Kind:
    return _Kind(name)


@functools.cache
def _line_masks(cfg) -> dict:
    """``{(kind name, line): masks}`` of ``cfg``, shared by the process's hosts (one is made
    at every power-on and attach; the rings' and staging lines recur every batch)."""
    return {}


def prepare() -> None:
    """Do now what every :class:`CppHost` of this process needs once: the message layouts
    (importing Amaranth for ``hw.cxl.messages``, about 0.35 s) and the request kinds the host
    sends. The device driver calls it when it is made, at the harness's start, so the first
    power-on does not pay it."""
    importlib.import_module("sw_model.coherence")     # every job's _masks uses it
    _response_layout()
    for name in ("uc_write", "uc_write_ptl", "rd_cur"):
        _kind(name)


class CppHost:
    """The compiled host on the device top ``dut`` (module docstring).

    ``cfg``: the device configuration (the reference's regions); ``seed``: the first tag, drawn
    as :class:`cosim.cxl_host.HostCore` draws it.
    Creating one selects the compiled host on the top (``host_cpp`` = 1), forgets what a host
    before it left and attaches it (S2M channels ready: ``host_cpp_attach`` = 1, at once).
    :meth:`detach` holds them not ready, :meth:`close` ends it (a power cycle)."""

    def __init__(self, dut, cfg, *, seed: int):
        self.dut, self.cfg, self.seed = dut, cfg, seed
        self._lib = lib = _lib()
        self._next_tag = random.Random(seed).randrange(1 << 16)
        self._mask_cache: dict = {}     # (kind, region) -> masks
        self._line_masks = _line_masks(cfg)
        lib.tcxl_host_layout(*_response_layout())
        lib.tcxl_host_reset()
        self._attach = getattr(dut, ATTACH)
        self._attach.value = 1
        getattr(dut, SELECT_PORT).value = 1
        self._busy = getattr(dut, BUSY)
        self.stats = {"requests": 0, "jobs": 0}

    # ------------------------------------------------------------------ state
    def error(self) -> str:
        return self._lib.tcxl_host_error().decode()

    def busy(self) -> bool:
        return bool(self._lib.tcxl_host_busy())

    def _raise_error(self):
        err = self.error()
        if err:
            from cosim.cxl_host import HostViolationError
            raise HostViolationError(f"compiled host (seed {self.seed}): {err}")

    def detach(self):
        """S2M channels not ready, at once (the engine keeps what it saw)."""
        self._raise_error()
        if self.busy():
            raise AssertionError("compiled host detached with a job running")
        self._attach.value = 0

    def close(self):
        """End this host (a power cycle): the job is dropped, the engine detached."""
        self._lib.tcxl_host_reset()
        self._attach.value = 0

    # ------------------------------------------------------------------ jobs
    def _masks(self, kind: _Kind, line: int):
        """(need_ndr, ndr mask, drs mask) of the reference's answer to a ``kind`` request of
        ``line`` (computed once per kind and region)."""
        from sw_model.coherence import host_region
        region = host_region(self.cfg, line)
        got = self._mask_cache.get((kind.name, region))
        if got is None:
            got = self._mask_cache[kind.name, region] = _answer_masks(
                self.cfg, kind.channel, *kind.fields, region, 0)
        return got

    async def _run(self, items, timeout: int):
        """Send one request per ``(kind, line, data, be)`` of ``items`` (data and enables for
        writes only), in order, wait until every one is complete; returns the results array
        and the read data."""
        from cocotb.triggers import FallingEdge
        self._raise_error()
        n = len(items)
        if n == 0:
            return [], b""
        if n > 1 << 16:
            raise ValueError(f"{n} requests in one job: at most 65536 tags")
        if len({it[1] for it in items}) != n:
            raise ValueError("a line appears twice in one job (the host has one transaction "
                             "per line at a time)")
        flat, words = [], []
        line_masks = self._line_masks
        if len(line_masks) > 1 << 16:
            line_masks.clear()
        tag = self._next_tag
        for kind, line, data, be in items:
            got = line_masks.get((kind.name, line))
            if got is None:
                got = line_masks[kind.name, line] = self._masks(kind, line)
            flat += (kind.rwd, tag, not kind.rwd, *got)
            words.append(kind.payload(tag, line, data, be))
            tag = (tag + 1) & 0xFFFF
        self._next_tag = tag
        meta = (ctypes.c_uint * (6 * n))(*flat)
        if self._lib.tcxl_host_submit(n, meta, b"".join(words), timeout + 1) != 0:
            raise AssertionError("compiled host: a job is still running")
        self.stats["requests"] += n
        self.stats["jobs"] += 1
        # busy (a registered output) is high from the next edge and falls at the edge the last
        # answer arrived, a violation stopped the job or it expired: one wake-up per job
        await FallingEdge(self._busy)
        self._raise_error()
        res = (ctypes.c_longlong * (_RESULT_FIELDS * n))()
        data = ctypes.create_string_buffer(LINE * n)
        self._lib.tcxl_host_results(res, data)
        left = [i for i in range(n) if not res[_RESULT_FIELDS * i]]
        if left:
            i = left[0]
            kind, line = items[i][0], items[i][1]
            raise AssertionError(
                f"compiled host: {len(left)} of {n} requests not complete after {timeout} "
                f"cycles; first: {kind.channel} opcode {kind.fields[0]} tag "
                f"{meta[6 * i + 1]:#06x} line {line:#x} (sent at edge "
                f"{res[_RESULT_FIELDS * i + 1]}, NDR {res[_RESULT_FIELDS * i + 4]}, DRS "
                f"{res[_RESULT_FIELDS * i + 5]}; seed {self.seed})")
        return res, data.raw

    async def write_lines(self, items, timeout: int = 20000):
        """Uncached writes of whole lines ``[(byte address, 64 bytes[, byte enables])]``:
        ``MemWr`` (``MemWrPtl`` when the enables are partial), all sent, then every ``Cmp``
        awaited."""
        full, ptl = _kind("uc_write"), _kind("uc_write_ptl")
        job = []
        for it in items:
            addr, data = it[0], bytes(it[1])
            be = it[2] if len(it) > 2 else _ALL_BE
            if addr % LINE or len(data) != LINE:
                raise ValueError(f"write of {len(data)} bytes at {addr:#x}: whole lines only")
            job.append((full if be == _ALL_BE else ptl, addr // LINE, data, be))
        await self._run(job, timeout)

    async def read_lines(self, addrs, timeout: int = 20000) -> list:
        """``MemRd`` with ``SnpCur`` of the lines at byte addresses ``addrs``, all sent, then
        their data; returns the 64-byte lines."""
        rd = _kind("rd_cur")
        for a in addrs:
            if a % LINE:
                raise ValueError(f"read at {a:#x}: whole lines only")
        _, raw = await self._run([(rd, a // LINE, None, 0) for a in addrs], timeout)
        return [raw[LINE * i:LINE * (i + 1)] for i in range(len(addrs))]
