"""Trace comparator (cosim/trace/compare.py) and expected traces (sw_model/expected_trace.py), pure
Python: a synthetic host action log runs through the golden model into the expected semantic
trace; a "perfect device" turns that into raw boundary records (CSR AXI4-Lite, CXL.mem
channels, AXI media writes), which the reducer must bring back to an equal semantic trace.
Perturbations of single fields, swapped writes to one line and dropped responses must be found
at the right place; reordering across lines and tags must not be a divergence; malformed files
exit 2 with the line number.
"""
import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cosim.trace.compare import compare, load_trace, reduce_raw
from trainingcxl.compare import main
from hw.config import DeviceConfig
from hw.cxl_encodings import MetaField as MF, MetaValue as MV, ReqOpcode as RQ
from hw.cxl_encodings import RwDOpcode as RW, SnpType as ST
from hw.encodings import CPL_BYTES, DESC_BYTES, FLAG_LOG, DescKind as K
from sw_model.expected_trace import ACTIONS, RAW, RegMap, expected_events
from sw_model.training import TrainingDevice

CFG = DeviceConfig()
RM = RegMap()
ROOT = Path(__file__).resolve().parents[2]


class Host:
    """Builds an action log the way cosim.device_driver would record it."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.acts = [{"act": "reset"}]
        self.tag = 0
        self.salloc = CFG.staging_base

    def w(self, name, v):
        self.acts.append({"act": "csr_write", "addr": RM.off[name], "data": v, "strb": 15,
                          "resp": 0})

    def r(self, name, v):
        self.acts.append({"act": "csr_read", "addr": RM.off[name], "data": v, "resp": 0})

    def poke(self, a, data):
        self.acts.append({"act": "poke", "addr": a, "data": bytes(data).hex()})

    def stage(self, data):
        a = self.salloc
        self.salloc += (len(data) + 63) // 64 * 64 or 64
        self.poke(a, data)
        return a

    def _hdr(self, opcode, snp, mf, mv, line, **kw):
        self.tag += 1
        return {"opcode": int(opcode), "snp_type": int(snp), "meta_field": int(mf),
                "meta_value": int(mv), "tag": self.tag, "addr": line, **kw}

    def cxl_write(self, addr, data, be=(1 << 64) - 1, poison=0):
        op = RW.MEM_WR if be == (1 << 64) - 1 else RW.MEM_WR_PTL
        h = self._hdr(op, ST.NO_OP, MF.META0_STATE, MV.I, addr // 64, poison=poison)
        self.acts.append({"act": "cxl", "tag": h["tag"], "ch": "m2s_rwd", "hdr": h,
                          "data": bytes(data).hex(), "be": format(be, "016x")})

    def cxl_read(self, addr):
        h = self._hdr(RQ.MEM_RD, ST.SNP_CUR, MF.NO_OP, MV.I, addr // 64)
        self.acts.append({"act": "cxl", "tag": h["tag"], "ch": "m2s_req", "hdr": h})


def workload(seed=1):
    """Format, two tables, two batches (LOOKUP+LOG, UPDATE, COMMIT), host reads."""
    h = Host(seed)
    h.w("CONTROL", 1)
    h.r("STATUS", 8)                       # still recovering: unsynchronised
    h.r("STATUS", 4)                       # READY
    tables = {}
    base = CFG.table_base
    for tid, rows, dim in ((0, 20, 16), (1, 10, 32)):
        t = h.rng.integers(-2**20, 2**20, (rows, dim)).astype("<i4")
        h.poke(base, t.tobytes())
        h.w(f"TABLE{tid}_BASE_LO", base & 0xFFFFFFFF)
        h.w(f"TABLE{tid}_BASE_HI", base >> 32)
        h.w(f"TABLE{tid}_ROWS", rows)
        h.w(f"TABLE{tid}_DIM", dim)
        tables[tid] = (base, rows, dim)
        base += rows * dim * 4
    h.w("LR", 1 << (CFG.frac_bits - 3))
    size = 8
    ring = h.stage(bytes(DESC_BYTES * size))
    cpl = h.stage(bytes(CPL_BYTES * size))
    h.w("CMD_BASE_LO", ring & 0xFFFFFFFF)
    h.w("CMD_BASE_HI", ring >> 32)
    h.w("CMD_SIZE", size)
    h.w("CPL_BASE_LO", cpl & 0xFFFFFFFF)
    h.w("CPL_BASE_HI", cpl >> 32)
    tail = 0
    for b in (1, 2):
        descs = []
        for tid, (tb, rows, dim) in tables.items():
            offs = np.array([0, 2, 2, 5], "<u4")
            idx = h.rng.integers(0, rows, 5).astype("<u4")
            oa, ia = h.stage(offs.tobytes()), h.stage(idx.tobytes())
            out = h.stage(bytes(3 * dim * 4))
            g = h.rng.integers(-2**16, 2**16, (3, dim)).astype("<i4")
            ga = h.stage(g.tobytes())
            descs.append(TrainingDevice.make_desc(kind=K.LOOKUP, flags=FLAG_LOG, table=tid,
                                                  tag=len(descs), batch=b, n_bags=3,
                                                  offsets_addr=oa, indices_addr=ia,
                                                  data_addr=out))
            descs.append(TrainingDevice.make_desc(kind=K.UPDATE, table=tid, tag=len(descs),
                                                  batch=b, n_bags=3, offsets_addr=oa,
                                                  indices_addr=ia, data_addr=ga))
        descs.append(TrainingDevice.make_desc(kind=K.COMMIT, tag=99, batch=b))
        slots = []
        for d in descs[:4]:
            h.cxl_write(ring + DESC_BYTES * tail, d)
            slots.append(tail)
            tail = (tail + 1) % size
        h.w("CMD_TAIL", tail)
        h.r("CMD_TAIL", tail)
        h.r("CPL_HEAD", (tail - 3) % size)           # partial progress seen
        h.cxl_read(cpl + CPL_BYTES * slots[0])        # unsynchronised: data unchecked
        h.r("CPL_HEAD", tail)
        for s in slots:
            h.cxl_read(cpl + CPL_BYTES * s)
        for d in descs[4:]:
            h.cxl_write(ring + DESC_BYTES * tail, d)
            slots.append(tail)
            tail = (tail + 1) % size
        h.w("CMD_TAIL", tail)
        h.r("CPL_HEAD", tail)
        h.cxl_read(cpl + CPL_BYTES * slots[-1])
        h.r("COMMITTED_LO", b)
    h.cxl_read(tables[0][0] + 64)
    h.cxl_read(CFG.superblock_base)
    h.cxl_read(CFG.log_base)                          # refused: MemData-NXM
    h.acts.append({"act": "csr_read", "addr": 0xFFC, "data": 0, "resp": 2})
    h.w("ERR_COUNT", 5)                               # read-only: SLVERR
    for name in ("ERR_CODE", "ERR_VALUE_LO", "ERR_COUNT", "STATUS", "IRQ_STATUS", "LOG_SLOT",
                 "ID", "REGION_TABLE_BASE_HI", "TABLE1_DIM"):
        h.r(name, 0)
    return h.acts


def _hexint(data: bytes) -> str:
    return format(int.from_bytes(data, "little"), f"0{2 * len(data)}x")


def perfect_device(expected, actions):
    """Raw boundary records a device matching ``expected`` exactly would show."""
    reads = iter([a["data"] for a in actions if a.get("act") == "csr_read"])
    raw = [{"trace": RAW, "version": 1, "section": "", "cfg": CFG.to_json()}]
    cyc = 0

    def add(ch, **kw):
        raw.append({"cycle": cyc, "ch": ch, **kw})

    for ev in expected[1:]:
        cyc += 3
        e = ev["ev"]
        if e == "reset":
            add("reset", rst=1)
        elif e == "csr_w":
            add("csr_aw", awaddr=ev["addr"], awprot=0)
            add("csr_w", wdata=format(ev["data"], "08x"), wstrb=ev["strb"])
            add("csr_b", bresp=ev["resp"])
        elif e == "csr_r":
            got = next(reads)
            add("csr_ar", araddr=ev["addr"], arprot=0)
            add("csr_r", rdata=format(got if ev["data"] is None else ev["data"], "08x"),
                rresp=ev["resp"])
        elif e == "cxl":
            hdr = {k: ev[k] for k in ("opcode", "snp_type", "meta_field", "meta_value", "addr")}
            hdr["tag"] = ev["tag"]
            if ev["ch"] == "m2s_rwd":
                add("m2s_rwd", hdr={**hdr, "poison": ev.get("poison", 0)},
                    data=_hexint(bytes.fromhex(ev["wdata"])), be=ev["be"])
            else:
                add("m2s_req", hdr=hdr)
            for op in ev["ndr"]:
                add("s2m_ndr", hdr={"opcode": op, "tag": ev["tag"]})
            for d in ev["drs"]:
                data = bytes.fromhex(d["data"]) if d["data"] else bytes(64)
                add("s2m_drs", hdr={"opcode": d["opcode"], "tag": ev["tag"],
                                    "poison": d["poison"]}, data=_hexint(data))
        elif e == "mwr":
            add("aw", awid=0, awaddr=ev["addr"], awlen=0, awsize=6, awuser=ev.get("poison", 0))
            add("w", wdata=_hexint(bytes.fromhex(ev["data"])), wstrb=int(ev["be"], 16), wlast=1)
            add("b", bid=0, bresp=0)
        elif e == "mrd":
            add("ar", arid=0, araddr=ev["addr"], arlen=0, arsize=6)
            add("r", rid=0, rdata="0" * 128, rlast=1, rresp=0)
    return raw


@pytest.fixture(scope="module")
def traces():
    acts = workload()
    exp = expected_events(acts, CFG)
    raw = perfect_device(exp, acts)
    return acts, exp, raw


def _red(raw):
    return reduce_raw(raw[1:], CFG)


def _ev(exp, kind, pred=lambda e: True):
    return next(e for e in exp[1:] if e["ev"] == kind and pred(e))


def test_workload_is_not_trivial(traces):
    _, exp, _ = traces
    kinds = [e["ev"] for e in exp[1:]]
    cpls = [e for e in exp[1:] if e["ev"] == "cpl"]
    assert len(cpls) == 10 and all(c["status"] == 0 for c in cpls), cpls
    assert sum(c["log_records"] for c in cpls) > 0
    assert kinds.count("image") == 2 and kinds.count("mwr") > 40
    reads = [e for e in exp[1:] if e["ev"] == "cxl" and e["ch"] == "m2s_req"]
    assert any(r["drs"][0]["data"] is None for r in reads)       # unsynchronised read
    assert any(r["drs"][0]["opcode"] == 1 for r in reads)        # NXM from the log region
    csr = [e for e in exp[1:] if e["ev"] == "csr_r" and e["data"] is not None]
    assert {e["name"] for e in csr} >= {"ERR_CODE", "STATUS", "ID", "TABLE1_DIM"}


def test_identical_traces_pass(traces):
    _, exp, raw = traces
    r = compare(exp, copy.deepcopy(exp))
    assert r.equal, r.report
    r = compare(_red(raw), exp)
    assert r.equal, r.report
    assert r.counts["cpl"] == 10 and r.counts["image"] == 2 and r.counts["cxl"] > 10, r.counts


def test_expected_poison_follows_the_media_rule():
    """Host writes with and without poison (docs/coherence.md "Poison"): the expected MemData
    poison is the media's bit (set by a poisoned write, kept by a partial clean write, cleared
    by a full-line clean one, and by a "load" image's list); each ``mwr`` carries the write's
    poison; a perfect device's trace is equal, one with an AWUSER flipped diverges there."""
    h = Host(3)
    a = CFG.table_base + 0x40
    h.cxl_write(a, bytes([1]) * 64, poison=1)
    h.cxl_read(a)
    h.cxl_write(a, bytes([2]) * 64, be=(1 << 64) - 2)
    h.cxl_read(a)
    h.cxl_write(a, bytes([3]) * 64)
    h.cxl_read(a)
    h.acts.append({"act": "load", "lines": {}, "poisoned": [format(a, "x")]})
    h.cxl_read(a)
    exp = expected_events(h.acts, CFG)
    reads = [e["drs"][0]["poison"] for e in exp[1:] if e["ev"] == "cxl" and e["ch"] == "m2s_req"]
    assert reads == [1, 1, 0, 1]
    assert [e["poison"] for e in exp[1:] if e["ev"] == "mwr"] == [1, 0, 0]
    raw = perfect_device(exp, h.acts)
    r = compare(_red(raw), exp)
    assert r.equal, r.report
    bad = copy.deepcopy(raw)
    next(x for x in bad if x.get("ch") == "aw")["awuser"] = 0
    _check(compare(_red(bad), exp), "mwr", "poison")


