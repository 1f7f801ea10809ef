"""The compiled CXL.mem host checks each answer against opcode masks computed once per header
kind and region (``cosim.host_cpp._answer_masks``): they must equal the coherence reference's
answer for the header at its own address, for every region, the gaps and outside HDM."""
import random

from cosim.host_cpp import _answer_masks, opcode_mask
from cosim.cxl_host.protocol import Reference
from hw.config import DEFAULT, REGIONS
from hw.cxl_encodings import M2S_REQ_FIELDS, M2S_RWD_FIELDS
from sw_model.coherence import host_region


def _direct(cfg, channel, hdr):
    e = Reference(cfg).expect(channel, hdr)
    return e.ndr is not None, opcode_mask(e.ndr), opcode_mask(e.drs)


def test_masks_by_region_equal_the_reference_per_address(seed):
    rng = random.Random(seed)
    cfg = DEFAULT
    widths = {"m2s_req": dict(M2S_REQ_FIELDS), "m2s_rwd": dict(M2S_RWD_FIELDS)}
    lines = []
    for r in REGIONS:                       # first, last and a random line of each region
        b, n = getattr(cfg, r + "_base") // 64, getattr(cfg, r + "_size") // 64
        lines += [b, b + n - 1, b + rng.randrange(n), b + n]    # b + n: the next region or a gap
    lines += [rng.randrange(1 << (cfg.addr_bits - 6)) for _ in range(200)]
    lines += [(1 << (cfg.addr_bits - 6)) + rng.randrange(1 << 20)]         # outside HDM
    regions = set()
    for i in range(3000):
        ch = rng.choice(("m2s_req", "m2s_rwd"))
        w = widths[ch]
        hdr = {k: rng.randrange(1 << w[k]) for k in ("opcode", "snp_type", "meta_field",
                                                       "meta_value")}
        hdr["addr"] = rng.choice(lines) % (1 << w["addr"])
        hdr["tag"] = 0
        if ch == "m2s_rwd":
            hdr["poison"] = rng.randrange(2)
        region = host_region(cfg, hdr["addr"])
        regions.add(region)
        got = _answer_masks(cfg, ch, hdr["opcode"], hdr["snp_type"], hdr["meta_field"],
                            hdr["meta_value"], region, hdr.get("poison", 0))
        assert got == _direct(cfg, ch, hdr), (seed, i, ch, hdr, region)
    assert regions >= set(REGIONS) | {None}, (seed, regions)
