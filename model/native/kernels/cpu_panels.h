// What the linear kernels share: the panel width, the register tiles over activation rows, the
// pair-panel loop, where the outputs go, and the input check. Included by cpu_linear.cpp,
// cpu_linear_bf12.cpp and cpu_linear_int4.cpp.

#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "cpu_vec.h"

namespace lfm_kernels {
namespace {

using namespace vec;

constexpr int VECS = 4;                     // vectors of outputs per panel
constexpr int64_t PANEL = VECS * LANES;     // outputs per panel
constexpr int MR = LANES == 16 ? 4 : 2;     // activation rows per register tile: 4 x 4 accumulators
                                            // fill half of AVX-512's 32 registers, 2 x 4 half of AVX2's 16

#define UNROLL _Pragma("GCC unroll 8")

// The last rows < MR of a panel, as one tile of exactly that many rows.
template <int R, typename Tile>
inline void remainder_tile(int64_t rows, int64_t m, int64_t p, Tile&& tile) {
  if constexpr (R > 0) {
    if (rows == R)
      tile(std::integral_constant<int, R>{}, m, p);
    else
      remainder_tile<R - 1>(rows, m, p, tile);
  }
}

// All M rows against panel p, ROWS (MR unless given) at a time. tile(R, m0, p) runs one register
// tile; R is passed as a compile-time constant.
template <int ROWS = MR, typename Tile>
inline void row_tiles(int64_t M, int64_t p, Tile&& tile) {
  int64_t m = 0;
  for (; m + ROWS <= M; m += ROWS) tile(std::integral_constant<int, ROWS>{}, m, p);
  remainder_tile<ROWS - 1>(M - m, m, p, tile);
}

// Every panel (split between threads) against all M rows.
template <typename Tile>
void for_each_tile(int64_t M, int64_t panels, Tile&& tile) {
  at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) row_tiles(M, p, tile);
  });
}

// k-steps (pairs or quads) of a panel per pass over its row tiles, as bytes of the panel. With more
// rows than one register tile, each tile would otherwise stream the whole panel (K * PANEL weights,
// 64-300 KB) from L2 or memory, one tile after another: memory idle while the later tiles compute
// from cache, compute waiting while the first one streams. A chunk this size stays in L1 while every
// tile multiplies it. Between chunks the sums wait in memory (stored and reloaded exactly), so each
// output's sum still runs over k in increasing order: a row's result does not depend on M.
constexpr int64_t CHUNK_BYTES = 16 << 10;

// Where a panel's stored weights are: `base` the first panel's, the others following it, each k-step
// `step_bytes` of them. A 12-bit panel has two: its bytes and its nibbles.
struct Stream {
  const void* base = nullptr;
  int64_t step_bytes = 0;
};
using Streams = std::array<Stream, 2>;

// The cache lines of the next chunk one pass over a chunk (a row tile) asks for, into L2, while it
// multiplies the current one: its share of each stream, a few lines every k-step. Asked for in one
// burst at the tile's start instead, they queue behind each other and the tile waits on them; left
// to the hardware prefetcher, memory idles while the later tiles compute from L1 (the prefetcher
// runs ahead only of demand misses). A default Ahead asks for nothing.
class Ahead {
 public:
  Ahead() = default;
  // Pass `pass` of `passes`, each `steps` k-steps long, shares out k-steps [from, from + count) of
  // every stream (counted from the first panel's first k-step).
  Ahead(const Streams& streams, int64_t from, int64_t count, int64_t pass, int64_t passes, int64_t steps)
      : steps_(steps) {
    for (size_t i = 0; i < streams.size(); ++i) {
      if (streams[i].base == nullptr) continue;
      const int64_t lines = count * streams[i].step_bytes / 64, share = (lines + passes - 1) / passes;
      const int64_t first = std::min(lines, pass * share);
      const char* base = static_cast<const char*>(streams[i].base);
      lines_[i] = {base + from * streams[i].step_bytes + first * 64, std::min(share, lines - first)};
    }
  }
  inline void step() {
    for (Lines& l : lines_)
      for (l.debt += l.count; l.debt >= steps_; l.debt -= steps_, l.next += 64) _mm_prefetch(l.next, _MM_HINT_T1);
  }

 private:
  struct Lines {
    const char* next = nullptr;
    int64_t count = 0, debt = 0;
  };
  std::array<Lines, 2> lines_{};
  int64_t steps_ = 1;
};

