// The CXL.mem host's channel engine as C++ inside the Verilator model (cosim/host_cpp/__init__.py).
//
// The SystemVerilog module `trainingcxl_host_dpi` (wrapper.py) calls tcxl_host_edge() on every
// rising clock edge with the host channels' values as that edge samples them, and registers what
// it returns with non-blocking assignments: the same "sample on the edge, drive after it" as the
// Python host's channel loop (cosim/cxl_host/channels.py, calm knobs, no pauses).
//
// Python hands over a job: messages for m2s_req and m2s_rwd (whole payloads, sent in order, one
// per cycle per channel, each as soon as the one before it was taken) and, per message, the tag
// its answers carry and the NDR/DRS opcodes the coherence reference allows. The engine matches
// every NDR and DRS to its request by tag and checks it as cosim.cxl_host.responses does: a known
// tag, no answer before its request was transferred, no second answer, DRS only for a read,
// opcode among the allowed ones, MemData-NXM all ones and poisoned. A request is complete with
// its NDR (writes) or its DRS plus, when the reference expects one, its NDR (reads). The first
// violation stops the job (Python raises it). `busy` (an output of the module) is high while a
// job has messages to send or answers to wait for: Python sleeps on its fall, not on each edge.
// A job not complete `timeout` edges after it was handed over expires: the engine sends no more
// of it and `busy` falls (Python reports the requests left). `busy` is high on the first edge
// after a job is handed over whatever happens on it (a violation, say), so the one fall Python
// waits for always comes.
// The module's input `attach` (written by Python) is the NDR and DRS ready: answers are taken on
// the edges that sample it high.
//
// The engine answers no snoops: it holds s2m_bisnp not ready, drives no BIRsp, and reports a
// BISnp offered while it is attached (a host that never caches a line gets none).
#pragma GCC optimize("O2")

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "svdpi.h"
#include "Vtop__Dpi.h"   // the prototypes Verilator derived from the SystemVerilog imports

namespace {

struct Field { unsigned off = 0, width = 0; };

uint64_t get_bits(const svBitVecVal *w, const Field &f) {
    uint64_t v = 0;
    for (unsigned i = 0; i < f.width; ++i) {
        unsigned b = f.off + i;
        v |= uint64_t((w[b / 32] >> (b % 32)) & 1u) << i;
    }
    return v;
}

struct Msg { std::vector<uint32_t> words; int txn; };

struct Txn {
    uint32_t tag;
    bool read, need_ndr;
    uint32_t ndr_mask, drs_mask;      // allowed opcodes, bit per opcode (0: none expected)
    int64_t t_sent = -1, t_ndr = -1, t_drs = -1;
    int ndr_op = -1, drs_op = -1, drs_poison = 0;
    uint8_t data[64] = {};
    bool done = false;
};

struct Host {
    // payload layout (set by tcxl_host_layout)
    unsigned req_words = 0, rwd_words = 0, ndr_words = 0, drs_words = 0;
    Field ndr_op, ndr_tag, drs_op, drs_tag, drs_poison, drs_data;
    unsigned nxm_op = 0;
    // state
    uint64_t edge = 0;
    std::deque<Msg> q[2];             // 0: m2s_req, 1: m2s_rwd
    bool cur[2] = {false, false};
    std::vector<uint32_t> cur_words[2];
    int cur_txn[2] = {-1, -1};
    std::vector<Txn> txns;            // this job's requests, in the order given
    std::unordered_map<uint32_t, int> open;   // tag -> index in txns, not complete
    size_t left = 0;                  // requests not complete
    std::string error;
    uint64_t deadline = 0;            // the edge at which a job still running expires
    bool expired = false;
    bool handed = false;              // a job was handed over since the last edge
    uint64_t bisnp_edge = 0;
    uint64_t stats_sent[2] = {0, 0}, stats_ndr = 0, stats_drs = 0;

    void violation(const char *rule, const std::string &msg) {
        if (!error.empty()) return;
        char head[96];
        std::snprintf(head, sizeof head, "[edge %llu] %s: ", (unsigned long long)edge, rule);
        error = head + msg;
    }

    void clear_job() {
        for (auto &d : q) d.clear();
        cur[0] = cur[1] = false;
        cur_txn[0] = cur_txn[1] = -1;
        txns.clear();
        open.clear();
        left = 0;
        expired = false;
    }

    bool busy() const {
        return error.empty() && !expired &&
               (left > 0 || cur[0] || cur[1] || !q[0].empty() || !q[1].empty());
    }

    void sent(int ch) {
        ++stats_sent[ch];
        int t = cur_txn[ch];
        if (t >= 0) txns[t].t_sent = int64_t(edge);
        cur[ch] = false;
        cur_txn[ch] = -1;
    }

    void maybe_done(int i) {
        Txn &t = txns[i];
        if (t.done) return;
        if (t.read ? (t.drs_op < 0 || (t.need_ndr && t.ndr_op < 0)) : t.ndr_op < 0) return;
        t.done = true;
        open.erase(t.tag);
        --left;
    }

