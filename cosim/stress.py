"""Long seeded random stress of the DCOH: ``python -m cosim.stress --messages 1000000 --seed N``.

Builds the DCOH test top (``--config main`` default, or ``small``: 2 x 2 snoop filter, 2
BITags), runs the cocotb test of this module once with random host traffic (every legal kind,
loads/stores, silent drops, adversarial delays and stalls) and device traffic on ``--lines``
hot lines, prints host messages per second and the violation count, and writes
``build/stress/report.json``. Exit status 1 when any violation was found (the report lists the
first ones by rule) or the run did not finish.

Inside the simulator the test reads ``TCXL_STRESS_*`` variables set by ``main()``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPORT_DIR = Path(__file__).resolve().parent.parent / "build" / "stress"

try:
    import cocotb
except ImportError:         # main() only needs cosim.build
    cocotb = None

if cocotb is not None:
    @cocotb.test()
    async def stress(dut):
        """One long random run; results go to TCXL_STRESS_OUT (JSON)."""
        from cosim.cxl_host import HostKnobs
        from cosim.tb_dcoh import DcohTB
        env = os.environ
        n = int(env.get("TCXL_STRESS_MESSAGES", "10000"))
        n_lines = int(env.get("TCXL_STRESS_LINES", "16"))
        stall = float(env.get("TCXL_STRESS_STALL", "0.2"))
        seed = int(env.get("TCXL_STRESS_SEED", "1"))
        knobs = HostKnobs(conflict_tag=env.get("TCXL_STRESS_CONFLICT_TAG", "fresh"))
        pmem_stall = float(env.get("TCXL_STRESS_PMEM_STALL", "0"))
        tb = DcohTB(dut, seed=seed, host_stall=stall, dev_stall=stall, pmem_stall=pmem_stall,
                    knobs=knobs, log_writes=False)
        await tb.reset()
        lines = [tb.line("table", i * 5) for i in range(n_lines - n_lines // 4)] + \
            [tb.line("staging", i) for i in range(n_lines // 4)]
        tb.dev.start_random(n // 5, lines, p=0.08)
        prof = None
        if env.get("TCXL_PROFILE"):
            import cProfile
            prof = cProfile.Profile()
            prof.enable()
        t0 = time.monotonic()
        c0 = tb.cycle
        tb.core.start_random(n, lines)
        await tb.drain(timeout=400 * n + 100_000)
        wall = time.monotonic() - t0
        if prof is not None:
            prof.disable()
            prof.dump_stats(env["TCXL_PROFILE"])
        s = await tb.finish(check=False)
        s.update(wall_s=round(wall, 2), sim_cycles=tb.cycle - c0,
                 host_messages_per_s=round(s["messages_sent"] / wall, 1),
                 cycles_per_s=round((tb.cycle - c0) / wall, 1),
                 first_violations=[str(v) for v in tb.violations()[:20]])
        Path(env["TCXL_STRESS_OUT"]).write_text(json.dumps(s, indent=1, default=str))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cosim.stress", description=__doc__.split("\n")[0])
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
    args = ap.parse_args(argv)

    from cosim import build as cb
    from hw.config import DeviceConfig
    from hw.dcoh.testtop import DcohTestTop, TEST_TOP_NAME
    cfg = DeviceConfig() if args.config == "main" else \
        DeviceConfig().with_(sf_sets=2, sf_ways=2, bi_tags=2, park_slots=2)
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    out = REPORT_DIR / "result.json"
    if out.exists():
        out.unlink()
    print(f"stress: seed={args.seed} messages={args.messages} lines={args.lines} "
          f"stall={args.stall} latency={args.latency} config={args.config} "
          f"conflict_tag={args.conflict_tag}", flush=True)
    b = cb.build(cb.generate_verilog(DcohTestTop(cfg), name=TEST_TOP_NAME), top=TEST_TOP_NAME)
    env = {"TCXL_CONFIG": cfg.to_json(), "TCXL_STRESS_MESSAGES": args.messages,
           "TCXL_LATENCY": args.latency,
           "TCXL_STRESS_LINES": args.lines, "TCXL_STRESS_STALL": args.stall,
           "TCXL_STRESS_SEED": args.seed, "TCXL_STRESS_PMEM_STALL": args.pmem_stall,
           "TCXL_STRICT_MEDIA": int(args.strict_media),
           "TCXL_STRESS_CONFLICT_TAG": args.conflict_tag, "TCXL_STRESS_OUT": out,
           **({"TCXL_HOST_TRACE": 1} if args.trace else {}),
           **({"TCXL_PROFILE": os.environ["TCXL_PROFILE"]} if os.environ.get("TCXL_PROFILE")
              else {})}
    t0 = time.monotonic()
    err = None
    try:
        cb.run(b, "cosim.stress", seed=args.seed, extra_env=env, test_dir=REPORT_DIR / "run")
    except cb.CosimError as e:
        err = str(e)
    if not out.exists():
        print(f"stress: no result ({err})", file=sys.stderr)
        return 1
    s = json.loads(out.read_text())
    s.update(seed=args.seed, config=args.config, wall_total_s=round(time.monotonic() - t0, 1),
             run_error=err)
    (REPORT_DIR / "report.json").write_text(json.dumps(s, indent=1))
    print(f"stress: {s['messages_sent']} host messages in {s['wall_s']} s = "
          f"{s['host_messages_per_s']} messages/s ({s['cycles_per_s']} cycles/s), "
          f"conflicts {s['conflicts']} (late {s['late_conflicts']}, early "
          f"{s['early_conflicts']}), BISnps {s['recv_s2m_bisnp']}, device ops "
          f"{s['device']['reads'] + s['device']['writes']}")
    print(f"stress: violations {s['violations_total']} {s['violations_by_rule']}")
    for line in s["first_violations"][:5] + s["problems"][-3:]:
        print("  " + line.splitlines()[0])
    print(f"stress: report {REPORT_DIR / 'report.json'}")
    return 0 if s["violations_total"] == 0 and not s["problems"] and err is None else 1


if __name__ == "__main__":
    sys.exit(main())
