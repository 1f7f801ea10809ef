"""sw_model.clicklog: synthetic generator (determinism, skew, pooling, learnable labels), npz format
(round trip, every validation error), Criteo TSV converter (against a hand-computed reference with
an independent splitmix64), batch iterator."""
import numpy as np
import pytest

from sw_model.clicklog import (ClickData, ClickLogConfig, ClickLogFormatError, ClickLogGenerator,
                               criteo_lines_to_clicklog, convert_criteo_tsv, iter_batches,
                               load_npz, save_npz)

M64 = (1 << 64) - 1


def same(a: ClickData, b: ClickData) -> bool:
    return (np.array_equal(a.dense, b.dense) and np.array_equal(a.labels, b.labels)
            and np.array_equal(a.table_rows, b.table_rows)
            and all(np.array_equal(x, y) for x, y in zip(a.offsets, b.offsets))
            and all(np.array_equal(x, y) for x, y in zip(a.indices, b.indices))
            and a.n_tables == b.n_tables)


def ref_auc(y, s):
    """Brute force: P(score_pos > score_neg) + 0.5 P(tie)."""
    pos, neg = s[y == 1], s[y == 0]
    return ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (
        len(pos) * len(neg))


# ---- generator -----------------------------------------------------------------------------------

def test_generator_deterministic_per_batch(seed):
    cfg = ClickLogConfig(seed=seed)
    g1, g2 = ClickLogGenerator(cfg), ClickLogGenerator(cfg)
    a = g1.batch(7, 48)
    g1.batch(3, 48)                                    # other batches in between change nothing
    assert same(a, g2.batch(7, 48)), f"seed={seed}"
    assert not same(a, g1.batch(8, 48)), f"seed={seed}"
    assert not same(a, g1.batch(7, 48, split="eval")), f"seed={seed}"
    assert not same(a, ClickLogGenerator(ClickLogConfig(seed=seed + 1)).batch(7, 48))
    a.validate()
    assert a.dense.dtype == np.float32 and a.dense.shape == (48, 13)
    assert a.labels.dtype == np.float32 and a.n == 48 and a.n_tables == 4


def test_generator_pooling_range_and_index_range(seed):
    cfg = ClickLogConfig(seed=seed, pooling=(0, 3), table_rows=(17, 1000), alphas=(0.0, 1.3))
    d = ClickLogGenerator(cfg).generate(20, 64)
    d.validate()
    for t, rows in enumerate(cfg.table_rows):
        lens = np.diff(d.offsets[t])
        assert lens.min() == 0 and lens.max() == 3, f"seed={seed} t={t}"
        assert set(np.unique(lens)) == {0, 1, 2, 3}
        assert d.indices[t].min() >= 0 and d.indices[t].max() < rows


def test_generator_zipf_skew_per_table(seed):
    """The most frequent row of each table has probability 1/H(rows, alpha) (5 sigma)."""
    cfg = ClickLogConfig(seed=seed)
    d = ClickLogGenerator(cfg).generate(100, 64)
    for t, (rows, a) in enumerate(zip(cfg.table_rows, cfg.alphas)):
        x = d.indices[t]
        p0 = 1.0 / np.sum(np.arange(1, rows + 1, dtype=np.float64) ** -a)
        top = np.bincount(x, minlength=rows).max() / x.size
        sigma = np.sqrt(p0 * (1 - p0) / x.size)
        assert abs(top - p0) < 5 * sigma, f"seed={seed} t={t}: {top} vs {p0}"
    # a uniform table has no such head
    u = ClickLogGenerator(ClickLogConfig(seed=seed, table_rows=(1000,), alphas=(0.0,)))
    x = u.generate(50, 64).indices[0]
    assert np.bincount(x, minlength=1000).max() / x.size < 0.01


def test_labels_carry_learnable_signal(seed):
    g = ClickLogGenerator(ClickLogConfig(seed=seed))
    y = np.concatenate([g.batch(b, 256).labels for b in range(1, 21)])
    z = np.concatenate([g.teacher_logits(b, 256) for b in range(1, 21)])
    rate = y.mean()
    assert 0.2 < rate < 0.6, f"seed={seed}: click rate {rate}"
    a = ref_auc(y, z)
    assert a > 0.8, f"seed={seed}: teacher AUC {a}"        # measured ~0.87


