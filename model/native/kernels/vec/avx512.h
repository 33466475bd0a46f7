// The vector layer on AVX-512 (F, BW, VL, VNNI, and BF16 where the build enables it): 16 fp32 lanes.
// Included by ../cpu_vec.h inside namespace lfm_kernels::vec, after the shared definitions; the
// names it must define are listed there. A port to another instruction set is a file like this.
//
// Without AVX512-BF16 (Cascade Lake and Ice Lake servers: "avx512f") bf16 pairs are widened to fp32 as
// vec/avx2.h does and rounded to bf16 in integers: twice AVX2's lanes, the same bits per lane.

#pragma once

#if defined(__AVX512BF16__)
#define LFM_ISA_NAME "avx512"
#else
#define LFM_ISA_NAME "avx512f"
#endif
constexpr int LANES = 16;
using vf = __m512;
using vi = __m512i;
#if defined(__AVX512BF16__)
using Pairs = __m512bh;
constexpr float INT8_PAIR_SCALE = 1.0f;
#else
struct Pairs {
  __m512 even, odd;  // fp32: k and k+1 of each lane's pair
};
constexpr float INT8_PAIR_SCALE = 65536.0f;  // int8_pairs: as vec/avx2.h's, each weight times 2^16
#endif
using Quads = __m512i;
constexpr int QUAD_OFFSET = 128;  // vpdpbusd: unsigned activations x signed weights

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
#if defined(__AVX512BF16__)
inline void store_bf16(bf16* p, vf v, int64_t n = LANES) {
  _mm256_mask_storeu_epi16(p, lanes_upto(n), (__m256i)_mm512_cvtneps_pbh(v));
}
inline vf round_bf16(vf v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(v)), 16));
}
#else
// fp32 -> bf16 bits, round to nearest even (NaN kept quiet), in the low 16 bits of each lane
inline __m512i bf16_bits(vf v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  return _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), rounded,
                                 _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40)));
}
inline void store_bf16(bf16* p, vf v, int64_t n = LANES) {
  _mm256_mask_storeu_epi16(p, lanes_upto(n), _mm512_cvtepi32_epi16(bf16_bits(v)));
}
inline vf round_bf16(vf v) { return _mm512_castsi512_ps(_mm512_slli_epi32(bf16_bits(v), 16)); }
#endif
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
#if defined(__AVX512BF16__)
inline Pairs split_pairs(__m512i pairs) { return (Pairs)pairs; }
#else
// widened: a bf16 in the top half of a 32-bit lane is that value as fp32
inline Pairs split_pairs(__m512i pairs) {
  return {_mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16)),
          _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(int32_t(0xFFFF0000u))))};
}
#endif
inline Pairs load_pairs(const bf16* p) { return split_pairs(_mm512_loadu_si512(p)); }
inline Pairs load_pairs(const bf16* p, int64_t values) {
  return split_pairs(_mm512_maskz_loadu_epi16(halves_upto(values), p));
}
inline Pairs broadcast_pair(const bf16* p) { return split_pairs(_mm512_set1_epi32(load_u32(p))); }
struct Widened {
  vf even, odd;  // fp32: values 2i and 2i+1 of the 2 * LANES loaded
};
inline Widened load_widened(const bf16* p, int64_t values = 2 * LANES) {
  const __m512i words = _mm512_maskz_loadu_epi16(halves_upto(values), p);
  return {_mm512_castsi512_ps(_mm512_slli_epi32(words, 16)),
          _mm512_castsi512_ps(_mm512_and_si512(words, _mm512_set1_epi32(int32_t(0xFFFF0000u))))};
}
#if defined(__AVX512BF16__)
constexpr bool PAIRS_FROM_FLOATS = false;
#else
// Widening a broadcast pair (a shift and a mask per row and k-pair) takes the two ports the FMAs
// need; from activations widened once per call it is two broadcast loads.
constexpr bool PAIRS_FROM_FLOATS = true;
inline Pairs broadcast_pair(const float* p) { return {_mm512_set1_ps(p[0]), _mm512_set1_ps(p[1])}; }
#endif
#if defined(__AVX512BF16__)
// 2 * LANES int8 (LANES pairs) as bf16 pairs, exact (|w| <= 127 fits bf16's significand)
inline Pairs int8_pairs(const int8_t* p) {
  const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(bytes)));
  const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(bytes, 1)));
  return _mm512_cvtne2ps_pbh(hi, lo);
}
inline vf dot_pairs(vf acc, Pairs a, Pairs b) { return _mm512_dpbf16_ps(acc, a, b); }
#else
// 2 * LANES int8 (LANES pairs), each weight times INT8_PAIR_SCALE: sign-extended to 16 bits, so a
// lane holds (k, k+1) as two int16; k+1 is then already the lane's int32 top half.
inline Pairs int8_pairs(const int8_t* p) {
  const __m512i words = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return {_mm512_cvtepi32_ps(_mm512_slli_epi32(words, 16)),
          _mm512_cvtepi32_ps(_mm512_and_si512(words, _mm512_set1_epi32(int32_t(0xFFFF0000u))))};
}
// even then odd, as vec/avx2.h's: each lane's sums the bits of the AVX2 build's
inline vf dot_pairs(vf acc, Pairs a, Pairs b) {
  return _mm512_fmadd_ps(a.odd, b.odd, _mm512_fmadd_ps(a.even, b.even, acc));
}
#endif