// The k-steps of the chunk after [s0, s1) of panel p in memory, where a thread's panels run to p1:
// the panel's own next chunk, the thread's next panel's first, or none.
inline int64_t next_chunk_steps(int64_t p, int64_t p1, int64_t s1, int64_t steps, int64_t chunk) {
  return s1 < steps ? std::min(chunk, steps - s1) : p + 1 < p1 ? std::min(chunk, steps) : 0;
}

template <typename Acc>
inline Acc zero_acc() {
  if constexpr (std::is_same_v<Acc, vi>)
    return zero_i32();
  else
    return zero();
}

// Every panel (split between threads) against all M rows in chunks of k-steps, each `step_bytes`
// of a panel: run(R, m0, p, s0, s1, acc, ahead) adds steps [s0, s1) of R rows from m0 into
// acc[R][VECS], calling ahead.step() once a k-step; finish(R, m0, p, acc) stores the finished sums;
// begin(p, s0, s1), before a chunk's tiles, may prepare it. With two or more row tiles each tile's
// Ahead asks for its share of the next chunk of the thread's panels in `streams`, so memory streams
// it under the arithmetic instead of between chunks.
// A begin taking a fourth argument, begin(p, s0, s1, scratch), prepares the chunk (then at most
// CHUNK_BYTES, whatever M) in `scratch`, CHUNK_BYTES of the calling thread's own, and run gets it
// as its last argument: a 12-bit panel decodes each chunk there. Not a thread_local buffer: in a
// shared library its address is a call (__tls_get_addr), which GCC repeated for every row tile,
// spilling and reloading the tile's sums around it.
template <typename Acc, typename Run, typename Finish, typename Begin = void (*)(int64_t, int64_t, int64_t)>
void for_each_chunked_tile(
    int64_t M, int64_t panels, int64_t steps, int64_t step_bytes, const Streams& streams, Run&& run,
    Finish&& finish, Begin&& begin = [](int64_t, int64_t, int64_t) {}) {
  constexpr bool scratch_chunks = std::is_invocable_v<Begin, int64_t, int64_t, int64_t, std::byte*>;
  const int64_t chunk = M <= MR && !scratch_chunks ? steps : std::max<int64_t>(1, CHUNK_BYTES / step_bytes);
  const int64_t tiles = (M + MR - 1) / MR;
  const bool prefetch = chunk < steps && tiles >= 2;
  at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
    std::vector<Acc> partial(chunk < steps ? M * VECS : 0);  // sums between chunks, [M][VECS]
    alignas(64) std::byte scratch[scratch_chunks ? CHUNK_BYTES : 1];
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t s0 = 0; s0 < steps; s0 += chunk) {
        const int64_t s1 = std::min(steps, s0 + chunk);
        const int64_t next_steps = prefetch ? next_chunk_steps(p, p1, s1, steps, chunk) : 0;
        if constexpr (scratch_chunks)
          begin(p, s0, s1, scratch);
        else
          begin(p, s0, s1);
        row_tiles(M, p, [&](auto R, int64_t m0, int64_t) {
          const Ahead ahead(streams, p * steps + s1, next_steps, m0 / MR, tiles, s1 - s0);
          Acc acc[R.value][VECS];
          UNROLL for (int r = 0; r < R.value; ++r) UNROLL for (int j = 0; j < VECS; ++j)
            acc[r][j] = s0 == 0 ? zero_acc<Acc>() : partial[(m0 + r) * VECS + j];
          if constexpr (scratch_chunks)
            run(R, m0, p, s0, s1, acc, ahead, scratch);
          else
            run(R, m0, p, s0, s1, acc, ahead);
          if (s1 == steps) {
            finish(R, m0, p, acc);
            return;
          }
          UNROLL for (int r = 0; r < R.value; ++r) UNROLL for (int j = 0; j < VECS; ++j)
            partial[(m0 + r) * VECS + j] = acc[r][j];
        });
      }
  });
}

// for_each_chunked_tile for tile_pairs, over a panel whose k-pairs take `pair_bytes` (in L1):
// run(R, m0, p, rows, pair0, pair1, acc, ahead[, scratch]) with the activation rows from m0 as
// tile_pairs reads them: x itself, or where the vector layer says so (PAIRS_FROM_FLOATS) x widened
// to fp32 once here, exactly, instead of every broadcast in every panel.
template <typename Run, typename Finish, typename Begin = void (*)(int64_t, int64_t, int64_t)>
void for_each_pair_tile(
    const bf16* x, int64_t M, int64_t K, int64_t panels, int64_t pair_bytes, const Streams& streams, Run&& run,
    Finish&& finish, Begin&& begin = [](int64_t, int64_t, int64_t) {}) {
  const auto over = [&](const auto* rows) {
    for_each_chunked_tile<vf>(
        M, panels, K / 2, pair_bytes, streams,
        [&](auto R, int64_t m0, int64_t p, int64_t s0, int64_t s1, auto& acc, Ahead ahead, auto*... scratch) {
          run(R, m0, p, rows + m0 * K, s0, s1, acc, ahead, scratch...);
        },
        finish, begin);
  };
  if constexpr (PAIRS_FROM_FLOATS) {
    std::vector<float> wide(M * K);
    at::parallel_for(0, M * K, 1 << 14, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) wide[i] = static_cast<float>(x[i]);
    });
    over(wide.data());
  } else {
    over(x);
  }
}

