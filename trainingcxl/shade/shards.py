"""The shared logical cache of several workers: which worker's process owns sample s, and
how the cache's capacity is split over the shards.

SHADE's replicas share one Redis cluster; Redis maps a key to one of 16384 hash slots by
CRC16 (XMODEM) of the key and gives each of W nodes a contiguous range of slots (what
``redis-cli --cluster create`` does). We do the same with the sample id's decimal string as
the key: ``owner(s) = (crc16(str(s)) % 16384) * W // 16384``. The cache of ``C`` samples is
split as evenly as possible: shard r holds ``C // W`` samples, one more for r < ``C % W``.
"""
from __future__ import annotations

import binascii

import numpy as np

SLOTS = 16384


def key_slot(sample: int) -> int:
    """Redis's hash slot of the key ``str(sample)``: CRC16-CCITT (XMODEM) mod 16384."""
    return binascii.crc_hqx(str(int(sample)).encode("ascii"), 0) % SLOTS


def owner(sample: int, world: int) -> int:
    """The worker (0..world-1) whose shard caches ``sample``."""
    if world < 1:
        raise ValueError(f"world must be >= 1, not {world!r}")
    return key_slot(sample) * world // SLOTS


def owners(samples, world: int) -> np.ndarray:
    """:func:`owner` of every id of ``samples``."""
    return np.fromiter((owner(s, world) for s in np.asarray(samples).tolist()), dtype=np.int64,
                       count=np.asarray(samples).size)


def shard_capacity(total: int, rank: int, world: int) -> int:
    """Samples shard ``rank`` holds of a cache of ``total`` samples over ``world`` shards."""
    if total < 0 or not 0 <= rank < world:
        raise ValueError(f"shard {rank} of {world}, total {total}")
    return total // world + (1 if rank < total % world else 0)
