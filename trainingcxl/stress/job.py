"""Long seeded random stress of the DCOH: ``trainingcxl stress --messages 1000000 --seed N``.

Builds the DCOH test top (``--config main`` default, or ``small``: 2 x 2 snoop filter, 2
BITags), runs the cocotb test :mod:`trainingcxl.stress.tb` with random host traffic (every
legal kind, loads/stores, silent drops, adversarial delays and stalls) and device traffic on
``--lines`` hot lines, prints host messages per second and the violation count, and writes
``build/stress/report.json`` (under the working directory, or ``--out``). Exit status 1 when any
violation was found (the report lists the first ones by rule) or a run did not finish; 2 on bad
options or an unreachable cluster.

``--blocks K`` sends the ``--messages`` in K independent runs (block k: about messages/K
messages, seed ``seed + k``, results in ``out/blocks/<k>``), which ``--workers N`` or
``--scheduler ADDRESS`` spread over a Dask cluster (:mod:`trainingcxl.cluster`,
docs/campaigns.md); the report merges them (:func:`merge_blocks`) and is the same wherever the
blocks ran, apart from :data:`WALL_CLOCK_FIELDS`. ``--blocks 1`` (the default) is one run with
seed ``--seed``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from trainingcxl import cluster

__all__ = ["StressBlock", "run_block", "merge_blocks", "main", "WALL_CLOCK_FIELDS"]

# report fields that measure wall-clock time (top level and in each of "blocks")
WALL_CLOCK_FIELDS = ("wall_s", "host_messages_per_s", "cycles_per_s", "wall_total_s")


@dataclass(frozen=True)
class StressBlock:
    """One task: ``messages`` host messages with ``seed``; the result JSON and the simulator
    run directory go to ``out/attempt-<id>``. ``build``: the DCOH test top's build
    (``cosim.build.Build``), rebuilt from ``config`` on a worker whose cache does not hold it."""
    index: int
    seed: int
    messages: int
    out: str
    build: object
    config: str
    lines: int
    stall: float
    latency: int
    pmem_stall: float
    strict_media: bool
    trace: bool
    conflict_tag: str
    profile: str | None = None
    poison: float = 0.0


def _device_config(name: str):
    from hw.config import DeviceConfig
    return DeviceConfig() if name == "main" else \
        DeviceConfig().with_(sf_sets=2, sf_ways=2, bi_tags=2, park_slots=2)


def _build(config: str):
    from cosim.tb.dcoh import dcoh_top_build
    return dcoh_top_build(_device_config(config))


def run_block(block: StressBlock, *, progress=None) -> dict:
    """Run one block (a campaign task); returns its result dict (``run_error``: the
    simulator's error text or None; ``None`` result fields when it wrote no result)."""
    from cosim import build as cb
    from cosim.tb.config import BenchConfig
    from trainingcxl.stress.tb import StressParams

    b = block.build if cb.is_built(block.build) else _build(block.config)
    out = cluster.fresh_task_dir(block.out)    # a re-run (its worker was lost) starts afresh
    result = out / "result.json"
    run_params = StressParams(
        bench=BenchConfig(_device_config(block.config), latency=block.latency,
                          strict_media=block.strict_media, host_trace=block.trace),
        messages=block.messages, lines=block.lines, stall=block.stall, seed=block.seed,
        pmem_stall=block.pmem_stall, conflict_tag=block.conflict_tag, out=str(result),
        profile=block.profile, poison=block.poison)
    err = None
    try:
        cb.run(b, "trainingcxl.stress.tb", seed=block.seed, params=run_params,
               test_dir=out / "run", quiet=True)
    except cb.CosimError as e:
        err = str(e)
    if not result.exists():
        return {"seed": block.seed, "run_error": err or "the stress run wrote no result",
                "missing": True}
    s = json.loads(result.read_text())
    s["run_error"] = err
    return s


def _merge(values: list):
    """Counters add up, dicts merge key by key, lists concatenate; anything else (seed,
    strings) keeps the first block's value."""
    first = values[0]
    if isinstance(first, bool) or not all(type(v) is type(first) for v in values):
        return first
    if isinstance(first, (int, float)):
        return sum(values)
    if isinstance(first, dict):
        keys = list(dict.fromkeys(k for v in values for k in v))
        return {k: _merge([v[k] for v in values if k in v]) for k in keys}
    if isinstance(first, list):
        return [x for v in values for x in v]
    return first


def merge_blocks(results: list[dict]) -> dict:
    """One report from the blocks' results, in block order: counts summed, violations by rule
    merged, problems and first violations concatenated (first 20 kept), rates recomputed from
    the sums; ``blocks`` lists each block's seed, messages, violations, wall time and error.
    One block gives its own result unchanged (plus ``blocks``)."""
    ok = [r for r in results if not r.get("missing")]
    rep = _merge(ok) if ok else {}
    if len(ok) > 1:
        rep["seed"] = ok[0]["seed"]
        rep["first_violations"] = rep.get("first_violations", [])[:20]
        wall = rep.get("wall_s") or 0
        rep["wall_s"] = round(wall, 2)
        rep["host_messages_per_s"] = round(rep["messages_sent"] / wall, 1) if wall else None
        rep["cycles_per_s"] = round(rep["sim_cycles"] / wall, 1) if wall else None
    errors = [r["run_error"] for r in results if r.get("run_error")]
    rep["run_error"] = "\n".join(errors) if errors else None
    rep["blocks"] = [{"seed": r["seed"], "messages_sent": r.get("messages_sent"),
                      "violations_total": r.get("violations_total"),
                      "wall_s": r.get("wall_s"), "run_error": r.get("run_error")}
                     for r in results]
    return rep


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="trainingcxl stress", description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=100_000,
                    help="host messages to send (over all blocks)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--blocks", type=int, default=1,
                    help="independent runs the messages are split into (block k: seed + k)")
    ap.add_argument("--lines", type=int, default=16, help="hot lines")
    ap.add_argument("--stall", type=float, default=0.2, help="channel stall probability")
    ap.add_argument("--latency", type=int, default=20, help="PMEM read/write latency (cycles)")
    ap.add_argument("--pmem-stall", type=float, default=0.0,
                    help="PMEM AXI channel stall probability (costs simulation speed)")
    ap.add_argument("--strict-media", action="store_true",
                    help="also HostPermission.device_access at each device AW/AR (stricter than "
                         "the contract; see cosim.coherence_check)")
    ap.add_argument("--trace", action="store_true", help="log every host and device message")
    ap.add_argument("--config", choices=("main", "small"), default="main")
    ap.add_argument("--conflict-tag", choices=("fresh", "req"), default="fresh")
    ap.add_argument("--poison", type=float, default=0.0,
                    help="probability that a host uncached write carries poison (the checker "
                         "then checks every read's poison bit against the media rule)")
    ap.add_argument("--out", type=Path, default=Path("build/stress"), help="report directory")
    ap.add_argument("--profile", type=Path, default=None,
                    help="write a cProfile of the simulator's stress loop here (per block: "
                         "suffixed with its index when --blocks > 1)")
    cluster.add_arguments(ap)
    args = ap.parse_args(argv)
    cluster.check_arguments(ap, args)
    if args.blocks < 1 or args.messages < args.blocks:
        ap.error(f"--blocks must be >= 1 and at most --messages, got --blocks {args.blocks} "
                 f"--messages {args.messages}")
    return cluster.run_with_executor("stress", args, lambda ex: _stress(args, ex))


