"""cocotb crash campaign on the device top: power failures at chosen cycles of a training run.

One simulator launch runs a no-failure reference run and then every crash point, with a reset
between runs (docs/crash.md):

1. *Image pass* (one per chunk of ``CrashParams.chunk`` points): power on with the initial
   image (tables only), recover (formats a fresh superblock), configure, write all staging
   data, run the batches; at each point's ``cycle`` (cycles after DCOH ready) take its crash
   image with ``cosim.powerfail.power_fail`` (acknowledged writes kept, in-flight 8-byte words
   survive with probability 1/2, staging garbage). ``power_fail`` only reads the PMEM model, so
   one run yields the images of many points; the run is cut after the chunk's last point.
2. Per point: power on with its crash image, recover, read ``C`` = COMMITTED; check ``C``
   against what the driver had seen at the crash (COMMIT completions read <= C <= COMMITs
   rung), every table equal to the model's tables after batch ``C``, (MLP_SLOT, MLP_EPOCH)
   in the set the model's run allows (``TrainingWorkload.legal_mlp``) with the model run's
   payload in that slot, and the recovered image (outside staging), ``C``,
   ``RECOVERED_RECORDS`` and the MLP slot equal to ``TrainingDevice.recover()`` on the same
   crash image.
3. Nested failure (a seeded fraction of the points): the same image recovered again with the
   power cut during that recovery, then recovered once more; the result must be one of the
   two outcomes the model derives from its own recovery of the image
   (:meth:`CrashBench.nested_failure`).
4. Replay the open batch ``C+1`` (or every batch, ``replay="all"``; staging data re-written),
   every completion equal to the model's (``cycles``/``seq`` skipped); the tables equal the
   no-failure run's after it and the image outside staging the golden model's run of the
   same batches.

The PMEM model is the Python one or the C++ one compiled into the simulator
(``BenchConfig.pmem``); the host is attached only while it has work (:meth:`CrashBench.power_on`).

Run parameters: :class:`CrashParams`.
"""
from __future__ import annotations

import json
import random
import time
import traceback
from dataclasses import dataclass, field

import cocotb
from cocotb.triggers import RisingEdge, Timer

from cosim import fcov, params
from cosim.device_driver import DeviceDriver
from cosim.model_top import start_clock
from cosim.pmem_cpp import pmem_model
from cosim.powerfail import power_fail
from cosim.tb.config import BenchConfig
from cosim.training_workload import TrainingWorkload, make_workload
from hw.config import DeviceConfig
from hw.encodings import (CPL_BYTES, DESC_BYTES, SB_FIELDS, SB_MAGIC, SB_VERSION, DescKind,
                          unpack_fields)
from sw_model.training import read_snap_slot, snap_slot_addr, snap_slot_bytes, snap_slot_valid

CLOCK_NS = 10
# self-checks (CrashParams.mutate): wipe_log erases the undo log from every crash image;
# epoch_first makes every nested failure's image the first image with the recovery epoch
# already advanced (a device that persisted its epoch write before its rollback writes)
# wipe_slots erases both MLP snapshot slot headers from every crash image
MUTATIONS = ("", "wipe_log", "epoch_first", "wipe_slots")


@dataclass(frozen=True)
class CrashParams:
    """One launch of the campaign.

    ``bench``: device configuration and PMEM latencies (read default 16, write default the
    read latency). ``points``: ``random:N`` (N seeded cycles in ``[0, T]``, T = length of the
    reference run), ``range:A:B`` (every cycle in ``[A, B)``) or a comma-separated list of
    cycles. ``skip``: points already done (resume after a simulator death); ``stop``: the index
    after the last point of this launch (None: every point), so a campaign split into tasks
    gives each launch the points ``skip <= i < stop``. ``chunk``: points per image pass.
    ``workload``: keyword arguments of ``make_workload``. ``results``: JSON-lines file (one
    ``reference`` line, then ``pass``/``start``/``point`` lines; the campaign runner follows it
    for its progress bar). ``via_host``: descriptors/completions
    through the CXL.mem host (else backdoor). ``mutate``: ``wipe_log`` erases the undo log from
    every crash image, a self-check that the campaign fails when rollback is impossible.
    ``snap_points``: the fraction of ``random:N`` points drawn inside the reference run's
    MLP snapshot copies (:meth:`CrashBench.snapshot_windows`). ``nested``: the fraction of
    points (seeded coin per point) whose recovery is cut by a second power failure
    (:meth:`CrashBench.nested_failure`). ``profile``: a path for cProfile statistics of the
    points loop. ``replay``: after a point's recovery, run the open batch ``C+1`` only
    (``"open"``) or every batch to the end of the run (``"all"``); either way the golden
    model runs the same batches from its own recovery of the crash image and the whole image
    outside staging must equal it, and the tables must equal the no-failure run's after the
    last batch run.
    """
    bench: BenchConfig = BenchConfig()
    seed: int = 1
    points: str = "random:20"
    skip: int = 0
    stop: int | None = None
    chunk: int = 25
    workload: dict = field(default_factory=dict)
    results: str | None = None
    via_host: bool = True
    mutate: str = ""
    profile: str | None = None
    replay: str = "open"
    nested: float = 0.25
    snap_points: float = 0.0

    def __post_init__(self):
        if self.mutate not in MUTATIONS:
            raise ValueError(f"CrashParams.mutate must be one of {MUTATIONS}, "
                             f"got {self.mutate!r}")
        for name in ("nested", "snap_points"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"CrashParams.{name} must be in [0, 1], "
                                 f"got {getattr(self, name)!r}")
        if self.replay not in ("open", "all"):
            raise ValueError(f"CrashParams.replay must be 'open' or 'all', got {self.replay!r}")