    static std::string tagstr(uint32_t tag) {
        char b[16];
        std::snprintf(b, sizeof b, "%#06x", tag);
        return b;
    }

    // The NDR or DRS side of a transaction: the rules' prefix, the channel's name in messages,
    // and the fields that keep its answer.
    struct Side {
        const char *rule, *name;
        int Txn::*op;
        int64_t Txn::*t;
        uint32_t Txn::*mask;
    };
    static constexpr Side NDR{"ndr", "NDR", &Txn::ndr_op, &Txn::t_ndr, &Txn::ndr_mask};
    static constexpr Side DRS{"drs", "DRS", &Txn::drs_op, &Txn::t_drs, &Txn::drs_mask};

    void violation(const Side &s, const char *what, const std::string &msg) {
        violation((std::string(s.rule) + "_" + what).c_str(), msg);
    }

    // The open transaction an answer with `tag` belongs to, or null (reported): no request is
    // outstanding with that tag, or this side has answered it already.
    Txn *owner(const Side &s, uint32_t op, uint32_t tag) {
        auto it = open.find(tag);
        if (it == open.end()) {
            violation(s, "tag", std::string(s.name) + " opcode " + std::to_string(op) +
                      " with tag " + tagstr(tag) + ", no request outstanding with it");
            return nullptr;
        }
        Txn &t = txns[it->second];
        if (t.*s.op >= 0) {
            violation(s, "dup", std::string("second ") + s.name + " for tag " + tagstr(tag));
            return nullptr;
        }
        return &t;
    }

    void check_sent(const Side &s, const Txn &t) {
        if (t.t_sent < 0)
            violation(s, "early", std::string(s.name) + " for tag " + tagstr(t.tag) +
                      " before the request was transferred");
    }

    // The answer's opcode checked against the reference's mask, then recorded.
    void accept(const Side &s, Txn &t, uint32_t op) {
        uint32_t mask = t.*s.mask;
        if (op >= 32 || !(mask >> op & 1))
            violation(s, mask ? "opcode" : "unexpected",
                      std::string(s.name) + " opcode " + std::to_string(op) + " for tag " +
                      tagstr(t.tag) + "; the reference allows mask " + std::to_string(mask));
        t.*s.op = int(op);
        t.*s.t = int64_t(edge);
        maybe_done(int(&t - txns.data()));
    }

    void on_ndr(const svBitVecVal *p) {
        ++stats_ndr;
        uint32_t op = uint32_t(get_bits(p, ndr_op)), tag = uint32_t(get_bits(p, ndr_tag));
        Txn *t = owner(NDR, op, tag);
        if (!t) return;
        check_sent(NDR, *t);
        accept(NDR, *t, op);
    }

    void on_drs(const svBitVecVal *p) {
        ++stats_drs;
        uint32_t op = uint32_t(get_bits(p, drs_op)), tag = uint32_t(get_bits(p, drs_tag));
        Txn *t = owner(DRS, op, tag);
        if (!t) return;
        if (!t->read) {
            violation(DRS, "unexpected", "DRS for tag " + tagstr(tag) + ", which reads no data");
            return;
        }
        check_sent(DRS, *t);
        for (unsigned i = 0; i < 64; ++i) {
            unsigned b = drs_data.off + 8 * i;
            uint32_t lo = p[b / 32] >> (b % 32);
            if (b % 32 > 24) lo |= p[b / 32 + 1] << (32 - b % 32);
            t->data[i] = uint8_t(lo);
        }
        t->drs_poison = int(get_bits(p, drs_poison));
        if (op == nxm_op) {
            bool ones = true;
            for (auto b : t->data) ones &= b == 0xFF;
            if (!ones || !t->drs_poison)
                violation("nxm_data", "MemData-NXM for tag " + tagstr(tag) + " with poison=" +
                          std::to_string(t->drs_poison) + " and data not all ones");
        }
        accept(DRS, *t, op);
    }
};

Host H;

void copy_out(svBitVecVal *dst, const std::vector<uint32_t> &src, unsigned n) {
    for (unsigned i = 0; i < n; ++i) dst[i] = i < src.size() ? src[i] : 0;
}

}  // namespace

