// The PMEM model of cosim/pmem.py as C++ inside the Verilator model (cosim/pmem_cpp/__init__.py).
//
// The SystemVerilog module `trainingcxl_pmem_dpi` (wrapper.py) calls tcxl_pmem_edge() on every
// rising clock edge with the media port's values as that edge samples them, and registers what
// it returns with non-blocking assignments: the same "sample on the edge, drive after it" that
// the Python model does from cocotb. tcxl_pmem_reset() runs when reset rises (the Python
// model's channel engines and protocol state are cleared at that instant too).
//
// Timing, ordering and persistence rules: exactly those of cosim/pmem.py's docstring without
// stalls and media faults (both stay with the Python model): AR/AW/W ready from the first edge
// after reset (or attach) on; the first R beat of a burst handshaken at edge a is driven at
// edge a + read_latency, B of a write whose data completed at edge d at d + write_latency, one
// beat per cycle, in order. Bandwidth (cosim/media.py): a service-time queue per direction
// (`Server`, cosim.media.BandwidthServer line for line): R beats are driven at
// ceil(service start) + read_latency, a burst's B at ceil(service start of its last beat) +
// write_latency; unlimited (num 0) leaves the edges above. Within one edge the model takes R
// and B handshakes, then AR (reads see the memory before any write completing at the same
// edge), then AW, then W.
//
// Poison (cosim/pmem.py's docstring): one bit per line in `poisoned` (apart from the line store,
// so a poisoned line that was never written creates no line and the creation order the staging
// garbage follows is unchanged). AWUSER 1 sets the bits of the burst's lines when its data is
// applied; AWUSER 0 clears the bit of each line the burst writes completely; RUSER of a beat is
// its line's bit at the AR handshake.
//
// Python reaches the state through the extern "C" tcxl_pmem_* functions below with ctypes on
// the simulator process (the build links with -rdynamic so dlopen(NULL) finds them).
#pragma GCC optimize("O2")

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "svdpi.h"
#include "Vtop__Dpi.h"   // the prototypes Verilator derived from the SystemVerilog imports

namespace {

constexpr uint64_t LINE = 64;
using Bytes = std::vector<uint8_t>;

struct RItem { uint64_t due; uint32_t id; Bytes data; bool last; uint32_t resp; bool user; };
struct BItem { uint64_t due; uint32_t id; uint32_t resp; };

// Media faults: the rules live in Python (cosim.pmem.MediaFault, PmemModel._fault, so the
// seeded draws are the Python model's). While any rule is set, the model asks this hook at
// each AR handshake (op 0) and each write's data completion (op 1): (op, burst address, bytes
// the rule matches against, AXI id, out: RDATA bytes of the burst's bus words, their count).
// It returns 0 (no fault) or the response (SLVERR/DECERR), plus 0x100 when a faulted write is
// still applied to the media.
using FaultFn = int (*)(int, unsigned long long, unsigned long long, unsigned, uint8_t *,
                        unsigned long long);
struct Seg { uint64_t addr; Bytes data; Bytes old; };
struct Pending {
    uint32_t awid; uint64_t addr, nbytes; uint64_t aw_edge, data_edge;
    int64_t log_index;                 // its Record in `log`, or -1
    std::vector<Seg> segs;
    bool poison = false;               // its AWUSER
    std::vector<std::pair<uint64_t, bool>> poison_old;   // (line, bit before) of lines it wrote
};
struct Record { uint32_t awid; uint64_t addr, nbytes, aw_edge, data_edge; int64_t b_edge; };
struct AwWait { uint32_t id; uint64_t addr; uint32_t len, size; uint64_t edge; bool poison; };
struct WBeat { Bytes data; uint64_t strb; };
struct WBurst { std::vector<WBeat> beats; uint64_t edge; };

// cosim.media.BandwidthServer: time in ticks of 1/num cycle, a unit of b bytes takes b * den
// ticks; num 0 = unlimited
struct Server {
    uint64_t num = 0, den = 0, free = 0;
    void clear() { free = 0; }
    uint64_t serve(uint64_t e, uint64_t nbytes) {     // the edge its service starts on
        if (!num) return e;
        uint64_t start = std::max(free, e * num);
        free = start + nbytes * den;
        return (start + num - 1) / num;
    }
};

struct Model {
    bool attached = false;
    FaultFn fault = nullptr;
    bool log_writes = false;
    uint32_t lanes = 64, read_lat = 100, write_lat = 100;
    Server r_server, w_server;
    uint64_t edge = 0;                 // rising clock edges seen since time 0
    // The line store. `seq` orders lines by creation, as the Python MemoryImage's dict does:
    // the power-failure model draws staging garbage in that order.
    struct Line { std::array<uint8_t, LINE> data; uint64_t seq; };
    std::unordered_map<uint64_t, Line> mem;
    std::unordered_set<uint64_t> poisoned;   // line addresses with the poison bit set
    uint64_t mem_version = 0, mem_seq = 0;
    Line &new_line(uint64_t la) { return mem.emplace(la, Line{{}, mem_seq++}).first->second; }
    // channel engines
    bool ar_ready = false, aw_ready = false, w_ready = false;
    std::deque<RItem> r; bool r_valid = false; uint64_t r_busy = 0;
    std::deque<BItem> b; bool b_valid = false; uint64_t b_busy = 0;
    RItem r_out{0, 0, {}, false, 0, false};
    BItem b_out{0, 0, 0};
    // protocol state (PmemModel._reset_state_vars)
    uint64_t ar_count = 0, aw_count = 0, r_beats = 0, w_beats = 0, b_count = 0, acked = 0;
    uint64_t r_queue = 0, w_queue = 0;     // cycles waited for bandwidth (PmemModel's)
    int64_t first_r = -1, last_r = -1;
    std::deque<AwWait> aw_waiting;
    std::deque<WBurst> w_waiting;
    std::vector<WBeat> w_cur;
    uint64_t w_bursts = 0;
    std::deque<Pending> unacked;
    std::vector<Record> log;
    uint64_t log_dropped = 0;          // records cleared from the front of `log`
    std::string error;
    std::string blob;

