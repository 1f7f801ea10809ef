"""``trainingcxl data``: write a seeded synthetic click log, convert Criteo TSV, or check an npz
click log (the format of docs/dlrm.md; the library is :mod:`sw_model.clicklog`)."""
from __future__ import annotations

import argparse
import sys

from sw_model.clicklog import (SPLITS, ClickLogConfig, ClickLogFormatError, ClickLogGenerator,
                               convert_criteo_tsv, load_npz, save_npz)

__all__ = ["main"]


def main(argv=None) -> int:
    """``trainingcxl data {generate,convert,info} ...``."""
    ap = argparse.ArgumentParser(prog="trainingcxl data",
                                 description="click logs in the npz format of docs/dlrm.md")
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="seeded synthetic click log (the demo's data)")
    g.add_argument("out", help="npz file to write")
    g.add_argument("--batches", type=int, default=100)
    g.add_argument("--batch-size", type=int, default=32)
    g.add_argument("--rows", default="1000,2000,3000,5000", help="rows per table")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--split", choices=SPLITS, default="train")
    c = sub.add_parser("convert", help="Criteo-style TSV (label, 13 ints, 26 hex) to npz")
    c.add_argument("tsv")
    c.add_argument("out")
    c.add_argument("--rows", default="1000,2000,3000,5000", help="rows per table (<= 8)")
    c.add_argument("--salt", type=int, default=0)
    i = sub.add_parser("info", help="validate an npz click log and print its shape")
    i.add_argument("npz")
    a = ap.parse_args(argv)
    try:
        if a.cmd in ("generate", "convert"):
            rows = tuple(int(x) for x in a.rows.split(","))
        if a.cmd == "generate":
            d = ClickLogConfig(table_rows=rows,
                               alphas=(ClickLogConfig.alphas * len(rows))[:len(rows)],
                               seed=a.seed)
            data = ClickLogGenerator(d).generate(a.batches, a.batch_size, split=a.split)
            save_npz(a.out, data)
        elif a.cmd == "convert":
            data = convert_criteo_tsv(a.tsv, a.out, rows, salt=a.salt)
        else:
            data = load_npz(a.npz)
    except (ClickLogFormatError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    nnz = [len(x) for x in data.indices]
    print(f"{data.n} samples, {data.dense.shape[1]} dense features, {data.n_tables} tables "
          f"(rows {list(map(int, data.table_rows))}, indices {nnz}), "
          f"positive rate {float(data.labels.mean()):.3f}")
    return 0