def crash_points(spec: str, seed: int, total: int, windows=(), in_windows: float = 0.0
                 ) -> list[int]:
    """The crash cycles of ``spec`` (see the module docstring); ``total`` = reference length.
    ``random:N`` with ``windows`` (``[(start, end)]`` cycles of the reference run, the MLP
    snapshot copies) and ``in_windows`` > 0: each point is, by a seeded coin of its own, drawn
    uniformly inside the windows (by length) with that probability; the uniform draws are
    those of ``in_windows = 0``."""
    spec = spec.strip()
    if spec.startswith("random:"):
        n = int(spec.split(":", 1)[1])
        rng = random.Random(f"crash-points-{seed}")
        out = [rng.randrange(0, total + 1) for _ in range(n)]
        spans = [(a, b) for a, b in windows if b > a]
        if spans and in_windows > 0:
            size = sum(b - a for a, b in spans)
            for k in range(n):
                r = random.Random(f"crash-snap-points-{seed}-{k}")
                if r.random() < in_windows:
                    x = r.randrange(size)
                    for a, b in spans:
                        if x < b - a:
                            out[k] = a + x
                            break
                        x -= b - a
        return out
    if spec.startswith("range:"):
        _, a, b = spec.split(":")
        return list(range(int(a), int(b)))
    return [int(x) for x in spec.split(",") if x.strip()]


def is_nested(seed: int, i: int, cycle: int, fraction: float) -> bool:
    """Whether point ``i`` also gets a power failure during its recovery (seeded coin)."""
    return random.Random(f"crash-nest-coin-{seed}-{i}-{cycle}").random() < fraction


def point_seed(seed: int, i: int, cycle: int) -> int:
    return random.Random(f"crash-{seed}-{i}-{cycle}").getrandbits(63)


def nonstaging_diff(cfg: DeviceConfig, a, b, limit: int = 4) -> list:
    """Line addresses (outside staging) where memories ``a`` and ``b`` differ (a line neither
    holds reads as its fill in both). Compares the line dicts directly: the C++ PMEM model's
    ``_lines`` is one bulk copy of its store, where a read per line is a call into C++."""
    s0, s1 = cfg.staging_base, cfg.staging_base + cfg.staging_size
    la, lb = a._lines, b._lines
    fa, fb = a._fill_line, b._fill_line
    out = []
    for addr in sorted(set(la) | set(lb)):
        if s0 <= addr < s1:
            continue
        x, y = la.get(addr), lb.get(addr)
        if (fa if x is None else x) != (fb if y is None else y):
            out.append(addr)
            if len(out) >= limit:
                break
    return out


class Progress:
    """What the driver has seen of a run: COMMITs rung and COMMIT completions read."""

    def __init__(self):
        self.commits_rung = 0
        self.commits_done = 0
        self.batches_done = 0


