/*
 * insncount: a QEMU TCG plugin that counts executed AArch64 instructions exactly, with the FP/AdvSIMD
 * (NEON) ones and the SDOT/UDOT dot-product ones counted apart.
 *
 *   qemu-aarch64 -plugin libinsncount.so -d plugin -D out.txt -cpu cortex-a76 ...
 *   -> out.txt: "insncount: region R total N simd N vector N sdot N udot N" per marked region (below),
 *      then "insncount: all total N simd N vector N sdot N udot N" for the whole run
 *   qemu-x86_64 -plugin libinsncount.so -d plugin -D out.txt -cpu Haswell ...
 *   -> the same lines, with the total only (simd/vector/sdot/udot stay 0): x86 instructions on an AVX2 CPU
 *
 * Written against QEMU 7.2's plugin API (version 1). Debian's qemu packages ship no qemu-plugin.h, so the
 * few declarations used are written out below from that API (include/qemu/qemu-plugin.h of QEMU 7.2).
 * Instructions are classified once, when a translation block is translated, by decoding their encoding
 * (QEMU 7.2's disassembler prints ".byte" for SDOT/UDOT); each block then adds its per-class totals to
 * the counters with inline TCG adds when it executes. The adds are not atomic: run the guest with one
 * compute thread for exact counts (and setarch -R + PYTHONHASHSEED=0 for repeatable ones).
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- The QEMU 7.2 plugin API (version 1), only what this plugin uses ---- */
#define QEMU_PLUGIN_EXPORT __attribute__((visibility("default")))
#define QEMU_PLUGIN_VERSION 1
typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t {
    const char *target_name;
    struct { int min; int cur; } version;
    bool system_emulation;
    union { struct { int smp_vcpus; int max_vcpus; } system; };
} qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_vcpu_syscall_cb_t)(qemu_plugin_id_t id, unsigned int vcpu_index, int64_t num,
                                              uint64_t a1, uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5,
                                              uint64_t a6, uint64_t a7, uint64_t a8);
void qemu_plugin_register_vcpu_syscall_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_syscall_cb_t cb);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op, void *ptr,
                                              uint64_t imm);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
void qemu_plugin_outs(const char *string);
/* ---- end of the API declarations ---- */

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

enum { TOTAL, SIMD, VECTOR, SDOT, UDOT, N_COUNTERS };
static uint64_t counters[N_COUNTERS];

/*
 * Regions: the guest marks the code to measure with a syscall no kernel has (it just gets ENOSYS):
 * syscall(MARK_SYSCALL, MARK_KEY, region, 0 = start | 1 = stop). Counts between start and stop add up per
 * region, so start-up and exit (and their noise) stay out of a region.
 */
#define MARK_SYSCALL 0x7ED0
#define MARK_KEY 0x45444745u /* "EDGE" */
#define N_REGIONS 8
static uint64_t region_start[N_REGIONS][N_COUNTERS];
static uint64_t region_sum[N_REGIONS][N_COUNTERS];
static bool region_used[N_REGIONS];

static void on_syscall(qemu_plugin_id_t id, unsigned int vcpu, int64_t num, uint64_t a1, uint64_t region,
                       uint64_t stop, uint64_t a4, uint64_t a5, uint64_t a6, uint64_t a7, uint64_t a8)
{
    if (num != MARK_SYSCALL || a1 != MARK_KEY || region >= N_REGIONS) {
        return;
    }
    region_used[region] = true;
    for (int c = 0; c < N_COUNTERS; c++) {
        if (stop) {
            region_sum[region][c] += counters[c] - region_start[region][c];
        } else {
            region_start[region][c] = counters[c];
        }
    }
}

/* Data processing, scalar FP and Advanced SIMD: op0 bits [28:25] = x111. */
static bool is_simd_fp_dp(uint32_t i) { return ((i >> 25) & 0x7) == 0x7; }
/* Advanced SIMD vector data processing (incl. crypto): that group with bit 28 = 0 and bit 31 = 0. */
static bool is_vector(uint32_t i) { return is_simd_fp_dp(i) && !(i & (1u << 28)) && !(i & (1u << 31)); }
/* Loads and stores (op0 = x1x0) on the FP/SIMD register file (V, bit 26, set). */
static bool is_simd_ldst(uint32_t i) { return (i & 0x0A000000u) == 0x08000000u && (i & (1u << 26)); }

/*
 * SDOT/UDOT (Armv8.2 DotProd), U = bit 29 (0 SDOT, 1 UDOT):
 *   vector:     0 Q U 01110 10 0 Rm 100101 Rn Rd
 *   by element: 0 Q U 01111 10 L M Rm 1110 H 0 Rn Rd
 */
static int dot_kind(uint32_t i)
{
    bool vec = (i & 0x9FE0FC00u) == 0x0E809400u;
    bool elem = (i & 0x9FC0F400u) == 0x0F80E000u;
    if (!vec && !elem) {
        return -1;
    }
    return (i & (1u << 29)) ? UDOT : SDOT;
}

/* The guest is AArch64 (instructions classified) or x86-64 (counted only: `qemu-x86_64 -cpu Haswell`). */
static bool aarch64;

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    uint64_t n[N_COUNTERS] = {0};
    size_t insns = qemu_plugin_tb_n_insns(tb);
    for (size_t k = 0; k < insns; k++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, k);
        uint32_t word = 0;
        n[TOTAL]++;
        if (!aarch64) {
            continue; /* x86-64 guests: the total only (the classes below decode AArch64 encodings) */
        }
        if (qemu_plugin_insn_size(insn) == 4) {
            memcpy(&word, qemu_plugin_insn_data(insn), 4); /* AArch64 code is little-endian here */
        }
        if (is_simd_fp_dp(word) || is_simd_ldst(word)) {
            n[SIMD]++;
        }
        if (is_vector(word)) {
            n[VECTOR]++;
        }
        int dot = dot_kind(word);
        if (dot >= 0) {
            n[dot]++;
        }
    }
    for (int c = 0; c < N_COUNTERS; c++) {
        if (n[c]) {
            qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &counters[c], n[c]);
        }
    }
}

static void print_counts(const char *what, const uint64_t *n)
{
    char line[256];
    snprintf(line, sizeof line, "insncount: %s total %" PRIu64 " simd %" PRIu64 " vector %" PRIu64 " sdot %" PRIu64
             " udot %" PRIu64 "\n", what, n[TOTAL], n[SIMD], n[VECTOR], n[SDOT], n[UDOT]);
    qemu_plugin_outs(line);
}

static void at_exit(qemu_plugin_id_t id, void *userdata)
{
    char what[32];
    for (int r = 0; r < N_REGIONS; r++) {
        if (region_used[r]) {
            snprintf(what, sizeof what, "region %d", r);
            print_counts(what, region_sum[r]);
        }
    }
    print_counts("all", counters);
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    aarch64 = strcmp(info->target_name, "aarch64") == 0;
    if (!aarch64 && strcmp(info->target_name, "x86_64") != 0) {
        char line[128];
        snprintf(line, sizeof line, "insncount: target %s is neither aarch64 nor x86_64\n", info->target_name);
        qemu_plugin_outs(line);
        return -1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_vcpu_syscall_cb(id, on_syscall);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
