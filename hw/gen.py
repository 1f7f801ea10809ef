"""Generate Verilog and a ports manifest for a named configuration.

    python -m hw.gen [--config default] [--out build/verilog] [--no-src]

Writes ``<out>/trainingcxl_device.v`` and ``<out>/trainingcxl_device.ports.json`` (top name,
configuration, and every port with direction and width, in Verilog naming).
"""
import argparse
import json
import pathlib
import sys

from amaranth.back import verilog
from amaranth.hdl import Value
from amaranth.lib import wiring

from .config import CONFIGS, named
from .top import TOP_NAME, TrainingCXLDevice


def ports_manifest(top: wiring.Component, cfg) -> dict:
    ports = [{"name": "clk", "dir": "in", "width": 1}, {"name": "rst", "dir": "in", "width": 1}]
    for path, member, value in top.signature.flatten(top):
        ports.append({"name": "__".join(str(p) for p in path),
                      "dir": "in" if member.flow == wiring.In else "out",
                      "width": len(Value.cast(value))})
    return {"top": TOP_NAME, "config": json.loads(cfg.to_json()), "ports": ports}


def generate(cfg, out_dir: pathlib.Path, emit_src=True):
    top = TrainingCXLDevice(cfg)
    text = verilog.convert(top, name=TOP_NAME, emit_src=emit_src)
    out_dir.mkdir(parents=True, exist_ok=True)
    vpath = out_dir / f"{TOP_NAME}.v"
    vpath.write_text(text)
    mpath = out_dir / f"{TOP_NAME}.ports.json"
    mpath.write_text(json.dumps(ports_manifest(top, cfg), indent=1) + "\n")
    return vpath, mpath


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m hw.gen", description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="default", help=f"one of: {', '.join(CONFIGS)}")
    ap.add_argument("--out", default="build/verilog", type=pathlib.Path)
    ap.add_argument("--no-src", action="store_true", help="omit source-location attributes")
    args = ap.parse_args(argv)
    try:
        cfg = named(args.config)
    except ValueError as e:
        ap.error(str(e))
    v, mf = generate(cfg, args.out, emit_src=not args.no_src)
    n = len(json.loads(mf.read_text())["ports"])
    print(f"wrote {v} ({v.stat().st_size} bytes) and {mf} ({n} ports), config {args.config}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
