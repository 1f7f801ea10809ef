"""Gaps in the model tests that mutation testing found (docs/verification.md "Mutation testing:
sw_model"): each test names the mutmut mutant(s) of ``python -m trainingcxl.mutate.model`` it
was written for; each fails with that mutant applied (checked with ``mutmut apply`` on a copy of
``sw_model``; for ``RegMap.__init__`` and ``StagingLayout.__init__``, which ``mutmut apply``
confuses with the module's first ``__init__``, by editing the copy by hand) and passes on the model. Expected values are worked out by hand from the
documented behaviour, not taken from a model run."""
import json

import numpy as np
import pytest

from hw.config import DeviceConfig
from hw.cxl_encodings import (BISnpOpcode as BS, MetaField as MF, MetaValue as MV,
                              NDROpcode as NDR, ReqOpcode as RQ, SnpType as ST)
from hw.encodings import CPL_FIELDS, DescKind, DeviceError
from hw.encodings import DeviceError as E
from sw_model.clicklog import ClickData, ClickLogFormatError, save_npz
from sw_model.coherence import CoherenceViolation, HostPermission
from sw_model.dlrm import TrainResult, npz_data
from sw_model.embedding_device import DeviceStatusError
from sw_model.fixedpoint import I32_MAX, I32_MIN, to_float
from sw_model.training import CSR_NAMES, _load_csr_addr
from sw_model.workload import make_table

CFG = DeviceConfig()


def _click_data(n: int) -> ClickData:
    """n samples, one dense feature equal to the sample number, one table of 4 rows with one
    index per sample (sample i looks up row i % 4), labels alternating 0/1."""
    return ClickData(dense=np.arange(n, dtype=np.float32).reshape(n, 1),
                     offsets=[np.arange(n + 1, dtype=np.int64)],
                     indices=[np.arange(n, dtype=np.int64) % 4],
                     labels=(np.arange(n) % 2).astype(np.float32),
                     table_rows=np.array([4], dtype=np.int64))


# ---- dlrm.npz_data ------------------------------------------------------------------------------

def test_npz_data_splits_train_batches_and_held_out_part_in_file_order(tmp_path):
    """Mutant ``sw_model.dlrm.x_npz_data__mutmut_11`` (``n_train = int(None)``): no test loaded a
    valid file through npz_data. 10 samples, eval 0.2: the first int(10 * 0.8) = 8 train, batch
    4 -> 2 batches (samples 0-3, 4-7), samples 8-9 held out, table_rows (4,)."""
    path = tmp_path / "log.npz"
    save_npz(path, _click_data(10))
    data, n_batches, eval_data, table_rows = npz_data(path, 4, eval_fraction=0.2)
    assert n_batches == 2 and table_rows == (4,)
    assert data(1).dense[:, 0].tolist() == [0, 1, 2, 3]
    assert data(2).dense[:, 0].tolist() == [4, 5, 6, 7]
    assert eval_data.dense[:, 0].tolist() == [8, 9]
    with pytest.raises(IndexError):
        data(3)


def test_npz_data_refuses_eval_fraction_one_before_reading_the_file(tmp_path):
    """Mutant ``sw_model.dlrm.x_npz_data__mutmut_5`` (``0 < eval_fraction <= 1``): the range
    is open at 1 (nothing left to train on); the check comes before the file is opened."""
    with pytest.raises(ValueError, match=r"eval_fraction must be in \(0, 1\)"):
        npz_data(tmp_path / "absent.npz", 4, eval_fraction=1.0)


def test_npz_data_refuses_a_held_out_part_that_rounds_to_nothing(tmp_path):
    """Mutant ``sw_model.dlrm.x_npz_data__mutmut_20`` (``n_train > full.n``): 1 - 1e-17 is 1.0
    in float64, so int(8 * (1 - 1e-17)) = 8 = every sample and the held-out set would be
    empty; that must be refused."""
    path = tmp_path / "log.npz"
    save_npz(path, _click_data(8))
    with pytest.raises(ValueError, match="too few"):
        npz_data(path, 4, eval_fraction=1e-17)


# ---- dlrm.TrainResult.progressive_auc ------------------------------------------------------------

def test_progressive_auc_takes_batches_first_to_last_inclusive():
    """Mutant ``sw_model.dlrm.xǁTrainResultǁprogressive_auc__mutmut_10`` (``range(first, )``,
    i.e. batches before ``first``). Batch 1 ranks its positive below its negative; batches 2
    and 3 rank their positive above their negative."""
    r = TrainResult(n_batches=3)
    r.preds = {1: (np.array([0.1, 0.9]), np.array([1.0, 0.0])),
               2: (np.array([0.8, 0.2]), np.array([1.0, 0.0])),
               3: (np.array([0.7, 0.3]), np.array([1.0, 0.0]))}
    assert r.progressive_auc(2, 3) == 1.0
    assert r.progressive_auc(2) == 1.0
    # batches 1..3: positives 0.1, 0.8, 0.7; negatives 0.9, 0.2, 0.3. Pairs (pos > neg):
    # 0.1 beats none, 0.8 beats 0.2 and 0.3, 0.7 beats 0.2 and 0.3: 4 of 9
    assert r.progressive_auc() == pytest.approx(4 / 9)


# ---- training._load_csr_addr ---------------------------------------------------------------------

def test_load_csr_addr_reads_offsets_and_names_missing_registers(tmp_path):
    """Mutants ``sw_model.training.x__load_csr_addr__mutmut_10`` (``int(None)``), ``_11``
    (key ``"XXoffsetXX"``) and ``_15`` (``missing = None``): the module-level CSR_ADDR is
    computed once at import, so only a direct call can see them."""
    regs = [{"name": n, "offset": 4 * i + 0x100} for i, n in enumerate(CSR_NAMES)]
    path = tmp_path / "regmap.json"
    path.write_text(json.dumps({"registers": regs + [{"name": "OTHER", "offset": 0}]}))
    assert _load_csr_addr(path) == {n: 4 * i + 0x100 for i, n in enumerate(CSR_NAMES)}
    path.write_text(json.dumps({"registers": regs[1:]}))
    with pytest.raises(KeyError, match=f"registers \\['{CSR_NAMES[0]}'\\] missing"):
        _load_csr_addr(path)


# ---- workload.make_table -------------------------------------------------------------------------

def test_make_table_scales_by_frac_bits():
    """Mutant ``sw_model.workload.x_make_table__mutmut_8`` (``frac_bits`` not passed to
    to_fixed, so always 24): N(0, 1) samples in Q.16 read back with 16 fraction bits have a
    standard deviation near 1 (800 samples: within 0.15), not 2^8."""
    t = make_table(np.random.default_rng(1), 100, 8, frac_bits=16)
    assert abs(float(np.std(to_float(t, 16))) - 1.0) < 0.15


def test_make_table_extreme_values_are_spread_within_2_24_of_the_rails():
    """Mutant ``sw_model.workload.x_make_table__mutmut_25`` (``size=None``: one distance from
    the rail for every extreme element). With extreme=1 every element is within 2^24 of a rail,
    at distances drawn independently from [0, 2^24): among 512 of them, many distinct ones."""
    t = make_table(np.random.default_rng(2), 64, 8, extreme=1.0).astype(np.int64)
    dist = np.minimum(I32_MAX - t, t - I32_MIN)
    assert dist.min() >= 0 and dist.max() < (1 << 24)
    assert len(np.unique(dist)) > 400


# ---- embedding_device.DeviceStatusError ----------------------------------------------------------

def test_device_status_error_message_names_code_kind_and_descriptor():
    """Mutants ``sw_model.embedding_device.xǁDeviceStatusErrorǁ__init____mutmut_2`` (default
    ``what="XXXX"``) and ``_18`` (``... or True``: an unknown descriptor kind is looked up in
    DescKind and the constructor itself raises ValueError)."""
    e = DeviceStatusError(DeviceError.BAD_DIM, 48, {"kind": int(DescKind.LOOKUP), "table": 2,
                                                    "batch": 7, "tag": 9}, bag=3)
    assert str(e) == "BAD_DIM (value 48, bag 3) for LOOKUP descriptor table=2 batch=7 tag=9"
    e = DeviceStatusError(DeviceError.BAD_DIM, 0, {"kind": 13})
    assert str(e) == "BAD_DIM (value 0, bag 0) for 13 descriptor table=None batch=None tag=None"


# ---- coherence.HostPermission: the violation's fields --------------------------------------------

def _violation(call):
    with pytest.raises(CoherenceViolation) as e:
        call()
    return e.value


