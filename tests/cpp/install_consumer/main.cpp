// Uses only the installed public headers: silu_and_mul on CPU tensors, one value checked, and an error caught.
#include <fuseops/fuseops.h>

#include <cmath>
#include <cstdio>

int main() {
  using fuseops::DType;
  using fuseops::Device;
  using fuseops::TensorView;
  float input[2][4] = {{1.0f, -2.0f, 3.0f, 0.5f}, {0.0f, 4.0f, -1.0f, 2.0f}};  // [2, 2d], d = 2
  float out[2][2] = {};
  fuseops::silu_and_mul(TensorView(out, DType::f32, Device::cpu(), {2, 2}),
                        TensorView(input, DType::f32, Device::cpu(), {2, 4}));
  const double expected = 1.0 / (1.0 + std::exp(-1.0)) * 3.0;  // silu(1) * 3
  if (!(std::fabs(out[0][0] - expected) <= 1e-6 * expected)) {  // NaN fails too
    std::printf("FAIL: silu_and_mul gave %.9g, expected %.9g\n", out[0][0], expected);
    return 1;
  }
  try {
    fuseops::silu_and_mul(TensorView(out, DType::f32, Device::cpu(), {2, 2}),
                          TensorView(input, DType::f32, Device::cpu(), {2, 3}));
    std::printf("FAIL: an odd last dim did not raise\n");
    return 1;
  } catch (const fuseops::Error& e) {
    if (e.kind() != fuseops::ErrorKind::invalid_argument) return 1;
  }
  std::printf("fuseops %s (CUDA build: %s): silu_and_mul ok, %.7f\n", fuseops::version(),
              fuseops::built_with_cuda() ? "yes" : "no", out[0][0]);
  return 0;
}