    void reset_state() {
        ar_count = aw_count = r_beats = w_beats = b_count = acked = 0;
        r_queue = w_queue = 0;
        first_r = last_r = -1;
        aw_waiting.clear(); w_waiting.clear(); w_cur.clear(); w_bursts = 0; unacked.clear();
        r_server.clear(); w_server.clear();
    }
    void reset() {          // reset asserted: engines stop, queues and protocol state go
        r.clear(); b.clear();
        r_valid = b_valid = false;
        ar_ready = aw_ready = w_ready = false;
        reset_state();
    }

    // After a power failure the media may be a GarbageMemory (cosim/powerfail.py): lines of its
    // regions never written nor read yet read as seeded garbage, made by Python on first read.
    using GarbageFn = void (*)(unsigned long long, uint8_t *);
    GarbageFn garbage = nullptr;
    std::vector<std::pair<uint64_t, uint64_t>> garbage_regions;   // (base, size)

    bool in_garbage(uint64_t la) const {
        for (auto &r : garbage_regions)
            if (la >= r.first && la - r.first < r.second) return true;
        return false;
    }

    void read(uint64_t addr, uint8_t *out, uint64_t n) {
        while (n) {
            uint64_t la = addr & ~(LINE - 1), o = addr - la, k = std::min(LINE - o, n);
            auto it = mem.find(la);
            if (it == mem.end() && garbage && in_garbage(la)) {
                garbage(la, new_line(la).data.data());
                ++mem_version;
                it = mem.find(la);
            }
            if (it == mem.end()) std::memset(out, 0, k);
            else std::memcpy(out, it->second.data.data() + o, k);
            addr += k; out += k; n -= k;
        }
    }
    void write(uint64_t addr, const uint8_t *in, uint64_t n) {
        ++mem_version;
        while (n) {
            uint64_t la = addr & ~(LINE - 1), o = addr - la, k = std::min(LINE - o, n);
            auto it = mem.find(la);
            Line &line = it == mem.end() ? new_line(la) : it->second;
            std::memcpy(line.data.data() + o, in, k);
            addr += k; in += k; n -= k;
        }
    }

    bool fail(const std::string &msg) { if (error.empty()) error = msg; return false; }

