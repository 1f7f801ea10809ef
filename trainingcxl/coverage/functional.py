"""Merge and report the functional coverage that the benches sample (cosim/fcov.py).

Each simulator process writes ``<pid>.json`` (item -> bin -> hits); :func:`merge_dir` adds them
up over the universe of bins of :func:`cosim.fcov.bins`, marks the bins the design makes
unreachable (:func:`unreachable`, each with its reason; they are not counted in ``total``) and
lists every reachable bin that was missed.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from cosim import fcov

__all__ = ["merge_dir", "merge", "unreachable"]

# docs/training.md sections 2, 4, 9: which completion statuses each descriptor kind can get
_ENGINE_ERRORS = ("OK", "BAD_DIM", "ALIGN", "ADDR_RANGE", "OFFSETS_ORDER", "BAG_TOO_LONG",
                  "INDEX_RANGE", "MEDIA", "WRONG_BATCH", "BAD_TABLE", "LOG_FULL")
_CPL_REACHABLE = {
    "LOOKUP": _ENGINE_ERRORS,
    "UPDATE": _ENGINE_ERRORS,
    "COMMIT": ("OK", "WRONG_BATCH", "MLP_LAG", "MEDIA"),
    "SNAPSHOT": ("OK", "BAD_EPOCH", "ADDR_RANGE", "SNAP_LENGTH"),
    # a descriptor whose read from the ring failed: its kind is never known (media area)
    "unknown": ("UNKNOWN_KIND", "MEDIA"),
}
_CPL_WHY = {
    "LOOKUP": "a LOOKUP is checked for kind/table/batch and by the gather engine only "
              "(training.md 2, lookup.md)",
    "UPDATE": "an UPDATE is checked for kind/table/batch and by the update engine only "
              "(training.md 2, 4)",
    "COMMIT": "a COMMIT names no table, rows or addresses: only the batch, the MLP lag and the "
              "superblock write can fail (training.md 2, 6, 9)",
    "SNAPSHOT": "a SNAPSHOT is checked for epoch, source range and length and completes before "
                "its DMA runs, so no media error reaches its completion (training.md 9)",
    "unknown": "an unknown kind is refused before any other check (UNKNOWN_KIND); MEDIA when "
               "the descriptor read itself failed. A hit on another status is a record the "
               "device did not write (the slot of a failed completion write, read back stale)",
}
_BISNP_WHY = ("the DCOH only sends BISnpInv (victims, device writes, device RdOwn) and BISnpData "
              "(device RdCur): hw/dcoh/dcoh.py alloc_op")
_BIRSP_WHY = ("legal only in answer to BISnpCur or a BISnp*Blk, which the DCOH never sends "
              "(sw_model.coherence.birsp_allowed); only a protocol-error test sends it")

# Legal Reqs after which the snoop filter does not track the line (docs/coherence.md "Legal
# requests": SF after I)
_RELEASING_REQS = ("MEM_INV/SNP_INV/I", "MEM_INV_NT/SNP_INV/I", "MEM_CLN_EVCT/NO_OP/I")
_LATE_WHY = ("a late conflict needs a BISnp sent after the Req was served (a Req waits while a "
             "BISnp to its line is outstanding), so the snoop filter must still track the line; "
             "this Req leaves it untracked and the host sends no other Req to the line before "
             "its Cmp (one per line), so nothing can snoop the line in that window")


# crash.cut (cosim/fcov.py): writes that cannot be in flight in a phase (docs/training.md)
_CUT_WHY = {
    "table": "the device writes table rows only in UPDATE, whose writes are acknowledged before "
             "its completion is written (training.md 3), and in recovery, which waits for them "
             "before READY (training.md 6 step 4); the host does not write tables while "
             "training (training.md 1)",
    "log": "undo records are written only by LOOKUP and UPDATE (training.md 5); recovery "
           "only reads the log (training.md 6), and the power cycle before it drops every "
           "write in flight",
    "slots": "recovery only reads the slots (training.md 9) and no SNAPSHOT can run before "
             "READY (a doorbell before it is NOT_READY, training.md 3); a power cycle drops "
             "the copy",
    "cpl": "a completion write belongs to its descriptor's window: the device waits for its "
           "write response before it advances CPL_HEAD (training.md 3), and the window ends "
           "at that response; nothing executes during recovery, and the host only reads the "
           "completion ring",
}
_CUT_UNREACHABLE = {
    "table": ("none", "LOOKUP", "COMMIT", "SNAPSHOT"),
    "log": ("RECOVER",),
    "slots": ("RECOVER",),
    "cpl": ("none", "RECOVER"),
}


def unreachable() -> dict:
    """item -> {bin: reason} for the bins the design makes impossible."""
    out = {name: {} for name in fcov.bins()}
    for b in fcov.bins()["cmd.cpl"]:
        kind, code = b.split("|")
        if code not in _CPL_REACHABLE[kind]:
            out["cmd.cpl"][b] = _CPL_WHY[kind]
    for combo in fcov.NO_ALLOC:
        out["dcoh.req"][f"{combo}|I|victim"] = ("the request does not allocate a snoop-filter "
                                                "entry, so it never evicts a victim")
    for combo in _RELEASING_REQS:
        out["dcoh.conflict_req"][f"late|{combo}"] = _LATE_WHY
    for b in ("BISNP_CUR", "BISNP_CUR_BLK", "BISNP_DATA_BLK", "BISNP_INV_BLK"):
        out["dcoh.bisnp"][b] = _BISNP_WHY
    for b in ("BIRSP_E", "BIRSP_I_BLK", "BIRSP_S_BLK", "BIRSP_E_BLK"):
        out["dcoh.birsp"][b] = _BIRSP_WHY
    for kind, phases in _CUT_UNREACHABLE.items():
        for phase in phases:
            out["crash.cut"][f"{phase}|{kind}"] = _CUT_WHY[kind]
    return out


def merge(docs) -> dict:
    docs = list(docs)
    universe = fcov.bins()
    unr = unreachable()
    hits = {name: Counter() for name in universe}
    for d in docs:
        for name, per_bin in d.items():
            if name in hits:
                hits[name].update({k: int(v) for k, v in per_bin.items()})
    groups = {}
    for name, labels in universe.items():
        reach = [b for b in labels if b not in unr[name]]
        hit = [b for b in reach if hits[name][b] > 0]
        groups[name] = {
            "hit": len(hit), "total": len(reach),
            "pct": round(100.0 * len(hit) / len(reach), 1) if reach else None,
            "missed": [b for b in reach if hits[name][b] == 0],
            "unreachable": unr[name],
            "unreachable_but_hit": [b for b in unr[name] if hits[name][b] > 0],
            "hits": {b: hits[name][b] for b in labels},
        }
    return {"processes": len(docs), "groups": groups}


def merge_dir(d: Path) -> dict:
    files = sorted(Path(d).glob("*.json"))
    return merge(json.loads(f.read_text()) for f in files) | {"files": len(files)}
