// The vector layer every kernel source is written against: one variant per instruction set.
//
// Why: the kernels' loops (linears, attention, norms, conv) are the same on every CPU; only
// the width of a register and a handful of instructions differ. Each operation is written
// once over the names below, and the build (model/native/kernels/__init__.py) compiles it for one
// instruction set, chosen by the compiler flags it passes:
//
//   AVX512   16 fp32 lanes   -mavx512f/bw/vl/bf16/vnni   bf16 pairs by vdpbf16ps, int8 quads by vpdpbusd
//   AVXVNNI   8 fp32 lanes   -mavx2 -mfma -mavxvnni      bf16 pairs widened to fp32, quads by vpdpbusd (VEX)
//   AVX2      8 fp32 lanes   -mavx2 -mfma                bf16 pairs widened to fp32, quads by vpmaddubsw
//
// A NEON port is a fourth block here (4 lanes; vbfdotq_f32 or widening for pairs, vdotq_s32
// for quads; masked tails through a stack buffer as AVX2 does) plus its flags in __init__.py:
// no kernel source changes.
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
//     multiplies weights by (exact powers of two; the caller divides it back out)
//   Quads: LANES groups of 4 int8 -- quad activations are stored + QUAD_OFFSET (as u8 where
//     the instruction multiplies unsigned by signed); broadcast_quad, dot_quads (exact int32)
//   Nibbles (int4 weights): load_nibbles splits 4 * LANES bytes into two Quads of u8 in [0, 15]
//     (low and high nibbles); dot_u4 multiplies them by s8 activation quads into U4Sums, exact,
//     and u4_total gives the int32 sums -- after at most U4_DOTS dot_u4 calls (AVX2 sums in int16)
//   For quantizing activations: reduce_max, store_i8 (whole-number lanes -> int8), load_u8

#pragma once

#include <c10/util/BFloat16.h>
#include <immintrin.h>

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

#if defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AVX512VNNI__)
// ================================================================ AVX-512 (+BF16, VNNI)
#define LFM_ISA_NAME "avx512"
constexpr int LANES = 16;
using vf = __m512;
using vi = __m512i;
using Pairs = __m512bh;
using Quads = __m512i;
constexpr int QUAD_OFFSET = 128;  // vpdpbusd: unsigned activations x signed weights
constexpr float INT8_PAIR_SCALE = 1.0f;

inline __mmask16 lanes_upto(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1); }
inline __mmask32 halves_upto(int64_t n) { return n >= 32 ? ~__mmask32(0) : __mmask32((1u << n) - 1); }