    // PmemModel._check_burst
    bool check_burst(const char *kind, uint64_t addr, uint32_t length, uint32_t size,
                     uint32_t burst, uint64_t &num_bytes, uint64_t &aligned) {
        char buf[200];
        if (burst != 1) {
            std::snprintf(buf, sizeof buf, "%s: only INCR bursts are supported, got burst=%u",
                          kind, burst);
            return fail(buf);
        }
        if ((1u << size) > lanes) {
            std::snprintf(buf, sizeof buf, "%s: size %u wider than the %u-bit bus", kind, size,
                          lanes * 8);
            return fail(buf);
        }
        num_bytes = 1ull << size;
        aligned = addr - addr % num_bytes;
        if ((aligned & 0xfff) + num_bytes * length > 0x1000) {
            std::snprintf(buf, sizeof buf, "%s: burst at %#llx of %ux%llu bytes crosses a 4 KiB "
                          "boundary", kind, (unsigned long long)addr, length,
                          (unsigned long long)num_bytes);
            return fail(buf);
        }
        return true;
    }

    bool is_poisoned(uint64_t a) const {
        return !poisoned.empty() && poisoned.count(a & ~(LINE - 1));
    }

    void on_ar(uint32_t id, uint64_t addr, uint32_t arlen, uint32_t size, uint32_t burst) {
        uint32_t length = arlen + 1;
        ++ar_count;
        uint64_t num_bytes, aligned;
        if (!check_burst("AR", addr, length, size, burst, num_bytes, aligned)) return;
        // each beat's edge: ceil(its service start) + read_lat (edge + read_lat unlimited)
        std::vector<uint64_t> due(length);
        for (uint32_t n = 0; n < length; ++n) {
            due[n] = r_server.serve(edge, num_bytes) + read_lat;
            r_queue += due[n] - read_lat - edge;
        }
        // bus word address of beat n
        auto beat_addr = [&](uint32_t n) {
            uint64_t a = (num_bytes == lanes) ? addr - addr % lanes + n * lanes
                                              : (n == 0 ? addr : aligned + n * num_bytes);
            return a - a % lanes;
        };
        if (fault) {       // PmemModel._on_ar's fault branch
            uint64_t lo = addr - addr % lanes;
            uint64_t hi = (aligned + num_bytes * length + lanes - 1) / lanes * lanes;
            Bytes data(hi - lo);
            int resp = fault(0, addr, aligned + num_bytes * length - addr, id, data.data(),
                             data.size()) & 0xff;
            if (resp) {
                for (uint32_t n = 0; n < length; ++n) {
                    uint64_t off = num_bytes == lanes
                        ? n * lanes
                        : ((n == 0 ? addr : aligned + n * num_bytes) - lo) / lanes * lanes;
                    RItem it{due[n], id, Bytes(data.begin() + off, data.begin() + off + lanes),
                             n == length - 1, uint32_t(resp), is_poisoned(beat_addr(n))};
                    r.push_back(std::move(it));
                }
                return;
            }
        }
        for (uint32_t n = 0; n < length; ++n) {
            uint64_t a = beat_addr(n);
            RItem it{due[n], id, Bytes(lanes), n == length - 1, 0, is_poisoned(a)};
            read(a, it.data.data(), lanes);
            r.push_back(std::move(it));
        }
    }

    void on_aw(uint32_t id, uint64_t addr, uint32_t awlen, uint32_t size, uint32_t burst,
               bool poison) {
        ++aw_count;
        uint64_t num_bytes, aligned;
        if (!check_burst("AW", addr, awlen + 1, size, burst, num_bytes, aligned)) return;
        aw_waiting.push_back({id, addr, awlen + 1, size, edge, poison});
        if (!w_waiting.empty()) match_writes();
    }

    void on_w(const Bytes &data, uint64_t strb, bool last) {
        ++w_beats;
        w_cur.push_back({data, strb});
        if (last) {
            w_waiting.push_back({std::move(w_cur), edge});
            w_cur.clear();
            ++w_bursts;
            if (!aw_waiting.empty()) match_writes();
        } else if (w_cur.size() > 256) {
            fail("W: more than 256 beats without WLAST");
        }
    }

