"""``trainingcxl compare A B``: compare two device traces by the rules that hold (docs/traces.md).

``A`` and ``B`` are raw RTL boundary traces, host action logs or semantic traces (the library,
with the rules, is :mod:`cosim.trace.compare`). Exit status: 0 equal, 1 divergence (the first
one, with context from both sides), 2 bad input (missing file, malformed JSON with its line
number, unknown trace kind).
"""
from __future__ import annotations

import argparse
import json
import sys

from cosim.trace.compare import TraceFormatError, compare_files, load_trace

__all__ = ["main"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="trainingcxl compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("a", help="trace A (raw RTL trace, action log or semantic trace)")
    ap.add_argument("b", help="trace B")
    ap.add_argument("--context", type=int, default=3, help="events of context each side")
    ap.add_argument("--write-semantic", metavar="PREFIX",
                    help="also write both semantic traces to PREFIX.a.jsonl / PREFIX.b.jsonl")
    args = ap.parse_args(argv)
    try:
        res = compare_files(args.a, args.b, context=args.context)
        if args.write_semantic:
            for tag, p in (("a", args.a), ("b", args.b)):
                with open(f"{args.write_semantic}.{tag}.jsonl", "w") as f:
                    for sec, evs in load_trace(p).items():
                        for e in evs:
                            f.write(json.dumps({k: v for k, v in e.items()
                                                if k not in ("_line", "_n")}
                                               | ({"section": sec} if "trace" in e else {}))
                                    + "\n")
    except TraceFormatError as e:
        print(f"compare: bad input: {e}", file=sys.stderr)
        return 2
    print(res.report)
    return 0 if res.equal else 1

