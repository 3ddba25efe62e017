// torch kernel of the gated norm: convert, guard, current stream, call (include/fuseops/norm.h).
#include "fuseops/norm.h"

#include "ops.h"
#include "torch_utils.h"

namespace fuseops::torch_binding {

void layer_norm_fwd(at::Tensor& out, const c10::optional<at::Tensor>& mean, const c10::optional<at::Tensor>& rstd,
                    const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                    const c10::optional<at::Tensor>& z, double eps, int64_t group_size, bool norm_before_gate,
                    bool is_rms_norm) {
  constexpr const char* op = "layer_norm_fwd";
  Written written;
  const TensorView xv = to_view(op, "x", x);
  const TensorView wv = to_view(op, "weight", weight);
  const OptionalView bv(op, "bias", bias), zv(op, "z", z);
  const auto mv = written.add(op, "mean", mean), rv = written.add(op, "rstd", rstd);
  const TensorView o = written.add(op, "out", out);
  run_on_device_of(out, written, [&](Stream s) {
    fuseops::layer_norm_fwd(o, mv.get(), rv.get(), xv, wv, bv.get(), zv.get(), eps, group_size, norm_before_gate,
                            is_rms_norm, s);
  });
}

}  // namespace fuseops::torch_binding
