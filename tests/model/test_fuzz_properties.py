"""Hypothesis properties of the golden model's input handling (the oracle of ``trainingcxl fuzz``):
descriptor and completion layouts round-trip; any 64-byte descriptor executes to a completion
whose status is a documented ``DeviceError`` (never an exception), with the error registers
saying the same, and committed state changed only by a good COMMIT; any doorbell value gets OK or
one of the section-3 codes; any CXL.mem Req/RwD header within the field widths gets an answer
whose error is a ``DcohError``, and combinations outside the legal table are ILLEGAL_REQ /
ILLEGAL_RWD. Also the fuzz's own generators: mutations stay 64 bytes, ``bound_work`` only ever
lowers n_bags and only for descriptors that would pass every range check.

Seeded: Hypothesis runs derandomized (``derandomize=True``), so a failure reproduces.
"""
import random

from hypothesis import HealthCheck, given, settings, strategies as st

from hw.config import DEFAULT
from hw.cxl_encodings import (M2S_REQ_FIELDS, M2S_RWD_FIELDS, DcohError, NDROpcode, ReqOpcode,
                              RwDOpcode, SnpType)
from hw.encodings import (CPL_BYTES, CPL_FIELDS, DESC_BYTES, DESC_FIELDS, DescKind,
                          DeviceError as E, pack_fields, unpack_fields)
from sw_model import coherence
from sw_model.memory import MemoryImage
from sw_model.training import TrainingDevice
from trainingcxl.fuzz.inputs import (MAX_BAGS_RUN, MAX_SNAP_RUN, RESERVED_BYTES, bound_work,
                                    mutate_desc, reads_range)

SETTINGS = settings(max_examples=100, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])
CFG = DEFAULT
SB_COMMITTED = CFG.superblock_base + 8


def _fields_strategy(fields):
    return st.fixed_dictionaries({n: st.integers(0, (1 << (8 * w)) - 1) for n, _, w in fields})


@SETTINGS
@given(_fields_strategy(DESC_FIELDS))
def test_descriptor_pack_unpack_round_trip(d):
    raw = pack_fields(DESC_FIELDS, d, DESC_BYTES)
    assert len(raw) == DESC_BYTES
    assert unpack_fields(DESC_FIELDS, raw) == d
    assert all(raw[b] == 0 for b in RESERVED_BYTES)


@SETTINGS
@given(_fields_strategy(CPL_FIELDS))
def test_completion_pack_unpack_round_trip(c):
    assert unpack_fields(CPL_FIELDS, pack_fields(CPL_FIELDS, c, CPL_BYTES)) == c


def _device():
    """A recovered model with three good tables, one bad directory entry and staged bags."""
    dev = TrainingDevice(CFG, MemoryImage(1 << CFG.addr_bits))
    dev.recover()
    rng = random.Random(5)
    base = CFG.table_base
    for t, (rows, dim) in enumerate(((64, 16), (40, 32), (16, 128))):
        dev.mem.write(base, bytes(rng.getrandbits(8) for _ in range(rows * dim * 4)))
        dev.set_table(t, base, rows, dim)
        base += rows * dim * 4
    dev.set_table(3, base + 4, 8, 48)
    s = CFG.staging_base
    dev.mem.write(s, b"".join(int(x).to_bytes(4, "little") for x in (0, 2, 3, 7, 7)))
    dev.mem.write(s + 64, b"".join(int(x).to_bytes(4, "little") for x in (1, 2, 3, 0, 5, 6, 7)))
    dev.lr = 1 << 10
    return dev


def _template(kind, table=0):
    s = CFG.staging_base
    return TrainingDevice.make_desc(kind=kind, table=table, batch=1, n_bags=4,
                                    offsets_addr=s, indices_addr=s + 64, data_addr=s + 4096,
                                    length=64)


@SETTINGS
@given(st.one_of(st.binary(min_size=DESC_BYTES, max_size=DESC_BYTES),
                 st.tuples(st.sampled_from(list(DescKind)), st.integers(0, 3),
                           st.integers(0, 2**32 - 1)).map(
                     lambda a: mutate_desc(random.Random(a[2]), _template(a[0], a[1]),
                                           near=[CFG.staging_base, 1 << CFG.addr_bits])[0])))