def test_rule7_violations_carry_rule_agent_and_cycles():
    """Mutants ``sw_model.coherence.xǁHostPermissionǁbisnp__mutmut_17``/``_18`` (rule name
    ``"XXrule 7XX"``/``"RULE 7"`` for an out-of-range BITag) and ``_37`` (``who="XXdcohXX"``
    for a reused BITag): the scoreboard reports ``rule``, ``who`` and ``times``."""
    p = HostPermission(CFG)
    v = _violation(lambda: p.bisnp(0x30, BS.BISNP_INV, CFG.bi_tags, 103))
    assert (v.rule, v.line, v.who, v.times) == ("rule 7", 0x30, "dcoh", (103,))
    p.bisnp(0x10, BS.BISNP_INV, 2, 100)
    v = _violation(lambda: p.bisnp(0x20, BS.BISNP_INV, 2, 101))
    assert (v.rule, v.line, v.who, v.times) == ("rule 7", 0x20, "dcoh", (100, 101))


def test_rule3_and_rule5_violations_carry_agent_and_cycles():
    """Mutants ``sw_model.coherence.xǁHostPermissionǁdevice_access__mutmut_31`` (``who=None``
    for rule 3) and ``...ǁresponse__mutmut_40`` (``times`` dropped for rule 5)."""
    p = HostPermission(CFG)
    p.req(0x40, RQ.MEM_RD, ST.SNP_INV, MF.META0_STATE, MV.A, 1)
    p.response(0x40, 3, ndr=NDR.CMP_E)                 # host holds E, no BISnpCur since
    v = _violation(lambda: p.device_access(0x40, False, 9, who="gather"))
    assert (v.rule, v.who, v.times) == ("rule 3", "gather", (9,))
    p = HostPermission(CFG)
    p.bisnp(0x99, BS.BISNP_INV, 1, 10)
    p.req(0x99, RQ.MEM_RD, ST.SNP_INV, MF.META0_STATE, MV.A, 12)
    v = _violation(lambda: p.response(0x99, 20, ndr=NDR.CMP_E))
    assert (v.rule, v.who, v.times) == ("rule 5", "dcoh", (10, 12, 20))


def test_make_table_draws_float32_normals():
    """Mutant ``sw_model.workload.x_make_table__mutmut_13`` (float64 normals). A float32 normal
    x scaled by 2^24 and rounded is an integer t with |t| < 2^24 (exact in float32) or, for
    |x| >= 1, x * 2^24 itself (24 significant bits): every t/2^24 is a float32 value. Float64
    normals give integers up to ~2^26 with 25-26 significant bits in about a sixth of the
    elements."""
    v = to_float(make_table(np.random.default_rng(3), 100, 8), 24)
    assert np.array_equal(v.astype(np.float32).astype(np.float64), v)


def test_random_lookup_job_passes_extreme_to_the_table():
    """Mutant ``sw_model.workload.x_random_lookup_job__mutmut_25`` (``extreme`` not passed on):
    with extreme=1 every table element is within 2^24 of a rail."""
    from sw_model.workload import random_lookup_job
    _, job = random_lookup_job(4, CFG, rows=32, dim=16, n_bags=2, pooling=2, extreme=1.0)
    t = job.table.astype(np.int64)
    assert np.all(np.minimum(I32_MAX - t, t - I32_MIN) < (1 << 24))


def test_validate_reports_a_dense_list_as_a_format_error():
    """Mutant ``sw_model.clicklog.xǁClickDataǁvalidate__mutmut_93`` (``getattr(d, 'shape', )``:
    a ``dense`` without ``shape`` raises AttributeError while the message is built)."""
    d = _click_data(2)
    d.dense = [[0.0], [1.0]]
    with pytest.raises(ClickLogFormatError, match=r"dense must be float32 \(N, n_dense\), got "
                                                  r"<class 'list'> $"):
        d.validate()


def test_regmap_bits_masks_exactly_the_named_fields():
    """Mutant ``sw_model.expected_trace.xǁRegMapǁbits__mutmut_15`` (``2 << width``: one bit too
    many per field). A field's mask has ``width`` ones starting at ``lsb``, read from the
    generated register map; a register's mask is the OR of its fields'."""
    from sw_model.expected_trace import RegMap
    rm = RegMap()
    checked = 0
    for reg, r in rm.regs.items():
        whole = 0
        for f in r["fields"]:
            m = rm.bits(reg, f["name"])
            assert bin(m).count("1") == f["width"] and m & -m == 1 << f["lsb"], (reg, f)
            whole |= m
            checked += 1
        assert rm.bits(reg) == whole
    assert checked > 20


def test_float_tables_use_the_configured_fraction_bits():
    """Mutant ``sw_model.embedding_device.xǁFixedPointEmbeddingsǁfloat_tables__mutmut_4``
    (``to_float(q)``: always 24 fraction bits). With frac_bits = 16, the stored 3 * 2^16 reads
    back as 3.0 and -2^15 as -0.5."""
    from sw_model.embedding_device import FixedPointEmbeddings

    class Tables(FixedPointEmbeddings):
        # only what float_tables uses: the tables and frac_bits (no layout, no device)
        def __init__(self):
            self.frac_bits = 16

        def read_tables_q(self):
            return [np.array([[3 << 16, -(1 << 15)]], dtype=np.int32)]

        write_staging = read_mem = submit = restart_device = set_mlp_lag_csr = None

    (t,) = Tables().float_tables()
    assert t.tolist() == [[3.0, -0.5]]


def test_npz_round_trip_holds_integers_as_int64_whatever_the_input_dtype(tmp_path):
    """Mutants ``sw_model.clicklog.x_save_npz__mutmut_28`` (indices written in their own dtype)
    and ``sw_model.clicklog.x_load_npz__mutmut_95`` (table_rows kept in the file's dtype): the
    file format and ClickData both say int64 (docs/dlrm.md, ClickData's docstring)."""
    d = _click_data(3)
    d.indices = [d.indices[0].astype(np.uint32)]
    save_npz(tmp_path / "a.npz", d)
    with np.load(tmp_path / "a.npz") as z:
        assert z["indices_0"].dtype == np.int64
    arrays = dict(version=np.int64(1), dense=d.dense, labels=d.labels,
                  table_rows=np.array([4], dtype=np.uint32),
                  offsets_0=np.arange(4, dtype=np.uint32), indices_0=np.arange(3, dtype=np.uint32))
    np.savez(tmp_path / "b.npz", **arrays)
    from sw_model.clicklog import load_npz
    loaded = load_npz(tmp_path / "b.npz")
    assert loaded.table_rows.dtype == np.int64 and loaded.table_rows.tolist() == [4]
    assert loaded.indices[0].dtype == np.int64 and loaded.offsets[0].dtype == np.int64


# ---- expected_trace: CSR events of the expected trace ---------------------------------------------

def test_expected_trace_csr_events_follow_the_register_contract():
    """Mutants of ``sw_model.expected_trace`` that the trace-comparator tests cannot see (they
    turn the expected trace itself into the "device" side): ``xǁ_Replayǁcsr_write__mutmut_44``
    (SLVERR under another key), ``xǁ_Replayǁcsr_read__mutmut_92`` (mask under another key),
    ``xǁ_Replayǁ_reg_value__mutmut_110`` (READY left out of the STATUS mask), ``_33``
    (REGION_*_SIZE looked up in lower case: falls back to the default configuration's value),
    ``_64`` (CMD_SIZE not known), ``xǁ_Replayǁ_apply_write__mutmut_30`` (TABLE<t>_BASE_HI
    writes ignored), ``_140`` and ``_158`` (ERR_CLEAR / IRQ_STATUS writes look up a register
    that does not exist). Expected values: what was written, the configuration's region, the
    register map's field positions."""
    from sw_model.expected_trace import RegMap, expected_events
    rm = RegMap()
    cfg = CFG.with_(staging_size=1 << 20)
    unmapped = max(rm.off.values()) + 4
    assert rm.name(unmapped) is None

    def w(name, v, addr=None):
        return {"act": "csr_write", "addr": rm.off[name] if addr is None else addr, "data": v,
                "strb": 15, "resp": 0}

    def r(name):
        return {"act": "csr_read", "addr": rm.off[name], "data": 0, "resp": 0}

    acts = [{"act": "reset"}, r("REGION_STAGING_SIZE_LO"), r("REGION_STAGING_BASE_HI"),
            w("CMD_SIZE", 16), r("CMD_SIZE"), w("TABLE0_BASE_HI", 0x12), r("TABLE0_BASE_HI"),
            w("ERR_CLEAR", rm.bit("ERR_CLEAR", "CLEAR")), w("IRQ_STATUS", rm.bits("IRQ_STATUS")),
            w(None, 5, addr=unmapped), r("STATUS")]
    ev = [e for e in expected_events(acts, cfg)[1:] if e["ev"] in ("csr_r", "csr_w")]
    assert [e["ev"] for e in ev] == ["csr_r", "csr_r", "csr_w", "csr_r", "csr_w", "csr_r",
                                     "csr_w", "csr_w", "csr_w", "csr_r"]
    assert (ev[0]["data"], ev[0]["mask"]) == (1 << 20, 0xFFFFFFFF)
    assert ev[1]["data"] == 0x10                      # staging base 0x10_0000_0000
    assert ev[3]["data"] == 16
    assert ev[5]["data"] == 0x12
    assert [e["resp"] for e in ev if e["ev"] == "csr_w"] == [0, 0, 0, 0, 2]   # OKAY.., SLVERR
    status = ev[9]
    assert status["mask"] & rm.bit("STATUS", "READY") and status["mask"] != 0xFFFFFFFF


