// Linear layers with bf16 weights stored in 12 bits, losslessly (model/quant/bf12.py packs them):
// out[M, N] = x[M, K] @ W.T, the same bits as linear_bf16 over the same weights.
//
// Why: a decode step reads every weight once, so its speed is the memory's; a trained model's bf16
// exponents take few values (most of a panel's weights share ~10 of them), so each weight is
// stored as a byte of sign + 7 mantissa bits and a 4-bit index into its panel's 15 commonest
// exponents: 1.5 bytes instead of 2. The bf16 words are rebuilt in registers (table lookups by
// index: vec/'s bf12_decode) and go into the very dot_pairs sequence of linear_bf16, in the same
// order, so the sums, and the logits, are bit-identical to the bf16 kernel's.
//
// Layout: the bf16 pair panels of linear_bf16 (model/native/kernels/layout.py), value by value in
// memory order (within each group, the values one decode step rebuilds, in the order vec/'s
// bf12_decode reads them: BF12_BYTE_ORDER, BF12_NIBBLE_ORDER), split into
//   bytes      u8 [values]          sign << 7 | mantissa
//   nibbles    u8 [values / 2]      two exponent indices (the first low)
//   tables     u8 [panels, 16]      each panel's exponents by index; index 15 marks an exception
//   starts     i64 [panels]         the first exception at or after each panel's first value
//   positions  i64 [exceptions + 1] every exception's value position, ascending, then INT64_MAX
//   values     bf16 [exceptions + 1] their exact bf16 (the last a placeholder)
// A group holding an exception is decoded as any other, then patched from the list.
// Up to one register tile of rows (MR) decodes in registers. With more rows, where pairs are one
// register (AVX512_BF16), up to TALL_MAX rows go in tiles of TALL_ROWS rows against part of a
// panel, still decoding in registers (tall_tiles); otherwise each k-chunk of a panel (cpu_panels.h)
// is decoded once, in L1 (DecodedChunk), and every row tile multiplied from there. Either way the
// activation rows come as linear_bf16's do (for_each_pair_tile: widened to fp32 once where the
// vector layer wants it).

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "cpu_panels.h"

namespace lfm_kernels {
namespace {

using namespace vec;

constexpr int64_t GROUP = BF12_VECTORS * 2 * LANES;  // values a decode step rebuilds: whole vectors of pairs
static_assert(GROUP == int64_t(BF12_BYTE_ORDER.size()) && GROUP == int64_t(BF12_NIBBLE_ORDER.size()),
              "the stored order spans one decode step");
static_assert(VECS % BF12_VECTORS == 0, "a panel's pair step is whole decode steps");
// Values ahead of the group being decoded that its decode asks the cache for. The decode keeps the
// vector ports busy, so the out-of-order window reaches far fewer loads ahead than linear_bf16's
// plain stream does, and the hardware prefetcher alone left the memory idle part of the time; the
// load ports are free for the two requests (docs/PERFORMANCE.md has the measurement).
constexpr int64_t AHEAD = 2048;

// A 12-bit panel, decoded group by group in increasing order (tile_pairs' loads, or all of it at
// once), so a cursor walks the panel's exceptions once.
struct Bf12Panel {
  const uint8_t* bytes;    // the panel's first value's
  const uint8_t* nibbles;  // likewise
  Bf12Table table;
  const int64_t* positions;
  const bf16* values;
  int64_t first;         // the panel's first value's position
  mutable int64_t next;  // the next exception's index in positions/values
  mutable Words words[BF12_VECTORS] = {};  // the group tile_pairs is in

  inline void decode_group(int64_t at, Words (&out)[BF12_VECTORS]) const {
    const int64_t end = first + at + GROUP;
    _mm_prefetch(reinterpret_cast<const char*>(bytes + at + AHEAD), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(nibbles + (at + AHEAD) / 2), _MM_HINT_T0);
    bf12_decode(bytes + at, nibbles + at / 2, table, out);  // an exception's index 15 decodes to a placeholder
    if (__builtin_expect(positions[next] < end, 0)) patch(end, out);
  }

