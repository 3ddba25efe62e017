// Plan of the wide variant of the CUDA schedule of moe_align_block_size (docs/ops/moe-log.md, "moe_align_block_size:
// wide variant"), shared with the tests, which size their cases on both sides of every switch.
#pragma once

#include <cstdint>

#include "common/moe_math.h"  // FUSEOPS_HD

namespace fuseops::detail {

/// How the wide variant runs `numel` ids: `clusters` independent thread block clusters of `cluster` blocks of
/// kMoeAlignWideWarps warps (grid = clusters * cluster blocks). Block b owns the flat ids [b * slice, (b + 1) *
/// slice) and ranks them with `rounds` ids per lane; block r of every cluster also counts the ids of chunk r, the
/// flat ids [r * clusters * slice, (r + 1) * clusters * slice). clusters == 0: the variant does not apply.
struct MoeAlignWidePlan {
  int clusters = 0;
  int cluster = 1;
  int rounds = 0;
  int64_t slice = 0;
  int64_t smem_words = 0;
};

/// The variant runs from this many ids (just above the small variant of moe_align_plan: measured faster than the
/// one-block variants from 1280 ids on), up to kMoeAlignWideMaxExperts experts and kMoeAlignWideMaxRounds ids per
/// lane of the owned slices (524 288 ids). The environment variable FUSEOPS_MOE_ALIGN_WIDE=0 turns it off at run
/// time, =<n> moves the minimum to n ids (for A/B measurements).
constexpr int64_t kMoeAlignWideMinIds = 1025;
constexpr int64_t kMoeAlignWideMaxExperts = 1024;
constexpr int kMoeAlignWideMaxRounds = 8;
constexpr int kMoeAlignWideWarps = 32;
/// The cluster doubles (2, 4, 8, up to the largest cluster) while a block would count more than this many ids, and
/// the clusters double (up to the cluster size, which they must divide) while a block would own at least twice this.
constexpr int64_t kMoeAlignWideCountIds = 2048;
constexpr int64_t kMoeAlignWideOwnIds = 1024;
/// Largest cluster the kernel handles (the portable size).
constexpr unsigned kMoeAlignWideMaxCluster = 8;

/// Shared memory words zeroed at the start: per-warp counters [warps][E] and the chunk histogram [E + 1] (the
/// last entry collects skipped ids), padded to a multiple of 4 (16-byte stores).
FUSEOPS_HD int64_t moe_align_wide_zeroed_words(int64_t E) { return kMoeAlignWideWarps * E + (E + 4) / 4 * 4; }

/// Shared memory words for slices of `slice` ids: the zeroed words, the owned counts [E], region starts [E + 1],
/// counts [E], earlier ids [E], block-local starts [E], scan scratch [64], the staging buffer [slice].
inline int64_t moe_align_wide_smem_words(int64_t E, int64_t slice) {
  return moe_align_wide_zeroed_words(E) + 5 * E + 1 + 64 + slice;
}

/// The wide plan for `numel` ids over E experts with clusters of up to `max_cluster` blocks (8 on sm_90; 1 before:
/// the variant then does not apply); `min_ids` < 0 turns it off; `own_ids`: kMoeAlignWideOwnIds, or another value
/// for A/B measurements. `one_round` (moe_route's schedule after its router): the clusters also double while a block
/// would own more than one id per lane (measured at 4096 x 512, k 10: 40 960 ids on 64 blocks of 640 instead of 32
/// of 1 280, moe_route 12.65 µs against 13.19; with one id per lane already, more clusters were slower: 4096 x 256
/// and 4096 x 128, k 8, 13.47 and 10.40 against 12.62 and 9.88).
inline MoeAlignWidePlan moe_align_wide_plan(int64_t numel, int64_t E, int max_cluster, int64_t budget_words,
                                            int64_t min_ids = kMoeAlignWideMinIds,
                                            int64_t own_ids = kMoeAlignWideOwnIds, bool one_round = false) {
  MoeAlignWidePlan p;
  if (min_ids < 0 || numel < min_ids || E > kMoeAlignWideMaxExperts || max_cluster < 2 ||
      max_cluster > static_cast<int>(kMoeAlignWideMaxCluster)) {
    return p;
  }
  int cl = 2;
  while (cl * 2 <= max_cluster && cl * kMoeAlignWideCountIds < numel) cl *= 2;
  int c = 1;
  while (c * 2 <= cl && numel >= int64_t{c} * 2 * cl * own_ids) c *= 2;
  while (one_round && c * 2 <= cl && numel > int64_t{c} * cl * 32 * kMoeAlignWideWarps) c *= 2;
  const int64_t slice = (numel + int64_t{c} * cl - 1) / (int64_t{c} * cl);
  const int64_t per_warp = (slice + kMoeAlignWideWarps - 1) / kMoeAlignWideWarps;
  int rounds = 1;
  while (int64_t{32} * rounds < per_warp) rounds *= 2;
  const int64_t smem = moe_align_wide_smem_words(E, slice);
  if (rounds > kMoeAlignWideMaxRounds || smem > budget_words) return p;
  p.clusters = c;
  p.cluster = cl;
  p.rounds = rounds;
  p.slice = slice;
  p.smem_words = smem;
  return p;
}

}  // namespace fuseops::detail
