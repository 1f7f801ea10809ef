"""The device's reset: the ``rst`` port registered once before it reaches any block."""
from amaranth.hdl import ClockDomain, ClockSignal, DomainRenamer, ResetSignal, Signal

__all__ = ["with_registered_reset"]

_PORT = "rst_port"      # placeholder name of the outer domain while the design is renamed


def with_registered_reset(m, domain: str = "sync", inner: str = "dev"):
    """``m`` (a module clocked by ``domain``) with ``domain``'s reset registered once: every
    register of ``m`` and its submodules is clocked by ``domain``'s clock in the local domain
    ``inner``, whose reset is a flip-flop that samples ``domain``'s reset each cycle.

    So a reset takes effect, and ends, one cycle after the ``rst`` port changes (it starts at
    1: the design is in reset until the first clock edge sees ``rst`` low). No logic but that
    one flip-flop depends combinationally on ``rst``: a top-level input that fans out to every
    register's next-state logic is a long path on an FPGA, and in Verilator it puts that whole
    logic into the input-combinational region, evaluated again on every ``eval``.

    Returns an elaboratable to return from ``elaborate``; the module hierarchy is unchanged.
    """
    m.domains += ClockDomain(inner, local=True)
    rst_q = Signal(init=1, reset_less=True, name=f"{inner}_rst_q")
    m.d[_PORT] += rst_q.eq(ResetSignal(_PORT))
    m.d.comb += [ClockSignal(inner).eq(ClockSignal(_PORT)), ResetSignal(inner).eq(rst_q)]
    return DomainRenamer({domain: inner, _PORT: domain})(m)