def _check(res, cls, fld, key=None):
    assert not res.equal
    d = res.divergence
    assert (d.cls, d.field) == (cls, fld), res.report
    if key is not None:
        assert d.key == key, res.report
    assert "first divergence" in res.report and fld in res.report


def test_completion_status_perturbed(traces):
    _, exp, raw = traces
    b = copy.deepcopy(exp)
    c = [e for e in b if e.get("ev") == "cpl"][3]
    c["status"] = 7
    _check(compare(exp, b), "cpl", "status", ("n", 3))


def test_completion_status_in_raw_media_write(traces):
    """The status byte of completion 2 changed in the AXI write data of the RTL trace."""
    _, exp, raw = traces
    c2 = [e for e in exp if e.get("ev") == "cpl"][2]
    line = next(e for e in exp if e.get("ev") == "mwr" and e["addr"] - e["addr"] % 64 ==
                e["addr"] and e["i"] < c2["i"] and e["i"] == c2["i"] - 1)
    raw2 = copy.deepcopy(raw)
    w = next(r for k, r in enumerate(raw2) if r.get("ch") == "w" and raw2[k - 1].get("awaddr")
             == line["addr"])
    data = bytearray(bytes.fromhex(line["data"]))
    from hw.encodings import CPL_FIELDS
    off = next(o for n, o, _ in CPL_FIELDS if n == "status")
    data[off] ^= 0x5
    w["wdata"] = _hexint(bytes(data))
    # both the line write and the completion differ; the completion's field is reported
    _check(compare(_red(raw2), exp), "cpl", "status", ("n", 2))