def test_any_descriptor_completes_with_a_documented_status(desc):
    """No exception; status is a DeviceError; the error CSRs agree; the superblock's committed
    word moves only on a good COMMIT, and then to the descriptor's batch."""
    dev = _device()
    desc = bound_work(desc, dev)
    before = (dev.err_count, dev.committed, dev.mem.read(SB_COMMITTED, 8))
    cpl = unpack_fields(CPL_FIELDS, dev.execute(desc))
    d = unpack_fields(DESC_FIELDS, desc)
    status = E(cpl["status"])                 # raises ValueError on an undocumented code
    assert cpl["tag"] == d["tag"] and cpl["kind"] == d["kind"] and cpl["batch"] == d["batch"]
    if status != E.OK:
        assert dev.err_code == status and dev.err_value == cpl["err_value"]
        assert dev.err_count == before[0] + 1 and dev.status_error
    else:
        assert dev.err_count == before[0]
    if status == E.OK and d["kind"] == DescKind.COMMIT:
        assert dev.committed == d["batch"] == 1
        assert dev.mem.read(SB_COMMITTED, 8) == (1).to_bytes(8, "little")
    else:
        assert dev.committed == before[1] and dev.mem.read(SB_COMMITTED, 8) == before[2]
    if d["kind"] not in tuple(DescKind):
        assert status == E.UNKNOWN_KIND and cpl["err_value"] == d["kind"]


def test_reads_range_finds_inputs_in_the_completion_ring():
    """The fuzz keeps descriptors that read completion records (their ``cycles`` is the RTL's
    alone) out (desc, seed 110, input 9952: gradients read from completion slot 0): every
    input range counts (offsets, indices up to max_bag per bag, gradients, a snapshot's
    source), outputs and other kinds do not."""
    dev = _device()
    ring = (CFG.staging_base + (32 << 20), CFG.staging_base + (32 << 20) + CPL_BYTES * 64)
    s = CFG.staging_base

    def desc(kind, **f):
        f = dict(table=0, batch=1, n_bags=4, offsets_addr=s, indices_addr=s + 64,
                 data_addr=s + 4096, length=64) | f
        return TrainingDevice.make_desc(kind=kind, **f)

    for kind in (DescKind.LOOKUP, DescKind.UPDATE):
        assert not reads_range(desc(kind), dev, ring)
        assert reads_range(desc(kind, offsets_addr=ring[1] - 4), dev, ring)
        # indices: bag b may hold up to max_bag rows, so the conservative end
        assert reads_range(desc(kind, indices_addr=ring[0] - 4 * CFG.max_bag * 4 + 4), dev, ring)
        assert not reads_range(desc(kind, indices_addr=ring[0] - 4 * CFG.max_bag * 4), dev, ring)
    assert reads_range(desc(DescKind.UPDATE, data_addr=ring[0]), dev, ring)      # gradients
    assert not reads_range(desc(DescKind.LOOKUP, data_addr=ring[0]), dev, ring)  # an output
    assert reads_range(desc(DescKind.SNAPSHOT, data_addr=ring[0] - 63), dev, ring)
    assert not reads_range(desc(DescKind.SNAPSHOT, data_addr=ring[0] - 64), dev, ring)
    assert not reads_range(desc(DescKind.COMMIT, data_addr=ring[0]), dev, ring)


def test_a_later_output_overwrites_an_earlier_completion_in_the_model():
    """The case the fuzz reads completions for from the model's memory (desc, seed 105, input
    9440): a COMMIT's completion slot overwritten by the output of a LOOKUP in the same doorbell
    holds the output, in the model as in the RTL's memory."""
    dev = _device()
    cmd, cpl = CFG.staging_base + 4096 * 4, CFG.staging_base + 4096 * 8
    assert dev.configure_ring(cmd, 8, cpl) == E.OK
    s = CFG.staging_base
    look = TrainingDevice.make_desc(kind=DescKind.LOOKUP, table=0, batch=1, n_bags=1,
                                    offsets_addr=s, indices_addr=s + 64, data_addr=cpl)
    commit = TrainingDevice.make_desc(kind=DescKind.COMMIT, batch=1)
    dev.mem.write(cmd, commit + look)
    assert dev.doorbell(2) == E.OK
    done = dev.process()
    assert [int(c["status"]) for c in done] == [E.OK, E.OK]
    slot0 = unpack_fields(CPL_FIELDS, dev.mem.read(cpl, CPL_BYTES))
    assert slot0 != done[0]
    rows = dev.mem.read_i32(CFG.table_base, 64 * 16).reshape(64, 16).astype("int64")
    pooled = (rows[1] + rows[2]).clip(-2**31, 2**31 - 1)   # offsets 0, 2: indices 1, 2
    assert dev.mem.read(cpl, 64) == pooled.astype("<i4").tobytes()