extern "C" {

int tcxl_host_edge(svBit rst, svBit attach, svBit req_ready, svBit rwd_ready,
                   svBit ndr_valid, const svBitVecVal *ndr_payload,
                   svBit drs_valid, const svBitVecVal *drs_payload, svBit bisnp_valid,
                   svBit *req_valid, svBitVecVal *req_payload,
                   svBit *rwd_valid, svBitVecVal *rwd_payload,
                   svBit *busy) {
    Host &h = H;
    ++h.edge;
    if (rst) {
        // a reset ends the messages being offered (the Python channel loop drops them too)
        h.cur[0] = h.cur[1] = false;
    } else {
        // handshakes of this edge, as driven after the previous one
        if (h.cur[0] && req_ready) h.sent(0);
        if (h.cur[1] && rwd_ready) h.sent(1);
        if (attach && ndr_valid) h.on_ndr(ndr_payload);
        if (attach && drs_valid) h.on_drs(drs_payload);
        if (attach && bisnp_valid && !h.bisnp_edge) {
            h.bisnp_edge = h.edge;
            h.violation("bisnp", "the device offered a BISnp; the compiled host holds no line "
                        "and answers no snoops (use the Python host)");
        }
        // drive for the next edge
        for (int ch = 0; ch < 2; ++ch) {
            if (h.cur[ch] || h.q[ch].empty() || !h.error.empty() || h.expired) continue;
            Msg &m = h.q[ch].front();
            h.cur_words[ch].swap(m.words);
            h.cur_txn[ch] = m.txn;
            h.cur[ch] = true;
            h.q[ch].pop_front();
        }
    }
    if (h.busy() && h.edge >= h.deadline) h.expired = true;
    *req_valid = h.cur[0];
    *rwd_valid = h.cur[1];
    if (h.cur[0]) copy_out(req_payload, h.cur_words[0], h.req_words);
    if (h.cur[1]) copy_out(rwd_payload, h.cur_words[1], h.rwd_words);
    *busy = h.busy() || h.handed;
    h.handed = false;
    return 0;
}

// Payload widths in 32-bit words and the answer fields' bit positions (cosim/host_cpp).
void tcxl_host_layout(unsigned req_words, unsigned rwd_words, unsigned ndr_words,
                      unsigned drs_words, const unsigned *f, unsigned nxm_op) {
    H.req_words = req_words;
    H.rwd_words = rwd_words;
    H.ndr_words = ndr_words;
    H.drs_words = drs_words;
    Field *dst[] = {&H.ndr_op, &H.ndr_tag, &H.drs_op, &H.drs_tag, &H.drs_poison, &H.drs_data};
    for (int i = 0; i < 6; ++i) *dst[i] = Field{f[2 * i], f[2 * i + 1]};
    H.nxm_op = nxm_op;
}

// Forget the job, the error and the BISnp seen (a power cycle ended the host).
void tcxl_host_reset() {
    H.clear_job();
    H.error.clear();
    H.bisnp_edge = 0;
}

// A job of n requests: channel (0 req, 1 rwd), tag, read, need_ndr, ndr_mask, drs_mask per
// request (6 values each in `meta`) and their payloads, each req_words or rwd_words words, one
// after the other in `words`; the job expires `timeout` edges from now. Returns 0, or -1 when a
// job is still running (nothing queued).
int tcxl_host_submit(unsigned n, const unsigned *meta, const uint32_t *words,
                     unsigned long long timeout) {
    Host &h = H;
    if (h.busy()) return -1;
    h.clear_job();
    h.deadline = h.edge + timeout;
    h.handed = true;
    h.txns.resize(n);
    h.left = n;
    for (unsigned i = 0; i < n; ++i) {
        const unsigned *m = meta + 6 * i;
        unsigned ch = m[0] ? 1 : 0, nw = ch ? h.rwd_words : h.req_words;
        Txn &t = h.txns[i];
        t.tag = m[1];
        t.read = m[2] != 0;
        t.need_ndr = m[3] != 0;
        t.ndr_mask = m[4];
        t.drs_mask = m[5];
        h.open[t.tag] = int(i);
        h.q[ch].push_back(Msg{std::vector<uint32_t>(words, words + nw), int(i)});
        words += nw;
    }
    return 0;
}

int tcxl_host_busy() { return H.busy() ? 1 : 0; }
const char *tcxl_host_error() { return H.error.c_str(); }
unsigned long long tcxl_host_edges() { return H.edge; }

// Per request of the job: done, t_sent, t_ndr, t_drs, ndr_op, drs_op, drs_poison (7 values, -1
// when absent) and, for reads, the 64 data bytes (zeros when none).
void tcxl_host_results(long long *out, uint8_t *data) {
    for (size_t i = 0; i < H.txns.size(); ++i) {
        const Txn &t = H.txns[i];
        long long *o = out + 7 * i;
        o[0] = t.done;
        o[1] = t.t_sent;
        o[2] = t.t_ndr;
        o[3] = t.t_drs;
        o[4] = t.ndr_op;
        o[5] = t.drs_op;
        o[6] = t.drs_poison;
        std::memcpy(data + 64 * i, t.data, 64);
    }
}

// sent m2s_req, sent m2s_rwd, NDRs and DRSs received, since the build started
void tcxl_host_stats(unsigned long long *out) {
    out[0] = H.stats_sent[0];
    out[1] = H.stats_sent[1];
    out[2] = H.stats_ndr;
    out[3] = H.stats_drs;
}

}  // extern "C"