def test_line_overlay_image_includes_a_line_at_a_region_base():
    """Mutant ``sw_model.expected_trace.xǁLineOverlayǁimage__mutmut_4`` (``b < a``: the first
    line of a region left out of the COMMIT image). Regions are [base, base + size)."""
    from sw_model.expected_trace import LineOverlay
    ov = LineOverlay()
    for a in (0x1000, 0x1040, 0x2000):
        ov.write(a, bytes(range(64)), (1 << 64) - 1)
    assert sorted(ov.image([(0x1000, 0x80)])) == ["1000", "1040"]


def test_regmap_reads_the_file_it_is_given(tmp_path):
    """Mutant ``sw_model.expected_trace.xǁRegMapǁ__init____mutmut_3`` (``path`` ignored: always
    the generated register map)."""
    from sw_model.expected_trace import RegMap
    doc = {"registers": [{"name": "ONLY", "offset": 8, "sw": "rw",
                          "fields": [{"name": "F", "lsb": 4, "width": 3, "reset": 0}]}]}
    (tmp_path / "map.json").write_text(json.dumps(doc))
    rm = RegMap(tmp_path / "map.json")
    assert list(rm.regs) == ["ONLY"] and rm.name(8) == "ONLY" and rm.bits("ONLY") == 0b111 << 4


def test_violation_report_gives_the_line_and_its_byte_address():
    """Mutants ``sw_model.coherence.xǁCoherenceViolationǁ__init____mutmut_5`` (``line >> 6``)
    and ``_22`` (``"XX: XX"`` between head and message): the report is what a failing
    scoreboard prints. Line 0x40 is byte address 0x40 * 64 = 0x1000."""
    v = CoherenceViolation("rule 2", 0x40, "m", who="gather", times=(3, 5))
    assert str(v) == "rule 2 violation, line 0x40 (byte address 0x1000), seen by gather, t=3/5: m"


