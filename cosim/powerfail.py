"""Power-failure model for the PMEM AXI4 slave model (architecture 5.6).

At the instant :func:`power_fail` is called (the clock "stops"):

* every write that had its B handshake (acknowledged) is kept;
* every write *in flight* survives per 8-byte word with probability ``p`` (1/2, seeded):

  - applied but unacknowledged writes (``pmem.unacked``, each with the bytes it overwrote in
    ``PendingWrite.old``): a surviving word keeps the new data, a lost one gets its old bytes
    back;
  - bursts whose AW and part of whose W beats were accepted but which were not applied yet
    (``pmem._aw_waiting[0]`` with the beats in ``pmem._w_beats``): a surviving word takes the
    new data of the beats received, every other word keeps its old contents;
  - an AW with no W beat yet, or W beats whose AW has not arrived (``pmem._w_waiting``, a
    partial ``pmem._w_beats`` without an AW), carry no (address, data) pair the memory could
    have stored: nothing of them survives (counted in ``bursts_without_data``);

  several in-flight writes to one word are decided independently, in write (AW) order, so a
  word ends up with the newest surviving write's bytes (or the acknowledged contents);
* the per-line poison bit (docs/coherence.md, "Poison") errs towards poisoned, with no coin:
  the acknowledged image's bits are kept, every in-flight write whose AW carried poison
  (AWUSER) and was accepted poisons the lines of its burst (applied or not, whatever data
  survived), and a clear by an unacknowledged write is lost (the line stays poisoned). So a
  poisoned line never reads as good after a failure unless a write that cleared it was
  acknowledged, and no coin is drawn for poison (the survival draws are those of the data);
* the staging region becomes garbage: every staging line ever written gets seeded random bytes,
  and the returned image is a :class:`GarbageMemory` whose never-written staging lines read as
  seeded garbage too (stable: the same line always reads the same bytes); staging lines lose
  their poison bit with their contents.

The result is a :class:`CrashImage`: a copy of the persistent memory plus statistics. Restart
with :func:`load_image` (fresh media contents for the same PMEM model, its queues and counters
cleared; call it while reset is asserted).

Acknowledged writes are exactly the writes applied before every unacknowledged one: the model
applies bursts and answers B in AW order, so rolling ``pmem.unacked`` back newest first yields
the acknowledged image exactly. :func:`crash_memory` is the same logic without a simulator
(tests/unit/test_powerfail.py drives it with fake pending writes).
"""
from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

from sw_model.memory import LINE, MemoryImage, lines_of

__all__ = ["GarbageMemory", "CrashImage", "power_fail", "crash_memory", "load_image",
           "word_chunks", "WORD_BYTES"]

WORD_BYTES = 8


class GarbageMemory(MemoryImage):
    """A :class:`MemoryImage` whose never-written lines inside ``regions`` (``(base, size)``
    pairs, line aligned) read as seeded garbage.

    The garbage of a line is a function of ``(seed, line address)`` only (BLAKE2b), and it is
    stored on first read, so repeated reads (and :meth:`copy`) see the same bytes. Lines outside
    the regions read as ``fill`` as in :class:`MemoryImage`.
    """

    def __init__(self, size: int = 1 << 52, fill: int = 0, *, regions=(), seed: int = 0):
        super().__init__(size, fill)
        self.regions = tuple((int(b), int(s)) for b, s in regions)
        for b, s in self.regions:
            if b % LINE or s % LINE or s <= 0:
                raise ValueError(f"garbage region ({b:#x}, {s:#x}) must be line aligned")
        self.seed = int(seed)
        self._key = self.seed.to_bytes(16, "little", signed=True)

    @classmethod
    def from_image(cls, mem: MemoryImage, *, regions=(), seed: int = 0,
                   copy: bool = True) -> "GarbageMemory":
        """``mem``'s contents with garbage ``regions``; ``copy=False`` takes ``mem``'s lines
        over instead of copying them (``mem`` must not be used afterwards)."""
        g = cls(mem.size, mem.fill, regions=regions, seed=seed)
        g._lines = {a: bytearray(v) for a, v in mem._lines.items()} if copy else mem._lines
        g.poisoned = set(mem.poisoned)
        return g

    def garbage_line(self, addr: int) -> bytes:
        return hashlib.blake2b(addr.to_bytes(8, "little"), key=self._key, digest_size=64).digest()

    def _materialize(self, address: int, length: int):
        if length <= 0:
            return
        lines = self._lines
        first = address - address % LINE
        end = address + length
        for b, s in self.regions:
            lo, hi = max(first, b), min(end, b + s)
            a = lo
            while a < hi:
                if a not in lines:
                    lines[a] = bytearray(self.garbage_line(a))
                a += LINE

    def read(self, address: int, length: int, **kwargs) -> bytes:
        address, length = int(address), int(length)
        if self.regions:
            self._materialize(address, length)
        return super().read(address, length)

    def gather_lines(self, line_addrs) -> bytes:
        for a in line_addrs:
            self._materialize(int(a), LINE)
        return super().gather_lines(line_addrs)

    def copy(self) -> "GarbageMemory":
        g = GarbageMemory(self.size, self.fill, regions=self.regions, seed=self.seed)
        g._lines = {a: bytearray(v) for a, v in self._lines.items()}
        g.poisoned = set(self.poisoned)
        return g

    def __repr__(self):
        return (f"GarbageMemory(size={self.size:#x}, lines={len(self._lines)}, "
                f"regions={[(hex(b), hex(s)) for b, s in self.regions]}, seed={self.seed})")


