"""MemoryImage: sparse per-line storage behaves like a flat byte array."""
import numpy as np
import pytest

from sw_model.memory import MemoryImage, differing_lines


def test_unwritten_bytes_read_as_zero_or_fill():
    assert MemoryImage().read(0x1234_5678, 100) == bytes(100)
    assert MemoryImage(fill=0xA5).read(7, 3) == b"\xa5\xa5\xa5"
    assert MemoryImage().lines() == []


def test_write_across_line_boundaries_touches_only_those_bytes():
    m = MemoryImage(fill=0xEE)
    data = bytes(range(1, 101))
    m.write(60, data)                                   # spans lines 0, 64, 128
    assert m.read(60, 100) == data
    assert m.read(0, 60) == b"\xee" * 60 and m.read(160, 32) == b"\xee" * 32
    assert m.lines() == [0, 64, 128]


def test_random_writes_and_reads_match_flat_bytearray():
    """1000 random writes/reads (any alignment, length 0..300) agree with a bytearray reference."""
    rng = np.random.default_rng(10)
    ref, m = bytearray(4096), MemoryImage(size=4096)
    for _ in range(1000):
        a = int(rng.integers(0, 4096))
        n = int(rng.integers(0, min(300, 4096 - a) + 1))
        if rng.random() < 0.5:
            d = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
            m.write(a, d)
            ref[a:a + n] = d
        else:
            assert m.read(a, n) == bytes(ref[a:a + n])
    assert m.read(0, 4096) == bytes(ref)


def test_typed_helpers_are_little_endian_and_range_checked():
    m = MemoryImage()
    m.write_i32(64, [-1, 1, -(2**31)])
    assert m.read(64, 12) == b"\xff\xff\xff\xff\x01\x00\x00\x00\x00\x00\x00\x80"
    assert m.read_i32(64, 3).tolist() == [-1, 1, -(2**31)]
    m.write_u32(4, np.array([2**32 - 1, 7], dtype=np.int64))
    assert m.read_u32(4, 2).tolist() == [2**32 - 1, 7] and m.read_u32(4, 2).dtype == np.uint32
    with pytest.raises(ValueError):
        m.write_i32(0, np.array([2**31]))
    with pytest.raises(ValueError):
        m.write_u32(0, [-1])


def test_out_of_range_access_raises():
    m = MemoryImage(size=128)
    with pytest.raises(ValueError):
        m.read(100, 29)
    with pytest.raises(ValueError):
        m.write(-1, b"x")


def test_gather_lines_returns_lines_in_requested_order():
    m = MemoryImage(fill=1)
    m.write(128, bytes([9]) * 64)
    assert m.gather_lines([128, 0, 128]) == bytes([9]) * 64 + bytes([1]) * 64 + bytes([9]) * 64
    with pytest.raises(ValueError):
        m.gather_lines([32])


def test_copy_is_independent_and_equality_is_by_content():
    a = MemoryImage()
    a.write(0, b"abc")
    b = a.copy()
    b.write(1, b"X")
    assert a.read(0, 3) == b"abc" and a != b
    c, d = MemoryImage(), MemoryImage()
    c.write(1000, bytes(64))                           # explicit zeros equal unwritten bytes
    assert c == d and c.diff(d) == []


def test_diff_reports_first_differing_byte_per_line_with_limit():
    a, b = MemoryImage(), MemoryImage()
    b.write(0x105, b"\x01")
    b.write(0x1000, b"\x02\x03")
    b.write(0x2000, b"\x04")
    d = a.diff(b, limit=2)
    assert [x for x, _ in d] == [0x105, 0x1000]
    assert "0000000100:" in d[0][1] and "^^" in d[0][1]


def test_hexdump_format():
    m = MemoryImage()
    m.write(0x10, b"AB\x00")
    assert m.hexdump(0x10, 3) == "0000000010: 41 42 00" + " " * 39 + "  |AB.|"


def test_bulk_unaligned_write_of_many_lines_is_exact():
    data = np.random.default_rng(11).integers(0, 256, 64 * 20_000, dtype=np.uint8).tobytes()
    m = MemoryImage()
    m.write(0x40_0000 + 3, data)
    assert len(m.lines()) == 20_001 and m.read(0x40_0000 + 3, len(data)) == data


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_differing_lines_equals_line_by_line_reference(seed):
    """differing_lines (whole arrays) against reading every line of both images: lines written
    on one side only, equal to the other's fill or not, different fills, a skipped range."""
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    a = MemoryImage(size=1 << 16)
    b = MemoryImage(size=1 << 16, fill=int(rng.integers(0, 2)))
    for m in (a, b):
        for _ in range(300):
            la = 64 * int(rng.integers(0, 1 << 10))
            m.write(la + int(rng.integers(0, 64)), bytes([int(rng.integers(0, 3))]))
    for _ in range(200):                           # shared lines, mostly equal
        la = 64 * int(rng.integers(0, 1 << 10))
        line = bytes(rng.integers(0, 256, 64, dtype=np.uint8))
        a.write(la, line)
        b.write(la, line if rng.random() < 0.9 else line[::-1])
    lo, hi = 64 * 100, 64 * 300
    want = [la for la in sorted(set(a.lines()) | set(b.lines()))
            if a.read(la, 64) != b.read(la, 64)]
    assert want, "the images must differ somewhere for the test to mean anything"
    assert differing_lines(a, b) == want
    assert differing_lines(b, a) == want
    assert differing_lines(a, b, skip=(lo, hi)) == [x for x in want if not lo <= x < hi]
    assert differing_lines(a, b, limit=2) == want[:2]
    assert differing_lines(a, a.copy()) == []


def test_line_arrays_sorted_and_equal_to_reads():
    m = MemoryImage(size=1 << 12)
    for la in (640, 64, 2048, 0):
        m.write(la, bytes([la // 64]) * 64)
    addrs, data = m.line_arrays()
    assert addrs.tolist() == [0, 64, 640, 2048]
    assert [bytes(r) for r in data] == [m.read(int(a), 64) for a in addrs]


@pytest.mark.parametrize("copy", [True, False])
def test_model_device_keeps_poison_through_copy_and_restart(copy):
    """The media's poison bits survive a copy of the device's memory and a restart from an
    image (a lock-step twin reseeded from a crash image must see the same poisoned lines)."""
    from hw.config import DEFAULT
    from sw_model.embedding_device import ModelDevice, StagingLayout
    rows, dims = (40, 70), (16, 32)
    tabs = [np.zeros((r, d), np.int32) for r, d in zip(rows, dims)]
    L = StagingLayout(DEFAULT, rows, dims, 24, 100, 256)
    dev = ModelDevice(L, tabs, mlp_lag=1, seed=1)
    line = DEFAULT.table_base + 64 * 3
    dev.mem.set_poison(line, True)
    assert dev.mem.copy().is_poisoned(line)
    img = MemoryImage(dev.mem.size)
    img._lines = {a: bytearray(v) for a, v in dev.mem._lines.items()}
    img.set_poison(line, True)
    twin = ModelDevice(L, tabs, mlp_lag=1, seed=1)
    twin.restart_from(img, copy=copy)
    assert twin.mem.is_poisoned(line)
    assert sorted(twin.mem.poisoned) == [line]
