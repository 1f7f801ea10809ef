"""Workload generation is seeded, bounded and lays jobs out inside the configured regions."""
import numpy as np
import pytest

from hw.config import DeviceConfig
from sw_model.device import DeviceModel
from sw_model.memory import MemoryImage
from sw_model.workload import (LookupJob, RegionAllocator, RegionFullError, make_bags, make_table,
                               random_lookup_job, zipf_indices)

CFG = DeviceConfig()


def test_zipf_indices_bounded_skewed_and_seeded():
    a = zipf_indices(np.random.default_rng(1), 20000, 1000, 1.2)
    b = zipf_indices(np.random.default_rng(1), 20000, 1000, 1.2)
    assert a.dtype == np.uint32 and np.array_equal(a, b)
    assert a.min() >= 0 and a.max() < 1000
    counts = np.bincount(a, minlength=1000)
    assert counts[0] == counts.max() and counts[0] > 10 * counts[100:].mean()
    assert zipf_indices(np.random.default_rng(2), 500, 1, 0.0).tolist() == [0] * 500


def test_zipf_shuffle_relabels_rows_by_a_permutation():
    u = zipf_indices(np.random.default_rng(3), 5000, 50, 1.5)
    s = zipf_indices(np.random.default_rng(3), 5000, 50, 1.5, shuffle=True)
    cu, cs = np.bincount(u, minlength=50), np.bincount(s, minlength=50)
    assert s.max() < 50 and not np.array_equal(u, s) and sorted(cu) == sorted(cs)
    assert all(len(set(s[u == k].tolist())) == 1 for k in np.unique(u))  # rank k -> one row


def test_make_bags_fixed_and_uniform_modes():
    rng = np.random.default_rng(4)
    off, idx = make_bags(rng, 100, 7, 50, mode="fixed")
    assert off.dtype == np.uint32 and off[0] == 0 and np.all(np.diff(off.astype(int)) == 7)
    assert len(idx) == 700 and idx.max() < 50
    off, idx = make_bags(rng, 300, 4, 50, mode="uniform", alpha=1.0)
    lens = np.diff(off.astype(int))
    assert off[0] == 0 and lens.min() == 0 and lens.max() == 8 and len(idx) == off[-1]
    with pytest.raises(ValueError):
        make_bags(rng, 1, 1, 1, mode="zipf")


def test_make_table_extreme_values_provoke_saturation():
    t = make_table(np.random.default_rng(5), 64, 16, extreme=0.5)
    assert t.dtype == np.int32 and t.shape == (64, 16)
    assert (t > 2**31 - 2**24 - 1).any() and (t < -(2**31) + 2**24).any()
    mem = MemoryImage()
    off, idx = make_bags(np.random.default_rng(6), 20, 4, 64)
    job = LookupJob.layout(CFG, mem, t, off, idx)
    assert DeviceModel(CFG, mem).lookup(job.cmd).sat > 0


def test_region_allocator_aligns_and_reports_full():
    a = RegionAllocator(0x1000, 256)
    assert a.alloc(4) == 0x1000 and a.alloc(8) == 0x1040 and a.alloc(4, align=4) == 0x1048
    assert a.alloc(0x1100 - 0x1080) == 0x1080
    with pytest.raises(RegionFullError, match="full"):
        a.alloc(1)


def test_layout_places_job_in_regions_aligned_and_readable():
    mem, job = random_lookup_job(7, CFG, rows=40, dim=32, n_bags=12, pooling=3, poison=-1)
    c = job.cmd
    assert CFG.table_base <= c.table_base and c.table_base + 40 * 128 <= CFG.table_base + CFG.table_size
    for a in (c.offsets_addr, c.indices_addr, c.out_addr):
        assert a % 64 == 0 and CFG.staging_base <= a < CFG.staging_base + CFG.staging_size
    assert (c.dim, c.table_rows, c.n_bags) == (32, 40, 12)
    assert np.array_equal(mem.read_i32(c.table_base, 40 * 32).reshape(40, 32), job.table)
    assert np.array_equal(mem.read_u32(c.offsets_addr, 13), job.offsets)
    assert np.array_equal(mem.read_u32(c.indices_addr, 36), job.indices)
    assert (job.read_output(mem) == -1).all()
    mem2, job2 = random_lookup_job(7, CFG, rows=40, dim=32, n_bags=12, pooling=3, poison=-1)
    assert mem2 == mem and job2.cmd == c


def test_shared_allocators_place_two_jobs_without_overlap():
    mem = MemoryImage()
    ta, sa = RegionAllocator(CFG.table_base, CFG.table_size), RegionAllocator(CFG.staging_base, CFG.staging_size)
    rng = np.random.default_rng(8)
    jobs = [LookupJob.layout(CFG, mem, make_table(rng, 10, 16), *make_bags(rng, 5, 2, 10),
                             table_alloc=ta, staging_alloc=sa) for _ in range(2)]
    assert jobs[1].cmd.table_base >= jobs[0].cmd.table_base + 10 * 64
    assert jobs[1].cmd.offsets_addr >= jobs[0].cmd.out_addr + 5 * 64
    for j in jobs:
        assert DeviceModel(CFG, mem).lookup(j.cmd).ok
