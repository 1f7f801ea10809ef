// The AXI4-Lite CSR master as C++ inside the Verilator model (cosim/csr_cpp/__init__.py).
//
// The SystemVerilog module `trainingcxl_csr_dpi` (wrapper.py) calls tcxl_csr_edge() on every
// rising clock edge with the CSR port's values as that edge samples them, and registers what it
// returns with non-blocking assignments (sample on the edge, drive after it, as cocotb's writes).
//
// Python hands over a job: a list of operations, run one after the other.
//   WRITE addr data strb  AW and W offered together, each until taken, then the B awaited.
//   READ  addr            AR offered until taken, then the R awaited.
//   POLL  addr want mask  the completion and recovery waits of cosim.device_driver:
//                         [WRITE clear_addr clear_data (write-1-to-clear)], READ addr; done
//                         when the data ANDed with `mask` equals `want`, or with `timeout`
//                         cycles gone since the operation began (then not matched); else
//                         wait until the edge that samples `irq` high (or `wait` cycles) and
//                         again.
// Each operation's response is returned (Python raises on a non-OKAY one). BREADY and
// RREADY are high outside reset; a B or R with no request outstanding, or a B before both AW and
// W were transferred, is a protocol violation that stops the job. A reset drops the job (a power
// cycle ends every access in flight). The module's input `selected` is its select on the top:
// while it is low another master drives the port and the engine takes no handshake. `busy` (an
// output of the module) is high while a job has operations left: Python sleeps on its fall, not
// on each edge. A job not done `timeout` edges after it was handed over expires: the engine
// withdraws its offers and `busy` falls (Python reports the operations left). `busy` is high on
// the first edge after a job is handed over whatever happens on it (a reset, say), so the one
// fall Python waits for always comes.
#pragma GCC optimize("O2")

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "svdpi.h"
#include "Vtop__Dpi.h"   // the prototypes Verilator derived from the SystemVerilog imports

namespace {

enum Kind { WRITE = 0, READ = 1, POLL = 2 };
constexpr unsigned OP_VALUES = 11;     // per operation in tcxl_csr_submit
enum Phase { START, W_SEND, W_RESP, R_SEND, R_RESP, WAIT };

struct Op {
    uint32_t kind = 0, addr = 0, data = 0, strb = 0;
    uint32_t want = 0, clear = 0, clear_addr = 0, clear_data = 0;
    uint64_t wait = 0, timeout = 0;
    uint32_t mask = 0xFFFFFFFFu;
    // results
    bool done = false, matched = false;
    int resp = -1;
    uint32_t rdata = 0, reads = 0;
    int64_t t_start = -1, t_done = -1;
};

struct Csr {
    uint64_t edge = 0;
    std::vector<Op> ops;
    size_t cur = 0;
    Phase phase = START;
    bool aw = false, w = false, ar = false;      // offered, not taken yet
    uint32_t awaddr = 0, wdata = 0, wstrb = 0, araddr = 0;
    uint64_t wait_until = 0;
    uint64_t deadline = 0;            // the edge at which a job still running expires
    bool expired = false;
    bool handed = false;              // a job was handed over since the last edge
    std::string error;
    uint64_t stats_writes = 0, stats_reads = 0;

    void violation(const char *rule, const std::string &msg) {
        if (!error.empty()) return;
        char head[96];
        std::snprintf(head, sizeof head, "[edge %llu] %s: ", (unsigned long long)edge, rule);
        error = head + msg;
    }

    bool busy() const { return error.empty() && !expired && cur < ops.size(); }

    void clear_job() {
        ops.clear();
        cur = 0;
        phase = START;
        aw = w = ar = false;
        expired = false;
    }

    void finish(Op &o) {
        o.done = true;
        o.t_done = int64_t(edge);
        ++cur;
        phase = START;
    }

    void start_write(uint32_t addr, uint32_t data, uint32_t strb) {
        awaddr = addr, wdata = data, wstrb = strb;
        aw = w = true;
        phase = W_SEND;
    }

    void start_read(uint32_t addr) {
        araddr = addr;
        ar = true;
        phase = R_SEND;
    }

    // The first step of the current operation (called on an edge, drives after it).
    void begin() {
        Op &o = ops[cur];
        if (o.t_start < 0) o.t_start = int64_t(edge);
        if (o.kind == WRITE) start_write(o.addr, o.data, o.strb);
        else if (o.kind == READ || !o.clear) start_read(o.addr);
        else start_write(o.clear_addr, o.clear_data, 0xF);
    }

    void on_b(uint32_t resp) {
        ++stats_writes;
        if (phase != W_RESP) {
            violation("b_unexpected", phase == W_SEND ? "B before both AW and W were transferred"
                                                      : "B with no write outstanding");
            return;
        }
        Op &o = ops[cur];
        if (o.kind == WRITE || resp != 0) {
            o.resp = int(resp);
            finish(o);
        } else {
            start_read(o.addr);          // POLL: the clear was written, now the read
        }
    }