def test_read_data_byte_perturbed(traces):
    _, exp, raw = traces
    ev = next(e for e in exp[1:] if e["ev"] == "cxl" and e["drs"] and e["drs"][0]["data"]
              and e["drs"][0]["opcode"] == 0)
    raw2 = copy.deepcopy(raw)
    drs = next(r for r in raw2 if r.get("ch") == "s2m_drs" and r["hdr"]["tag"] == ev["tag"])
    data = bytearray(int(drs["data"], 16).to_bytes(64, "little"))
    data[17] ^= 1
    drs["data"] = _hexint(bytes(data))
    res = compare(_red(raw2), exp)
    _check(res, "cxl", "drs.data", ("tag", ev["tag"], "n", 0))
    assert "bytes differing: [17]" in res.report


def test_image_line_perturbed(traces):
    _, exp, _ = traces
    b = copy.deepcopy(exp)
    img = [e for e in b if e.get("ev") == "image"][1]
    k = sorted(img["lines"])[2]
    img["lines"][k] = "0" * 16
    _check(compare(exp, b), "image", f"lines[{k}]", ("n", 1))


def test_swapped_writes_to_one_line(traces):
    """Two writes of the same table line exchanged: per-line order is a divergence."""
    _, exp, raw = traces
    seen = {}
    pair = None
    for e in exp[1:]:
        if e["ev"] == "mwr" and CFG.table_base <= e["addr"] < CFG.table_base + CFG.table_size:
            if e["addr"] in seen and seen[e["addr"]]["data"] != e["data"]:
                pair = (seen[e["addr"]], e)
                break
            seen[e["addr"]] = e
    assert pair is not None
    raw2 = copy.deepcopy(raw)
    ws = [r for k, r in enumerate(raw2) if r.get("ch") == "w" and raw2[k - 1].get("awaddr")
          == pair[0]["addr"]]
    ws[0]["wdata"], ws[1]["wdata"] = ws[1]["wdata"], ws[0]["wdata"]
    _check(compare(_red(raw2), exp), "mwr", "data", ("line", pair[0]["addr"], "k", 0))


