"""``cosim.device_driver.line_writes``: bulk data as per-line writes with byte enables (the
overlap workload's staging through CXL.mem)."""
import random

import pytest

from cosim.device_driver import line_writes

LINE = 64


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_line_writes_cover_exactly_the_bytes_written_last_chunk_wins(seed):
    print("seed", seed)
    rng = random.Random(seed)
    chunks = [(rng.randrange(0, 1000), rng.randbytes(rng.randrange(0, 150)))
              for _ in range(8)]
    want = {}
    for addr, data in chunks:
        for k, byte in enumerate(data):
            want[addr + k] = byte
    got = {}
    out = line_writes(chunks)
    assert [a for a, _, _ in out] == sorted({a - a % LINE for a in want})
    for line, data, be in out:
        assert line % LINE == 0 and len(data) == LINE and 0 < be < 1 << LINE
        for i in range(LINE):
            if be >> i & 1:
                got[line + i] = data[i]
            else:
                assert data[i] == 0
    assert got == want


def test_line_writes_of_a_whole_aligned_line_enable_every_byte():
    assert line_writes([(128, bytes(range(64)))]) == [(128, bytes(range(64)), (1 << 64) - 1)]
    assert line_writes([(130, b"\x01\x02")]) == [(128, bytes(2) + b"\x01\x02" + bytes(60),
                                                   0b1100)]
    assert line_writes([]) == []
