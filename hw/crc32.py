"""CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320) as a parallel XOR network.

``crc32_next(m, state, data, nbytes)`` is the CRC register after feeding ``nbytes`` bytes of
``data`` (byte 0 = ``data[0:8]``, each byte LSB first) into register ``state``; it is purely
combinational (its mask ROM is added to module ``m``). Start from ``CRC32_INIT`` and invert at
the end (``CRC32_XOROUT``) for the zlib value. The network is derived here from the bit-serial definition by symbolic execution over
GF(2) (not from a table shared with the golden model, which uses ``zlib.crc32``).
"""
from functools import lru_cache

from amaranth.hdl import Cat
from amaranth.lib.memory import Memory

__all__ = ["CRC32_INIT", "CRC32_XOROUT", "crc32_next", "crc32_masks"]

CRC32_INIT = 0xFFFF_FFFF
CRC32_XOROUT = 0xFFFF_FFFF
_POLY = 0xEDB8_8320


@lru_cache(maxsize=None)
def crc32_masks(nbytes):
    """For each of the 32 output bits, a bitmask over the inputs: bits 0..31 = state bits,
    bits 32.. = data bits. Output bit i is the XOR of the masked inputs."""
    s = [1 << i for i in range(32)]                       # symbolic state bits
    poly = [(_POLY >> i) & 1 for i in range(32)]
    for byte in range(nbytes):
        for bit in range(8):
            s[0] ^= 1 << (32 + 8 * byte + bit)            # s ^= data bit (LSB first)
            lsb = s[0]
            s = s[1:] + [0]                               # s >>= 1
            s = [x ^ lsb if p else x for x, p in zip(s, poly)]
    return tuple(s)


def crc32_next(m, state, data, nbytes):
    """Next CRC register (32-bit Value) after ``nbytes`` bytes of ``data`` from ``state``.

    The 32 masks of :func:`crc32_masks` live in a small ROM added to module ``m`` and read at
    constant addresses, so each output bit stays one AND and one XOR reduction over the whole
    input in the generated Verilog (Verilator evaluates that on words); Amaranth would fold
    constant masks into bit selects, about 140 slice assignments per output bit. Synthesis
    folds the ROM back into constants: the same XOR network either way."""
    if data.shape().width < 8 * nbytes:
        raise ValueError(f"data has {data.shape().width} bits, need {8 * nbytes}")
    inputs = Cat(state[:32], data[:8 * nbytes])
    rom = Memory(shape=len(inputs), depth=32, init=crc32_masks(nbytes))
    m.submodules += rom
    out = []
    for i in range(32):
        port = rom.read_port(domain="comb")
        m.d.comb += port.addr.eq(i)
        out.append((inputs & port.data).xor())
    return Cat(*out)