// One k-pair of a bf16 panel: 4 vectors of LANES outputs x 2 k.
struct Bf16Panel {
  const bf16* w;
  inline Pairs load(int64_t pair, int j) const { return load_pairs(w + (pair * PANEL + j * LANES) * 2); }
};

// R activation rows (bf16, or fp32 holding bf16 values; row stride K) against pairs [pair0, pair1)
// of one pair panel (or V < VECS of its vectors), added into fp32 sums. Panel::load(pair, j) gives
// the pairs of vector j, called once per (pair, j) in increasing order; ahead.step() once a pair.
template <int R, typename X, typename Panel, int V>
inline void tile_pairs(const X* x, int64_t K, const Panel& panel, int64_t pair0, int64_t pair1, vf (&acc)[R][V],
                       Ahead ahead = {}) {
  for (int64_t p = pair0; p < pair1; ++p) {
    ahead.step();
    Pairs xb[R];
    UNROLL for (int r = 0; r < R; ++r) xb[r] = broadcast_pair(x + r * K + 2 * p);
    UNROLL for (int j = 0; j < V; ++j) {
      const Pairs w = panel.load(p, j);
      UNROLL for (int r = 0; r < R; ++r) acc[r][j] = dot_pairs(acc[r][j], xb[r], w);
    }
  }
}

// Where a product's [M, N] outputs go: a new tensor of x's dtype or, for the head's logits, an
// fp32 tensor the caller reuses every step, holding the values that dtype would (bf16-rounded
// for bf16 x). (A fresh 2 MB fp32 copy per step is a fresh mmap under model/memory.py's
// threshold, page-faulted every step: docs/ARCHITECTURE.md has the measurement.)
class Output {
 public:
  Output(const at::Tensor& x, int64_t N, const std::optional<at::Tensor>& into)
      : N_(N), round_(x.scalar_type() == at::kBFloat16) {
    const int64_t M = x.size(0);
    if (into) {
      TORCH_CHECK(into->scalar_type() == at::kFloat && into->is_contiguous() && into->dim() == 2 &&
                      into->size(0) == M && into->size(1) == N,
                  "out must be a contiguous float32 [M, N]");
      tensor_ = *into;
    } else {
      tensor_ = at::empty({M, N}, x.options());
    }
    if (tensor_.scalar_type() == at::kFloat)
      f32_ = tensor_.data_ptr<float>();
    else
      bf16_ = tensor_.data_ptr<bf16>();
  }
  // LANES outputs of row `row` from output n0, clipped at N
  inline void store(int64_t row, int64_t n0, vf values) const {
    if (n0 >= N_) return;
    if (f32_ != nullptr)
      vec::store(f32_ + row * N_ + n0, round_ ? round_bf16(values) : values, N_ - n0);
    else
      store_bf16(bf16_ + row * N_ + n0, values, N_ - n0);
  }
  // A finished register tile's sums as they are: R rows from `row`, panel p's outputs.
  template <int R>
  inline void store_tile(int64_t row, int64_t p, const vf (&sums)[R][VECS]) const {
    UNROLL for (int r = 0; r < R; ++r) UNROLL for (int j = 0; j < VECS; ++j)
      store(row + r, p * PANEL + LANES * j, sums[r][j]);
  }
  at::Tensor tensor() const { return tensor_; }

 private:
  int64_t N_;
  bool round_;  // bf16 x: fp32 outputs hold bf16-rounded values
  at::Tensor tensor_;
  bf16* bf16_ = nullptr;
  float* f32_ = nullptr;
};

void check_x(const at::Tensor& x, int64_t K, at::ScalarType dtype = at::kBFloat16) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == dtype, "x must be a contiguous ",
              c10::toString(dtype), " [M, K]");
  TORCH_CHECK(x.size(1) == K, "x has ", x.size(1), " columns, the weight ", K);
}

}  // namespace
}  // namespace lfm_kernels
