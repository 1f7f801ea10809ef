"""One DLRM training step on four systems: time and energy by phase, link bytes.

Systems (docs/system.md has the reasoning and the diagrams):

- ``pmem-log``: the paper's baseline class. Embedding tables in host-attached persistent
  memory (Optane DCPMM, App Direct); the CPU gathers and pools the rows, the GPU runs the MLPs
  over PCIe; the CPU applies the sparse update. Failure tolerance by synchronous undo logging
  (each distinct row's old contents written and fenced before it is updated, as a PMDK
  transaction does) plus the MLP parameters copied to PMEM every batch.
- ``pmem-ckpt``: as ``pmem-log`` but failure tolerance by a periodic checkpoint of the whole
  tables and the MLP every ``ckpt_interval_batches`` batches (amortised; up to that many
  batches of work can be lost, which the time does not count).
- ``dram``: tables in host DRAM, no failure tolerance (a speed reference; capacity ignored).
- ``cxl-host``: the tables in PMEM behind a CXL link without near-data processing: the CPU
  gathers, pools, logs and updates over the link (the crossover reference for link bytes).
- ``trainingcxl``: the device. The host writes index lists to staging; LOOKUP+LOG per table
  (near-data gather and pool, undo records written during it), pooled outputs to the GPU, MLP,
  gradients back, UPDATE per table, one COMMIT; an MLP SNAPSHOT every ``lag`` batches copied in
  the background (its media time is charged, amortised).

Device time: the fitted RTL cycle formulas (:mod:`trainingcxl.system.cycles`) at the clock
scenario, bounded below by the media (Optane) bandwidth for the bytes the command moves: the
RTL's media port carries one line per cycle, so above the media's rate the media decides.
Media time of a mix of reads and writes is the sum of both at their own bandwidths (Optane does
not overlap them well, Izraelevitz et al.); random accesses smaller than the 256-B XPLine cost
a whole XPLine of bandwidth, for every system alike.

Energy per step: CPU, GPU and device logic at their active power while busy and idle power
otherwise; PMEM at its module power while the media is busy; DRAM and link traffic per bit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from trainingcxl.system import cycles as cyc
from trainingcxl.system.params import Params, defaults
from trainingcxl.system.workload import Table, Workload

__all__ = ["StepResult", "SYSTEMS", "BASELINES", "step", "compare", "link_bytes_table"]

LINE = 64
SYSTEMS = ("pmem-log", "pmem-ckpt", "dram", "cxl-host", "trainingcxl")
BASELINES = ("pmem-log", "pmem-ckpt", "dram", "cxl-host")


@dataclass
class StepResult:
    system: str
    workload: str
    time: dict = field(default_factory=dict)       # phase -> seconds (serial, they add up)
    energy: dict = field(default_factory=dict)     # component -> joules
    link_bytes: float = 0.0                        # bytes over the CXL link (device systems)
    pcie_bytes: float = 0.0
    media_read: float = 0.0
    media_write: float = 0.0
    busy: dict = field(default_factory=dict)       # component -> busy seconds
    notes: list = field(default_factory=list)

    @property
    def total_time(self) -> float:
        return sum(self.time.values())

    @property
    def total_energy(self) -> float:
        return sum(self.energy.values())


def _lines(nbytes: float) -> float:
    return math.ceil(nbytes / LINE)


def _granule(row_bytes: int, p: Params) -> float:
    """Media bytes moved by one random access of ``row_bytes``: whole XPLines."""
    g = p["pmem_access_granule"]
    return math.ceil(row_bytes / g) * g


def _media_time(read: float, write: float, p: Params) -> float:
    return read / p["pmem_read_bw"] + write / p["pmem_write_bw"]


def _cpu_gather_time(n_rows: float, row_bytes: int, latency_ns: float, p: Params,
                     mem_bw: float, granule: float) -> float:
    """CPU gather/pool (or read-modify-write) of ``n_rows`` random rows: the larger of the
    memory-level-parallelism bound (cores x outstanding misses / latency), the memory
    bandwidth bound and the instruction bound."""
    lines = n_rows * math.ceil(row_bytes / LINE)
    mlp_bound = lines * latency_ns * 1e-9 / (p["cpu_cores"] * p["cpu_misses_per_core"])
    bw_bound = n_rows * granule / mem_bw
    cpu_bound = n_rows * p["cpu_ns_per_row"] * 1e-9 / p["cpu_cores"]
    return max(mlp_bound, bw_bound, cpu_bound)


def _mlp_time(w: Workload, p: Params) -> float:
    return w.mlp_flops / (p["gpu_flops"] * p["gpu_efficiency"])


def _energy(r: StepResult, p: Params, *, cpu_busy: float, gpu_busy: float,
            device_busy: float | None, dram_bytes: float):
    T = r.total_time
    r.busy = {"cpu": cpu_busy, "gpu": gpu_busy}
    r.energy["cpu"] = p["cpu_active_w"] * cpu_busy + p["cpu_idle_w"] * max(0.0, T - cpu_busy)
    r.energy["gpu"] = p["gpu_active_w"] * gpu_busy + p["gpu_idle_w"] * max(0.0, T - gpu_busy)
    pmem_busy = _media_time(r.media_read, r.media_write, p)
    r.busy["pmem"] = pmem_busy
    r.energy["pmem"] = p["pmem_dimm_power_w"] * p["pmem_dimms"] * pmem_busy
    r.energy["dram"] = dram_bytes * 8 * p["dram_energy_pj_bit"] * 1e-12
    r.energy["links"] = (r.link_bytes + r.pcie_bytes) * 8 * p["link_pj_bit"] * 1e-12
    if device_busy is not None:
        r.busy["device"] = device_busy
        r.energy["device"] = (p["device_logic_w"] * device_busy
                              + p["device_idle_w"] * max(0.0, T - device_busy))


# ------------------------------------------------------------------------------------------
# host-side systems
# ------------------------------------------------------------------------------------------
def _host_system(w: Workload, p: Params, system: str) -> StepResult:
    r = StepResult(system, w.name)
    B = w.batch
    on_pmem = system != "dram"
    over_cxl = system == "cxl-host"
    lat = p["pmem_read_latency_ns"] if on_pmem else p["dram_latency_ns"]
    if over_cxl:
        lat += p["cxl_latency_ns"]
    bw_r = p["pmem_read_bw"] if on_pmem else p["dram_bw"]
    if over_cxl:
        bw_r = min(bw_r, p["cxl_bw"])
    t_lookup = t_update = t_log = 0.0
    dram_bytes = 0.0
    for t in w.tables:
        n, U, rb = t.lookups(B), t.distinct(B), t.row_bytes
        gr = _granule(rb, p) if on_pmem else _lines(rb) * LINE
        # gather + pool (pooled outputs to host DRAM, then to the GPU)
        t_lookup += _cpu_gather_time(n, rb, lat, p, bw_r, gr)
        if on_pmem:
            r.media_read += n * gr
        else:
            dram_bytes += n * gr
        dram_bytes += B * rb * 2                       # pooled outputs written + DMA-read
        if over_cxl:
            r.link_bytes += n * _lines(rb) * LINE + 4 * n + 4 * (B + 1)
        # sparse update: read-modify-write of each distinct row (gradients coalesced first)
        rd = _cpu_gather_time(U, rb, lat, p, bw_r, gr)
        if on_pmem:
            wr = U * gr / (min(p["pmem_write_bw"], p["cxl_bw"]) if over_cxl
                           else p["pmem_write_bw"])
            r.media_read += U * gr
            r.media_write += U * gr
        else:
            wr = U * gr / p["dram_bw"]
            dram_bytes += 2 * U * gr
        t_update += rd + wr + n * p["cpu_ns_per_row"] * 1e-9 / p["cpu_cores"]
        dram_bytes += B * rb                           # gradients from the GPU
        if over_cxl:
            r.link_bytes += U * _lines(rb) * LINE * 2
        if system in ("pmem-log", "cxl-host"):
            # undo record (row + 64-B header, sequential in the log) written and fenced
            # before the row is updated: bandwidth bound or fence-latency bound per core
            rec = _lines(rb) * LINE + LINE
            bw_w = min(p["pmem_write_bw"], p["cxl_bw"]) if over_cxl else p["pmem_write_bw"]
            fence = U * (p["pmem_persist_latency_ns"]
                         + (p["cxl_latency_ns"] if over_cxl else 0)) * 1e-9 / p["cpu_cores"]
            t_log += max(U * rec / bw_w, fence)
            r.media_write += U * rec
            if over_cxl:
                r.link_bytes += U * rec
    emb_bytes = B * sum(t.row_bytes for t in w.tables)
    t_pcie = emb_bytes / p["pcie_bw"]
    r.pcie_bytes = 2 * emb_bytes
    r.time["lookup"] = t_lookup
    r.time["to_gpu"] = t_pcie
    r.time["mlp"] = _mlp_time(w, p)
    r.time["from_gpu"] = t_pcie
    if t_log:
        r.time["log"] = t_log
    r.time["update"] = t_update
    mlp_bytes = 4 * w.mlp_params
    if system in ("pmem-log", "cxl-host"):
        # MLP parameters GPU -> host -> PMEM every batch, then a commit record
        bw_w = min(p["pmem_write_bw"], p["cxl_bw"]) if over_cxl else p["pmem_write_bw"]
        r.time["mlp_checkpoint"] = mlp_bytes / p["pcie_bw"] + mlp_bytes / bw_w
        r.time["commit"] = p["pmem_persist_latency_ns"] * 1e-9
        r.pcie_bytes += mlp_bytes
        r.media_write += mlp_bytes
        if over_cxl:
            r.link_bytes += mlp_bytes
    elif system == "pmem-ckpt":
        N = p["ckpt_interval_batches"]
        tb = w.table_bytes
        r.time["checkpoint"] = (_media_time(tb, tb, p) + mlp_bytes / p["pcie_bw"]
                                + mlp_bytes / p["pmem_write_bw"]) / N
        r.media_read += tb / N
        r.media_write += (tb + mlp_bytes) / N
        r.pcie_bytes += mlp_bytes / N
    cpu_busy = sum(v for k, v in r.time.items() if k in ("lookup", "update", "log",
                                                          "mlp_checkpoint", "checkpoint"))
    _energy(r, p, cpu_busy=cpu_busy, gpu_busy=r.time["mlp"], device_busy=None,
            dram_bytes=dram_bytes)
    return r


# ------------------------------------------------------------------------------------------
# TrainingCXL
# ------------------------------------------------------------------------------------------
def link_bytes_table(t: Table, B: int, *, near_data: bool) -> float:
    """CXL link bytes of one table's LOOKUP + UPDATE in one step. Near-data: offsets and
    index lists written to staging once (LOOKUP and UPDATE both read them there), pooled
    outputs read and gradients written in whole lines, two descriptors and two completion
    records. Host gather: every looked-up row read, every distinct updated row written back
    (whole lines; logging excluded), as `make demo` counts it."""
    n, U = t.lookups(B), t.distinct(B)
    row = _lines(t.row_bytes) * LINE
    if near_data:
        return 4 * (B + 1) + 4 * n + 2 * B * row + 4 * LINE
    return n * row + U * row


def _device_table(t: Table, B: int, p: Params, L: int, f: cyc.Formulas) -> dict:
    """One table's LOOKUP+LOG and UPDATE on one device. ``t_lookup`` includes every undo
    record write (the step subtracts what the record buffer absorbs, once for all tables);
    ``t_lookup_floor`` is the LOOKUP without any record write (what an unbounded buffer
    would leave)."""
    n, U, rb = t.lookups(B), t.distinct(B), t.row_bytes
    clk = p["clock_hz"]
    row_lines = _lines(rb)
    staging = 0.0 if p["staging_dram"] else 1.0      # staging traffic on the PMEM media?
    idx_bytes = 4 * n + 4 * (B + 1)
    rec_bytes = U * (row_lines + 1) * LINE
    out_bytes = B * row_lines * LINE
    # LOOKUP+LOG: reads rows (whole XPLines) and the index lists; writes pooled outputs and
    # one undo record per new row
    lk_cyc = f.lookup(n_bags=B, lookups=n, dim=t.dim, distinct=U, latency=L)
    lk_cyc0 = f.lookup(n_bags=B, lookups=n, dim=t.dim, distinct=0, latency=L)
    lk_read = n * _granule(rb, p) + staging * idx_bytes
    t_lookup = max(lk_cyc / clk, _media_time(lk_read, staging * out_bytes + rec_bytes, p))
    t_floor = max(lk_cyc0 / clk, _media_time(lk_read, staging * out_bytes, p))
    # UPDATE: gradients, index lists, rows; the RTL reads a row for every item whose row is
    # not still in flight (cycles.update_row_reads) and writes it once per (bag, row) item, a
    # coalescing engine reads and writes each distinct row once
    if p["update_coalesced"]:
        items = reads = U
    else:
        items = n
        reads = cyc.update_row_reads(lookups=n, dim=t.dim, latency=L, rows=t.rows,
                                     dist=t.dist, alpha=t.alpha)
    up_cyc = f.update(n_bags=B, lookups=items, dim=t.dim, latency=L, row_reads=reads)
    up_read = reads * _granule(rb, p) + staging * (idx_bytes + out_bytes)
    up_write = items * _granule(rb, p)
    t_update = max(up_cyc / clk, _media_time(up_read, up_write, p))
    return dict(t_lookup=t_lookup, t_lookup_floor=t_floor, t_update=t_update,
                rec_bytes=rec_bytes, lookup_cycles=lk_cyc, update_cycles=up_cyc,
                media_read=lk_read + up_read,
                media_write=staging * out_bytes + rec_bytes + up_write,
                link=link_bytes_table(t, B, near_data=True),
                lookup_port_bound=lk_cyc / clk >= _media_time(
                    lk_read, staging * out_bytes + rec_bytes, p))


def shards(w: Workload, p: Params) -> list[Table]:
    """The tables as the devices hold them: a table larger than one device
    (``pmem_dimms`` x ``pmem_dimm_bytes``) is split by rows over ``s`` devices; each shard sees
    1/s of the lookups and returns its own partial pooled outputs (summed on the GPU)."""
    cap = p["pmem_dimms"] * p["pmem_dimm_bytes"]
    out = []
    for t in w.tables:
        s = max(1, math.ceil(t.rows * t.row_bytes / cap))
        out += [Table(math.ceil(t.rows / s), t.dim, t.pooling / s, t.dist, t.alpha)] * s
    return out


def _trainingcxl(w: Workload, p: Params, f: cyc.Formulas, devices: int = 1) -> StepResult:
    r = StepResult("trainingcxl", w.name)
    B = w.batch
    clk = p["clock_hz"]
    L = max(1, round(p["pmem_read_latency_ns"] * 1e-9 * clk))
    tables = shards(w, p) if devices > 1 else list(w.tables)
    per = [_device_table(t, B, p, L, f) for t in tables]
    # tables spread over ``devices`` devices (largest work first onto the least loaded); the
    # devices run in parallel, one command at a time each
    load = [[0.0, 0.0, 0.0, 0.0] for _ in range(devices)]   # lookup, update, records, floor
    for d in sorted(per, key=lambda d: -(d["t_lookup"] + d["t_update"])):
        k = min(range(devices), key=lambda i: load[i][0] + load[i][1])
        load[k][0] += d["t_lookup"]
        load[k][1] += d["t_update"]
        load[k][2] += d["rec_bytes"]
        load[k][3] += d["t_lookup_floor"]
    # the record buffer (log_buffer_lines) takes up to its size of each device's records off
    # the LOOKUPs; they drain afterwards, behind the transfers and the MLP
    buf = p["log_buffer_lines"] * LINE
    for l in load:
        credit = min(buf, l[2]) / p["pmem_write_bw"]
        l[0] = max(l[3], l[0] - credit)
    drain = max(min(buf, l[2]) / p["pmem_write_bw"] for l in load)
    hop = p["cxl_latency_ns"] + (p["switch_latency_ns"] if devices > 1 else 0.0)
    # per command: descriptor write, doorbell, completion poll over the link (host side)
    cmd_overhead = 2 * hop * 1e-9
    n_cmd = math.ceil(len(tables) / devices)
    link = sum(d["link"] for d in per)
    idx_bytes = sum(4 * t.lookups(B) + 4 * (B + 1) for t in tables)
    emb_bytes = B * sum(_lines(t.row_bytes) * LINE for t in tables)
    gpu_bw = min(p["cxl_bw"], p["pcie_bw"])     # device -> (switch/root) -> GPU
    # staging lives in the device's media (the RTL has one media port): index lists and
    # gradients are written there, pooled outputs read from there, at link or media speed
    mdev = devices if not p["staging_dram"] else math.inf
    r.time["indices"] = max(idx_bytes / p["cxl_bw"],
                            idx_bytes / (p["pmem_write_bw"] * mdev)) + hop * 1e-9
    r.time["lookup"] = max(l[0] for l in load) + n_cmd * cmd_overhead
    r.time["to_gpu"] = max(emb_bytes / gpu_bw, emb_bytes / (p["pmem_read_bw"] * mdev))
    r.time["mlp"] = _mlp_time(w, p)
    r.time["from_gpu"] = max(emb_bytes / gpu_bw, emb_bytes / (p["pmem_write_bw"] * mdev))
    overlap = r.time["to_gpu"] + r.time["mlp"] + r.time["from_gpu"]
    r.time["log_drain"] = max(0.0, drain - overlap)
    r.time["update"] = max(l[1] for l in load) + n_cmd * cmd_overhead
    c_cyc = f.commit(latency=L)
    r.time["commit"] = c_cyc / clk + cmd_overhead
    # MLP snapshot every ``lag`` batches: the GPU writes the parameters to staging over the
    # link; the device copies them in the background during the next ``lag`` steps. Charged,
    # amortised: the host's write, the copy's media time (taken from the other commands), and
    # any copy time beyond ``lag`` steps (the lag-bounded COMMIT would wait for it)
    mlp_bytes = 4 * w.mlp_params
    s_cyc = f.snapshot(nbytes=mlp_bytes, latency=L)
    s_media = _media_time(mlp_bytes, 2 * mlp_bytes, p)   # staging write, slot read + write
    rest = sum(r.time.values())
    copy = max(s_cyc / clk, s_media)
    r.time["snapshot"] = (mlp_bytes / gpu_bw + s_media + max(0.0, copy - w.lag * rest)) / w.lag
    st = 0.0 if p["staging_dram"] else 1.0
    r.media_read = (sum(d["media_read"] for d in per) + mlp_bytes / w.lag
                    + st * emb_bytes)                   # pooled outputs read by the GPU
    r.media_write = (sum(d["media_write"] for d in per) + st * idx_bytes
                     + (1 + st) * mlp_bytes / w.lag + st * emb_bytes)   # indices, gradients
    r.link_bytes = link + 2 * LINE + mlp_bytes / w.lag
    r.pcie_bytes = 2 * emb_bytes + mlp_bytes / w.lag
    dev_busy = (r.time["lookup"] + r.time["log_drain"] + r.time["update"] + r.time["commit"]
                + r.time["snapshot"])
    _energy(r, p, cpu_busy=0.0, gpu_busy=r.time["mlp"], device_busy=dev_busy,
            dram_bytes=0.0)
    if devices > 1:
        r.energy["device"] *= devices
    cap = p["pmem_dimms"] * p["pmem_dimm_bytes"]
    if devices == 1 and w.table_bytes > cap:
        r.notes.append(f"tables ({w.table_bytes / 1e12:.2f} TB) exceed one device "
                       f"({cap / 1e12:.2f} TB): see the scaling section for several devices")
    r.notes.append(f"media latency {L} cycles at {clk / 1e6:.1f} MHz; LOOKUP port-bound for "
                   f"{sum(d['lookup_port_bound'] for d in per)} of {len(per)} tables")
    return r


def step(w: Workload, system: str, p: Params | None = None, *, formulas=None,
         devices: int = 1) -> StepResult:
    p = defaults() if p is None else p
    if system not in SYSTEMS:
        raise ValueError(f"system must be one of {SYSTEMS}, got {system!r}")
    if system == "trainingcxl":
        return _trainingcxl(w, p, formulas or cyc.default_formulas(), devices)
    return _host_system(w, p, system)


def compare(w: Workload, p: Params | None = None, *, formulas=None) -> dict:
    """Every system's step; ``speedup``/``energy_saving`` of TrainingCXL against each
    baseline."""
    res = {s: step(w, s, p, formulas=formulas) for s in SYSTEMS}
    tc = res["trainingcxl"]
    return {"results": res,
            "speedup": {b: res[b].total_time / tc.total_time for b in BASELINES},
            "energy_saving": {b: 1 - tc.total_energy / res[b].total_energy for b in BASELINES}}