def test_dropped_response(traces):
    _, exp, raw = traces
    ev = [e for e in exp[1:] if e["ev"] == "cxl" and e["ch"] == "m2s_rwd"][2]
    raw2 = [r for r in raw if not (r.get("ch") == "s2m_ndr" and r["hdr"]["tag"] == ev["tag"])]
    _check(compare(_red(raw2), exp), "cxl", "ndr", ("tag", ev["tag"], "n", 0))


def test_media_reads_compared_as_a_set_per_epoch(traces):
    """Each line the device reads counts once per power-on epoch: a repeated read is no
    event, a read of a line the model never reads (a stray read) and a line the model reads
    that the device never did are divergences at that line."""
    acts, exp, raw = traces
    reads = [k for k, r in enumerate(raw) if r.get("ch") == "ar"]
    assert len(reads) > 20
    raw2 = copy.deepcopy(raw)
    raw2.insert(reads[-1] + 1, dict(raw[reads[3]]))          # the same line again
    assert compare(_red(raw2), exp).equal
    stray = CFG.log_base + CFG.log_size - 64                   # the log's last line
    assert not any(r.get("araddr") == stray for r in raw)
    raw2 = copy.deepcopy(raw)
    raw2.insert(reads[5], {**raw[reads[5]], "araddr": stray})
    _check(compare(_red(raw2), exp), "mrd", "missing", ("line", stray, "k", 0))
    raw2 = copy.deepcopy(raw)
    dropped = raw2.pop(reads[7])
    _check(compare(_red(raw2), exp), "mrd", "missing", ("line", dropped["araddr"], "k", 0))