    // PmemModel._segments: contiguous (addr, bytes) runs written by a burst
    std::vector<Seg> segments(uint64_t addr, uint32_t size, const std::vector<WBeat> &beats) {
        std::vector<Seg> out;
        uint64_t full = lanes == 64 ? ~0ull : (1ull << lanes) - 1;
        uint64_t num_bytes = 1ull << size, aligned = addr - addr % num_bytes;
        bool have = false; uint64_t run_addr = 0; Bytes run;
        auto extend = [&](uint64_t a, const uint8_t *p, uint64_t k) {
            if (have && run_addr + run.size() == a) {
                run.insert(run.end(), p, p + k);
            } else {
                if (have && !run.empty()) out.push_back({run_addr, run, {}});
                have = true; run_addr = a; run.assign(p, p + k);
            }
        };
        for (size_t n = 0; n < beats.size(); ++n) {
            uint64_t a = n == 0 ? addr : aligned + n * num_bytes;
            uint64_t word = a - a % lanes, lo = a - word;
            uint64_t hi = (n == 0 ? aligned : a) - word + num_bytes;
            uint64_t himask = hi >= 64 ? ~0ull : (1ull << hi) - 1;
            uint64_t strb = beats[n].strb & himask & ~((1ull << lo) - 1);
            const uint8_t *d = beats[n].data.data();
            if (strb == full) { extend(word, d, lanes); continue; }
            uint32_t i = 0;
            while (i < lanes) {
                if (!((strb >> i) & 1)) { ++i; continue; }
                uint32_t j = i;
                while (j < lanes && ((strb >> j) & 1)) ++j;
                extend(word + i, d + i, j - i);
                i = j;
            }
        }
        if (have && !run.empty()) out.push_back({run_addr, run, {}});
        return out;
    }

    // cosim.pmem.poison_update: a poisoned burst sets the bits of its lines (in address order);
    // a clean one clears the poisoned lines its segments write completely (in the order the
    // Python dict sees them: first byte written)
    void poison_update(Pending &pw, const AwWait &aw) {
        uint64_t num_bytes = 1ull << aw.size;
        uint64_t end = aw.addr - aw.addr % num_bytes + num_bytes * aw.len;
        if (aw.poison) {
            for (uint64_t la = aw.addr & ~(LINE - 1); la < end; la += LINE) {
                pw.poison_old.emplace_back(la, poisoned.count(la) != 0);
                poisoned.insert(la);
            }
            return;
        }
        if (poisoned.empty()) return;
        std::vector<std::pair<uint64_t, uint64_t>> written;   // (line, bytes), first-seen order
        for (auto &sg : pw.segs) {
            uint64_t a = sg.addr, n = sg.data.size(), i = 0;
            while (i < n) {
                uint64_t la = (a + i) & ~(LINE - 1), k = std::min(la + LINE - (a + i), n - i);
                auto it = std::find_if(written.begin(), written.end(),
                                       [&](auto &w) { return w.first == la; });
                if (it == written.end()) written.emplace_back(la, k);
                else it->second += k;
                i += k;
            }
        }
        for (auto &w : written)
            if (w.second == LINE && poisoned.count(w.first)) {
                pw.poison_old.emplace_back(w.first, true);
                poisoned.erase(w.first);
            }
    }