@dataclass
class CrashImage:
    """Persistent memory after a power failure, and what happened to the in-flight writes.

    ``words_survived``/``words_lost`` count (write, 8-byte word) decisions; ``applied_unacked``
    and ``unapplied`` the in-flight bursts of each kind that had data; ``bursts_without_data``
    those that could not persist anything; ``staging_lines`` the staging lines overwritten with
    garbage."""
    mem: GarbageMemory
    cycle: int | None = None
    seed: int | None = None
    words_survived: int = 0
    words_lost: int = 0
    applied_unacked: int = 0
    unapplied: int = 0
    bursts_without_data: int = 0
    staging_lines: int = 0
    writes_in_flight: int = 0
    extra: dict = field(default_factory=dict)

    def stats(self) -> dict:
        return {k: getattr(self, k) for k in (
            "cycle", "seed", "words_survived", "words_lost", "applied_unacked", "unapplied",
            "bursts_without_data", "staging_lines", "writes_in_flight")}


def word_chunks(segments):
    """Group the bytes of a write's ``(addr, bytes)`` segments by aligned 8-byte word.

    Returns ``{word address: [(addr, bytes), ...]}`` (pieces in segment order), so one write
    gets exactly one survival decision per word it touched, whatever its byte enables."""
    words: dict[int, list] = {}
    for addr, data in segments:
        i, n = 0, len(data)
        while i < n:
            a = addr + i
            w = a - a % WORD_BYTES
            k = min(w + WORD_BYTES - a, n - i)
            words.setdefault(w, []).append((a, bytes(data[i:i + k])))
            i += k
    return words


def crash_memory(mem: MemoryImage, unacked, unapplied, rng: random.Random, *,
                 staging=None, p_survive: float = 0.5, garbage_seed: int | None = None,
                 unapplied_poison=()):
    """The persistent image after a power failure, as a new :class:`GarbageMemory`.

    ``mem``: the media contents now (every applied write in it, and the poison bits).
    ``unacked``: the applied, unacknowledged writes, oldest first, each with ``segments`` and
    ``old`` (lists of ``(addr, bytes)``, ``old`` the bytes each segment replaced), ``poison``
    (its AWUSER) and ``poison_old`` (``(line address, bit before)`` of every line whose poison
    bit it wrote). ``unapplied``: segment lists of accepted-but-unapplied writes, oldest first
    (their old contents are what ``mem`` holds). ``unapplied_poison``: line addresses of the
    accepted-but-unapplied bursts whose AW carried poison. ``staging``: ``(base, size)`` made
    garbage. Returns ``(image, stats dict)``.
    """
    if not 0.0 <= p_survive <= 1.0:
        raise ValueError(f"p_survive must be in [0, 1], got {p_survive}")
    img = mem.copy()
    # 1. roll every applied-unacknowledged write back, newest first: the acknowledged image
    for pw in reversed(list(unacked)):
        for a, old in pw.old:
            img.write(a, old)
        for la, was in reversed(pw.poison_old):
            img.set_poison(la, was)
    # poison errs towards poisoned: every accepted poisoned write marks its lines, no coin
    for pw in unacked:
        if pw.poison:
            for la, _was in pw.poison_old:
                img.set_poison(la, True)
    for la in unapplied_poison:
        img.set_poison(la, True)
    # 2. replay every in-flight write in order, one coin per (write, word)
    survived = lost = 0
    rnd = rng.random
    for segs in [pw.segments for pw in unacked] + [list(s) for s in unapplied]:
        for _w, pieces in sorted(word_chunks(segs).items()):
            if rnd() < p_survive:
                survived += 1
                for a, d in pieces:
                    img.write(a, d)
            else:
                lost += 1
    # 3. staging: garbage over every written line, garbage reads for the others
    if garbage_seed is None:
        garbage_seed = rng.getrandbits(63)
    regions = () if staging is None else (tuple(staging),)
    out = GarbageMemory.from_image(img, regions=regions, seed=garbage_seed, copy=False)
    n_staging = 0
    if staging is not None:
        base, size = staging
        grng = random.Random(garbage_seed)
        for a in [a for a in out._lines if base <= a < base + size]:
            out._lines[a] = bytearray(grng.randbytes(LINE))
            n_staging += 1
        out.poisoned = {a for a in out.poisoned if not base <= a < base + size}
    return out, {"words_survived": survived, "words_lost": lost, "staging_lines": n_staging,
                 "garbage_seed": garbage_seed}