  // The exceptions of the group of GROUP values ending at ``end`` put back exactly into its decoded
  // words, in registers (a round trip through memory stalled on the stores); those before the group
  // passed over: a pass over some of each pair's vectors (Bf12Part) skips the others' groups.
  inline void patch(int64_t end, Words (&out)[BF12_VECTORS]) const {
    for (; positions[next] < end; ++next) {
      const int64_t at = positions[next] - (end - GROUP);
      UNROLL for (int v = 0; v < BF12_VECTORS; ++v)
        if (at >= v * 2 * LANES && at < (v + 1) * 2 * LANES) out[v] = set_word(out[v], at - v * 2 * LANES, values[next].x);
    }
  }

  inline Pairs load(int64_t pair, int j) const {
    const int slot = j % BF12_VECTORS;
    if (slot == 0) decode_group((pair * PANEL + j * LANES) * 2, words);
    return words_pairs(words[slot]);
  }

  // ``count`` values of the panel from ``from`` (whole groups) into ``chunk``, a Chunk (DecodedChunk);
  // ``next`` must be the first exception at or after ``from``.
  template <typename Chunk>
  void decode(int64_t from, int64_t count, std::byte* chunk) const {
    Words group[BF12_VECTORS];
    // counted in vectors, not divided out of ``at``: a signed division here slowed the few-row case
    for (int64_t at = from, vector = 0; at < from + count; at += GROUP, vector += BF12_VECTORS) {
      decode_group(at, group);
      for (int v = 0; v < BF12_VECTORS; ++v) Chunk::put(chunk, vector + v, group[v]);
    }
  }
};

// Vectors [part * BF12_VECTORS, (part + 1) * BF12_VECTORS) of a 12-bit panel's pairs: one decode
// step's group each pair, decoded in registers as tile_pairs loads them.
struct Bf12Part {
  const Bf12Panel& panel;
  int part;
  inline Pairs load(int64_t pair, int j) const { return panel.load(pair, part * BF12_VECTORS + j); }
};

// Where pairs are one register (AVX512_BF16) a tile of TALL_ROWS rows against one part of the
// panel (TALL_ROWS x BF12_VECTORS sums) decodes each group in registers, once per TALL_ROWS rows,
// between its dot products, instead of once per chunk into memory ahead of them (DecodedChunk: a
// burst of decoding that the multiplies wait for). Each part of a k-chunk is such a pass, the sums
// waiting in memory between chunks (exact), so each output still sums k in increasing order.
constexpr bool TALL = !std::is_class_v<Pairs> && !PAIRS_FROM_FLOATS;
constexpr int TALL_ROWS = 8;
// Up to this many rows; past it decoding once per TALL_ROWS rows costs more than once per chunk.
constexpr int64_t TALL_MAX = 2 * TALL_ROWS;
constexpr int PARTS = VECS / BF12_VECTORS;

template <typename PanelOf, typename Store>
void tall_tiles(const bf16* x, int64_t M, int64_t K, int64_t panels, const int64_t* positions,
                const int64_t* positions_end, const Streams& streams, PanelOf&& panel, Store&& store) {
  const int64_t steps = K / 2;
  const int64_t chunk = std::max<int64_t>(1, CHUNK_BYTES / (PANEL * 2 * int64_t(sizeof(bf16))));  // linear_bf16's
  const int64_t tiles = (M + TALL_ROWS - 1) / TALL_ROWS;
  at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
    std::vector<vf> partial(chunk < steps ? M * VECS : 0);  // sums between chunks, [M][VECS]
    for (int64_t p = p0; p < p1; ++p) {
      const Bf12Panel whole = panel(p);
      int64_t next = whole.next;
      for (int64_t s0 = 0; s0 < steps; s0 += chunk) {
        const int64_t s1 = std::min(steps, s0 + chunk);
        next = std::lower_bound(positions + next, positions_end, whole.first + s0 * 2 * PANEL) - positions;
        const int64_t next_steps = chunk < steps ? next_chunk_steps(p, p1, s1, steps, chunk) : 0;
        for (int part = 0; part < PARTS; ++part)
          row_tiles<TALL_ROWS>(M, p, [&](auto R, int64_t m0, int64_t) {
            vf acc[R.value][BF12_VECTORS];
            vf* saved = partial.data() + m0 * VECS + part * BF12_VECTORS;
            UNROLL for (int r = 0; r < R.value; ++r) UNROLL for (int j = 0; j < BF12_VECTORS; ++j)
              acc[r][j] = s0 == 0 ? zero() : saved[r * VECS + j];
            Bf12Panel cursor = whole;
            cursor.next = next;
            const int64_t pass = part * tiles + m0 / TALL_ROWS;
            const Ahead ahead(streams, p * steps + s1, next_steps, pass, PARTS * tiles, s1 - s0);
            tile_pairs<R.value>(x + m0 * K, K, Bf12Part{cursor, part}, s0, s1, acc, ahead);
            UNROLL for (int r = 0; r < R.value; ++r) UNROLL for (int j = 0; j < BF12_VECTORS; ++j) {
              if (s1 == steps)
                store(m0 + r, p * PANEL + (part * BF12_VECTORS + j) * LANES, acc[r][j]);
              else
                saved[r * VECS + j] = acc[r][j];
            }
          });
      }
    }
  });
}