def test_generator_config_errors():
    with pytest.raises(ValueError, match="alphas"):
        ClickLogConfig(alphas=(1.0,))
    with pytest.raises(ValueError, match="pooling"):
        ClickLogConfig(pooling=(3, 2))
    with pytest.raises(ValueError, match="split"):
        ClickLogGenerator().batch(1, 4, split="test")


# ---- iterator, slicing ---------------------------------------------------------------------------

def test_iter_batches_and_concat(seed):
    d = ClickLogGenerator(ClickLogConfig(seed=seed, pooling=(0, 2))).generate(3, 50)
    parts = list(iter_batches(d, 32))
    assert [p.n for p in parts] == [32, 32, 32, 32, 22]
    for p in parts:
        p.validate()
        assert all(o[0] == 0 for o in p.offsets)
    assert same(ClickData.concat(parts), d)
    assert [p.n for p in iter_batches(d, 32, drop_last=True)] == [32] * 4
    b = parts[1]
    for t in range(d.n_tables):     # sample 32+i's bag is batch 1's bag i
        for i in (0, 5, 31):
            s, e = d.offsets[t][32 + i], d.offsets[t][33 + i]
            bs, be = b.offsets[t][i], b.offsets[t][i + 1]
            assert np.array_equal(d.indices[t][s:e], b.indices[t][bs:be])
    assert b.bags[2][0] is b.offsets[2] and len(b.bags) == 4


# ---- npz format ----------------------------------------------------------------------------------

def test_npz_round_trip(tmp_path, seed):
    d = ClickLogGenerator(ClickLogConfig(seed=seed, pooling=(0, 4))).generate(2, 40)
    p = tmp_path / "c.npz"
    save_npz(p, d)
    e = load_npz(p)
    assert same(d, e)
    with np.load(p) as z:
        assert sorted(z.files) == sorted(["version", "dense", "labels", "table_rows"]
                                         + [f"offsets_{t}" for t in range(4)]
                                         + [f"indices_{t}" for t in range(4)])
        assert z["dense"].dtype == np.float32 and z["offsets_0"].shape == (81,)


def _write(path, **arrays):
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def _good():
    return dict(version=np.int64(1), dense=np.ones((3, 2), np.float32),
                labels=np.array([0, 1, 0], np.float32), table_rows=np.array([5, 7]),
                offsets_0=np.array([0, 1, 1, 3], np.uint32), indices_0=np.array([4, 0, 1],
                                                                                np.uint32),
                offsets_1=np.array([0, 0, 2, 2]), indices_1=np.array([6, 6]))


@pytest.mark.parametrize("change, match", [
    (dict(dense=None), "missing key 'dense'"),
    (dict(indices_1=None), r"missing keys \['indices_1'\]"),
    (dict(offsets_2=np.zeros(4, np.int64)), r"unexpected keys \['offsets_2'\]"),
    (dict(version=np.int64(2)), "version"),
    (dict(offsets_0=np.array([1, 1, 1, 3])), r"offsets\[0\] = 1"),
    (dict(offsets_0=np.array([0, 2, 1, 3])), "offsets decrease at sample 1"),
    (dict(offsets_0=np.array([0, 1, 1, 2])), r"offsets\[-1\] = 2 but there are 3 indices"),
    (dict(offsets_0=np.array([0, 1, 3])), r"offsets must have shape \(4,\)"),
    (dict(indices_0=np.array([5, 0, 1])), r"table 0: indices\[0\] = 5 outside \[0, 5\)"),
    (dict(indices_1=np.array([6, -1])), r"table 1: indices\[1\] = -1"),
    (dict(indices_1=np.array([6.0, 6.0])), "integer arrays"),
    (dict(dense=np.array([[1, 2], [3, np.nan], [0, 0]], np.float32)), r"dense\[1, 1\]"),
    (dict(dense=np.ones((3, 2))), "dense must be float32"),
    (dict(dense=np.ones((2, 2), np.float32)), "dense has 2 rows"),
    (dict(labels=np.array([0, 2, 0], np.float32)), r"labels\[1\] = 2"),
    (dict(table_rows=np.array([5, 0])), "table_rows must be >= 1"),
])
def test_npz_validation_errors(tmp_path, change, match):
    a = _good()
    for k, v in change.items():
        if v is None:
            del a[k]
        else:
            a[k] = v
    p = tmp_path / "bad.npz"
    _write(p, **a)
    with pytest.raises(ClickLogFormatError, match=match):
        load_npz(p)