def test_dropped_completion_write(traces):
    _, exp, raw = traces
    c = [e for e in exp if e.get("ev") == "cpl"][-1]
    line = c["slot"]
    del line
    raw2 = copy.deepcopy(raw)
    # drop the last completion-ring write (the COMMIT of batch 2)
    last_aw = max(k for k, r in enumerate(raw2) if r.get("ch") == "aw"
                  and any(e.get("ev") == "cpl" for e in exp))
    cpl_addr = raw2[last_aw]["awaddr"]
    ks = [k for k, r in enumerate(raw2) if r.get("ch") == "aw" and r["awaddr"] == cpl_addr]
    k = ks[-1]
    del raw2[k:k + 3]
    res = compare(_red(raw2), exp)
    assert not res.equal and res.divergence.field == "missing", res.report


def test_reordering_across_lines_and_tags_is_not_a_divergence(traces):
    _, exp, raw = traces
    raw2 = copy.deepcopy(raw)
    # media bursts: swap neighbouring (aw, w, b) groups of different lines, away from
    # completion-ring writes (the image at a COMMIT is taken at its completion write)
    cpl_lines = {e["addr"] for e in exp if e.get("ev") == "mwr" and any(
        c.get("ev") == "cpl" and c["i"] == e["i"] + 1 for c in exp[1:])}
    groups = [k for k, r in enumerate(raw2) if r.get("ch") == "aw"]
    swapped = 0
    for k1, k2 in zip(groups, groups[1:]):
        a1, a2 = raw2[k1]["awaddr"], raw2[k2]["awaddr"]
        if k2 == k1 + 3 and a1 != a2 and not {a1, a2} & cpl_lines and swapped < 10 \
                and k1 % 2 == 0:
            raw2[k1:k1 + 3], raw2[k2:k2 + 3] = raw2[k2:k2 + 3], raw2[k1:k1 + 3]
            swapped += 1
    assert swapped >= 3
    # host responses of different tags: move every DRS after the next request's responses
    resp = [k for k, r in enumerate(raw2) if r.get("ch") == "s2m_drs"]
    for k in reversed(resp[:-1]):
        rec = raw2.pop(k)
        raw2.insert(k + 2, rec)
    r = compare(_red(raw2), exp)
    assert r.equal, r.report


def _write(path, objs):
    path.write_text("".join(json.dumps({k: v for k, v in o.items() if k != "_line"}) + "\n"
                            for o in objs))
    return path