// Pairs [first_pair, ...) of a panel's k-chunk, decoded once (Bf12Panel::decode) for all its row
// tiles: as linear_bf16's panel (bf16 words) or, WIDE, as the very Pairs its loads make of them,
// already widened to fp32 where the vector layer widens pairs (AVX2, AVX512F). WIDE spares every
// row tile a shift and a mask per vector, on the two ports its FMAs need, for twice the bytes
// stored per weight: worth it from WIDE_TILES row tiles on (measured: docs/PERFORMANCE.md, End to
// end, 2026-11-29 late night).
constexpr int64_t WIDE_TILES = 4;

template <bool WIDE>
struct DecodedChunk {
  static constexpr int64_t PAIR_BYTES = VECS * (WIDE ? sizeof(Pairs) : 2 * LANES * sizeof(bf16));
  static_assert(PAIR_BYTES <= CHUNK_BYTES, "a chunk holds at least one pair step");
  const std::byte* data;
  int64_t first_pair;

  // vector ``at`` of the chunk (pair * VECS + j, counted from its first pair)
  static void put(std::byte* data, int64_t at, Words words) {
    if constexpr (WIDE)
      reinterpret_cast<Pairs*>(data)[at] = words_pairs(words);
    else
      store_words(reinterpret_cast<bf16*>(data) + at * 2 * LANES, words);
  }
  inline Pairs load(int64_t pair, int j) const {
    const int64_t at = (pair - first_pair) * VECS + j;
    if constexpr (!WIDE) {
      return load_pairs(reinterpret_cast<const bf16*>(data) + at * 2 * LANES);
    } else {
      return copied(reinterpret_cast<const Pairs*>(data)[at]);
    }
  }

 private:
  // member by member where Pairs is a struct of two vectors (AVX2, AVX512F): GCC copies a struct by
  // 16-byte moves, which the wide loads after it would wait on (a failed store forward each, 10x
  // slower). A template, so the struct branch is not compiled where Pairs is one vector (AVX512_BF16).
  template <typename P>
  static P copied(const P& w) {
    if constexpr (std::is_class_v<P>)
      return {w.even, w.odd};
    else
      return w;
  }
};

void check_bf12(const at::Tensor& bytes, const at::Tensor& nibbles, const at::Tensor& tables,
                const at::Tensor& starts, const at::Tensor& positions, const at::Tensor& values, int64_t N,
                int64_t K) {
  const int64_t panels = (N + PANEL - 1) / PANEL;
  const auto fits = [](const at::Tensor& t, at::ScalarType dtype, int64_t numel) {
    return t.is_contiguous() && t.scalar_type() == dtype && t.numel() == numel;
  };
  TORCH_CHECK(K % 4 == 0, "K must be a multiple of 4");
  TORCH_CHECK(fits(bytes, at::kByte, panels * PANEL * K) && fits(nibbles, at::kByte, panels * PANEL * K / 2) &&
                  fits(tables, at::kByte, panels * 16) && fits(starts, at::kLong, panels),
              "12-bit weight does not match N=", N, ", K=", K);
  TORCH_CHECK(positions.numel() >= 1 && fits(positions, at::kLong, positions.numel()) &&
                  fits(values, at::kBFloat16, positions.numel()) &&
                  positions.data_ptr<int64_t>()[positions.numel() - 1] == INT64_MAX,
              "12-bit exceptions: i64 positions ending in INT64_MAX, as many bf16 values");
}

}  // namespace