    void match_writes() {
        while (!aw_waiting.empty() && !w_waiting.empty()) {
            AwWait aw = aw_waiting.front(); aw_waiting.pop_front();
            WBurst wb = std::move(w_waiting.front()); w_waiting.pop_front();
            if (wb.beats.size() != aw.len) {
                char buf[200];
                std::snprintf(buf, sizeof buf, "W: burst for AW at %#llx (awid %u) has %zu "
                              "beats, AWLEN says %u", (unsigned long long)aw.addr, aw.id,
                              wb.beats.size(), aw.len);
                fail(buf);
                return;
            }
            Pending pw;
            pw.segs = segments(aw.addr, aw.size, wb.beats);
            uint64_t done = std::max(aw.edge, wb.edge);
            uint64_t nbytes = 0;       // the record's size: before a fault drops the data
            for (auto &s : pw.segs) nbytes += s.data.size();
            uint32_t resp = 0;
            bool applied = true;
            if (fault) {
                uint64_t nb = (1ull << aw.size) * aw.len - aw.addr % (1ull << aw.size);
                int f = fault(1, aw.addr, nb, aw.id, nullptr, 0);
                resp = uint32_t(f & 0xff);
                if (resp && !(f & 0x100)) {      // nothing reached the media
                    pw.segs.clear();
                    applied = false;
                }
            }
            pw.poison = aw.poison;
            pw.awid = aw.id; pw.addr = aw.addr; pw.nbytes = nbytes;
            pw.aw_edge = aw.edge; pw.data_edge = done;
            for (auto &s : pw.segs) {
                s.old.resize(s.data.size());
                read(s.addr, s.old.data(), s.old.size());
            }
            for (auto &s : pw.segs) write(s.addr, s.data.data(), s.data.size());
            if (applied) poison_update(pw, aw);
            if (log_writes) log.push_back({aw.id, aw.addr, nbytes, aw.edge, done, -1});
            pw.log_index = log_writes ? int64_t(log_dropped + log.size() - 1) : -1;
            unacked.push_back(std::move(pw));
            uint64_t start = done;   // service start of the burst's last beat
            for (uint32_t n = 0; n < aw.len; ++n) start = w_server.serve(done, 1ull << aw.size);
            w_queue += start - done;
            b.push_back({start + write_lat, aw.id, resp});
        }
    }
};

Model M;

void to_bytes(const svBitVecVal *v, uint8_t *out, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) out[i] = uint8_t(v[i / 4] >> (8 * (i % 4)));
}
void from_bytes(const uint8_t *in, svBitVecVal *v, uint32_t n) {
    for (uint32_t i = 0; i < (n + 3) / 4; ++i) v[i] = 0;
    for (uint32_t i = 0; i < n; ++i) v[i / 4] |= svBitVecVal(in[i]) << (8 * (i % 4));
}
uint64_t strb_of(const svBitVecVal *v, uint32_t lanes) {
    uint64_t s = v[0];
    if (lanes > 32) s |= uint64_t(v[1]) << 32;
    return s;
}

template <class T> void put(std::string &s, T v) { s.append((const char *)&v, sizeof v); }
void put_bytes(std::string &s, const Bytes &b) {
    put<uint32_t>(s, uint32_t(b.size()));
    s.append((const char *)b.data(), b.size());
}

}  // namespace

