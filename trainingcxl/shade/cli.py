"""``trainingcxl shade``: the SHADE study (docs/shade.md). ``add_parser(subparsers)`` registers
the subcommand on an argparse command line; ``main(argv)`` runs it on its own."""
from __future__ import annotations

import argparse

from . import study


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("shade", help="SHADE importance-aware caching study (make shade)",
                              description=study.__doc__.splitlines()[0])
    study.add_arguments(p)
    p.set_defaults(func=lambda a: study.main(_argv(a)))
    return p


def _argv(a) -> list[str]:
    """The study's own options of a parsed namespace, back as a command line."""
    own = argparse.ArgumentParser()
    study.add_arguments(own)
    keys = {x.dest for x in own._actions}
    out = []
    for k, v in vars(a).items():
        if k not in keys or v is None or v is False:
            continue
        if v is True:
            out.append(f"--{k.replace('_', '-')}")
            continue
        v = ",".join(map(str, v)) if isinstance(v, list) else str(v)
        out += [f"--{k.replace('_', '-')}", v]
    return out


def main(argv=None) -> int:
    return study.main(argv)
