// Shared helpers of the GoogleTest suite: the per-run random seed, the CPU/CUDA switch, buffers that hold
// views at chosen offsets and pitches (on the host and, for CUDA, mirrored on the device), and the table of
// activation ops with their goldens.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fuseops/fuseops.h"
#include "reference/activation.h"
#include "testing/compare.h"
#include "testing/host_tensor.h"

namespace fuseops_test {

namespace ft = fuseops::testing;
using fuseops::DType;
using fuseops::TensorView;
using ft::HostTensor;

/// The seed of this process (FUSEOPS_SEED, else the clock); printed once before the first test.
uint64_t run_seed();
/// A generator for the current test: the run seed mixed with the test's full name, so that
/// `FUSEOPS_SEED=<seed> fuseops_tests --gtest_filter=<test>` replays exactly that test's inputs.
std::mt19937_64 test_rng();

/// Where an op runs.
enum class Where { cpu, cuda };
const char* where_name(Where where);
/// Test-name suffix of a Where parameter (INSTANTIATE_TEST_SUITE_P).
inline std::string where_param_name(const ::testing::TestParamInfo<Where>& info) { return where_name(info.param); }
/// True when this build has CUDA and the machine has at least one device.
bool cuda_available();

#define FUSEOPS_SKIP_WITHOUT_CUDA()                                                                   \
  do {                                                                                                \
    if (!::fuseops_test::cuda_available())                                                            \
      GTEST_SKIP() << "no CUDA device (built_with_cuda=" << fuseops::built_with_cuda()               \
                   << ", cuda_device_count=" << fuseops::cuda_device_count() << ")";                  \
  } while (0)

#define FUSEOPS_SKIP_UNLESS_RUNNABLE(where)                                                           \
  do {                                                                                                \
    if ((where) == ::fuseops_test::Where::cuda) FUSEOPS_SKIP_WITHOUT_CUDA();                          \
  } while (0)

/// A view inside a flat buffer: element (r, c) of the view is element offset + r * pitch + c of the buffer;
/// leading dims of `shape` are flattened into rows.
struct Region {
  int buffer = 0;
  int64_t offset = 0;
  std::vector<int64_t> shape;
  int64_t pitch = 0;
  int64_t rows() const;
  int64_t cols() const { return shape.back(); }
  int64_t end() const { return rows() == 0 ? offset : offset + (rows() - 1) * pitch + cols(); }
};

/// Flat host buffers of one dtype, poisoned with NaN when created, mirrored on a CUDA device when `where` is
/// cuda. Usage: buffer()/write() -> upload() -> view() -> run the op -> download() -> read()/unchanged_outside().
class Workspace {
 public:
  Workspace(Where where, DType dtype);
  ~Workspace();
  Where where() const { return where_; }
  DType dtype() const { return dtype_; }

  /// A new buffer of `elems` elements, poisoned; returns its id.
  int buffer(int64_t elems);
  /// A new buffer just large enough for `shape` at `offset` with `pitch`, and the region there.
  Region region(std::vector<int64_t> shape, int64_t offset = 0, int64_t pitch = 0);
  /// Scatters a compact tensor of the region's shape into the host buffer.
  void write(const Region& r, const HostTensor& compact);
  /// Gathers the region of the host buffer into a compact tensor.
  HostTensor read(const Region& r) const;
  /// Copies the host buffers to the device (CUDA) and snapshots them for unchanged_outside().
  void upload();
  /// A view of the region where the op runs (device memory for CUDA).
  TensorView view(const Region& r) const;
  /// Waits for the device and copies every buffer back to the host.
  void download();
  /// Success when every element outside `written` is bitwise what it was at upload() (padding between the
  /// rows of an output stays poisoned, inputs are not modified).
  ::testing::AssertionResult unchanged_outside(const std::vector<Region>& written) const;

