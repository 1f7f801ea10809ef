"""hw.crc32 against zlib.crc32 (independent: zlib's table-driven C implementation)."""
import random
import zlib

from amaranth.hdl import Module, Signal

from hw.crc32 import CRC32_INIT, CRC32_XOROUT, crc32_masks, crc32_next
from tests.unit.pysim_util import simulate


def _eval_masks(state, data, nbytes):
    """Evaluate the XOR network in Python (fast check of many vectors)."""
    x = state | int.from_bytes(data, "little") << 32
    return sum((bin(m & x).count("1") & 1) << i for i, m in enumerate(crc32_masks(nbytes)))


def test_masks_match_zlib_many_lengths():
    rng = random.Random(11)
    for nbytes in (1, 4, 20, 64):
        for _ in range(50):
            data = bytes(rng.randrange(256) for _ in range(nbytes))
            assert _eval_masks(CRC32_INIT, data, nbytes) ^ CRC32_XOROUT == zlib.crc32(data), \
                (nbytes, data.hex())


def test_chained_lines_match_zlib():
    rng = random.Random(12)
    for _ in range(20):
        lines = [bytes(rng.randrange(256) for _ in range(64)) for _ in range(rng.randrange(1, 5))]
        s = CRC32_INIT
        for ln in lines:
            s = _eval_masks(s, ln, 64)
        assert s ^ CRC32_XOROUT == zlib.crc32(b"".join(lines))


def test_rtl_network_in_pysim():
    state, data, out = Signal(32), Signal(512), Signal(32)
    m = Module()
    m.d.comb += out.eq(crc32_next(m, state, data, 64))
    dummy = Signal()
    m.d.sync += dummy.eq(~dummy)          # gives the module a clock domain for the watchdog
    rng = random.Random(13)
    vectors = [bytes(rng.randrange(256) for _ in range(64)) for _ in range(8)]

    async def tb(ctx):
        s = CRC32_INIT
        for v in vectors:
            ctx.set(state, s)
            ctx.set(data, int.from_bytes(v, "little"))
            s = ctx.get(out)
        assert s ^ CRC32_XOROUT == zlib.crc32(b"".join(vectors))
    simulate(m, [tb], name="crc32")
