// The one place where the torch binding converts arguments: at::Tensor -> fuseops::TensorView, the device guard,
// the current CUDA stream, and fuseops::Error -> the Python exception (the only place that knows both torch and fuseops).
#pragma once

#include <torch/all.h>

#include <array>
#include <cstddef>

#include "fuseops/fuseops.h"

#ifdef FUSEOPS_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace fuseops::torch_binding {

/// "torch.float64": how a Python user spells the dtypes that errors name.
inline const char* torch_dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "torch.float32";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kDouble: return "torch.float64";
    case at::kShort: return "torch.int16";
    case at::kChar: return "torch.int8";
    case at::kByte: return "torch.uint8";
    case at::kBool: return "torch.bool";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    default: return c10::toString(t);
  }
}

/// float32 / float16 / bfloat16 / int32 / int64; any other dtype is a ValueError naming the op and the argument.
/// Which of these an op accepts is the library's check (it names the argument too).
inline DType to_dtype(const char* op, const char* arg, at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DType::f32;
    case at::kHalf: return DType::f16;
    case at::kBFloat16: return DType::bf16;
    case at::kInt: return DType::i32;
    case at::kLong: return DType::i64;
    default: break;
  }
  TORCH_CHECK_VALUE(false, op, ": ", arg, ": unsupported dtype ", torch_dtype_name(t),
                    " (fuseops ops take float32, float16 or bfloat16 values and int32 or int64 indices)");
  return DType::f32;  // unreachable
}

/// cpu, or cuda:index; any other device type is a ValueError.
inline Device to_device(const char* op, const char* arg, const at::Tensor& t) {
  if (t.is_cpu()) return Device::cpu();
  if (t.is_cuda()) return Device::cuda(static_cast<int32_t>(t.get_device()));
  TORCH_CHECK_VALUE(false, op, ": ", arg, ": expected a cpu or cuda tensor, got a tensor on ", t.device());
  return Device::cpu();  // unreachable
}

/// A view of `t`: data pointer (storage offset included), dtype, device, sizes and strides in elements, rank <= 8.
/// A dual tensor of forward-mode AD (torch.autograd.forward_ad.make_dual) is a NotImplementedError: the ops compute no
/// tangent, and their outputs would carry none (or a stale one, for a written tensor) without a word.
inline TensorView to_view(const char* op, const char* arg, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.defined(), op, ": ", arg, ": expected a tensor, got an undefined tensor");
  TORCH_CHECK_NOT_IMPLEMENTED(!t._fw_grad(/*level=*/0).defined(), op, ": ", arg,
                              ": a dual tensor of forward-mode AD; fuseops computes no tangent (pass the primal, "
                              "torch.autograd.forward_ad.unpack_dual(t).primal, and compute the tangent otherwise)");
  TORCH_CHECK_VALUE(t.dim() <= TensorView::kMaxRank, op, ": ", arg, ": expected rank <= ", TensorView::kMaxRank,
                    ", got rank ", t.dim(), " ", t.sizes());
  const DType dtype = to_dtype(op, arg, t.scalar_type());
  const Device device = to_device(op, arg, t);
  return TensorView::from_arrays(t.data_ptr(), dtype, device, static_cast<int32_t>(t.dim()), t.sizes().data(),
                                 t.strides().data());
}

/// An optional tensor argument as an optional view (nullptr when absent or undefined); written ones come from
/// Written::add.
struct OptionalView {
  TensorView view;
  bool present = false;
  OptionalView() = default;
  OptionalView(const char* op, const char* arg, const c10::optional<at::Tensor>& t) {
    if (t.has_value() && t->defined()) {
      view = to_view(op, arg, *t);
      present = true;
    }
  }
  const TensorView* get() const { return present ? &view : nullptr; }
  TensorView* get() { return present ? &view : nullptr; }
};

/// The tensors an op writes (its `Tensor!` / `Tensor(a!)` arguments), treated as torch treats the tensors its own
/// in-place ops write:
/// - an inference tensor (made under torch.inference_mode()) may be written only inside inference mode: outside it,
///   a RuntimeError naming the op and the argument, before anything runs;
/// - once the op has run (run_on_device_of), each written tensor's version counter is bumped, so autograd refuses a
///   backward through a graph that saved the tensor's old values ("modified by an inplace operation") instead of
///   computing a wrong gradient from the new ones. A call that throws bumps nothing.
class Written {
 public:
  /// `t`'s view (to_view), after the inference-tensor check; `t` is bumped after the op.
  TensorView add(const char* op, const char* arg, const at::Tensor& t) {
    const TensorView view = to_view(op, arg, t);  // (an undefined tensor is its error)
    TORCH_CHECK(!t.is_inference() || c10::InferenceMode::is_enabled(), op, ": ", arg,
                ": an in-place write to an inference tensor outside torch.inference_mode() is not allowed (torch's "
                "rule for in-place updates); call the op under torch.inference_mode(), or pass a clone");
    TORCH_INTERNAL_ASSERT(count_ < tensors_.size(), "fuseops binding: more written tensors than Written holds");
    tensors_[count_++] = t.unsafeGetTensorImpl();
    return view;
  }
  /// An optional written tensor (`Tensor(a!)?`).
  OptionalView add(const char* op, const char* arg, const c10::optional<at::Tensor>& t) {
    OptionalView o;
    if (t.has_value() && t->defined()) {
      o.view = add(op, arg, *t);
      o.present = true;
    }
    return o;
  }
  /// After the op has run. Inside inference mode an inference tensor has no counter (bump_version skips it).
  void bump() const {
    for (std::size_t i = 0; i < count_; ++i) tensors_[i]->bump_version();
  }

 private:
  std::array<c10::TensorImpl*, 6> tensors_{};  // the most an op writes: moe_route's five
  std::size_t count_ = 0;
};

/// Re-raises a library error as the Python exception the README names, with the same message: ValueError for a bad
/// argument or a bad device-resident value, RuntimeError for an unsupported request or a CUDA failure.
[[noreturn]] inline void rethrow(const Error& e) {
  switch (e.kind()) {
    case ErrorKind::invalid_argument:
    case ErrorKind::device_value: TORCH_CHECK_VALUE(false, e.what()); break;
    case ErrorKind::unsupported:
    case ErrorKind::device_failure: break;
  }
  TORCH_CHECK(false, e.what());
  throw;  // unreachable: TORCH_CHECK(false, ...) throws
}

/// Calls `fn(stream)` on the device of `t`: for a CUDA tensor under a device guard with torch's current stream on that
/// device (never the default stream unless it is the current one), for a CPU tensor with no stream. Library errors
/// become Python exceptions (rethrow); once `fn` has returned, the written tensors' version counters are bumped.
template <class Fn>
void run_on_device_of(const at::Tensor& t, const Written& written, Fn&& fn) {
  try {
#ifdef FUSEOPS_TORCH_CUDA
    if (t.is_cuda()) {
      const c10::cuda::OptionalCUDAGuard guard(t.device());
      fn(Stream(c10::cuda::getCurrentCUDAStream(t.get_device()).stream()));  // = at::cuda::getCurrentCUDAStream
    } else {
      fn(Stream{});
    }
#else
    (void)t;
    fn(Stream{});
#endif
  } catch (const Error& e) {
    rethrow(e);
  }
  written.bump();
}

/// Calls `fn()` and turns library errors into Python exceptions (for ops without tensors).
template <class Fn>
auto translate_errors(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    rethrow(e);
  }
}

}  // namespace fuseops::torch_binding