def test_cli(traces, tmp_path, capsys):
    acts, exp, raw = traces
    rawf = _write(tmp_path / "rtl.jsonl", raw)
    actf = _write(tmp_path / "rtl.actions.jsonl",
                  [{"trace": ACTIONS, "version": 1, "section": "", "cfg": CFG.to_json()}, *acts])
    expf = _write(tmp_path / "exp.jsonl", exp)
    assert main([str(rawf), str(actf)]) == 0
    assert main([str(rawf), str(expf)]) == 0
    assert "traces equal" in capsys.readouterr().out
    raw2 = copy.deepcopy(raw)
    r = next(r for r in raw2 if r.get("ch") == "csr_b")
    r["bresp"] = 2
    badf = _write(tmp_path / "bad.jsonl", raw2)
    assert main([str(badf), str(actf)]) == 1
    out = capsys.readouterr().out
    assert "field 'resp' differs" in out and "csr_w" in out, out
    # subprocess, as the lead's CLI would run it
    p = subprocess.run([sys.executable, "-m", "trainingcxl", "compare", str(badf), str(expf)],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 1 and "'resp'" in p.stdout, p


def test_malformed_input(tmp_path, capsys):
    good = json.dumps({"trace": RAW, "version": 1})
    f = tmp_path / "bad.jsonl"
    f.write_text(good + "\n" + json.dumps({"cycle": 1, "ch": "reset", "rst": 1}) +
                 "\n{\"cycle\": 2, \"ch\": \n")
    assert main([str(f), str(f)]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:3: malformed JSON" in err, err
    assert main([str(tmp_path / "nope.jsonl"), str(f)]) == 2
    assert "cannot open" in capsys.readouterr().err
    g = tmp_path / "nohdr.jsonl"
    g.write_text(json.dumps({"cycle": 1, "ch": "aw"}) + "\n")
    assert main([str(g), str(g)]) == 2
    assert "nohdr.jsonl:1: first line is not a trace header" in capsys.readouterr().err
    h = tmp_path / "noch.jsonl"
    h.write_text(good + "\n" + json.dumps({"x": 1}) + "\n")
    assert main([str(h), str(h)]) == 2
    assert "noch.jsonl:2:" in capsys.readouterr().err


def test_load_trace_sections(traces, tmp_path):
    _, exp, raw = traces
    f = _write(tmp_path / "two.jsonl", [*raw, {**raw[0], "section": "second"}, *raw[1:]])
    secs = load_trace(f)
    assert list(secs) == ["", "second"]


def crash_workload():
    """The workload cut at batch 2's first doorbell (the host never sees those descriptors
    finish, and one host read is still outstanding), then a power cycle that loads an image of
    the two tables only, a recovery (which must format the superblock) and host reads of the
    tables and the superblock."""
    acts = workload()
    tail_w = [i for i, a in enumerate(acts)
              if a.get("act") == "csr_write" and a["addr"] == RM.off["CMD_TAIL"]]
    cut = acts[:tail_w[2] + 1]                     # batch 1 rings twice, batch 2's first
    tables = [a for a in acts if a.get("act") == "poke"
              and CFG.table_base <= a["addr"] < CFG.table_base + CFG.table_size]
    image = {}
    for a in tables:
        data = bytes.fromhex(a["data"])
        for o in range(0, len(data), 64):
            line = data[o:o + 64].ljust(64, b"\0")
            image[format(a["addr"] + o, "x")] = line.hex()
    h = Host(7)
    h.tag = 5000
    h.acts = []
    h.cxl_read(CFG.table_base + 128)
    cut.append({**h.acts.pop(), "cut": True})
    h.acts = [{"act": "reset"}, {"act": "load", "lines": image}]
    h.w("CONTROL", 1)
    h.r("STATUS", 4)
    h.cxl_read(CFG.table_base + 64)
    h.cxl_read(CFG.superblock_base)
    h.r("COMMITTED_LO", 0)
    return cut + h.acts, image


@pytest.fixture(scope="module")
def crash_traces():
    acts, image = crash_workload()
    exp = expected_events(acts, CFG)
    return acts, exp, image


def test_power_cycle_marks_cut_work_and_loads_the_image(crash_traces):
    acts, exp, image = crash_traces
    may = [e for e in exp[1:] if e.get("may")]
    assert {e["ev"] for e in may} == {"mwr", "mrd", "cpl", "cxl"}, {e["ev"] for e in may}
    assert all(e["ev"] != "image" for e in may)      # batch 2's COMMIT was not rung yet
    resets = [e["i"] for e in exp[1:] if e["ev"] == "reset"]
    assert all(e["i"] < resets[-1] for e in may)
    # after the load, host reads see the image (not what batch 1 wrote to the table lines)
    rd = [e for e in exp[1:] if e["ev"] == "cxl" and e["i"] > resets[-1]]
    assert rd[0]["drs"][0]["data"] == image[format(CFG.table_base + 64, "x")]
    sb = [e for e in exp[1:] if e["ev"] == "mwr" and e["i"] > resets[-1]]
    assert sb and all(e["addr"] == CFG.superblock_base and not e.get("may") for e in sb)


def test_power_cycle_device_may_have_done_any_prefix(crash_traces):
    acts, exp, _ = crash_traces
    full = perfect_device(exp, acts)
    assert compare(_red(full), exp).equal
    none = perfect_device([e for e in exp if not e.get("may")], acts)
    res = compare(_red(none), exp)
    assert res.equal, res.report
    # a prefix per line: only the first may-write of each line done
    seen, part = set(), []
    for e in exp:
        if e.get("ev") == "mwr" and e.get("may"):
            if e["addr"] in seen:
                continue
            seen.add(e["addr"])
        part.append(e)
    assert compare(_red(perfect_device(part, acts)), exp).equal


def test_handshake_at_the_reset_edge_belongs_to_the_old_epoch(crash_traces):
    """A media write sampled at the same edge as the reset (recorded after the reset record
    of that cycle) happened before the power cycle; seen in the 200-batch main job."""
    acts, exp, _ = crash_traces
    raw = perfect_device(exp, acts)
    r0 = next(k for k, r in enumerate(raw) if r.get("ch") == "reset" and k > 1
              and any(x.get("ch") == "aw" for x in raw[:k]))
    k = max(j for j in range(r0) if raw[j].get("ch") == "aw")
    moved = [dict(x, cycle=raw[r0]["cycle"]) for x in raw[k:k + 3]]      # aw, w, b
    assert [x["ch"] for x in moved] == ["aw", "w", "b"]
    raw2 = raw[:k] + raw[k + 3:r0 + 1] + moved + raw[r0 + 1:]
    res = compare(_red(raw2), exp)
    assert res.equal, res.report
    # one cycle later it is a write of the new epoch, which the model does not make
    late = [dict(x, cycle=raw[r0]["cycle"] + 1) for x in moved]
    raw3 = raw[:k] + raw[k + 3:r0 + 1] + late + raw[r0 + 1:]
    assert not compare(_red(raw3), exp).equal


def test_power_cycle_divergences_still_found(crash_traces):
    acts, exp, _ = crash_traces
    # a may-write the device did, with a wrong byte
    bad = copy.deepcopy(exp)
    w = next(e for e in bad[1:] if e["ev"] == "mwr" and e.get("may") and e["be"] == "f" * 16)
    w["data"] = ("%02x" % (int(w["data"][:2], 16) ^ 1)) + w["data"][2:]
    _check(compare(_red(perfect_device(bad, acts)), exp), "mwr", "data",
           ("line", w["addr"], "k", w["k"]))
    # a write in the recovered epoch that the model does not make
    bad = copy.deepcopy(exp)
    last = bad[-1]["i"]
    bad.append({"ev": "mwr", "addr": CFG.table_base, "k": 0, "be": "f" * 16,
                "data": "11" * 64, "i": last + 1})
    res = compare(_red(perfect_device(bad, acts)), exp)
    assert not res.equal and res.divergence.field == "missing", res.report
    assert res.divergence.key[:2] == ("epoch", 1), res.report
    # the second recovery's superblock writes dropped
    reset = [e["i"] for e in exp[1:] if e["ev"] == "reset"][-1]
    bad = [e for e in exp if not (e.get("ev") == "mwr" and e["addr"] == CFG.superblock_base
                                  and e["i"] > reset)]
    res = compare(_red(perfect_device(bad, acts)), exp)
    d = res.divergence
    assert not res.equal and (d.cls, d.field) == ("mwr", "missing"), res.report
    assert d.key[:4] == ("epoch", 1, "line", CFG.superblock_base), res.report
