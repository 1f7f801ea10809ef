"""Long seeded random stress of the DCOH: ``trainingcxl stress --messages 1000000 --seed N``.

Builds the DCOH test top (``--config main`` default, or ``small``: 2 x 2 snoop filter, 2
BITags), runs the cocotb test :mod:`trainingcxl.stress.tb` once with random host traffic (every legal kind,
loads/stores, silent drops, adversarial delays and stalls) and device traffic on ``--lines``
hot lines, prints host messages per second and the violation count, and writes
``build/stress/report.json`` (under the working directory, or ``--out``). Exit status 1 when any violation was found (the report lists the
first ones by rule) or the run did not finish.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="trainingcxl stress", description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=100_000, help="host messages to send")
    ap.add_argument("--seed", type=int, default=1)
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
    ap.add_argument("--out", type=Path, default=Path("build/stress"), help="report directory")
    ap.add_argument("--profile", type=Path, default=None,
                    help="write a cProfile of the simulator's stress loop here")
    args = ap.parse_args(argv)

    from cosim import build as cb
    from cosim.tb.config import BenchConfig
    from hw.config import DeviceConfig
    from trainingcxl.stress.tb import StressParams
    report_dir = args.out.resolve()
    from hw.testtops.dcoh import DcohTestTop, TEST_TOP_NAME
    cfg = DeviceConfig() if args.config == "main" else \
        DeviceConfig().with_(sf_sets=2, sf_ways=2, bi_tags=2, park_slots=2)
    report_dir.mkdir(parents=True, exist_ok=True)
    out = report_dir / "result.json"
    if out.exists():
        out.unlink()
    print(f"stress: seed={args.seed} messages={args.messages} lines={args.lines} "
          f"stall={args.stall} latency={args.latency} config={args.config} "
          f"conflict_tag={args.conflict_tag}", flush=True)
    b = cb.build(cb.generate_verilog(DcohTestTop(cfg), name=TEST_TOP_NAME), top=TEST_TOP_NAME)
    run_params = StressParams(
        bench=BenchConfig(cfg, latency=args.latency, strict_media=args.strict_media,
                          host_trace=args.trace),
        messages=args.messages, lines=args.lines, stall=args.stall, seed=args.seed,
        pmem_stall=args.pmem_stall, conflict_tag=args.conflict_tag, out=str(out),
        profile=str(args.profile.resolve()) if args.profile else None)
    t0 = time.monotonic()
    err = None
    try:
        cb.run(b, "trainingcxl.stress.tb", seed=args.seed, params=run_params,
               test_dir=report_dir / "run")
    except cb.CosimError as e:
        err = str(e)
    if not out.exists():
        print(f"stress: no result ({err})", file=sys.stderr)
        return 1
    s = json.loads(out.read_text())
    s.update(seed=args.seed, config=args.config, wall_total_s=round(time.monotonic() - t0, 1),
             run_error=err)
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
    return 0 if s["violations_total"] == 0 and not s["problems"] and err is None else 1