extern "C" {

// ---- DPI-C imports of trainingcxl_pmem_dpi (wrapper.py) -------------------------------------

void tcxl_pmem_reset() { M.reset(); }

int tcxl_pmem_edge(svBit rst,
                   svBit ar_valid, int ar_id, long long ar_addr, int ar_len, int ar_size,
                   int ar_burst,
                   svBit aw_valid, int aw_id, long long aw_addr, int aw_len, int aw_size,
                   int aw_burst, svBit aw_user,
                   svBit w_valid, const svBitVecVal *w_data, const svBitVecVal *w_strb,
                   svBit w_last, svBit r_ready, svBit b_ready,
                   svBit *ar_ready, svBit *aw_ready, svBit *w_ready,
                   svBit *r_valid, int *r_id, svBitVecVal *r_data, svBit *r_last, int *r_resp,
                   svBit *r_user,
                   svBit *b_valid, int *b_id, int *b_resp) {
    Model &m = M;
    ++m.edge;
    if (rst || !m.attached) {
        if (rst) m.reset();
    } else {
        // sources: the beat driven since the last edge is taken when ready was high
        if (m.r_valid) {
            ++m.r_busy;
            if (r_ready) {
                if (m.first_r < 0) m.first_r = int64_t(m.edge);
                m.last_r = int64_t(m.edge);
                ++m.r_beats;
                m.r_valid = false;
            }
        }
        if (m.b_valid) {
            ++m.b_busy;
            if (b_ready) {
                Pending &pw = m.unacked.front();
                if (pw.log_index >= int64_t(m.log_dropped))
                    m.log[size_t(pw.log_index) - m.log_dropped].b_edge = int64_t(m.edge);
                m.unacked.pop_front();
                ++m.b_count; ++m.acked;
                m.b_valid = false;
            }
        }
        // sinks: handshakes with the ready driven since the last edge
        if (ar_valid && m.ar_ready)
            m.on_ar(uint32_t(ar_id), uint64_t(ar_addr), uint32_t(ar_len), uint32_t(ar_size),
                    uint32_t(ar_burst));
        if (aw_valid && m.aw_ready)
            m.on_aw(uint32_t(aw_id), uint64_t(aw_addr), uint32_t(aw_len), uint32_t(aw_size),
                    uint32_t(aw_burst), aw_user != 0);
        if (w_valid && m.w_ready) {
            Bytes d(m.lanes);
            to_bytes(w_data, d.data(), m.lanes);
            m.on_w(d, strb_of(w_strb, m.lanes), w_last);
        }
        m.ar_ready = m.aw_ready = m.w_ready = true;
        // sources: the next due item (a beat still waiting for ready stays)
        if (!m.r_valid && !m.r.empty() && m.r.front().due <= m.edge) {
            m.r_out = std::move(m.r.front());
            m.r.pop_front();
            m.r_valid = true;
        }
        if (!m.b_valid && !m.b.empty() && m.b.front().due <= m.edge) {
            m.b_out = m.b.front();
            m.b.pop_front();
            m.b_valid = true;
        }
    }
    *ar_ready = m.ar_ready; *aw_ready = m.aw_ready; *w_ready = m.w_ready;
    *r_valid = m.r_valid; *b_valid = m.b_valid;
    if (m.r_valid) {
        *r_id = int(m.r_out.id); *r_last = m.r_out.last; *r_resp = int(m.r_out.resp);
        *r_user = m.r_out.user;
        from_bytes(m.r_out.data.data(), r_data, m.lanes);
    }
    if (m.b_valid) { *b_id = int(m.b_out.id); *b_resp = int(m.b_out.resp); }
    return m.error.empty() ? 0 : 1;
}

// ---- the transaction-level API Python calls with ctypes -------------------------------------

void tcxl_pmem_attach(unsigned lanes, unsigned read_lat, unsigned write_lat, int log_writes) {
    M.lanes = lanes; M.read_lat = read_lat; M.write_lat = write_lat;
    M.log_writes = log_writes != 0;
    M.attached = true;
}
// bandwidth per direction in bytes per cycle, num/den (num 0: unlimited); empties the servers
void tcxl_pmem_set_bandwidth(unsigned long long rnum, unsigned long long rden,
                             unsigned long long wnum, unsigned long long wden) {
    M.r_server = Server{rnum, rden, 0};
    M.w_server = Server{wnum, wden, 0};
}
unsigned long long tcxl_pmem_edges() { return M.edge; }
const char *tcxl_pmem_error() { return M.error.c_str(); }

void tcxl_pmem_mem_read(unsigned long long addr, uint8_t *out, unsigned long long n) {
    M.read(addr, out, n);
}
void tcxl_pmem_mem_write(unsigned long long addr, const uint8_t *in, unsigned long long n) {
    M.write(addr, in, n);
}
// n whole lines at once: their addresses and 64 bytes each (one after the other), written in
// the order given (a whole image loaded with one call)
void tcxl_pmem_mem_write_lines(const unsigned long long *addrs, const uint8_t *data,
                               unsigned long long n) {
    for (unsigned long long i = 0; i < n; ++i) M.write(addrs[i], data + LINE * i, LINE);
}
void tcxl_pmem_mem_clear() {
    M.mem.clear(); M.poisoned.clear(); ++M.mem_version;
    M.garbage = nullptr; M.garbage_regions.clear();
}
// regions: n (base, size) pairs; fn(line address, out 64 bytes) makes a line's garbage
void tcxl_pmem_set_garbage(void (*fn)(unsigned long long, uint8_t *),
                           const unsigned long long *regions, unsigned n) {
    M.garbage = fn;
    M.garbage_regions.clear();
    for (unsigned i = 0; i < n; ++i) M.garbage_regions.emplace_back(regions[2 * i],
                                                                    regions[2 * i + 1]);
}
unsigned long long tcxl_pmem_mem_version() { return M.mem_version; }
// the poison bit of the line holding addr; set it (on != 0) or clear it
int tcxl_pmem_poison_get(unsigned long long addr) { return M.is_poisoned(addr) ? 1 : 0; }
void tcxl_pmem_poison_set(unsigned long long addr, int on) {
    if (on) M.poisoned.insert(addr & ~(LINE - 1));
    else M.poisoned.erase(addr & ~(LINE - 1));
}
// the poisoned line addresses (out: tcxl_pmem_poison_count() entries, any order)
unsigned long long tcxl_pmem_poison_count() { return M.poisoned.size(); }
void tcxl_pmem_poison_dump(unsigned long long *out) {
    size_t i = 0;
    for (uint64_t la : M.poisoned) out[i++] = la;
}
unsigned long long tcxl_pmem_mem_nlines() { return M.mem.size(); }
// addresses and contents of every written line in creation order (out_addrs: nlines,
// out_data: 64 * nlines)
void tcxl_pmem_mem_dump(unsigned long long *out_addrs, uint8_t *out_data) {
    std::vector<std::pair<uint64_t, const Model::Line *>> order;
    order.reserve(M.mem.size());
    for (auto &kv : M.mem) order.emplace_back(kv.first, &kv.second);
    std::sort(order.begin(), order.end(),
              [](auto &a, auto &b) { return a.second->seq < b.second->seq; });
    for (size_t i = 0; i < order.size(); ++i) {
        out_addrs[i] = order[i].first;
        std::memcpy(out_data + LINE * i, order[i].second->data.data(), LINE);
    }
}

// counters: ar, aw, r beats, w beats, b, acked, w bursts, w beats in progress, first_r edge,
// last_r edge (-1: none), busy R edges, busy B edges, R and W queueing cycles (bandwidth)
void tcxl_pmem_stats(long long *out) {
    const Model &m = M;
    long long v[] = {(long long)m.ar_count, (long long)m.aw_count, (long long)m.r_beats,
                     (long long)m.w_beats, (long long)m.b_count, (long long)m.acked,
                     (long long)m.w_bursts, (long long)m.w_cur.size(), m.first_r, m.last_r,
                     (long long)m.r_busy, (long long)m.b_busy, (long long)m.r_queue,
                     (long long)m.w_queue};
    std::memcpy(out, v, sizeof v);
}

// Drop every queued response and in-flight burst (cosim.powerfail.load_image).
void tcxl_pmem_drop_in_flight() {
    M.r.clear(); M.b.clear(); M.r_valid = M.b_valid = false; M.reset_state();
}

void tcxl_pmem_set_fault_hook(FaultFn fn) { M.fault = fn; }

void tcxl_pmem_clear_log() { M.log_dropped += M.log.size(); M.log.clear(); }

// The write state a power failure needs, serialised (parsed by cosim/pmem_cpp/__init__.py):
// unacked writes (record, segments with old bytes, AWUSER, poison bits before), waiting AWs
// (with AWUSER), waiting W bursts, the W burst in progress, then the write log.
unsigned long long tcxl_pmem_state(const char **out) {
    Model &m = M;
    std::string &s = m.blob;
    s.clear();
    put<uint32_t>(s, uint32_t(m.unacked.size()));
    for (auto &pw : m.unacked) {
        put<uint32_t>(s, pw.awid); put<uint64_t>(s, pw.addr); put<uint64_t>(s, pw.nbytes);
        put<uint64_t>(s, pw.aw_edge); put<uint64_t>(s, pw.data_edge);
        put<uint32_t>(s, uint32_t(pw.segs.size()));
        for (auto &sg : pw.segs) { put<uint64_t>(s, sg.addr); put_bytes(s, sg.data);
                                   put_bytes(s, sg.old); }
        put<uint8_t>(s, pw.poison);
        put<uint32_t>(s, uint32_t(pw.poison_old.size()));
        for (auto &po : pw.poison_old) { put<uint64_t>(s, po.first); put<uint8_t>(s, po.second); }
    }
    put<uint32_t>(s, uint32_t(m.aw_waiting.size()));
    for (auto &a : m.aw_waiting) {
        put<uint32_t>(s, a.id); put<uint64_t>(s, a.addr); put<uint32_t>(s, a.len);
        put<uint32_t>(s, a.size); put<uint64_t>(s, a.edge); put<uint8_t>(s, a.poison);
    }
    auto beats = [&](const std::vector<WBeat> &bs) {
        put<uint32_t>(s, uint32_t(bs.size()));
        for (auto &b : bs) { put_bytes(s, b.data); put<uint64_t>(s, b.strb); }
    };
    put<uint32_t>(s, uint32_t(m.w_waiting.size()));
    for (auto &w : m.w_waiting) { beats(w.beats); put<uint64_t>(s, w.edge); }
    beats(m.w_cur);
    put<uint32_t>(s, uint32_t(m.log.size()));
    for (auto &r : m.log) {
        put<uint32_t>(s, r.awid); put<uint64_t>(s, r.addr); put<uint64_t>(s, r.nbytes);
        put<uint64_t>(s, r.aw_edge); put<uint64_t>(s, r.data_edge); put<int64_t>(s, r.b_edge);
    }
    *out = s.data();
    return s.size();
}

}  // extern "C"
