// The vector layer on AVX2 + FMA (and AVX-VNNI where the build enables it): 8 fp32 lanes.
// Included by ../cpu_vec.h inside namespace lfm_kernels::vec, after the shared definitions; the
// names it must define are listed there. A port to another instruction set is a file like this.

#pragma once

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
using Widened = Pairs;  // pairs are widened here already
inline Widened load_widened(const bf16* p, int64_t values = 2 * LANES) { return load_pairs(p, values); }
constexpr bool PAIRS_FROM_FLOATS = false;  // each broadcast widened: a third vector port takes the shifts
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

// ---- 12-bit bf16 (cpu_linear_bf12.cpp): per value a byte of sign + 7 mantissa bits and a 4-bit
// index into 16 exponents; the bf16 word is sign | exponent << 7 | mantissa, rebuilt by two pshufb.
// 32 values a step, in 256-bit registers: their bytes are stored with the middle two 8-value
// blocks swapped (values 0-7, 16-23, 8-15, 24-31), so the in-lane byte interleave gives values
// 0-15 and 16-31 in order; the nibbles follow the stored order.
constexpr std::array<int, 32> BF12_BYTE_ORDER = [] {  // the value each stored byte holds
  std::array<int, 32> order{};
  for (int s = 0; s < 32; ++s) order[s] = (s / 8 == 1 ? 16 : s / 8 == 2 ? 8 : s / 8 * 8) + s % 8;
  return order;
}();
constexpr std::array<int, 32> BF12_NIBBLE_ORDER = BF12_BYTE_ORDER;  // the value each stored nibble indexes
using Words = __m256i;  // 2 * LANES bf16 words: one vector of pairs
constexpr int BF12_VECTORS = 2;  // vectors of pairs a decode step gives
struct Bf12Table {
  __m256i low, high;  // per index, in both 128-bit lanes: the exponent's low bit at bit 7, its high 7 bits
};
inline Bf12Table bf12_table(const uint8_t* exponents) {
  const __m256i e = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(exponents)));
  return {_mm256_slli_epi16(_mm256_and_si256(e, _mm256_set1_epi8(1)), 7),
          _mm256_and_si256(_mm256_srli_epi16(e, 1), _mm256_set1_epi8(0x7F))};
}
// 32 values from 32 stored bytes and 16 bytes of nibbles (stored value 2i low, 2i + 1 high)
inline void bf12_decode(const uint8_t* bytes, const uint8_t* nibbles, const Bf12Table& table, Words (&out)[2]) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes));
  const __m128i n = _mm_loadu_si128(reinterpret_cast<const __m128i*>(nibbles)), mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(n, mask), hi = _mm_and_si128(_mm_srli_epi16(n, 4), mask);
  const __m256i index = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
  const __m256i low = _mm256_or_si256(_mm256_and_si256(b, _mm256_set1_epi8(0x7F)), _mm256_shuffle_epi8(table.low, index));
  const __m256i high =
      _mm256_or_si256(_mm256_and_si256(b, _mm256_set1_epi8(char(0x80))), _mm256_shuffle_epi8(table.high, index));
  out[0] = _mm256_unpacklo_epi8(low, high);
  out[1] = _mm256_unpackhi_epi8(low, high);
}
// word i (0 <= i < 2 * LANES) replaced by value
inline Words set_word(Words words, int64_t i, uint16_t value) {
  const __m256i at = _mm256_cmpeq_epi16(_mm256_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                        _mm256_set1_epi16(int16_t(i)));
  return _mm256_blendv_epi8(words, _mm256_set1_epi16(int16_t(value)), at);
}
inline void store_words(bf16* p, Words words) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), words); }
inline Pairs words_pairs(Words words) { return split_pairs(words); }

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