at::Tensor linear_bf12(const at::Tensor& x, const at::Tensor& bytes, const at::Tensor& nibbles,
                       const at::Tensor& tables, const at::Tensor& starts, const at::Tensor& positions,
                       const at::Tensor& values, int64_t N, const std::optional<at::Tensor>& out) {
  const int64_t M = x.size(0), K = x.size(1);
  check_x(x, K);
  check_bf12(bytes, nibbles, tables, starts, positions, values, N, K);
  const Output result(x, N, out);
  const bf16* xp = x.data_ptr<bf16>();
  const uint8_t* bp = bytes.data_ptr<uint8_t>();
  const uint8_t* np = nibbles.data_ptr<uint8_t>();
  const uint8_t* tp = tables.data_ptr<uint8_t>();
  const int64_t* sp = starts.data_ptr<int64_t>();
  const int64_t* pp = positions.data_ptr<int64_t>();
  const bf16* vp = values.data_ptr<bf16>();
  const auto panel = [&](int64_t p) {
    const int64_t first = p * PANEL * K;
    return Bf12Panel{bp + first, np + first / 2, bf12_table(tp + p * 16), pp, vp, first, sp[p]};
  };
  const int64_t panels = (N + PANEL - 1) / PANEL;
  const auto store = [&](auto R, int64_t m0, int64_t p, auto& acc) { result.store_tile<R.value>(m0, p, acc); };
  if (M <= MR) {  // one register tile, all of K in one chunk: each weight decoded once, in registers
    for_each_pair_tile(
        xp, M, K, panels, PANEL * 2 * sizeof(bf16), {},
        [&](auto R, int64_t m0, int64_t p, const auto* rows, int64_t s0, int64_t s1, auto& acc, Ahead) {
          tile_pairs<R.value>(rows, K, panel(p), s0, s1, acc);
        },
        store);
    return result.tensor();
  }
  const int64_t* positions_end = pp + positions.numel();
  const Streams streams = {{{bp, 2 * PANEL}, {np, PANEL}}};  // a k-pair's bytes and nibbles
  if (TALL && M <= TALL_MAX) {
    if constexpr (TALL)
      tall_tiles(xp, M, K, panels, pp, positions_end, streams, panel,
                 [&](int64_t row, int64_t n0, vf sums) { result.store(row, n0, sums); });
    return result.tensor();
  }
  // more rows: each k-chunk of a panel decoded once, into the thread's scratch, then every tile over it
  const auto chunked = [&](auto wide) {
    using Chunk = DecodedChunk<wide.value>;
    for_each_pair_tile(
        xp, M, K, panels, Chunk::PAIR_BYTES, streams,
        [&](auto R, int64_t m0, int64_t p, const auto* rows, int64_t s0, int64_t s1, auto& acc, Ahead ahead,
            std::byte* chunk) {
          tile_pairs<R.value>(rows, K, Chunk{chunk, s0}, s0, s1, acc, ahead);
        },
        store,
        [&](int64_t p, int64_t s0, int64_t s1, std::byte* chunk) {
          const int64_t from = s0 * 2 * PANEL, count = (s1 - s0) * 2 * PANEL;
          Bf12Panel decoder = panel(p);
          decoder.next = std::lower_bound(pp + decoder.next, positions_end, decoder.first + from) - pp;
          decoder.decode<Chunk>(from, count, chunk);
        });
  };
  if ((M + MR - 1) / MR >= WIDE_TILES)
    chunked(std::true_type{});
  else
    chunked(std::false_type{});
  return result.tensor();
}

}  // namespace lfm_kernels