@SETTINGS
@given(st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 2, 3, 8, 64, 1 << 17]),
       st.booleans())
def test_any_doorbell_is_accepted_or_refused_with_a_ring_code(v, size, ready):
    dev = _device()
    if not ready:
        dev.reset()
    dev.configure_ring(CFG.staging_base + 4096, size, CFG.staging_base + 8192)
    code = dev.doorbell(v)
    assert code in (E.OK, E.NOT_READY, E.RING_CONFIG, E.DOORBELL_RANGE, E.RING_OVERFLOW)
    if code == E.OK:
        assert dev.tail == v and dev.err_count == 0
    else:
        assert dev.tail == 0 and dev.err_code == code and dev.err_count == 1


def _hdr_strategy(fields):
    return st.fixed_dictionaries({n: st.integers(0, (1 << w) - 1) for n, w in fields
                                  if n in ("opcode", "snp_type", "meta_field", "meta_value",
                                           "tag", "addr")})


@SETTINGS
@given(_hdr_strategy(M2S_REQ_FIELDS))
def test_any_req_header_gets_a_documented_answer(h):
    a = coherence.expected_req(CFG, h)
    assert int(a.error) in DcohError._value2member_map_
    assert a.tag == h["tag"]
    if h["opcode"] == ReqOpcode.MEM_SPEC_RD:          # dropped: no response, no error
        assert a.drs is None and a.ndr is None and a.error == DcohError.NONE
    elif h["opcode"] not in set(ReqOpcode) or h["snp_type"] > SnpType.SNP_INV:
        # undefined opcode or SnpType encodings are outside the legal table
        assert a.error == DcohError.ILLEGAL_REQ and not a.media_write and not a.media_read


@SETTINGS
@given(_hdr_strategy(M2S_RWD_FIELDS), st.sampled_from([None, "I", "S", "A"]))
def test_any_rwd_header_gets_a_documented_answer(h, sf):
    a = coherence.expected_rwd(CFG, h, sf)
    assert int(a.error) in DcohError._value2member_map_
    assert a.tag == h["tag"]
    if h["opcode"] == RwDOpcode.BI_CONFLICT:
        assert a.ndr == NDROpcode.BI_CONFLICT_ACK and a.error == DcohError.NONE
    elif h["opcode"] not in (RwDOpcode.MEM_WR, RwDOpcode.MEM_WR_PTL) or h["snp_type"]:
        # docs/coherence.md: writes carry SnpType No-Op; anything else is ILLEGAL_RWD
        assert a.error == DcohError.ILLEGAL_RWD and not a.media_write


@SETTINGS
@given(st.sampled_from(list(DescKind)), st.integers(0, 2**32 - 1))
def test_mutations_stay_descriptors_and_bound_work_only_lowers_passing_counts(kind, seed):
    dev = _device()
    d, what = mutate_desc(random.Random(seed), _template(kind), near=[CFG.staging_base])
    assert len(d) == DESC_BYTES and what
    b = bound_work(d, dev)
    nd, nb = unpack_fields(DESC_FIELDS, d), unpack_fields(DESC_FIELDS, b)
    assert {k: v for k, v in nd.items() if k not in ("n_bags", "length")} == \
        {k: v for k, v in nb.items() if k not in ("n_bags", "length")}
    assert nb["n_bags"] <= nd["n_bags"] and nb["length"] <= nd["length"]
    if nb["n_bags"] != nd["n_bags"]:
        assert nd["n_bags"] > MAX_BAGS_RUN and nb["n_bags"] < MAX_BAGS_RUN
        assert nd["kind"] in (DescKind.LOOKUP, DescKind.UPDATE)
    if nb["length"] != nd["length"]:
        assert nd["length"] > MAX_SNAP_RUN and nb["length"] < MAX_SNAP_RUN
        assert nd["kind"] == DescKind.SNAPSHOT
