// The vector layer every kernel source is written against: one variant per instruction set.
//
// Why: the kernels' loops (linears, attention, norms, conv) are the same on every CPU; only
// the width of a register and a handful of instructions differ. Each operation is written
// once over the names below, and the build (model/native/kernels/__init__.py) compiles it for one
// instruction set, chosen by the compiler flags it passes:
//
//   AVX512   16 fp32 lanes   -mavx512f/bw/vl/bf16/vnni   bf16 pairs by vdpbf16ps, int8 quads by vpdpbusd
//   AVX512F  16 fp32 lanes   -mavx512f/bw/vl/vnni        bf16 pairs widened to fp32, quads by vpdpbusd
//   AVXVNNI   8 fp32 lanes   -mavx2 -mfma -mavxvnni      bf16 pairs widened to fp32, quads by vpdpbusd (VEX)
//   AVX2      8 fp32 lanes   -mavx2 -mfma                bf16 pairs widened to fp32, quads by vpmaddubsw
//
// Each variant is one header in vec/ (vec/avx512.h, vec/avx2.h), included below by the flags the
// build passes. A NEON port is a new file there (4 lanes; vbfdotq_f32 or widening for pairs,
// vdotq_s32 for quads; masked tails through a stack buffer as AVX2 does), one more #elif here and
// its flags in __init__.py: no kernel source changes.
//
// bf16 -> fp32 is exact (a 16-bit shift); fp32 -> bf16 rounds to nearest even, as PyTorch's
// conversion does, so an fp32 result stored here matches `.to(torch.bfloat16)`.
//
// Names (namespace lfm_kernels::vec):
//   LANES, vf (fp32 lanes), vi (int32 lanes)
//   zero, set1, load/store (fp32), load_bf16/store_bf16, each with an optional lane count n
//     (lanes [0, n) touched, n >= LANES meaning all), add, sub, mul, div, fmadd, fnmadd, max,
//     abs, select_negative, reduce_add, round_bf16, exp_nonpositive, sum_each (+ SUM_ORDER)
//   Pairs: LANES pairs of bf16 (k, k+1) -- load_pairs, broadcast_pair, int8_pairs, dot_pairs
//     (acc += a.even * b.even + a.odd * b.odd per lane); INT8_PAIR_SCALE is what int8_pairs
//     multiplies weights by (exact powers of two; the caller divides it back out);
//     PAIRS_FROM_FLOATS: the linears broadcast activations widened to fp32 once per call
//     (broadcast_pair(const float*)) instead of widening each broadcast
//   Widened: 2 * LANES bf16 as fp32 without a shuffle, the even-indexed values and the odd ones in
//     two vectors (load_widened, with an optional value count), on every variant
//   12-bit bf16 (cpu_linear_bf12.cpp): Bf12Table, bf12_table (16 exponents -> lookup tables),
//     bf12_decode (a group's bf16 words rebuilt from their sign/mantissa bytes and index
//     nibbles, as BF12_VECTORS Words of 2 * LANES), BF12_BYTE_ORDER and BF12_NIBBLE_ORDER (the
//     value each stored byte and nibble of a decode step's group holds),
//     store_words, words_pairs, set_word (one word of a decoded vector replaced: an exception)
//   Quads: LANES groups of 4 int8 -- quad activations are stored + QUAD_OFFSET (as u8 where
//     the instruction multiplies unsigned by signed); broadcast_quad, dot_quads (exact int32)
//   Nibbles (int4 weights): load_nibbles splits 4 * LANES bytes into two Quads of u8 in [0, 15]
//     (low and high nibbles); dot_u4 multiplies them by s8 activation quads into U4Sums, exact,
//     and u4_total gives the int32 sums -- after at most U4_DOTS dot_u4 calls (AVX2 sums in int16)
//   For quantizing activations: reduce_max, store_i8 (whole-number lanes -> int8), load_u8
//   Shared over every variant (below): load_values (fp32, or bf16 widened, exactly), so one loop
//     reads either weight dtype

#pragma once

#include <c10/util/BFloat16.h>
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>

namespace lfm_kernels {

using bf16 = c10::BFloat16;

inline int32_t load_u32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

namespace vec {

// Cephes' expf polynomial after reducing by powers of two (~1 ulp); shared by every variant.
constexpr float EXP_LOG2E = 1.44269504088896341f, EXP_C1 = 0.693359375f, EXP_C2 = -2.12194440e-4f;
constexpr float EXP_P[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                            4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#include "vec/avx512.h"
#elif defined(__AVX2__) && defined(__FMA__)
#include "vec/avx2.h"
#else
#error "model/native/kernels need AVX-512 (F, BW, VL, VNNI) or AVX2 + FMA; build with the flags build.py passes"
#endif

// LANES values (the first n) as fp32, whichever of the two storage types holds them
inline vf load_values(const float* p, int64_t n = LANES) { return load(p, n); }
inline vf load_values(const bf16* p, int64_t n = LANES) { return load_bf16(p, n); }

// exp(x) for x <= 0 (clamped at -87, where it is ~1e-38): the same steps on every variant
inline vf exp_nonpositive(vf x) {
  x = max(x, set1(-87.0f));
  const vf n = round_nearest(mul(x, set1(EXP_LOG2E)));
  vf r = fnmadd(n, set1(EXP_C1), x);
  r = fnmadd(n, set1(EXP_C2), r);
  vf p = set1(EXP_P[0]);
#pragma GCC unroll 5
  for (int i = 1; i < 6; ++i) p = fmadd(p, r, set1(EXP_P[i]));
  const vf y = add(fmadd(p, mul(r, r), r), set1(1.0f));
  return times_pow2(y, n);
}

}  // namespace vec
}  // namespace lfm_kernels