class CrashBench:
    def __init__(self, dut):
        self.dut = dut
        self.params = p = params.current(CrashParams)
        self.cfg = p.bench.device
        self.seed = p.seed
        self.latency = p.bench.latency if p.bench.latency is not None else 16
        self.write_latency = (p.bench.write_latency if p.bench.write_latency is not None
                              else self.latency)
        self.wl: TrainingWorkload = make_workload(self.cfg, self.seed, **p.workload)
        self.results_path = p.results
        start_clock(dut, CLOCK_NS)
        # the write log gives the snapshot windows (snap_points) and the descriptors'
        # execution windows (functional coverage, crash.cut); recording it changes no timing
        self.snap_log = p.snap_points > 0 and bool(self.wl.snapshots)
        self.fcov = fcov.enabled()
        # the Python model (cosim.pmem) or the one compiled into the simulator
        # (cosim.pmem_cpp): pmem_model refuses a kind the simulator was not built for
        self.pmem = pmem_model(p.bench.pmem, dut, clock=dut.clk, reset=dut.rst,
                               read_latency=self.latency, write_latency=self.write_latency,
                               seed=self.seed, mem=self.wl.initial.copy(),
                               log_writes=self.snap_log or self.fcov)
        # the host has nothing to do while the device executes a doorbell's descriptors:
        # detached for the wait (DeviceDriver.submit; see power_on)
        self.drv = DeviceDriver(dut, self.pmem, self.cfg, via_host=p.via_host,
                                host_seed=self.seed, detach_while_waiting=True,
                                host=p.bench.host, csr_model=p.bench.csr)
        self.staging = (self.cfg.staging_base, self.cfg.staging_size)
        self.mutate = p.mutate
        wl = self.wl
        self.rings = ((wl.ring_base, wl.ring_size * DESC_BYTES),
                      (wl.cpl_base, wl.ring_size * CPL_BYTES))
        # what the run from power-on did when (cycles of the PMEM clock; see run_batches):
        # the recovery (start, end) and the descriptor kinds of every doorbell
        self.recover_span = None
        self.doorbell_kinds: list[list[str]] = []
        # the reference run's phase windows and doorbell cycles (crash.cut), from its t0
        self.phase_windows: list = []
        self.ref_doorbells: list[int] = []

    def emit(self, rec: dict):
        if self.results_path:
            with open(self.results_path, "a") as f:
                f.write(json.dumps(rec) + "\n")

    # ------------------------------------------------------------------ one run of batches
    async def run_batches(self, first: int, prog: Progress, *, recover=True, last=None):
        """Recover (optional), configure, write staging of batches ``first..last`` (default:
        to the end) and run them, checking every completion against the model."""
        wl, drv = self.wl, self.drv
        batches = wl.batches[first - 1:last]
        if recover:
            t = self.cycle()
            await self.recover()
            self.recover_span = (t, self.cycle())
        drv.attach_host()
        await drv.configure(wl.tables, wl.lr, wl.ring_base, wl.ring_size, wl.cpl_base)
        if wl.mlp_lag is not None:
            await drv.write("MLP_LAG", wl.mlp_lag)
        # wl.prewrite: the host writes staging data through CXL.mem, the first batch's before
        # the first doorbell, the next batch's and the next doorbell's descriptors while the
        # device runs; otherwise all staging data by backdoor
        if wl.prewrite:
            await drv.write_data(batches[0].staging)
        else:
            for b in batches:
                drv.write_staging(b.staging)
        doorbells = [(b, first, descs) for b in batches for first, descs in b.parts]
        written = 0
        for j, (b, first, descs) in enumerate(doorbells):
            expect = b.expect[first:first + len(descs)]
            if any(w["kind"] == DescKind.COMMIT for w in expect):
                prog.commits_rung += 1          # the doorbell below includes the COMMIT
            self.doorbell_kinds.append([DescKind(w["kind"]).name for w in expect])
            nxt = doorbells[j + 1] if wl.prewrite and j + 1 < len(doorbells) else None
            ahead = nxt[2] if nxt else ()
            data = nxt[0].staging if nxt and nxt[0] is not b else ()
            cpls = await drv.submit(descs, written=written, ahead=ahead, ahead_data=data)
            written = len(ahead)
            for k, (want, got) in enumerate(zip(expect, cpls), first):
                bad = wl.cpl_mismatches(want, got)
                if bad:
                    raise AssertionError(f"batch {b.batch} descriptor {k} "
                                         f"({DescKind(want['kind']).name}): completion "
                                         f"fields differ (model, RTL): {bad}")
            if first + len(descs) == len(b.descs):
                prog.commits_done += 1
                prog.batches_done = b.batch

    # ------------------------------------------------------------------ power, host, recovery
    async def power_on(self, image):
        """Power cycle with ``image`` as the media, without a host: the host model's channel
        loop wakes Python on every clock edge, and recovery (thousands of cycles) never talks
        to the host, so it is attached only when it has work (``DeviceDriver.attach_host``).
        Until then the device->host channels are not ready, so a message sent meanwhile is
        caught there, not lost."""
        drv = self.drv
        via, drv.via_host = drv.via_host, False
        try:
            await drv.power_cycle(in_reset=lambda: drv.load_image(image))
        finally:
            drv.via_host = via
        drv.detach_host()
        self.clear_write_log()
        drv.doorbell_cycles.clear()
        self.doorbell_kinds.clear()
        self.recover_span = None

    async def wait_until(self, t_start: int, cycle: int):
        """Return at cycle ``cycle`` counted from ``t_start``, the edge settled (no wait if it
        is past). One Timer to half a period before the edge (ClockCycles would wake Python on
        every edge), then the edge itself, then the PMEM model's settle (docs/crash.md, "When
        the power fails"): every handshake of that edge is in a crash image, none of the
        next."""
        ahead = cycle - (self.cycle() - t_start)
        if ahead > 0:
            period = self.pmem.period
            await Timer(ahead * period - period // 2, "step")
            await RisingEdge(self.dut.clk)
            await self.pmem.settle()

    async def recover(self) -> int:
        """CONTROL.RECOVER until READY, sleeping on the interrupt (``DeviceDriver.recover``
        with ``sleep_on_irq``). Returns COMMITTED."""
        return await self.drv.recover(sleep_on_irq=True)

    async def check_mlp(self, c: int, prog: dict, model, what: str) -> tuple:
        """MLP_SLOT/MLP_EPOCH after a recovery that reported ``c``: one of the pairs the model's
        run allows for the cut (``TrainingWorkload.legal_mlp``), the same as ``model`` (the
        golden model's recovery) reports, and the chosen slot holds the model run's payload of
        that epoch. Returns the pair."""
        st = await self.drv.mlp_state()
        got = (st["slot"], st["epoch"])
        legal = self.wl.legal_mlp(c, prog["commits_rung"], prog["commits_done"])
        if got not in legal:
            raise AssertionError(f"{what}: (MLP_SLOT, MLP_EPOCH) = {got}, legal after this cut "
                                 f"(C={c}, {prog['commits_rung']} batches rung, "
                                 f"{prog['commits_done']} read): {sorted(legal)}")
        if got != (model.mlp_slot, model.mlp_epoch):
            raise AssertionError(f"{what}: (MLP_SLOT, MLP_EPOCH) = {got}, the model's recovery "
                                 f"gives {(model.mlp_slot, model.mlp_epoch)}")
        if got[0]:
            payload = {e: p for e, _i, p in self.wl.snapshots}[got[1]]
            h, data = read_snap_slot(self.cfg, self.pmem.mem, got[0] - 1)
            if h["epoch"] != got[1] or data != payload:
                raise AssertionError(f"{what}: slot {got[0]} holds epoch {h['epoch']}, "
                                     f"{h['length']} bytes, not the model run's snapshot of "
                                     f"epoch {got[1]}")
        return got

    def check_tables(self, c: int, what: str):
        diffs = self.wl.table_diffs(self.pmem.mem, self.wl.tables_after(c))
        if diffs:
            raise AssertionError(f"{what}: tables differ from the model after batch {c} "
                                 f"(table, row, elem, want, got): {diffs}")

    # ------------------------------------------------------------------ reference
    async def reference(self) -> int:
        """No-failure run: completions, tables after every batch, final image outside staging
        equal to the model. Returns its length in cycles (from DCOH ready to the last
        completion read)."""
        wl = self.wl
        await self.power_on(wl.initial)
        t0 = self.cycle()
        prog = Progress()
        self.drv.phase_cycles.clear()
        await self.run_batches(1, prog)
        total = self.cycle() - t0
        self.reference_phases = dict(self.drv.phase_cycles)
        if self.fcov:
            self.phase_windows = self.execution_windows(t0)
            self.ref_doorbells = [c - t0 for c in self.drv.doorbell_cycles]
        await self.drv.wait_snapshot_idle()     # the last copy may outlive its COMMIT
        self.snap_windows = self.snapshot_windows(t0) if self.snap_log else []
        self.clear_write_log()
        self.check_tables(wl.n_batches, "reference run")
        diff = nonstaging_diff(self.cfg, wl.final_image, self.pmem.mem)
        if diff:
            raise AssertionError(f"reference run: memory outside staging differs from the model "
                                 f"at lines {[hex(a) for a in diff]}")
        return total

    def cycle(self) -> int:
        return self.pmem.cycle

    def clear_write_log(self):
        """Forget the PMEM model's write log (kept only for :meth:`snapshot_windows` and
        :meth:`execution_windows`: the C++ model hands its whole log over with every read of
        its write state)."""
        if self.pmem.log_writes:
            self.pmem.clear_write_log()

    def snapshot_windows(self, t0: int) -> list:
        """``[(start, end)]`` (cycles from ``t0``) of the MLP snapshot copies of the run just
        made, from the PMEM model's write log: writes into the slots region and the
        superblock's ``mlp_slot`` word, grouped where they are more than 64 cycles apart,
        each from its first AW to its last B (the copy's source reads come before the first
        write, so the window starts a little late). Statistics and point placement only."""
        if not self.pmem.log_writes:
            return []
        c = self.cfg
        flip = c.superblock_base + next(off for n, off, _w in SB_FIELDS if n == "mlp_slot")
        recs = sorted((r for r in self.pmem.write_log
                       if (c.slots_base <= r.addr < c.slots_base + c.slots_size
                           or r.addr == flip) and r.b_cycle is not None),
                      key=lambda r: r.aw_cycle)
        out = []
        for r in recs:
            a, b = r.aw_cycle - t0, r.b_cycle - t0
            if out and a - out[-1][1] <= 64:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
        self.clear_write_log()
        return out

    def execution_windows(self, t0: int) -> list:
        """``[(start, end, phase)]`` (cycles from ``t0``, end exclusive) of the run just made:
        its recovery (``RECOVER``, from CONTROL.RECOVER to the driver seeing READY) and every
        descriptor's execution (``fcov.descriptor_windows``: from its doorbell or the previous
        completion write's B to its own completion write's B, which the write log shows).
        The phases of ``crash.cut`` (cosim/fcov.py); the image passes are the same run."""
        base, size = self.rings[1]
        acks = sorted((r.aw_cycle, r.b_cycle) for r in self.pmem.write_log
                      if base <= r.addr < base + size and r.b_cycle is not None)
        doorbells = list(zip([c - t0 for c in self.drv.doorbell_cycles], self.doorbell_kinds))
        if len(acks) != sum(len(k) for _c, k in doorbells):
            raise AssertionError(f"reference run: {len(acks)} completion writes acknowledged "
                                 f"for {sum(len(k) for _c, k in doorbells)} descriptors rung")
        out = fcov.descriptor_windows(doorbells, [b - t0 for _a, b in acks])
        if self.recover_span is not None:
            a, b = self.recover_span
            out.insert(0, (a - t0, b - t0, "RECOVER"))
        return out

    def in_flight_addrs(self) -> list:
        """Start address of every write the PMEM model holds applied-unacknowledged or
        accepted-unapplied (reads its state only, as ``power_fail`` does)."""
        return ([pw.record.addr for pw in self.pmem.unacked]
                + [aw[1] for aw in self.pmem._aw_waiting])

    def in_flight_kinds(self) -> list:
        """``crash.cut`` kind of every write in flight (:meth:`in_flight_addrs`)."""
        return [fcov.crash_write_kind(self.cfg, a, *self.rings) for a in self.in_flight_addrs()]

    def sample_cut(self, cycle: int, t_start: int) -> str | None:
        """Sample ``crash.cut`` for a cut of the image pass at ``cycle`` (from ``t_start``),
        after checking that the pass rang its doorbells at the reference run's cycles so far
        (the phase windows come from the reference run). Returns the mismatch, if any."""
        got = [c - t_start for c in self.drv.doorbell_cycles]
        want = [c for c in self.ref_doorbells if c < cycle]
        if [c for c in got if c < cycle] != want:
            return (f"image pass and reference run differ: doorbells at cycles {got} "
                    f"(reference: {want}), so the crash.cut phase would be wrong")
        fcov.sample_crash_cut(fcov.crash_phase(self.phase_windows, cycle),
                              self.in_flight_kinds())
        return None

    # ------------------------------------------------------------------ crash images
    async def image_pass(self, points) -> dict:
        """One run of the workload from the initial image, taking the crash image of every
        ``(i, cycle)`` in ``points`` at its cycle (``power_fail`` only reads the PMEM model, so
        the run goes on unchanged); the run is cut after the last one. Returns
        ``{i: (CrashImage, progress dict) or exception}``."""
        wl = self.wl
        out = {}
        await self.power_on(wl.initial)
        prog = Progress()
        t_start = self.cycle()
        task = cocotb.start_soon(self.run_batches(1, prog))
        for i, cycle in sorted(points, key=lambda p: (p[1], p[0])):
            await self.wait_until(t_start, cycle)
            if task.done() and task.exception() is not None:
                out[i] = AssertionError(f"run before the crash failed: {task.exception()!r}")
                continue
            if self.fcov:
                bad = self.sample_cut(self.cycle() - t_start, t_start)
                if bad:
                    out[i] = AssertionError(bad)
                    continue
            pseed = point_seed(self.seed, i, cycle)
            self.clear_write_log()
            img = power_fail(self.pmem, random.Random(pseed), staging=self.staging, cycle=cycle)
            if self.mutate == "wipe_log":       # self-check: a device that never logged
                c = self.cfg
                for la in [a for a in img.mem._lines if c.log_base <= a < c.log_base + c.log_size]:
                    del img.mem._lines[la]
            if self.mutate == "wipe_slots":     # self-check: snapshots that never persisted
                for k in (0, 1):
                    img.mem.write(snap_slot_addr(self.cfg, k), bytes(64))
            out[i] = (img, {"commits_rung": prog.commits_rung, "commits_done": prog.commits_done,
                            "measured_cycle": self.cycle() - t_start, "point_seed": pseed,
                            **self.snapshot_cut(img)})
        if not task.done():
            task.cancel()
        fcov.write()
        return out

    def snapshot_cut(self, img) -> dict:
        """Where a cut fell relative to the snapshot copies (statistics only): in-flight writes
        into the slots region, and slots written but invalid in the crash image (torn)."""
        c = self.cfg
        lo, hi = c.slots_base, c.slots_base + c.slots_size
        inflight = sum(1 for a in self.in_flight_addrs() if lo <= a < hi)
        n = snap_slot_bytes(c)
        torn = 0
        for k in (0, 1):
            a = snap_slot_addr(c, k)
            if (any(a <= x < a + n for x in img.mem._lines)
                    and not snap_slot_valid(c, img.mem, k, 2**64 - 1)):
                torn += 1
        return {"snap_writes_in_flight": inflight, "slots_torn": torn}

    # ------------------------------------------------------------------ nested failure
    async def nested_failure(self, i, cycle, img, rec, dev, mm, m_rec, c, prog):
        """Power on with crash image ``img`` again, start RECOVER and cut the power ``r``
        cycles later (``r`` seeded: half uniform in ``[0, R]``, ``R`` = the cycles the full
        recovery of ``img`` just took, half in its last cycles, where it writes; some cuts
        land after it); power on with that second image,
        recover, and check the result against the legal outcomes, which the golden model
        computes from its own recovery of ``img`` (``dev``/``mm``, ``m_rec`` records), never
        from the RTL's second image. Until its epoch write lands, recovery writes only table
        rows (and the superblock when formatting), always the same values, so:

        * ``again``: the cut came before the epoch write (or the format's magic) persisted,
          and the second recovery redoes the first: the model's image ``mm``, ``m_rec``
          records;
        * ``done``: the first recovery had persisted its epoch write, so every rollback too;
          the second recovery applies nothing: the model's recovery of ``mm`` (epoch + 2,
          records 0; after a format: the first normal recovery).

        Either way COMMITTED = ``c`` and the tables are the model's run's after batch ``c``.
        The RTL's image must equal one of the two outside staging, with the matching
        RECOVERED_RECORDS. Returns the matching (model device, memory) for the replay."""
        wl, cfg = self.wl, self.cfg
        mm2 = mm.copy()
        dev2 = wl.model(mm2)
        m_rec2 = dev2.recover()
        outcomes = {"again": (dev, mm, m_rec), "done": (dev2, mm2, m_rec2)}
        rng = random.Random(f"crash-nested-{self.seed}-{i}-{cycle}")
        full = rec["recover_cycles"]
        if rng.random() < 0.5:
            r = rng.randrange(0, full + 1)
        else:
            # recovery scans every header first and writes only at its end (its rows, then
            # the epoch word): half of the cuts fall in its last ``tail`` cycles (about 5 per
            # record the model applied, plus the write latencies), where writes are in flight
            tail = 8 * m_rec + 64
            r = max(0, full - rng.randrange(0, tail + 1))
        pseed = rng.getrandbits(63)
        rec.update(nested=True, nested_cut=r, nested_point_seed=pseed)
        await self.power_on(img)
        t0 = self.cycle()
        await self.drv.start_recover(sleep_on_irq=True)
        await self.wait_until(t0, r)
        if self.fcov:       # a cut of recovery, or of the idle device after it
            fcov.sample_crash_cut("RECOVER" if self.cycle() - t0 < full else "none",
                                  self.in_flight_kinds())
            fcov.write()
        img2 = power_fail(self.pmem, random.Random(pseed), staging=self.staging,
                          cycle=self.cycle() - t0)
        rec["nested_measured_cut"] = self.cycle() - t0
        rec.update({"nested_" + k: v for k, v in img2.stats().items()
                    if k not in ("seed", "cycle")})
        if self.mutate == "epoch_first":
            # self-check: a device whose epoch write persisted before its rollback writes
            sb = img.mem.read(cfg.superblock_base, 64)
            magic = unpack_fields(SB_FIELDS, sb)
            if magic["magic"] == SB_MAGIC and magic["version"] == SB_VERSION:
                img2 = img.mem.copy()
                _, off, w = next(f for f in SB_FIELDS if f[0] == "recovery_epoch")
                e = (magic["recovery_epoch"] + 1) & (2**64 - 1)
                img2.write(cfg.superblock_base + off, e.to_bytes(w, "little"))
        await self.power_on(img2)
        t_rec = self.cycle()
        c2 = await self.recover()
        rec["nested_recover_cycles"] = self.cycle() - t_rec
        n2 = await self.drv.recovered_records()
        rec.update(nested_committed=c2, nested_records=n2)
        if c2 != c:
            raise AssertionError(f"second recovery (power failed {r} cycles into the first): "
                                 f"COMMITTED = {c2}, the model's recovery gives {c}")
        self.check_tables(c, f"after the second recovery (cut {r} cycles into the first)")
        match = [k for k, (_d, m, _n) in outcomes.items()
                 if not nonstaging_diff(cfg, m, self.pmem.mem, limit=1)]
        if not match:
            raise AssertionError(
                f"second recovery (cut {r} cycles into the first): image outside staging is "
                f"neither legal outcome; lines differing from 'again': "
                f"{[hex(a) for a in nonstaging_diff(cfg, mm, self.pmem.mem)]}, from 'done': "
                f"{[hex(a) for a in nonstaging_diff(cfg, mm2, self.pmem.mem)]}")
        k = match[0]
        rec["nested_outcome"] = k
        if n2 != outcomes[k][2]:
            raise AssertionError(f"second recovery ({k}): RECOVERED_RECORDS = {n2}, the model "
                                 f"gives {outcomes[k][2]}")
        await self.check_mlp(c, prog, outcomes[k][0], "after the second recovery")
        return outcomes[k][0], outcomes[k][1]

    # ------------------------------------------------------------------ one crash point
    async def crash_point(self, i: int, cycle: int, snap) -> dict:
        """Restart on the crash image of point ``i``, recover, check, replay, check."""
        wl, drv, cfg = self.wl, self.drv, self.cfg
        rec = {"event": "point", "i": i, "cycle": cycle, "seed": self.seed,
               "ok": False, "recovered": False, "identical": False, "error": None}
        t_wall = time.monotonic()
        c0 = self.cycle()
        drv.phase_cycles.clear()
        try:
            if isinstance(snap, BaseException):
                raise snap
            img, prog = snap
            rec.update(prog)
            rec.update({k: v for k, v in img.stats().items() if k != "seed"})
            await self.power_on(img)
            t_rec = self.cycle()
            c = await self.recover()
            rec["recover_cycles"] = self.cycle() - t_rec
            n_rec = await drv.recovered_records()
            rec.update(committed=c, recovered_records=n_rec)
            if c < wl.n_batches:         # error completions the open batch's replay expects
                rec["open_batch_errors"] = wl.batches[c].errors
            if not prog["commits_done"] <= c <= prog["commits_rung"]:
                raise AssertionError(f"COMMITTED = {c}, but {prog['commits_done']} COMMITs had "
                                     f"completed and {prog['commits_rung']} were rung")
            self.check_tables(c, "after recovery")
            # the golden model's recovery of the same crash image
            mm = img.mem.copy()
            dev = wl.model(mm)
            m_rec = dev.recover()
            rec["model_records"] = m_rec
            if dev.committed != c or m_rec != n_rec:
                raise AssertionError(f"recovery differs from the model: RTL C={c} records={n_rec}"
                                     f", model C={dev.committed} records={m_rec}")
            diff = nonstaging_diff(cfg, mm, self.pmem.mem)
            if diff:
                raise AssertionError(f"recovered image differs from the model's recovery "
                                     f"(outside staging) at lines {[hex(a) for a in diff]}")
            rec["mlp_slot"], rec["mlp_epoch"] = await self.check_mlp(c, prog, dev,
                                                                     "after recovery")
            rec["recovered"] = True
            if is_nested(self.seed, i, cycle, self.params.nested):
                # power fails again during the recovery of the same crash image; the replay
                # then runs on what the second recovery left, the model alongside
                dev, mm = await self.nested_failure(i, cycle, img, rec, dev, mm, m_rec, c, prog)
            # replay the open batch (or the rest of the run), the model alongside
            last = wl.n_batches if self.params.replay == "all" else min(c + 1, wl.n_batches)
            if c < last:
                await self.run_batches(c + 1, Progress(), recover=False, last=last)
            else:
                drv.attach_host()      # the check that the device sent no host message
            await drv.wait_snapshot_idle()     # the last copy may outlive its COMMIT
            diffs = wl.table_diffs(self.pmem.mem, wl.tables_after(last))
            if diffs:
                raise AssertionError(f"after replay: tables differ from the no-failure run's "
                                     f"after batch {last} (table, row, elem, want, got): {diffs}")
            for b in wl.batches[c:last]:
                for a, data in b.staging:
                    mm.write(a, data)
                for d in b.descs:
                    dev.execute(d)
            diff = nonstaging_diff(cfg, mm, self.pmem.mem)
            if diff:
                raise AssertionError(f"after replay of batches {c + 1}..{last}: image differs "
                                     f"from the model's (outside staging) at lines "
                                     f"{[hex(a) for a in diff]}")
            rec["identical"] = True
            rec["ok"] = True
        except Exception as e:  # noqa: BLE001 - every failure is recorded, the campaign goes on
            rec["error"] = f"{type(e).__name__}: {e}"
            rec["traceback"] = traceback.format_exc(limit=6)
        rec["wall_s"] = round(time.monotonic() - t_wall, 3)
        rec["sim_cycles"] = self.cycle() - c0
        rec["phase_cycles"] = dict(drv.phase_cycles)
        return rec


@cocotb.test()
async def crash_campaign(dut):
    """Reference run, then every crash point of ``CrashParams.points``; fails if any point
    failed (details in the results file)."""
    tb = CrashBench(dut)
    t0 = time.monotonic()
    total = await tb.reference()
    spec = tb.params.points
    points = crash_points(spec, tb.seed, total, tb.snap_windows, tb.params.snap_points)
    skip = tb.params.skip
    tb.emit({"event": "reference", "cycles": total, "points": len(points), "skip": skip,
             "seed": tb.seed, "batches": tb.wl.n_batches, "latency": tb.latency,
             "write_latency": tb.write_latency,
             "phase_cycles": tb.reference_phases, "snap_windows": tb.snap_windows,
             "cpl_errors": tb.wl.cpl_errors,
             **({"phase_windows": tb.phase_windows} if tb.fcov else {}),
             "wall_s": round(time.monotonic() - t0, 3)})
    dut._log.info(f"crash campaign seed={tb.seed}: reference run {total} cycles, "
                  f"{len(points)} points ({spec}), skip {skip}")
    prof = None
    if tb.params.profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    failed = 0
    stop = len(points) if tb.params.stop is None else min(tb.params.stop, len(points))
    todo = [(i, c) for i, c in enumerate(points) if skip <= i < stop]
    chunk = max(1, tb.params.chunk)
    for k in range(0, len(todo), chunk):
        part = todo[k:k + chunk]
        t_pass = time.monotonic()
        snaps = await tb.image_pass(part)
        tb.emit({"event": "pass", "points": [i for i, _ in part],
                 "wall_s": round(time.monotonic() - t_pass, 3)})
        for i, c in part:
            tb.emit({"event": "start", "i": i, "cycle": c})
            rec = await tb.crash_point(i, c, snaps.pop(i))
            tb.emit(rec)
            if not rec["ok"]:
                failed += 1
                dut._log.error(f"crash point {i} cycle {c}: {rec['error']}")
    if prof is not None:
        prof.disable()
        prof.dump_stats(tb.params.profile)
    assert failed == 0, f"{failed} of {len(todo)} crash points failed (seed {tb.seed})"
