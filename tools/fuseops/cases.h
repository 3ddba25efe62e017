// Case sets of the `fuseops` command line: each op family adds cases (an op on concrete shapes and dtypes) to
// named sets, mostly named after real models. A case can check itself against the float64 golden and can build a
// benchmark problem on the GPU.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "case_params.h"
#include "fuseops/tensor.h"

namespace fuseops::cli {

/// Result of checking one case against the golden (worst over the op's outputs).
struct CheckOutcome {
  bool pass = false;
  double max_abs_error = 0;
  double rel_rms_error = 0;
  std::string tolerance;  ///< the bound, in words
  std::string detail;     ///< first violation, if any
  int64_t rows_checked = 0;
  double seconds = 0;     ///< wall time of the check
};

/// One benchmark problem on a CUDA device: `sets` independent buffer sets so that consecutive launches can touch
/// different memory (cold timing). Implementations allocate in `allocate` and free in the destructor.
class BenchProblem {
 public:
  virtual ~BenchProblem() = default;
  /// Device bytes of one buffer set.
  virtual std::size_t set_bytes() const = 0;
  /// Allocates and fills (random, never zeros) `sets` buffer sets on the current device.
  virtual void allocate(int sets) = 0;
  /// Enqueues the op on buffer set `set`.
  virtual void run(int set, void* stream) = 0;
  /// Enqueues the baseline (same math, unfused) on buffer set `set`; false if the op has none.
  virtual bool run_baseline(int set, void* stream) = 0;
  /// Bytes the op must move (each input read once, each output written once).
  virtual double bytes() const = 0;
  /// Floating-point operations (0 when the op is memory-bound and FLOPs are not reported).
  virtual double flops() const { return 0; }
};

/// One case: an op, a shape, a dtype.
class OpCase {
 public:
  virtual ~OpCase() = default;
  std::string family;      ///< "activation"
  std::string op;          ///< "silu_and_mul"
  std::string shape;       ///< "8192x14336"
  std::string baseline;    ///< name of the baseline run_baseline() times, e.g. "unfused"
  DType dtype = DType::bf16;
  bool decode = false;     ///< a decode-sized case: bench also reports the empty kernel's time
  int64_t rows = 0;        ///< rows (tokens) of the full-size case

  /// Runs the op on `device` with `rows` rows (<= this->rows; fewer for reduced CPU runs) and compares with the
  /// golden. `seed` makes the random inputs.
  virtual CheckOutcome check(Device device, int64_t rows, uint64_t seed) const = 0;
  /// Median wall time of the op on the CPU backend with `rows` rows, microseconds.
  virtual double time_cpu_us(int64_t rows) const = 0;
  /// Rows (tokens) time_cpu_us(rows) runs: `rows` itself, unless the case keeps more (the chunked GDN forward keeps
  /// two and a half chunks, decode whole sequences, a fixed-length GDN batch `rows` per batch row). check() reports
  /// its own count (CheckOutcome::rows_checked).
  virtual int64_t rows_at(int64_t rows) const { return rows; }
  /// A benchmark problem at full size on the current CUDA device.
  virtual std::unique_ptr<BenchProblem> bench() const = 0;
  /// Bytes the op moves with `rows` rows (reduced CPU runs): the full size's scaled linearly, exact for row-wise ops;
  /// a case with a part that does not grow with the rows (the MoE schedule's padding) overrides it.
  virtual double bytes_at(int64_t rows) const {
    return this->rows > 0 ? bench()->bytes() * static_cast<double>(rows) / static_cast<double>(this->rows) : 0.0;
  }
  /// Factor from time_cpu_us(rows) to the full size's CPU time (`fuseops model` on the CPU): the full rows over the
  /// rows that ran (rows_at), exact for row-wise ops; a case whose work does not follow its rows (the masked
  /// activation: its valid rows) overrides it.
  virtual double time_scale_to_full(int64_t rows) const {
    return static_cast<double>(this->rows) / static_cast<double>(std::max<int64_t>(rows_at(rows), 1));
  }
};

/// Median wall time of `reps` calls of `fn`, microseconds (OpCase::time_cpu_us).
double median_wall_us(const std::function<void()>& fn, int reps = 5);

using CaseFactory = std::function<std::vector<std::unique_ptr<OpCase>>()>;

/// A factory making one `Case` (an OpCase constructed from a spec) per spec, in order.
template <class Case, class Spec>
CaseFactory case_factory(std::vector<Spec> specs) {
  return [specs = std::move(specs)] {
    std::vector<std::unique_ptr<OpCase>> cases;
    for (const Spec& s : specs) cases.push_back(std::make_unique<Case>(s));
    return cases;
  };
}

/// A named case set.
struct CaseSet {
  std::string name;
  std::string description;
  bool real_model = true;  ///< part of the default `fuseops check` / `bench` run
  std::vector<CaseFactory> factories;  ///< one per op family contributing to the set
};

/// All sets, in a stable order; families append to sets by name (creating them on first use).
class Registry {
 public:
  /// Adds `factory`'s cases to `set`; a set that exists keeps its flag and gets "; description" appended.
  void add(const std::string& set, const std::string& description, bool real_model, CaseFactory factory);
  const std::vector<CaseSet>& sets() const { return sets_; }
  const CaseSet* find(const std::string& name) const;

  /// Ops that can be made from parameters (case files, `fuseops model`); see case_params.h.
  void add_op(OpSpec spec);
  const std::vector<OpSpec>& ops() const { return ops_; }
  /// The op answering to `name` (its name or an alias), or nullptr.
  const OpSpec* find_op(const std::string& name) const;

 private:
  std::vector<CaseSet> sets_;
  std::vector<OpSpec> ops_;
};

/// The registry with every family's cases.
const Registry& registry();

/// Families register here (one function per family).
void register_activation_cases(Registry& r);
void register_gdn_cases(Registry& r);
void register_moe_cases(Registry& r);
void register_rope_cases(Registry& r);
void register_gdn_forward_cases(Registry& r);
void register_gdn_fwd_o_cases(Registry& r);
void register_norm_cases(Registry& r);

}  // namespace fuseops::cli