// ---- 12-bit bf16 (cpu_linear_bf12.cpp): per value a byte of sign + 7 mantissa bits and a 4-bit
// index into 16 exponents; the bf16 word is sign | exponent << 7 | mantissa. 64 values (two vectors
// of pairs) a step: each 128-bit lane of their 64 bytes holds 8 values of the first 32, then the 8
// values 32 later, so one in-lane interleave of the bytes with themselves gives every word its byte
// twice (sign at bit 15, mantissa at bits 0-6); nibble byte i holds the index of value i (low) and
// of value i + 32 (high), widened to words once for both halves. One vpermw per 32 values looks up
// the exponents in a 32-word table (the 16 twice, so a low nibble's stray fifth bit is ignored),
// one bit select puts sign and mantissa around them (AVX512BW only: no VBMI needed).
constexpr int BF12_VECTORS = 2;  // vectors of pairs a decode step gives
constexpr std::array<int, 64> BF12_BYTE_ORDER = [] {  // the value each stored byte holds
  std::array<int, 64> order{};
  for (int s = 0; s < 64; ++s) order[s] = s / 16 * 8 + s % 8 + (s % 16 >= 8 ? 32 : 0);
  return order;
}();
constexpr std::array<int, 64> BF12_NIBBLE_ORDER = [] {  // the value each stored nibble indexes
  std::array<int, 64> order{};
  for (int s = 0; s < 64; ++s) order[s] = s / 2 + (s % 2 ? 32 : 0);
  return order;
}();
using Words = __m512i;  // 2 * LANES bf16 words: one vector of pairs
struct Bf12Table {
  __m512i words;  // word i and i + 16: exponent i at bits 7-14, as in a bf16 word
};
inline Bf12Table bf12_table(const uint8_t* exponents) {
  const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(exponents));
  return {_mm512_broadcast_i64x4(_mm256_slli_epi16(_mm256_cvtepu8_epi16(e), 7))};
}
// 64 values from 64 stored bytes and 32 bytes of nibbles
inline void bf12_decode(const uint8_t* bytes, const uint8_t* nibbles, const Bf12Table& table, Words (&out)[2]) {
  const __m512i b = _mm512_loadu_si512(bytes);
  const __m512i n = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(nibbles)));
  const __m512i keep = _mm512_set1_epi16(int16_t(0x807F));  // sign and mantissa from the doubled byte
  out[0] = _mm512_ternarylogic_epi32(keep, _mm512_unpacklo_epi8(b, b), _mm512_permutexvar_epi16(n, table.words),
                                     0xCA);  // a ? b : c
  out[1] = _mm512_ternarylogic_epi32(keep, _mm512_unpackhi_epi8(b, b),
                                     _mm512_permutexvar_epi16(_mm512_srli_epi16(n, 4), table.words), 0xCA);
}
// word i (0 <= i < 2 * LANES) replaced by value
inline Words set_word(Words words, int64_t i, uint16_t value) {
  return _mm512_mask_set1_epi16(words, __mmask32(1u << i), int16_t(value));
}
inline void store_words(bf16* p, Words words) { _mm512_storeu_si512(p, words); }
inline Pairs words_pairs(Words words) { return split_pairs(words); }

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