def test_npz_accepts_uint32_and_int64(tmp_path):
    p = tmp_path / "ok.npz"
    _write(p, **_good())
    d = load_npz(p)
    assert d.offsets[0].dtype == np.int64 and d.indices[0].tolist() == [4, 0, 1]
    assert d.bags[1][1].tolist() == [6, 6]


def test_save_refuses_invalid(tmp_path):
    d = ClickLogGenerator().batch(1, 4)
    d.indices[0] = d.indices[0].copy()
    d.indices[0][0] = 10**6
    with pytest.raises(ClickLogFormatError, match="outside"):
        save_npz(tmp_path / "x.npz", d)
    assert not (tmp_path / "x.npz").exists()


# ---- Criteo converter ----------------------------------------------------------------------------

def mix(x):
    x &= M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def ref_hash(v, c, rows, salt=0):
    return mix(mix(v) ^ mix(((c + 1) << 32) + salt)) % rows


def criteo_line(label, dense, cats):
    return "\t".join([str(label)] + [("" if v is None else str(v)) for v in dense]
                     + [("" if v is None else v) for v in cats]) + "\n"


def test_splitmix_reference_value():
    # splitmix64 of seed 0's first output (Vigna's reference): state 0x9E3779B97F4A7C15
    assert mix(0x9E3779B97F4A7C15) == 0xE220A8397B1DCDAF


def test_criteo_converter(tmp_path, seed):
    rng = np.random.default_rng(seed)
    rows = (97, 1000, 13)
    lines, exp_dense, exp_bags = [], [], [[] for _ in rows]
    for i in range(25):
        dense = [None if rng.random() < 0.2 else int(rng.integers(-3, 5000)) for _ in range(13)]
        cats = [None if rng.random() < 0.3 else f"{int(rng.integers(0, 2**32)):08x}"
                for _ in range(26)]
        lines.append(criteo_line(int(rng.integers(0, 2)), dense, cats))
        exp_dense.append([np.log1p(max(v or 0, 0)) for v in dense])
        for t in range(3):
            exp_bags[t].append([ref_hash(int(cats[c], 16), c, rows[t])
                                for c in range(26) if c % 3 == t and cats[c] is not None])
    lines[3] = lines[3].replace("\n", "\r\n")
    src = tmp_path / "day.tsv"
    src.write_text("".join(lines), encoding="ascii", newline="")
    d = convert_criteo_tsv(src, tmp_path / "day.npz", rows)
    assert d.n == 25 and d.n_tables == 3
    assert np.array_equal(d.dense, np.asarray(exp_dense, np.float32))
    assert d.labels.tolist() == [float(ln[0]) for ln in lines]
    for t in range(3):
        got = [d.indices[t][d.offsets[t][i]:d.offsets[t][i + 1]].tolist() for i in range(25)]
        assert got == exp_bags[t], f"seed={seed} table {t}"
    assert same(load_npz(tmp_path / "day.npz"), d)


def test_criteo_column_table_and_errors():
    line = criteo_line(1, [1] * 13, ["00000001"] * 26)
    d = criteo_lines_to_clicklog([line], (50, 60), column_table=[0] + [-1] * 24 + [1])
    assert d.indices[0].tolist() == [ref_hash(1, 0, 50)]
    assert d.indices[1].tolist() == [ref_hash(1, 25, 60)]
    assert d.dense[0, 0] == np.float32(np.log(2.0))
    with pytest.raises(ClickLogFormatError, match="src:2: expected 40 tab-separated fields, got"):
        criteo_lines_to_clicklog([line, line.replace("\t1\t", "\t", 1)], (5,), source="src")
    with pytest.raises(ClickLogFormatError, match=":1: label must be 0 or 1"):
        criteo_lines_to_clicklog(["2" + line[1:]], (5,))
    with pytest.raises(ClickLogFormatError, match="dense I1 = '1.5'"):
        criteo_lines_to_clicklog([line.replace("\t1\t", "\t1.5\t", 1)], (5,))
    with pytest.raises(ClickLogFormatError, match="C26 = 'xyz'"):
        criteo_lines_to_clicklog([line.rstrip("\n")[:-8] + "xyz\n"], (5,))
    with pytest.raises(ClickLogFormatError, match="expected 40"):
        criteo_lines_to_clicklog([line, "\n"], (5,))
    with pytest.raises(ValueError, match="column_table"):
        criteo_lines_to_clicklog([line], (5,), column_table=[0] * 25)