 private:
  Where where_;
  DType dtype_;
  std::vector<HostTensor> host_, snapshot_;
  std::vector<std::unique_ptr<ft::DeviceTensor>> device_;
};

// ---------------------------------------------------------------------------------------------------------------
// The activation ops.

enum class Form { fused, split, backward };

/// One public entry point with its arguments in declaration order: fused (out, input); split (out, gate, up);
/// backward (dgate, dup, dout, gate, up). The first `num_outputs(form)` arguments are outputs.
struct OpCase {
  std::string name;
  Form form;
  fuseops::detail::Act act;
  std::function<void(const std::vector<TensorView>&)> call;
};
int num_outputs(Form form);
int num_args(Form form);
/// Names of the arguments in declaration order ("out", "input" / "out", "gate", "up" / ...).
std::vector<std::string> arg_names(Form form);
/// Every function of fuseops/activation.h, each GELU variant once.
const std::vector<OpCase>& all_ops();

/// Golden values of the outputs (in argument order) for compact inputs (in argument order).
std::vector<fuseops::reference::Golden> golden(const OpCase& op, const std::vector<HostTensor>& inputs);

/// How the views of a case lie in memory.
enum class Layout {
  contiguous,  ///< each tensor in its own buffer, rows back to back
  pitched,     ///< rows 16 elements further apart than their width (padding must stay untouched)
  misaligned,  ///< each view starts 1 element into its buffer, pitch width + 1: no vector path on the GPU
  shared,      ///< fused: out and input side by side in one buffer; split/backward: gate|up (and dgate|dup)
               ///< the two halves of one fused buffer
};
const char* layout_name(Layout layout);

/// Runs `op` on random inputs of shape [lead..., d] (fused input: [lead..., 2d]) and compares every output
/// with the golden within Tolerance::for_dtype(dtype, 16); also checks that nothing outside the outputs was
/// written. Records gtest failures with a description of the case.
void check_op(const OpCase& op, Where where, DType dtype, const std::vector<int64_t>& lead, int64_t d,
              Layout layout, ft::Fill fill, std::mt19937_64& rng);

/// Success when `f` throws fuseops::Error of `kind` whose message contains every string of `needles`.
template <typename F>
::testing::AssertionResult raises(F&& f, fuseops::ErrorKind kind, std::vector<std::string> needles) {
  try {
    f();
  } catch (const fuseops::Error& e) {
    const std::string msg = e.what();
    if (e.kind() != kind) {
      return ::testing::AssertionFailure() << "Error kind " << static_cast<int>(e.kind()) << ", expected "
                                           << static_cast<int>(kind) << ": " << msg;
    }
    for (const std::string& n : needles) {
      if (msg.find(n) == std::string::npos) {
        return ::testing::AssertionFailure() << "message \"" << msg << "\" does not contain \"" << n << "\"";
      }
    }
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw something other than fuseops::Error: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}


/// The message of the Error(device_value) that check_errors(device) raises, or "" (with a failure) if none.
std::string take_device_error(int device = -1);

// The argument is named in the "<op>: <arg>: " prefix of the message.
#define EXPECT_ARG_ERROR(statement, op, arg, ...)                                                              \
  EXPECT_TRUE(::fuseops_test::raises([&] { statement; }, fuseops::ErrorKind::invalid_argument,             \
                     std::vector<std::string>{std::string(op) + ": " + (arg) + ": ", ##__VA_ARGS__}))

/// The malformed views of the layout tests, as a caller could write the public fields: `t` with a rank its arrays
/// cannot hold (how 0: 9, how 1: -1) or with dim `dim` negative (how 2: -4); kMalformedWays of them.
constexpr int kMalformedWays = 3;
inline TensorView malformed(TensorView t, int how, int dim) {
  if (how < 2) t.rank = how == 0 ? 9 : -1;
  else t.shape[dim] = -4;
  return t;
}
/// A part of the message that check_layout() gives for malformed(t, how, dim).
inline std::string malformed_message(int how) { return how == 0 ? "got 9" : how == 1 ? "got -1" : "non-negative dims"; }

/// Bit-identical tensors (shape, dtype and bytes; two empty tensors are equal); on failure, how many elements differ
/// and the first.
::testing::AssertionResult same_bytes(const HostTensor& a, const HostTensor& b);

}  // namespace fuseops_test
