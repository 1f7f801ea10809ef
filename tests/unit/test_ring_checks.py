"""The registered ring configuration checks (hw/cmdproc/ring_checks.py) against the rules of
docs/training.md section 3, computed here: reset values, one cycle of latency, outputs held while ``load`` is low, and
random and edge-case sizes and bases."""
import pytest

from hw.cmdproc.ring_checks import MAX_RING, RingConfigChecks
from hw.config import DeviceConfig
from hw.encodings import DeviceError

from pysim_util import as_int, make_rng, simulate

CFG = DeviceConfig()
M32, M64 = (1 << 32) - 1, (1 << 64) - 1


def expected(size, cmd_base, cpl_base):
    """(mask, (valid, code, value)) by the documented rules."""
    mask = (size - 1) & M32
    s_base, s_end = CFG.staging_base, CFG.staging_base + CFG.staging_size

    def ring_ok(base):
        return base % 64 == 0 and base >= s_base and base + size * 64 <= s_end
    if not (2 <= size <= MAX_RING and size & (size - 1) == 0):
        err = (1, DeviceError.RING_CONFIG, size)
    elif not ring_ok(cmd_base):
        err = (1, DeviceError.RING_CONFIG, cmd_base)
    elif not ring_ok(cpl_base):
        err = (1, DeviceError.RING_CONFIG, cpl_base)
    else:
        err = (0, DeviceError.RING_CONFIG, 0)
    return mask, err


def cases(rng, n):
    s_base, s_end = CFG.staging_base, CFG.staging_base + CFG.staging_size
    sizes = [0, 1, 2, 3, 4, 6, 1024, MAX_RING, MAX_RING + 1, 2 * MAX_RING, 1 << 31, M32]
    for _ in range(n):
        size = rng.choice(sizes + [1 << rng.randrange(32), rng.getrandbits(32)])
        ring = size * 64

        def base():
            return rng.choice([
                s_base, s_base + 64, s_end - ring, s_end - ring + 64, s_end - ring - 64,
                s_base - 64, s_base + 32, s_end, rng.getrandbits(64),
                s_base + 64 * rng.randrange(CFG.staging_size // 64),
            ]) & M64
        yield size, base(), base(), rng.random() < 0.8


@pytest.mark.parametrize("seed", [1, 2])
def test_registered_checks_follow_the_rules_one_cycle_later(seed):
    rng = make_rng(seed)
    dut = RingConfigChecks(CFG)
    todo = list(cases(rng, 400))
    errors = []

    async def bench(ctx):
        err = dut.error
        want = (M32, (1, DeviceError.RING_CONFIG, 0))     # after reset: size 0
        for case in todo + [todo[-1]]:
            for port, v in zip(("size", "cmd_base", "cpl_base", "load"), case):
                ctx.set(getattr(dut, port), v)
            *_, mask, valid, code, value = await ctx.tick().sample(
                dut.mask, err.valid, err.code, err.value)
            got = (as_int(mask), (as_int(valid), as_int(code), as_int(value)))
            if got != want:
                errors.append((case, got, want))
            if case[-1]:
                want = expected(*case[:3])

    simulate(dut, [bench], name="ring_checks")
    assert not errors, f"{len(errors)} mismatches, first (inputs, got, expected): {errors[0]}"