    void on_r(uint32_t data, uint32_t resp) {
        ++stats_reads;
        if (phase != R_RESP) {
            violation("r_unexpected", "R with no read outstanding");
            return;
        }
        Op &o = ops[cur];
        o.rdata = data;
        o.resp = int(resp);
        ++o.reads;
        if (o.kind == READ || resp != 0) {
            finish(o);
        } else if ((data & o.mask) == o.want) {
            o.matched = true;
            finish(o);
        } else if (uint64_t(int64_t(edge) - o.t_start) >= o.timeout) {
            finish(o);
        } else {
            phase = WAIT;
            wait_until = edge + o.wait;
        }
    }
};

Csr C;

}  // namespace

extern "C" {

int tcxl_csr_edge(svBit rst, svBit selected, svBit awready, svBit wready, svBit bvalid,
                  const svBitVecVal *bresp, svBit arready, svBit rvalid,
                  const svBitVecVal *rdata, const svBitVecVal *rresp, svBit irq,
                  svBit *awvalid, svBitVecVal *awaddr, svBit *wvalid, svBitVecVal *wdata,
                  svBitVecVal *wstrb, svBit *arvalid, svBitVecVal *araddr, svBit *busy) {
    Csr &c = C;
    ++c.edge;
    if (rst) {
        c.clear_job();               // a power cycle ends every access in flight
    } else if (c.error.empty() && selected) {
        // handshakes of this edge, as driven after the previous one (none while another
        // master drives the port: its B and R are not this engine's)
        if (c.aw && awready) c.aw = false;
        if (c.w && wready) c.w = false;
        if (c.ar && arready) c.ar = false;
        if (c.phase == W_SEND && !c.aw && !c.w) c.phase = W_RESP;
        if (c.phase == R_SEND && !c.ar) c.phase = R_RESP;
        if (bvalid) c.on_b(bresp[0] & 3u);
        if (rvalid) c.on_r(rdata[0], rresp[0] & 3u);
        if (c.phase == WAIT && (irq || c.edge >= c.wait_until)) c.begin();
        // the next operation starts on this edge, offered after it
        if (c.error.empty() && c.phase == START && c.cur < c.ops.size()) c.begin();
    }
    if (c.busy() && c.edge >= c.deadline) {
        c.expired = true;
        c.aw = c.w = c.ar = false;
    }
    *awvalid = c.aw;
    *wvalid = c.w;
    *arvalid = c.ar;
    awaddr[0] = c.awaddr;            // within the port's width: cosim.csr_cpp checks addresses
    wdata[0] = c.wdata;
    wstrb[0] = c.wstrb & 0xFu;
    araddr[0] = c.araddr;
    *busy = c.busy() || c.handed;
    c.handed = false;
    return 0;
}

// A job of n operations, 11 values each in `ops`: kind, addr, data, strb, want, clear,
// clear_addr, clear_data, wait, timeout, mask; the job expires `timeout` edges from now.
// Returns 0, or -1 when a job is still running.
int tcxl_csr_submit(unsigned n, const unsigned long long *v, unsigned long long timeout) {
    Csr &c = C;
    if (c.busy()) return -1;
    c.clear_job();
    c.deadline = c.edge + timeout;
    c.handed = true;
    c.ops.resize(n);
    for (unsigned i = 0; i < n; ++i) {
        const unsigned long long *p = v + OP_VALUES * i;
        Op &o = c.ops[i];
        o.kind = uint32_t(p[0]);
        o.addr = uint32_t(p[1]);
        o.data = uint32_t(p[2]);
        o.strb = uint32_t(p[3]);
        o.want = uint32_t(p[4]);
        o.clear = uint32_t(p[5]);
        o.clear_addr = uint32_t(p[6]);
        o.clear_data = uint32_t(p[7]);
        o.wait = p[8];
        o.timeout = p[9];
        o.mask = uint32_t(p[10]);
    }
    return 0;
}

// Forget the job and the error (a new master).
void tcxl_csr_reset() {
    C.clear_job();
    C.error.clear();
}

int tcxl_csr_busy() { return C.busy() ? 1 : 0; }
const char *tcxl_csr_error() { return C.error.c_str(); }

// Per operation of the job: done, resp, rdata, matched, reads, t_start, t_done (7 values).
void tcxl_csr_results(long long *out) {
    for (size_t i = 0; i < C.ops.size(); ++i) {
        const Op &o = C.ops[i];
        long long *p = out + 7 * i;
        p[0] = o.done;
        p[1] = o.resp;
        p[2] = o.rdata;
        p[3] = o.matched;
        p[4] = o.reads;
        p[5] = o.t_start;
        p[6] = o.t_done;
    }
}

// writes and reads answered since the build started
void tcxl_csr_stats(unsigned long long *out) {
    out[0] = C.stats_writes;
    out[1] = C.stats_reads;
}

}  // extern "C"