def test_expected_trace_numbers_completions_and_tag_uses_and_refuses_with_nxm():
    """Mutants of ``sw_model.expected_trace`` the comparator tests cannot see:
    ``xǁ_Replayǁ_step__mutmut_47`` (completion number under another key), ``xǁ_Replayǁ_cxl__
    mutmut_16`` (the second use of a tag numbered 2), ``_198`` (MemData-NXM with poison 2),
    ``xǁ_Replayǁ_apply_write__mutmut_128`` (a RECOVER that does not unsynchronise the trace),
    ``xǁ_Replayǁ_reg_value__mutmut_104`` (READY missing from an idle device's STATUS).
    Contract (docs/traces.md via the module docstring, docs/coherence.md): ``cpl`` events keyed
    ``n`` = 0, 1, ... in order; ``cxl`` events keyed tag + n-th use of the tag; a refused read
    gets MemData-NXM, data all ones, poison 1, no NDR; after CONTROL.RECOVER, CSR read data is
    unchecked (None) until the host has seen STATUS READY and not RECOVERING."""
    from hw.cxl_encodings import MetaField, MetaValue, ReqOpcode, SnpType
    from sw_model.expected_trace import RegMap, expected_events
    from tests.model.test_compare import workload

    exp = expected_events(workload(), CFG)[1:]
    assert [c["n"] for c in exp if c["ev"] == "cpl"] == list(range(10))
    status = [e for e in exp if e["ev"] == "csr_r" and e["name"] == "STATUS"]
    assert status[0]["data"] is None                     # the host read RECOVERING (8)
    assert status[1]["data"] is not None                 # then READY (4): synchronised, and
    assert status[1]["data"] & RegMap().bit("STATUS", "READY")   # the expected value says READY

    hdr = {"opcode": int(ReqOpcode.MEM_RD), "snp_type": int(SnpType.SNP_CUR),
           "meta_field": int(MetaField.NO_OP), "meta_value": int(MetaValue.I), "tag": 5,
           "addr": CFG.log_base // 64}
    read = {"act": "cxl", "tag": 5, "ch": "m2s_req", "hdr": hdr}
    reads = [e for e in expected_events([{"act": "reset"}, read, read], CFG)[1:]
             if e["ev"] == "cxl"]
    assert [(e["tag"], e["n"]) for e in reads] == [(5, 0), (5, 1)]
    for e in reads:
        assert e["ndr"] == [] and len(e["drs"]) == 1
        assert e["drs"][0]["poison"] == 1 and e["drs"][0]["data"] == "ff" * 64


def test_expected_trace_irq_status_is_write_one_to_clear_and_known_when_idle():
    """Mutants ``sw_model.expected_trace.xǁ_Replayǁ_power_on__mutmut_17`` (not synchronised
    after reset, so a write to IRQ_STATUS makes its bits unknown) and ``xǁ_Replayǁ_apply_write__
    mutmut_151`` (RECOVERED not cleared by writing 1). IRQ_STATUS is write-1-to-clear; with the
    device idle and the host synchronised every bit of it is determined."""
    from sw_model.expected_trace import RegMap, expected_events
    from tests.model.test_compare import workload
    rm = RegMap()
    every = rm.bits("IRQ_STATUS")
    w1c = {"act": "csr_write", "addr": rm.off["IRQ_STATUS"], "data": every, "strb": 15, "resp": 0}
    rd = {"act": "csr_read", "addr": rm.off["IRQ_STATUS"], "data": 0, "resp": 0}

    (after_reset,) = [e for e in expected_events([{"act": "reset"}, w1c, rd], CFG)[1:]
                      if e["ev"] == "csr_r"]
    assert (after_reset["data"], after_reset["mask"]) == (0, every)

    events = expected_events(workload() + [w1c, rd], CFG)[1:]
    irq_reads = [e for e in events if e["ev"] == "csr_r" and e["name"] == "IRQ_STATUS"]
    assert irq_reads[-2]["data"] & rm.bit("IRQ_STATUS", "RECOVERED")   # the workload recovered
    assert (irq_reads[-1]["data"], irq_reads[-1]["mask"]) == (0, every)


def test_expected_from_file_splits_sections_at_action_headers(tmp_path):
    """Mutants ``sw_model.expected_trace.x_expected_from_file__mutmut_16`` (section order
    recorded as None), ``_18`` (header key misspelt: no section is recognised) and ``_27``
    (section name read from "SECTION": every name ""). No model test read an action-log file
    with sections."""
    from sw_model.expected_trace import ACTIONS, SEMANTIC, RegMap, expected_from_file
    status = {"act": "csr_read", "addr": RegMap().off["STATUS"], "data": 0, "resp": 0}
    lines = [{"trace": ACTIONS, "section": "first"}, {"act": "reset"}, status,
             {"trace": ACTIONS, "section": "second"}, {"act": "reset"}]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    got = expected_from_file(tmp_path / "a.jsonl")
    assert list(got) == ["first", "second"]
    assert all(evs[0]["trace"] == SEMANTIC for evs in got.values())
    assert [e["ev"] for e in got["first"][1:]].count("csr_r") == 1
    assert [e["ev"] for e in got["second"][1:]].count("csr_r") == 0
    (tmp_path / "b.jsonl").write_text(json.dumps({"act": "reset"}) + "\n" + json.dumps(status))
    assert list(expected_from_file(tmp_path / "b.jsonl")) == [""]


def test_concat_joins_in_order_and_refuses_parts_of_other_tables():
    """Mutants ``sw_model.clicklog.xǁClickDataǁconcat__mutmut_12`` (``parts[2:]``: a second
    part with other table_rows is not checked) and ``_8`` (table_rows kept in the first part's
    dtype; ClickData holds int64). Both were stopped by the run's time limit, then survived a
    rerun with a 15-minute limit (docs/verification.md)."""
    a, b = _click_data(2), _click_data(3)
    a.table_rows = a.table_rows.astype(np.uint32)
    c = ClickData.concat([a, b])
    assert c.dense[:, 0].tolist() == [0, 1, 0, 1, 2]
    assert c.offsets[0].tolist() == [0, 1, 2, 3, 4, 5]
    assert c.indices[0].tolist() == [0, 1, 0, 1, 2]
    assert c.table_rows.dtype == np.int64 and c.table_rows.tolist() == [4]
    b.table_rows = np.array([5], dtype=np.int64)
    with pytest.raises(ValueError, match="table_rows differ"):
        ClickData.concat([a, b])


def test_dlrm_devices_start_from_tables_in_their_own_fixed_point_format():
    """Mutants ``sw_model.dlrm.x_make_float_device__mutmut_13`` (initial tables quantised with
    24 fraction bits whatever ``frac_bits``), ``sw_model.dlrm.x_make_model_device__mutmut_18``
    (the same for the device's ``frac_bits``) and ``_9`` (MLP_LAG = ``lag_k`` not set). All
    three were stopped by the run's time limit; the first survived a rerun with a 15-minute
    limit. uniform(-0.05, 0.05) rounded to Q.16 is a multiple of 2^-16 of magnitude at most
    0.05 + 2^-17 (half a step)."""
    from sw_model.dlrm import DLRMConfig, make_float_device, make_model_device
    cfg = DLRMConfig(table_rows=(50, 60), alphas=(1.05, 1.1), lag_k=3)
    for t in make_float_device(cfg, frac_bits=16).tables():
        v = t.astype(np.float64)
        assert np.all(np.abs(v) <= 0.05 + 2**-17)
        assert np.array_equal(v * 65536, np.rint(v * 65536))
        assert np.abs(v).max() > 0.04                    # the draws span the range
    dev = make_model_device(cfg, CFG.with_(frac_bits=16))
    assert dev.mlp_lag == 3
    for q in dev.tables():
        assert np.abs(q).max() <= 0.05 * 65536 + 0.5 and np.abs(q).max() > 0.04 * 65536


def test_slice_rebases_offsets_and_holds_int64_indices():
    """Mutant ``sw_model.clicklog.xǁClickDataǁslice__mutmut_19`` (indices kept in their own
    dtype; ClickData holds int64). Stopped by the run's time limit, it survived a rerun with a
    15-minute limit. Samples 1..2 of 4 (one index each, sample i looks up row i % 4)."""
    d = _click_data(4)
    d.indices = [d.indices[0].astype(np.uint32)]
    s = d.slice(1, 3)
    assert s.offsets[0].tolist() == [0, 1, 2] and s.indices[0].tolist() == [1, 2]
    assert s.indices[0].dtype == np.int64 and s.dense[:, 0].tolist() == [1, 2]


def test_staging_layout_snapshot_must_fit_its_slot_less_one_line():
    """Mutant ``sw_model.embedding_device.xǁStagingLayoutǁ__init____mutmut_62`` (capacity one
    line more than the slot instead of one line less): the slot keeps a 64 B line besides the
    snapshot bytes, so slot - 64 fits and slot - 63 does not."""
    from sw_model.embedding_device import StagingLayout, snap_slot_bytes
    slot = snap_slot_bytes(CFG)
    StagingLayout(CFG, (10,), (16,), 4, 8, slot - 64)
    with pytest.raises(ValueError, match="exceeds the slot capacity"):
        StagingLayout(CFG, (10,), (16,), 4, 8, slot - 63)


# ==== second campaign (seed-1 sample of 500 of 8,860 mutants, docs/verification.md) ==============

# ---- training.TrainingDevice ---------------------------------------------------------------------

def test_update_bag_checks_report_code_value_and_bag():
    """Mutants ``sw_model.training.xǁTrainingDeviceǁ_bag__mutmut_20`` (BAG_TOO_LONG raised with
    code None: the descriptor dies with a ValueError instead of completing) and ``_37`` (an
    ADDR_RANGE of a bag's indices reported with the bag number as its value and bag 0).
    docs/training.md: bag-level checks complete with the code, the value (the bag's length,
    the first byte address past the staging region) and the failing bag."""
    from tests.model.test_model_training import CFG as TCFG, S1, Rig
    rig = Rig(1, cfg=TCFG, shapes=((8, 16),))
    n = TCFG.max_bag + 1
    d, _ = rig.stage_update(0, [0, 1, 1 + n], [0] * (1 + n))
    c = rig.dev.update(**d)
    assert (c["status"], c["err_value"], c["err_bag"]) == (E.BAG_TOO_LONG, n, 1)
    # indices in the last 8 bytes of staging: bag 0 reads one, bag 1 would read past S1
    rig.mem.write_u32(S1 - 8, np.zeros(2, dtype=np.uint32))
    o, _ = rig.stage_bags([0, 1, 3], [])
    c = rig.dev.update(**{**d, "offsets_addr": o, "indices_addr": S1 - 8})
    assert (c["status"], c["err_value"], c["err_bag"]) == (E.ADDR_RANGE, S1 + 4, 1)


def test_make_desc_epoch_is_the_batch_field_and_parse_cpl_decodes_the_status():
    """Mutants ``sw_model.training.xǁTrainingDeviceǁmake_desc__mutmut_8`` (``epoch`` looked up
    under another name: KeyError) and ``xǁTrainingDeviceǁparse_cpl__mutmut_7`` (the decoded
    status stored under another key, ``status`` left a plain int). ``epoch`` aliases
    ``batch`` (bytes 8..15 of the descriptor); a completion's known status is a DeviceError."""
    from sw_model.training import TrainingDevice
    desc = TrainingDevice.make_desc(kind=int(DescKind.SNAPSHOT), epoch=0x0102030405)
    assert desc[8:16] == (0x0102030405).to_bytes(8, "little")
    rec = bytearray(64)
    rec[5] = int(DeviceError.BAD_DIM)
    c = TrainingDevice.parse_cpl(bytes(rec))
    assert type(c["status"]) is DeviceError and c["status"] is DeviceError.BAD_DIM
    assert set(c) == {name for name, *_ in CPL_FIELDS}


def test_device_reset_clears_the_recovery_count_and_mlp_slot():
    """Mutants ``sw_model.training.xǁTrainingDeviceǁreset__mutmut_14`` (``recovered_records =
    None``) and ``_30`` (``mlp_slot = 1``): docs/training.md, device reset clears MLP_SLOT
    (0 = none) and the count of records applied by recovery is 0 until a recovery."""
    from sw_model.memory import MemoryImage
    from sw_model.training import TrainingDevice
    dev = TrainingDevice(CFG, MemoryImage(1 << CFG.addr_bits))
    assert dev.recovered_records == 0 and dev.mlp_slot == 0
    assert dev.csr_read("MLP_SLOT") == 0 and dev.csr_read("MLP_EPOCH_LO") == 0


# ---- embedding_device ----------------------------------------------------------------------------

def test_device_status_error_names_an_unknown_code_by_its_number():
    """Mutant ``sw_model.embedding_device.xǁDeviceStatusErrorǁ__init____mutmut_7``
    (``int(None)``: a status the DeviceError enum does not know raises TypeError instead of
    being reported as ``code <n>``)."""
    unknown = max(int(c) for c in DeviceError) + 1
    e = DeviceStatusError(unknown, 5, {"kind": int(DescKind.COMMIT)})
    assert (e.code, e.name) == (unknown, f"code {unknown}")
    assert str(e).startswith(f"code {unknown} (value 5, bag 0) for COMMIT descriptor")


def test_set_mlp_lag_refuses_2_32_before_touching_the_device():
    """Mutant ``sw_model.embedding_device.xǁFixedPointEmbeddingsǁset_mlp_lag__mutmut_8``
    (``< 1 << 33``): MLP_LAG is a 32-bit CSR; 2^32 is refused with the device's lag unchanged
    and no CSR write."""
    from sw_model.embedding_device import FixedPointEmbeddings

    class Lag(FixedPointEmbeddings):
        def __init__(self):
            self.mlp_lag, self.csr = 7, []

        def set_mlp_lag_csr(self, k):
            self.csr.append(k)

        write_staging = read_mem = submit = restart_device = read_tables_q = None

    d = Lag()
    d.set_mlp_lag((1 << 32) - 1)
    with pytest.raises(ValueError, match="MLP_LAG 4294967296 does not fit 32 bits"):
        d.set_mlp_lag(1 << 32)
    assert d.mlp_lag == (1 << 32) - 1 and d.csr == [(1 << 32) - 1]


def test_staging_layout_accepts_a_one_row_table():
    """Mutant ``sw_model.embedding_device.xǁStagingLayoutǁ__init____mutmut_23`` (``1 < r``):
    a table has 1..2^32-1 rows; one row is valid."""
    from sw_model.embedding_device import StagingLayout
    L = StagingLayout(CFG, (1, 3), (16, 16), 4, 8, 256)
    assert L.table_rows == (1, 3) or list(L.table_rows) == [1, 3]
    with pytest.raises(ValueError, match="rows 0 must be in"):
        StagingLayout(CFG, (0,), (16,), 4, 8, 256)


def test_float_embeddings_hold_float32_tables_and_name_the_open_batch():
    """Mutants ``sw_model.embedding_device.xǁFloatEmbeddingsǁ__init____mutmut_5`` (float64
    initial tables kept float64: the reference is float32 by definition) and
    ``xǁFloatEmbeddingsǁ_check_batch__mutmut_5`` (the message names committed - 1 as the open
    batch)."""
    from sw_model.embedding_device import FloatEmbeddings
    f = FloatEmbeddings([np.full((2, 16), 0.1, dtype=np.float64)])
    (t,) = f.tables()
    assert t.dtype == np.float32 and t[0, 0] == np.float32(0.1)
    f.commit(1)
    with pytest.raises(ValueError, match=r"^commit: batch 5 is not the open batch 2$"):
        f.commit(5)


def _small_model_device():
    from sw_model.embedding_device import ModelDevice, StagingLayout
    L = StagingLayout(CFG, (8,), (16,), 4, 8, 256)
    return ModelDevice(L, [np.full((8, 16), I32_MAX - 10, dtype=np.int32)], seed=3)


def test_model_device_counts_saturations_and_power_failures_and_spans_the_address_space():
    """Mutants ``sw_model.embedding_device.xǁFixedPointEmbeddingsǁupdate_q__mutmut_45``
    (``update_sat -=``), ``xǁModelDeviceǁ_on_write__mutmut_38`` (``failures = 1``) and
    ``xǁModelDeviceǁ__init____mutmut_12`` (a memory of twice the device's address space).
    Rows at I32_MAX - 10 minus lr 1.0 x gradient -100 saturate in every one of their 16
    lanes; two scheduled power failures are two failures."""
    from sw_model.embedding_device import PowerFailure
    dev = _small_model_device()
    assert dev.mem.size == 1 << CFG.addr_bits
    one = 1 << dev.frac_bits
    bags = [(np.array([0, 2]), np.array([1, 5]))]
    dev.update_q(1, bags, [np.full((1, 16), -100, dtype=np.int32)], one)
    assert dev.stats["update_sat"] == 32
    assert dev.tables()[0][1].tolist() == [I32_MAX] * 16
    for n in (1, 2):
        dev.schedule_power_failure(0)
        with pytest.raises(PowerFailure):
            dev.commit_q(1)
        assert dev.failures == n
        dev.restart()


def test_bags_are_checked_into_u32_offsets_and_indices():
    """Mutant ``sw_model.embedding_device.x__bags_u32__mutmut_35`` (``o.astype(None)``: the
    offsets come back float64). The devices' bag check returns u32 arrays (its docstring):
    the staged offsets are u32 words."""
    from sw_model.embedding_device import _bags_u32
    ((o, x),) = _bags_u32([([0, 2, 3], np.array([1, 2, 3], dtype=np.int64))], 1)
    assert o.dtype == np.uint32 and x.dtype == np.uint32
    assert o.tolist() == [0, 2, 3] and x.tolist() == [1, 2, 3]


# ---- memory.MemoryImage --------------------------------------------------------------------------

def test_memory_image_copy_keeps_the_fill_and_gather_lines_refuses_past_the_end():
    """Mutants ``sw_model.memory.xǁMemoryImageǁcopy__mutmut_5`` (the copy reads unwritten
    bytes as 0 whatever the fill) and ``xǁMemoryImageǁgather_lines__mutmut_7`` (``or`` ->
    ``and``: a line past the end is read as fill instead of refused)."""
    from sw_model.memory import MemoryImage
    m = MemoryImage(0x1000, fill=0xA5)
    c = m.copy()
    assert c.fill == 0xA5 and c.read(0x40, 4) == b"\xa5" * 4 and c == m
    assert m.gather_lines([0xFC0]) == b"\xa5" * 64
    for bad in ([0x1000], [0, 0x1000], [0x20]):
        with pytest.raises(ValueError, match="unaligned or out-of-range"):
            m.gather_lines(bad)


def test_write_i32_refuses_one_below_int32_min():
    """Mutant ``sw_model.memory.xǁMemoryImageǁwrite_i32__mutmut_15`` (lower bound -2^32: -2^31
    - 1 is written, wrapped to 2^31 - 1)."""
    from sw_model.memory import MemoryImage
    m = MemoryImage(0x1000)
    m.write_i32(0, [I32_MIN, I32_MAX])
    assert m.read(0, 8) == bytes.fromhex("00000080ffffff7f")
    with pytest.raises(ValueError, match="write_i32"):
        m.write_i32(0, [I32_MIN - 1])
    assert m.read(0, 4) == bytes.fromhex("00000080")


def test_memory_diff_hexdump_rows_carry_their_own_address_and_printable_space():
    """Mutants ``sw_model.memory.xǁMemoryImageǁdiff__mutmut_61``/``_72`` (the self/other rows
    labelled ``la - o`` instead of the row's address ``la + o``) and ``x__hexline__mutmut_10``
    (a space shown as '.'). Line 0x1000, bytes 0x34-0x35 = "A " in the other image: the row
    at 0x1030 is dumped."""
    from sw_model.memory import MemoryImage
    a, b = MemoryImage(0x2000), MemoryImage(0x2000)
    b.write(0x1034, b"A ")
    ((addr, desc),) = a.diff(b)
    lines = desc.splitlines()
    assert addr == 0x1034 and lines[0] == "line 0x1000: 2 byte(s) differ"
    zeros = " ".join(["00"] * 4)
    assert lines[1] == f"  self  0000001030: {' '.join(['00'] * 16)}  |{'.' * 16}|"
    assert lines[2] == (f"  other 0000001030: {zeros} 41 20 {' '.join(['00'] * 10)}  "
                        f"|....A {'.' * 10}|")


# ---- dlrm ----------------------------------------------------------------------------------------

def test_evaluate_reports_the_number_of_samples():
    """Mutant ``sw_model.dlrm.x_evaluate__mutmut_25`` (``n=None``): ``n`` is the number of
    samples evaluated (10 here, over batches of 4)."""
    from sw_model.dlrm import DLRM, DLRMConfig, evaluate
    cfg = DLRMConfig(n_dense=1, table_rows=(4,), alphas=(1.0,))
    r = evaluate(DLRM(cfg), [np.zeros((4, cfg.emb_dim), dtype=np.float32)], _click_data(10),
                 batch_size=4)
    assert r["n"] == 10 and 0.0 <= r["auc"] <= 1.0


def test_npz_data_accepts_exactly_one_training_batch(tmp_path):
    """Mutant ``sw_model.dlrm.x_npz_data__mutmut_19`` (``n_batches < 2``): 10 samples, eval
    0.2, batch 8 leaves one whole training batch (samples 0-7), which is enough."""
    path = tmp_path / "log.npz"
    save_npz(path, _click_data(10))
    data, n_batches, eval_data, _ = npz_data(path, 8, eval_fraction=0.2)
    assert n_batches == 1 and data(1).dense[:, 0].tolist() == list(range(8))
    assert eval_data.n == 2


def test_dlrm_config_refuses_a_zero_learning_rate():
    """Mutant ``sw_model.dlrm.xǁDLRMConfigǁ__post_init____mutmut_66`` (``lr >= 0``): learning
    rates must be > 0."""
    from sw_model.dlrm import DLRMConfig
    with pytest.raises(ValueError, match="learning rates > 0"):
        DLRMConfig(lr=0.0)
    with pytest.raises(ValueError, match="learning rates > 0"):
        DLRMConfig(emb_lr=0.0)


def test_progressive_auc_stops_at_last():
    """Mutant ``sw_model.dlrm.xǁTrainResultǁprogressive_auc__mutmut_4`` (``last`` ignored:
    always up to n_batches). Batch 1 ranks its positive first, batch 2 last."""
    r = TrainResult(n_batches=2)
    r.preds = {1: (np.array([0.9, 0.1]), np.array([1.0, 0.0])),
               2: (np.array([0.2, 0.8]), np.array([1.0, 0.0]))}
    assert r.progressive_auc(1, 1) == 1.0
    assert r.progressive_auc(2, 2) == 0.0


def test_make_model_device_lays_out_for_the_device_configuration_given():
    """Mutant ``sw_model.dlrm.x_make_model_device__mutmut_13`` (layout built for the default
    DeviceConfig): with frac_bits = 16 the device reads its Q.16 tables back as values of
    magnitude up to emb_init = 0.05 (as Q.24 they would read 256 times smaller)."""
    from sw_model.dlrm import DLRMConfig, make_model_device
    cfg = DLRMConfig(table_rows=(50, 60), alphas=(1.05, 1.1))
    dev = make_model_device(cfg, CFG.with_(frac_bits=16))
    assert dev.layout.cfg.frac_bits == 16
    for t in dev.float_tables():
        assert 0.04 < np.abs(t).max() <= 0.05 + 2**-17


# ---- workload ------------------------------------------------------------------------------------

def test_workload_defaults_uniform_indices_and_tag_zero():
    """Mutants ``sw_model.workload.x_make_bags__mutmut_3`` (default ``alpha`` 1.0: Zipf
    instead of uniform) and ``x_random_lookup_job__mutmut_10`` (default ``tag`` 1). Uniform
    over 4 rows puts about a quarter of 8000 indices on row 0 (Zipf 1.0: 0.48)."""
    from sw_model.workload import make_bags, random_lookup_job
    _, idx = make_bags(np.random.default_rng(5), 1000, 8, 4)
    assert 0.22 < np.count_nonzero(idx == 0) / idx.size < 0.28
    _, job = random_lookup_job(4, CFG, rows=32, dim=16, n_bags=2, pooling=2)
    assert job.cmd.tag == 0


def test_lookup_job_stages_indices_as_u32_words():
    """Mutant ``sw_model.workload.xǁLookupJobǁlayout__mutmut_15`` (indices kept as given:
    a list becomes int64 and takes 8 B per index of staging). 20 u32 indices fill 80 B,
    so the output buffer starts at the next 64 B line, 128 B after them."""
    from sw_model.memory import MemoryImage
    from sw_model.workload import LookupJob
    mem = MemoryImage(1 << CFG.addr_bits)
    job = LookupJob.layout(CFG, mem, np.zeros((32, 16), dtype=np.int32), [0, 20],
                           list(range(20)))
    assert job.indices.dtype == np.uint32
    assert job.cmd.out_addr - job.cmd.indices_addr == 128
    assert mem.read_u32(job.cmd.indices_addr, 20).tolist() == list(range(20))


# ---- coherence -----------------------------------------------------------------------------------

def test_second_bisnp_to_a_line_reports_when_the_first_was_sent():
    """Mutant ``sw_model.coherence.xǁHostPermissionǁbisnp__mutmut_40`` (``t0 = None``): rule 7,
    a second BISnp to a line whose BISnp (BITag 1, cycle 100) is outstanding; the violation
    carries both cycles."""
    p = HostPermission(CFG)
    p.bisnp(0x10, BS.BISNP_INV, 1, 100)
    v = _violation(lambda: p.bisnp(0x10, BS.BISNP_INV, 2, 105))
    assert (v.rule, v.line, v.who, v.times) == ("rule 7", 0x10, "dcoh", (100, 105))
    assert "(sent at 100)" in str(v)


def test_poisoned_write_ending_at_the_reads_first_cycle_may_give_its_poison():
    """Mutant ``sw_model.coherence.xǁLineValueCheckerǁ_poison_possible__mutmut_13`` (``w.we >
    rs``): intervals are inclusive at both ends, so a write over [5, 10] may take effect at
    cycle 10, concurrently with a read over [10, 12]: poison 1 (the write's) and poison 0
    (the line before it) are both explained; once the write has ended before the read, only
    its poison is."""
    from sw_model.coherence import LineValueChecker
    c = LineValueChecker()
    c.write(0x7, bytes(64), (1 << 64) - 1, 5, 10, who="host", poison=True)
    assert c.read(0x7, bytes(64), 10, 12, who="gather", poison=True) is None
    assert c.read(0x7, bytes(64), 10, 12, who="gather", poison=False) is None
    assert c.read(0x7, bytes(64), 11, 12, who="gather", poison=True) is None
    with pytest.raises(CoherenceViolation):
        c.read(0x7, bytes(64), 11, 12, who="gather", poison=False)


# ---- expected_trace: what the comparator tests cannot see ----------------------------------------

def test_line_overlay_writes_enabled_bytes_counts_writes_and_skips_exact_ranges():
    """Mutants ``sw_model.expected_trace.xǁLineOverlayǁwrite__mutmut_12`` (``be >> i | 1``:
    every byte written), ``_14`` (``& 2``: the neighbouring byte's enable), ``_27`` (write count
    None: a second write of the line fails) and ``xǁLineOverlayǁimage__mutmut_13`` (a skipped
    range starting inside a line also blanks the bytes before it). Hash: sha256 of the 64
    content bytes + the 8-byte little-endian written mask, first 16 hex digits."""
    import hashlib

    from sw_model.expected_trace import LineOverlay
    ov = LineOverlay()
    e1 = ov.write(0x1000, bytes(range(1, 65)), 0b101)
    assert (e1["k"], e1["data"]) == (0, ("01" + "00" + "03").ljust(128, "0"))
    e2 = ov.write(0x1000, b"\xff" * 64, 0b10, poison=1)
    assert (e2["k"], e2["poison"], e2["data"]) == (1, 1, ("00" + "ff").ljust(128, "0"))
    content = bytes([1, 0xFF, 3]) + bytes(61)
    whole = hashlib.sha256(content + (0b111).to_bytes(8, "little")).hexdigest()[:16]
    assert ov.image([(0x1000, 64)]) == {"1000": whole}
    skipped = bytes([1, 0, 3]) + bytes(61)
    part = hashlib.sha256(skipped + (0b101).to_bytes(8, "little")).hexdigest()[:16]
    assert ov.image([(0x1000, 64)], skip=[(0x1001, 1)]) == {"1000": part}


def _csr_events(acts, cfg=CFG):
    from sw_model.expected_trace import expected_events
    return [e for e in expected_events(acts, cfg)[1:] if e["ev"] in ("csr_r", "csr_w")]


def test_expected_trace_err_clear_clears_status_error_and_table_base_halves_combine():
    """Mutants ``sw_model.expected_trace.xǁ_Replayǁ_apply_write__mutmut_132`` (ERR_CLEAR not
    recognised: STATUS.ERROR stays set), ``_26`` (``base | ~0xFFFFFFFF``: writing BASE_LO
    wipes BASE_HI), ``xǁ_Replayǁ_reg_value__mutmut_95`` (STATUS bit 0 set without an error),
    ``_116`` (RECOVERING left out of the checked STATUS bits) and ``_185`` (a never-written
    read/write register without a model value, IRQ_ENABLE, looked up by None). A write to an
    unmapped CSR address is an error (CSR_ADDR); writing ERR_CLEAR.CLEAR clears
    STATUS.ERROR; a table's base is BASE_HI:BASE_LO; IRQ_ENABLE resets to 0."""
    from sw_model.expected_trace import RegMap
    rm = RegMap()
    unmapped = max(rm.off.values()) + 4

    def w(name, v, addr=None):
        return {"act": "csr_write", "addr": rm.off[name] if addr is None else addr, "data": v,
                "strb": 15, "resp": 0}

    def r(name):
        return {"act": "csr_read", "addr": rm.off[name], "data": 0, "resp": 0}

    ev = _csr_events([{"act": "reset"}, r("STATUS"), w(None, 1, addr=unmapped), r("STATUS"),
                      w("ERR_CLEAR", rm.bit("ERR_CLEAR", "CLEAR")), r("STATUS"),
                      w("TABLE3_BASE_HI", 0x12), w("TABLE3_BASE_LO", 0x40),
                      r("TABLE3_BASE_LO"), r("TABLE3_BASE_HI"), r("IRQ_ENABLE")])
    status = [e for e in ev if e["ev"] == "csr_r" and e["name"] == "STATUS"]
    every = rm.bits("STATUS", "BUSY", "ERROR", "READY", "RECOVERING")
    assert [(s["data"], s["mask"]) for s in status] == [
        (0, every), (rm.bit("STATUS", "ERROR"), every), (0, every)]
    reads = [(e["name"], e["data"]) for e in ev if e["ev"] == "csr_r"][3:]
    assert reads == [("TABLE3_BASE_LO", 0x40), ("TABLE3_BASE_HI", 0x12), ("IRQ_ENABLE", 0)]


def test_expected_trace_host_write_event_and_header():
    """Mutants ``sw_model.expected_trace.xǁ_Replayǁ_cxl__mutmut_54`` (the cycle read from
    "CYCLE": None), ``_60`` (the RwD's poison not recorded) and ``x_expected_events__mutmut_65``
    (the header's ``covers`` under another key). A host MemWr event carries the action's
    cycle and the header's poison; the header lists what the trace covers (docs/traces.md)."""
    from sw_model.expected_trace import COVERS, expected_events
    from tests.model.test_compare import Host
    h = Host(1)
    h.cxl_write(CFG.staging_base + 0x40, bytes(range(64)), poison=1)
    h.acts[-1]["cycle"] = 1234
    evs = expected_events(h.acts, CFG)
    assert set(evs[0]["covers"]) <= set(COVERS) and "cxl" in evs[0]["covers"]
    (rwd,) = [e for e in evs[1:] if e["ev"] == "cxl"]
    assert (rwd["cycle"], rwd["poison"], rwd["ndr"]) == (1234, 1, [int(NDR.CMP)])


def test_expected_trace_marks_completion_lines_and_a_cut_recovery():
    """Mutants ``sw_model.expected_trace.xǁ_Replayǁ_media_write__mutmut_45`` (completion-record
    writes marked ``cpl_line: False``) and ``xǁ_Replayǁreset__mutmut_1`` (a reset while
    recovering looks its events up under another key and fails). The compare workload runs
    10 descriptors: 10 completion records, one line each, marked ``cpl_line`` True; a reset
    that cuts a recovery (CONTROL.RECOVER on fresh media formats it: media writes) makes the
    recovery's writes ``may`` (docs/traces.md)."""
    from sw_model.expected_trace import RegMap, expected_events
    from tests.model.test_compare import workload
    evs = expected_events(workload(), CFG)[1:]
    cpl = [e for e in evs if e["ev"] == "mwr" and "cpl_line" in e]
    assert len(cpl) == len([e for e in evs if e["ev"] == "cpl"]) == 10
    assert all(e["cpl_line"] is True for e in cpl)
    rm = RegMap()
    recover = {"act": "csr_write", "addr": rm.off["CONTROL"],
               "data": rm.bit("CONTROL", "RECOVER"), "strb": 15, "resp": 0}
    evs = expected_events([{"act": "reset"}, recover, {"act": "reset"}], CFG)[1:]
    mwr = [e for e in evs if e["ev"] == "mwr"]
    assert mwr and all(e.get("may") is True for e in mwr)
    assert [e["ev"] for e in evs][-1] == "reset"


def test_read_slot_refuses_a_payload_longer_than_the_slot_holds():
    """Mutant ``sw_model.embedding_device.xǁFixedPointEmbeddingsǁread_slot__mutmut_14`` (slot
    capacity one line more than the slot): a slot of ``slots_size / 2`` bytes holds its header
    line and at most slot - 64 payload bytes; a header claiming one byte more is refused even
    with a CRC that matches (section 9 CRC computed here with zlib: the payload zero-padded to
    whole lines, then the header line with its crc bytes zero)."""
    import types
    import zlib

    from hw.encodings import SNAP_MAGIC
    from sw_model.embedding_device import FixedPointEmbeddings, SnapshotError
    from sw_model.memory import MemoryImage
    cfg = CFG.with_(slots_size=1024)
    cap = 512 - 64
    mem = MemoryImage(1 << 20)

    class Slots(FixedPointEmbeddings):
        def __init__(self):
            self.cfg = cfg
            self.layout = types.SimpleNamespace(slot_addr=lambda i: 0x1000 + 512 * i)

        def read_mem(self, a, n):
            return mem.read(a, n)

        write_staging = submit = restart_device = set_mlp_lag_csr = read_tables_q = None

    def put(length):
        payload = (np.arange(length) % 251).astype(np.uint8).tobytes()
        hdr = bytearray(64)
        hdr[0:4] = SNAP_MAGIC.to_bytes(4, "little")
        hdr[8:16] = (5).to_bytes(8, "little")
        hdr[16:20] = length.to_bytes(4, "little")
        crc = zlib.crc32(payload + bytes(-length % 64) + bytes(hdr)) & 0xFFFFFFFF
        hdr[4:8] = crc.to_bytes(4, "little")
        mem.write(0x1000, bytes(hdr) + payload)
        return payload

    s = Slots()
    payload = put(cap)
    assert s.read_slot(0, 5) == payload
    put(cap + 1)
    with pytest.raises(SnapshotError, match="slot 0: bad header"):
        s.read_slot(0, 5)


def test_run_names_a_completion_that_does_not_match_its_descriptor():
    """Mutant ``sw_model.embedding_device.xǁFixedPointEmbeddingsǁ_run__mutmut_30`` (the
    message looks the completion's tag up under another key: KeyError instead of the
    RuntimeError that names both)."""
    from sw_model.embedding_device import FixedPointEmbeddings
    from sw_model.training import TrainingDevice

    class Wrong(FixedPointEmbeddings):
        def __init__(self):
            self.stats = dict(descriptors=0)

        def submit(self, descs):
            return [{"tag": 9, "kind": int(DescKind.COMMIT), "status": DeviceError.OK}]

        write_staging = read_mem = restart_device = set_mlp_lag_csr = read_tables_q = None

    desc = TrainingDevice.make_desc(kind=int(DescKind.COMMIT), tag=3, batch=1)
    kind = int(DescKind.COMMIT)
    with pytest.raises(RuntimeError, match=f"^COMMIT 1: completion tag/kind 9/{kind} does not "
                                           f"match the descriptor's 3/{kind}$"):
        Wrong()._run([desc], "COMMIT 1")


def test_region_full_error_reports_the_bytes_used():
    """Mutant ``sw_model.workload.xǁRegionAllocatorǁalloc__mutmut_14`` (``next + base`` as
    the bytes used): 0x80 B of a 0x100 B region at 0x1000 used, 0x100 B more refused."""
    from sw_model.workload import RegionAllocator, RegionFullError
    a = RegionAllocator(0x1000, 0x100)
    assert a.alloc(0x80) == 0x1000
    with pytest.raises(RegionFullError, match=r"\(0x80 B used\)$"):
        a.alloc(0x100)


# ==== third campaign (seed-1 sample of 500 of 8,864 mutants, docs/verification.md) ===============

# ---- embedding_device.StagingLayout --------------------------------------------------------------

def test_staging_layout_refuses_2_32_rows_by_the_row_rule():
    """Mutant ``sw_model.embedding_device.xǁStagingLayoutǁ__init____mutmut_26`` (``r < 2 <<
    32``): a table has at most 2^32 - 1 rows (the descriptor's 32-bit row count); 2^32 rows
    are refused by that rule, not later by the table region's size."""
    from sw_model.embedding_device import StagingLayout
    with pytest.raises(ValueError, match=r"^table 0: rows 4294967296 must be in 1\.\.2\^32-1$"):
        StagingLayout(CFG, (1 << 32,), (16,), 4, 8, 256)


def test_staging_layout_ring_holds_one_descriptor_per_table_plus_one_slot():
    """Mutant ``sw_model.embedding_device.xǁStagingLayoutǁ__init____mutmut_56`` (``ring_size
    - 2 >= T``): a ring of N slots holds N - 1 descriptors, so one table needs a ring of 2 and
    two tables a ring of 4."""
    from sw_model.embedding_device import StagingLayout
    assert StagingLayout(CFG, (10,), (16,), 4, 8, 256, ring_size=2).ring_size == 2
    with pytest.raises(ValueError, match=r"holding 2 descriptors \(>= 3\), got 2$"):
        StagingLayout(CFG, (10, 10), (16, 16), 4, 8, 256, ring_size=2)


def test_staging_layout_puts_tables_back_to_back_at_rows_times_dim_times_4():
    """Mutant ``sw_model.embedding_device.xǁStagingLayoutǁ__init____mutmut_92`` (``r * d *
    5``: tables spaced as if rows were 5 bytes per element). Table t starts at the 64 B
    aligned end of table t - 1: 3 rows x 16 x 4 B = 192 B, 5 x 32 x 4 B = 640 B; tables that
    fill the table region exactly fit."""
    from sw_model.embedding_device import StagingLayout
    L = StagingLayout(CFG, (3, 5, 1), (16, 32, 16), 4, 8, 256)
    b = CFG.table_base
    assert list(L.table_base) == [b, b + 192, b + 192 + 640]
    assert L.table_end == b + 192 + 640 + 64
    rows = CFG.table_size // (128 * 4)
    assert StagingLayout(CFG, (rows,), (128,), 4, 8, 256).table_end == b + CFG.table_size


# ---- expected_trace ------------------------------------------------------------------------------

def test_expected_trace_header_names_its_source():
    """Mutant ``sw_model.expected_trace.x_expected_events__mutmut_61`` (the header's
    ``source`` under another key). docs/traces.md: the header is ``{"trace", "version",
    "source": "model"|"rtl", "covers"}``."""
    from sw_model.expected_trace import SEMANTIC, expected_events
    (hdr,) = expected_events([], CFG)
    assert hdr["trace"] == SEMANTIC and hdr["source"] == "model"


def test_expected_trace_req_events_carry_their_ndr():
    """Mutant ``sw_model.expected_trace.xǁ_Replayǁ_cxl__mutmut_188`` (every M2S Req event's
    NDR list left empty). docs/coherence.md: MemRd SnpInv Meta0=A on a table line is answered
    Cmp-E and MemData, MemInv SnpInv Meta0=I with Cmp and no data."""
    from sw_model.expected_trace import expected_events

    def req(tag, op, snp, mv):
        return {"act": "cxl", "tag": tag, "ch": "m2s_req",
                "hdr": {"opcode": int(op), "snp_type": int(snp),
                        "meta_field": int(MF.META0_STATE), "meta_value": int(mv), "tag": tag,
                        "addr": CFG.table_base // 64 + tag}}

    acts = [{"act": "reset"}, req(1, RQ.MEM_RD, ST.SNP_INV, MV.A),
            req(2, RQ.MEM_INV, ST.SNP_INV, MV.I)]
    rd, inv = [e for e in expected_events(acts, CFG)[1:] if e["ev"] == "cxl"]
    assert rd["ndr"] == [int(NDR.CMP_E)] and [d["opcode"] for d in rd["drs"]] == [0]
    assert inv["ndr"] == [int(NDR.CMP)] and inv["drs"] == []


def test_expected_trace_ring_base_halves_and_read_only_writes():
    """Mutants ``sw_model.expected_trace.xǁ_Replayǁ_apply_write__mutmut_91`` (a CMD/CPL_BASE_LO
    write clears bit 32 instead of the low word, so a second LO write ORs into the first),
    ``xǁ_Replayǁ_reg_value__mutmut_12`` (CPL_BASE looked up in lower case: its value unknown)
    and ``xǁ_Replayǁcsr_write__mutmut_55`` (a write to a read-only register answered without
    SLVERR). The ring bases are BASE_HI:BASE_LO, each half replaced by its write; a write to
    a read-only register (STATUS) is SLVERR (2) and CSR_RO."""
    from sw_model.expected_trace import RegMap
    rm = RegMap()

    def w(name, v):
        return {"act": "csr_write", "addr": rm.off[name], "data": v, "strb": 15, "resp": 0}

    def r(name):
        return {"act": "csr_read", "addr": rm.off[name], "data": 0, "resp": 0}

    ev = _csr_events([{"act": "reset"}, w("CMD_BASE_HI", 0x10), w("CMD_BASE_LO", 0x1000),
                      w("CMD_BASE_LO", 0x2040), w("CPL_BASE_LO", 0x4000),
                      w("CPL_BASE_LO", 0x8000), r("CMD_BASE_LO"), r("CMD_BASE_HI"),
                      r("CPL_BASE_LO"), w("STATUS", 1), r("ERR_CODE")])
    reads = [(e["name"], e["data"]) for e in ev if e["ev"] == "csr_r"]
    assert reads == [("CMD_BASE_LO", 0x2040), ("CMD_BASE_HI", 0x10), ("CPL_BASE_LO", 0x8000),
                     ("ERR_CODE", int(E.CSR_RO))]
    assert [e["resp"] for e in ev if e["ev"] == "csr_w"] == [0, 0, 0, 0, 0, 2]


# ---- memory --------------------------------------------------------------------------------------

def test_line_snapshot_reads_an_unwritten_line_as_its_fill():
    """Mutant ``sw_model.memory.xǁLineSnapshotǁread_line__mutmut_11`` (``bytes(None)``: an
    unwritten line raises TypeError)."""
    from sw_model.memory import LineSnapshot, MemoryImage
    m = MemoryImage(0x1000, fill=0xA5)
    m.write(0x40, b"\x01")
    s = LineSnapshot.of(m)
    assert s.read_line(0x80) == b"\xa5" * 64
    assert s.read_line(0x40) == b"\x01" + b"\xa5" * 63


def test_memory_diff_dumps_only_the_row_holding_a_difference():
    """Mutant ``sw_model.memory.xǁMemoryImageǁdiff__mutmut_50`` (``o <= i <= o + 16``: a
    difference at byte 16 also dumps the row at byte 0). One byte differs, at 0x1010: only the
    row at 0x1010 is dumped (self, other, marks)."""
    from sw_model.memory import MemoryImage
    a, b = MemoryImage(0x2000), MemoryImage(0x2000)
    b.write(0x1010, b"\x07")
    ((addr, desc),) = a.diff(b)
    lines = desc.splitlines()
    assert addr == 0x1010 and len(lines) == 4
    assert lines[1].startswith("  self  0000001010:")
    assert lines[2].startswith("  other 0000001010: 07 00")


def test_gather_lines_refuses_a_u32_address_whose_line_ends_past_4_gib():
    """Mutant ``sw_model.memory.xǁMemoryImageǁgather_lines__mutmut_3`` (addresses kept in the
    caller's dtype: a uint32 0xFFFFFFC0 plus one line wraps to 0 and passes the range check).
    The line at 0xFFFFFFC0 is outside a 64 KiB image whatever the array's dtype."""
    from sw_model.memory import MemoryImage
    m = MemoryImage(0x10000)
    assert m.gather_lines(np.array([0x40], dtype=np.uint32)) == bytes(64)
    with pytest.raises(ValueError, match="out-of-range line address"):
        m.gather_lines(np.array([0xFFFFFFC0], dtype=np.uint32))


def test_memory_write_takes_a_list_of_byte_values():
    """Mutant ``sw_model.memory.xǁMemoryImageǁwrite__mutmut_5`` (``bytes(None)``): ``data``
    may be a list of byte values (the docstring's contract)."""
    from sw_model.memory import MemoryImage
    m = MemoryImage(0x100)
    m.write(0x10, [1, 2, 255])
    assert m.read(0x10, 3) == b"\x01\x02\xff"


# ---- training ------------------------------------------------------------------------------------

def test_parse_cpl_keeps_an_unknown_status_as_its_number():
    """Mutant ``sw_model.training.xǁTrainingDeviceǁparse_cpl__mutmut_10`` (every status made
    a DeviceError: an unknown code raises ValueError). A completion's status that the enum does
    not know stays the plain number, for DeviceStatusError to report."""
    from sw_model.training import TrainingDevice
    unknown = max(int(c) for c in DeviceError) + 1
    rec = bytearray(64)
    rec[5] = unknown
    c = TrainingDevice.parse_cpl(bytes(rec))
    assert type(c["status"]) is int and c["status"] == unknown


def test_formatting_recovery_reports_its_superblock_writes_by_name():
    """Mutant ``sw_model.training.xǁTrainingDeviceǁrecover__mutmut_31`` (the zeroing write of
    a format reported as ``None``). Module docstring: formatting writes zeros to bytes 8..63
    (``"sb_format"``), then the magic/version word (``"sb_magic"``), and no epoch word."""
    from sw_model.memory import MemoryImage
    from sw_model.training import TrainingDevice
    dev = TrainingDevice(CFG, MemoryImage(1 << CFG.addr_bits))
    seen = []
    dev.on_write = lambda addr, data, what: seen.append((addr, len(data), what))
    dev.recover()
    sb = CFG.superblock_base
    assert seen[:2] == [(sb + 8, 56, "sb_format"), (sb, 8, "sb_magic")]
    assert "sb_epoch" not in [w for _, _, w in seen]


# ---- workload ------------------------------------------------------------------------------------

def test_lookup_job_stages_offsets_as_u32_words():
    """Mutant ``sw_model.workload.xǁLookupJobǁlayout__mutmut_11`` (offsets kept as given: a
    list becomes int64, 8 B per offset of staging). 20 u32 offsets fill 80 B, so the indices
    start at the next 64 B line, 128 B after them."""
    from sw_model.memory import MemoryImage
    from sw_model.workload import LookupJob
    mem = MemoryImage(1 << CFG.addr_bits)
    offsets = list(range(20))
    job = LookupJob.layout(CFG, mem, np.zeros((32, 16), dtype=np.int32), offsets,
                           list(range(19)))
    assert job.offsets.dtype == np.uint32
    assert job.cmd.indices_addr - job.cmd.offsets_addr == 128
    assert mem.read_u32(job.cmd.offsets_addr, 20).tolist() == offsets