def _unapplied_bursts(pmem):
    """(segment lists with data, count of bursts without data, line addresses of the bursts
    whose AW carried poison) of the accepted-but-unapplied writes of a
    :class:`cosim.pmem.PmemModel`."""
    with_data, without = [], 0
    aw = list(pmem._aw_waiting)
    poisoned = [la for awid, addr, length, size, _t, poison in aw if poison
                for la in lines_of(addr, addr - addr % (1 << size) + (length << size) - addr)]
    # AXI4 has no WID: W beats arrive in AW order. _match_writes pairs eagerly, so when an AW
    # waits, no complete W burst does, and the beats in progress belong to the oldest AW.
    if aw and pmem._w_beats:
        awid, addr, length, size, _t, _poison = aw[0]
        beats = pmem._w_beats[:length]
        with_data.append(pmem._segments(addr, size, beats))
        without += len(aw) - 1
    else:
        without += len(aw)
        if pmem._w_beats:
            without += 1
    without += len(pmem._w_waiting)
    return with_data, without, poisoned


def power_fail(pmem, rng: random.Random, staging=None, *, p_survive: float = 0.5,
               cycle: int | None = None) -> CrashImage:
    """Power fails now: the persistent image of ``pmem`` (a :class:`cosim.pmem.PmemModel` whose
    ``mem`` is a :class:`MemoryImage`) under the rules of the module docstring.

    ``staging``: ``(base, size)`` of the staging region (made garbage). ``rng``: the seeded
    source of every random choice (survival coins, garbage). The PMEM model is not modified;
    the image is a copy."""
    unacked = list(pmem.unacked)
    unapplied, no_data, unapplied_poison = _unapplied_bursts(pmem)
    seed_hint = getattr(rng, "seed_value", None)
    img, st = crash_memory(pmem.mem, unacked, unapplied, rng, staging=staging,
                           p_survive=p_survive, unapplied_poison=unapplied_poison)
    return CrashImage(mem=img, cycle=cycle, seed=seed_hint,
                      words_survived=st["words_survived"], words_lost=st["words_lost"],
                      applied_unacked=len(unacked), unapplied=len(unapplied),
                      bursts_without_data=no_data, staging_lines=st["staging_lines"],
                      writes_in_flight=pmem.writes_in_flight,
                      extra={"garbage_seed": st["garbage_seed"]})


def load_image(pmem, image) -> None:
    """Give ``pmem`` a fresh copy of ``image`` (a :class:`CrashImage` or a memory) as its media
    and drop every queued read/write response and in-flight burst. Call it while the device's
    reset is asserted (the channel engines restart themselves when reset is released)."""
    mem = image.mem if isinstance(image, CrashImage) else image
    # a model whose ``mem`` assignment copies the image (the C++ one) needs no copy first
    pmem.mem = mem if getattr(pmem, "loads_copy", False) else mem.copy()
    pmem.drop_in_flight()