def _stress(args, ex) -> int:
    report_dir = args.out.resolve()
    report_dir.mkdir(parents=True, exist_ok=True)
    if (report_dir / "blocks").exists():
        shutil.rmtree(report_dir / "blocks")
    print(f"stress: seed={args.seed} messages={args.messages} blocks={args.blocks} "
          f"lines={args.lines} stall={args.stall} latency={args.latency} config={args.config} "
          f"conflict_tag={args.conflict_tag} poison={args.poison}; {ex.description}",
          flush=True)
    t0 = time.monotonic()
    b = _build(args.config)            # once, before any task: the workers find it cached
    n, k = args.messages, args.blocks
    blocks = [StressBlock(
        index=i, seed=args.seed + i, messages=n // k + (1 if i < n % k else 0),
        out=str(report_dir / "blocks" / f"{i:03d}"), build=b, config=args.config,
        lines=args.lines, stall=args.stall, latency=args.latency, pmem_stall=args.pmem_stall,
        strict_media=args.strict_media, trace=args.trace, conflict_tag=args.conflict_tag,
        poison=args.poison, profile=(str(args.profile.resolve()) + (f".{i}" if k > 1 else ""))
        if args.profile else None) for i in range(k)]
    results = ex.map(run_block, blocks, desc="stress", unit="block", progress=k > 1)
    missing = [r for r in results if r.get("missing")]
    for r in missing:
        print(f"stress: seed {r['seed']}: no result ({r['run_error']})", file=sys.stderr)
    if len(missing) == len(results):
        return 1
    s = merge_blocks(results)
    s.update(seed=args.seed, config=args.config, wall_total_s=round(time.monotonic() - t0, 1))
    (report_dir / "report.json").write_text(json.dumps(s, indent=1))
    print(f"stress: {s['messages_sent']} host messages in {s['wall_s']} s = "
          f"{s['host_messages_per_s']} messages/s ({s['cycles_per_s']} cycles/s), "
          f"conflicts {s['conflicts']} (late {s['late_conflicts']}, early "
          f"{s['early_conflicts']}), BISnps {s['recv_s2m_bisnp']}, device ops "
          f"{s['device']['reads'] + s['device']['writes']}")
    print(f"stress: violations {s['violations_total']} {s['violations_by_rule']}")
    for line in s["first_violations"][:5] + s["problems"][-3:]:
        print("  " + line.splitlines()[0])
    print(f"stress: report {report_dir / 'report.json'}")
    return 0 if (s["violations_total"] == 0 and not s["problems"] and s["run_error"] is None
                 and not missing) else 1