inline vf zero() { return _mm512_setzero_ps(); }
inline vf set1(float v) { return _mm512_set1_ps(v); }
inline vf load(const float* p) { return _mm512_loadu_ps(p); }
inline vf load(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(lanes_upto(n), p); }
inline void store(float* p, vf v) { _mm512_storeu_ps(p, v); }
inline void store(float* p, vf v, int64_t n) { _mm512_mask_storeu_ps(p, lanes_upto(n), v); }
inline vf load_bf16(const bf16* p, int64_t n = LANES) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes_upto(n), p)), 16));
}
inline void store_bf16(bf16* p, vf v, int64_t n = LANES) {
  _mm256_mask_storeu_epi16(p, lanes_upto(n), (__m256i)_mm512_cvtneps_pbh(v));
}
inline vf round_bf16(vf v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(v)), 16));
}
inline vf add(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf div(vf a, vf b) { return _mm512_div_ps(a, b); }
inline vf max(vf a, vf b) { return _mm512_max_ps(a, b); }
inline vf abs(vf a) { return _mm512_abs_ps(a); }
inline vf fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
inline vf fnmadd(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }
// where x < 0: if_negative, else otherwise
inline vf select_negative(vf x, vf if_negative, vf otherwise) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), otherwise, if_negative);
}
inline float reduce_add(vf v) { return _mm512_reduce_add_ps(v); }
inline vf round_nearest(vf v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline vf times_pow2(vf y, vf n) { return _mm512_scalef_ps(y, n); }
inline vf to_float(vi v) { return _mm512_cvtepi32_ps(v); }
inline vi load_i32(const int32_t* p) { return _mm512_loadu_si512(p); }
inline vi sub_i32(vi a, vi b) { return _mm512_sub_epi32(a, b); }
inline vi mul_i32(vi a, vi b) { return _mm512_mullo_epi32(a, b); }
inline vi set1_i32(int32_t v) { return _mm512_set1_epi32(v); }
inline vi zero_i32() { return _mm512_setzero_si512(); }

// r[i] = the sum of v[SUM_ORDER[i]]'s lanes, in 15 shuffle-and-add steps instead of 16
// horizontal reductions (the tree's output order is a 4x4 transpose of its input order).
constexpr int SUM_ORDER[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
inline vf sum_each(const vf (&v)[16]) {
  vf eight[8], four[4], two[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)  // 128-bit lanes: [v2i: 2 x 4 partials | v2i+1: 2 x 4 partials]
    eight[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)  // lane j: 4 partials of v[4i + j]
    four[i] = _mm512_add_ps(_mm512_shuffle_f32x4(eight[2 * i], eight[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_f32x4(eight[2 * i], eight[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i)  // lane j: 2 partials each of v[8i + j] and v[8i + 4 + j]
    two[i] = _mm512_add_ps(_mm512_unpacklo_ps(four[2 * i], four[2 * i + 1]),
                           _mm512_unpackhi_ps(four[2 * i], four[2 * i + 1]));
  return _mm512_add_ps(_mm512_shuffle_ps(two[0], two[1], _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_ps(two[0], two[1], _MM_SHUFFLE(3, 2, 3, 2)));
}

// ---- bf16 pairs: lane i holds (k, k+1) of one output or of a row chunk
inline Pairs load_pairs(const bf16* p) { return (Pairs)_mm512_loadu_si512(p); }
inline Pairs load_pairs(const bf16* p, int64_t values) { return (Pairs)_mm512_maskz_loadu_epi16(halves_upto(values), p); }
inline Pairs broadcast_pair(const bf16* p) { return (Pairs)_mm512_set1_epi32(load_u32(p)); }
// 2 * LANES int8 (LANES pairs) as bf16 pairs, exact (|w| <= 127 fits bf16's significand)
inline Pairs int8_pairs(const int8_t* p) {
  const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(bytes)));
  const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(bytes, 1)));
  return _mm512_cvtne2ps_pbh(hi, lo);
}
inline vf dot_pairs(vf acc, Pairs a, Pairs b) { return _mm512_dpbf16_ps(acc, a, b); }

// ---- int8 quads
inline Quads load_quads(const int8_t* p) { return _mm512_loadu_si512(p); }
inline Quads broadcast_quad(const uint8_t* p) { return _mm512_set1_epi32(load_u32(p)); }
inline vi dot_quads(vi acc, Quads x, Quads w) { return _mm512_dpbusd_epi32(acc, x, w); }

// ---- int4 nibbles: u8 weights x s8 activations by vpdpbusd, straight into int32
using U4Sums = __m512i;
constexpr int U4_DOTS = 1 << 20;  // int32 sums: no limit the kernels reach
inline void load_nibbles(const uint8_t* p, Quads& lo, Quads& hi) {
  const __m512i bytes = _mm512_loadu_si512(p), mask = _mm512_set1_epi8(0x0F);
  lo = _mm512_and_si512(bytes, mask);
  hi = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), mask);
}
inline U4Sums dot_u4(U4Sums acc, Quads w, Quads x) { return _mm512_dpbusd_epi32(acc, w, x); }
inline vi u4_total(U4Sums acc) { return acc; }

// ---- quantizing activations
inline float reduce_max(vf v) { return _mm512_reduce_max_ps(v); }
inline void store_i8(int8_t* p, vf v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
}
inline vf load_u8(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

#elif defined(__AVX2__) && defined(__FMA__)
// ================================================================ AVX2 + FMA (+ AVX-VNNI)
#if defined(__AVXVNNI__)
#define LFM_ISA_NAME "avxvnni"
constexpr int QUAD_OFFSET = 128;  // vpdpbusd: unsigned activations x signed weights
#else
#define LFM_ISA_NAME "avx2"
constexpr int QUAD_OFFSET = 0;  // vpmaddubsw's sign trick takes signed activations
#endif
constexpr int LANES = 8;
using vf = __m256;
using vi = __m256i;
struct Pairs {
  __m256 even, odd;  // fp32: k and k+1 of each lane's pair
};
using Quads = __m256i;
// int8_pairs leaves each weight times 2^16 (shifted into the top half of a lane, then
// converted): one shift fewer than sign-extending both halves, and exact below 2^24.
constexpr float INT8_PAIR_SCALE = 65536.0f;

// AVX2 has no 16-bit masked loads: partial chunks go through a zeroed stack buffer.
inline vf zero() { return _mm256_setzero_ps(); }
inline vf set1(float v) { return _mm256_set1_ps(v); }
inline vf load(const float* p) { return _mm256_loadu_ps(p); }
inline vf load(const float* p, int64_t n) {
  if (n >= LANES) return _mm256_loadu_ps(p);
  float tmp[LANES] = {};
  std::memcpy(tmp, p, n * sizeof(float));
  return _mm256_loadu_ps(tmp);
}
inline void store(float* p, vf v) { _mm256_storeu_ps(p, v); }
inline void store(float* p, vf v, int64_t n) {
  if (n >= LANES) return _mm256_storeu_ps(p, v);
  float tmp[LANES];
  _mm256_storeu_ps(tmp, v);
  std::memcpy(p, tmp, n * sizeof(float));
}
inline vf widen_bf16(__m128i halves) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16));
}
inline vf load_bf16(const bf16* p, int64_t n = LANES) {
  if (n >= LANES) return widen_bf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  uint16_t tmp[LANES] = {};
  std::memcpy(tmp, p, n * sizeof(bf16));
  return widen_bf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tmp)));
}
// fp32 -> bf16 bits, round to nearest even (NaN kept quiet), in the low 16 bits of each lane
inline __m256i bf16_bits(vf v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(rounded, _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40)), nan);
}
inline __m128i pack_bf16(vf v) {
  const __m256i bits = bf16_bits(v);
  return _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
}
inline void store_bf16(bf16* p, vf v, int64_t n = LANES) {
  const __m128i packed = pack_bf16(v);
  if (n >= LANES) return _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
  uint16_t tmp[LANES];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(tmp), packed);
  std::memcpy(p, tmp, n * sizeof(bf16));
}
inline vf round_bf16(vf v) { return _mm256_castsi256_ps(_mm256_slli_epi32(bf16_bits(v), 16)); }
inline vf add(vf a, vf b) { return _mm256_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf div(vf a, vf b) { return _mm256_div_ps(a, b); }
inline vf max(vf a, vf b) { return _mm256_max_ps(a, b); }
inline vf abs(vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
inline vf fmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline vf fnmadd(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
inline vf select_negative(vf x, vf if_negative, vf otherwise) {
  return _mm256_blendv_ps(otherwise, if_negative, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
}
inline float reduce_add(vf v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline vf round_nearest(vf v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// y * 2^n for whole n in [-126, 127] (exp's range after its clamp): n goes into the exponent field
inline vf times_pow2(vf y, vf n) {
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}
inline vf to_float(vi v) { return _mm256_cvtepi32_ps(v); }
inline vi load_i32(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline vi sub_i32(vi a, vi b) { return _mm256_sub_epi32(a, b); }
inline vi mul_i32(vi a, vi b) { return _mm256_mullo_epi32(a, b); }
inline vi set1_i32(int32_t v) { return _mm256_set1_epi32(v); }
inline vi zero_i32() { return _mm256_setzero_si256(); }

// r[i] = the sum of v[i]'s lanes: three rounds of hadd, then the two 128-bit halves.
constexpr int SUM_ORDER[8] = {0, 1, 2, 3, 4, 5, 6, 7};
inline vf sum_each(const vf (&v)[8]) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);  // [v0..v3 low | v0..v3 high]
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// ---- bf16 pairs, widened: a bf16 in the top half of a 32-bit lane is that value as fp32
inline Pairs split_pairs(__m256i pairs) {
  return {_mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16)),
          _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32(int32_t(0xFFFF0000u))))};
}
inline Pairs load_pairs(const bf16* p) { return split_pairs(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline Pairs load_pairs(const bf16* p, int64_t values) {
  if (values >= 2 * LANES) return load_pairs(p);
  uint16_t tmp[2 * LANES] = {};
  std::memcpy(tmp, p, values * sizeof(bf16));
  return load_pairs(reinterpret_cast<const bf16*>(tmp));
}
inline Pairs broadcast_pair(const bf16* p) { return split_pairs(_mm256_set1_epi32(load_u32(p))); }
// 2 * LANES int8 (LANES pairs), each weight times INT8_PAIR_SCALE: sign-extended to 16 bits,
// so a lane holds (k, k+1) as two int16; k+1 is then already the lane's int32 top half.
inline Pairs int8_pairs(const int8_t* p) {
  const __m256i words = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return {_mm256_cvtepi32_ps(_mm256_slli_epi32(words, 16)),
          _mm256_cvtepi32_ps(_mm256_and_si256(words, _mm256_set1_epi32(int32_t(0xFFFF0000u))))};
}
inline vf dot_pairs(vf acc, Pairs a, Pairs b) {
  return _mm256_fmadd_ps(a.odd, b.odd, _mm256_fmadd_ps(a.even, b.even, acc));
}

// ---- int8 quads
inline Quads load_quads(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline Quads broadcast_quad(const uint8_t* p) { return _mm256_set1_epi32(load_u32(p)); }
#if defined(__AVXVNNI__)
inline vi dot_quads(vi acc, Quads x, Quads w) { return _mm256_dpbusd_avx_epi32(acc, x, w); }
#else
// x signed: |x| * (w * sign(x)) through vpmaddubsw (u8 x s8 -> s16 pairs, at most
// 2 * 127 * 127: no saturation since both sides lie in [-127, 127]), then vpmaddwd by 1.
inline vi dot_quads(vi acc, Quads x, Quads w) {
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(x), _mm256_sign_epi8(w, x));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}
#endif

// ---- int4 nibbles: u8 weights x s8 activations
using U4Sums = __m256i;
inline void load_nibbles(const uint8_t* p, Quads& lo, Quads& hi) {
  const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), mask = _mm256_set1_epi8(0x0F);
  lo = _mm256_and_si256(bytes, mask);
  hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), mask);
}
#if defined(__AVXVNNI__)
constexpr int U4_DOTS = 1 << 20;  // int32 sums: no limit the kernels reach
inline U4Sums dot_u4(U4Sums acc, Quads w, Quads x) { return _mm256_dpbusd_avx_epi32(acc, w, x); }
inline vi u4_total(U4Sums acc) { return acc; }
#else
// vpmaddubsw: u8 weights in [0, 15] x s8 activations in [-127, 127] -> int16 pairs of at most
// 2 * 15 * 127 = 3810, summed in int16 (8 of them: 30480 < 2^15, no saturation), then
// widened to int32 once by vpmaddwd: one instruction fewer per dot than dot_quads.
constexpr int U4_DOTS = 8;
inline U4Sums dot_u4(U4Sums acc, Quads w, Quads x) { return _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, x)); }
inline vi u4_total(U4Sums acc) { return _mm256_madd_epi16(acc, _mm256_set1_epi16(1)); }
#endif

// ---- quantizing activations
inline float reduce_max(vf v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
// lanes holding whole numbers in [-127, 127] -> LANES int8
inline void store_i8(int8_t* p, vf v) {
  const __m256i words = _mm256_cvtps_epi32(v);
  const __m128i halves = _mm_packs_epi32(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packs_epi16(halves, halves));
}
inline vf load_u8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

#else
#error "model/native/kernels need AVX-512 (F, BW, VL, BF16, VNNI) or AVX2 + FMA; build with the flags __init__.py passes"
#endif

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
