// Which compiled code the CUDA driver runs on a device, from the build's architecture list (host only, no CUDA).
// The device-side cluster and programmatic-dependent-launch helpers compile to no-ops below sm_90 (their
// #if __CUDA_ARCH__ >= 900 branches), so the host may use clusters and PDL only when the code that actually runs was
// compiled for sm_90 or newer, not merely when the device is: a build for "80;90a" runs its compute_80 PTX on an
// sm_100 device (sm_90a code runs on compute capability 9.0 only).
#pragma once

#include <string_view>

namespace fuseops::detail {

/// The architecture (e.g. 90 for sm_90a code) of the code the driver picks on a device of compute capability
/// `major`.`minor` from a build for `archs`, a list in CMake's CUDA_ARCHITECTURES form with ',' or ';' between the
/// entries ("90a", "80,90a", "86-real", "90-virtual"). The driver takes the best binary (SASS) it can run (sm_XY runs
/// on X.Y and later minors of major X; sm_XYa / sm_XYf only on X.Y / major X), else compiles the newest PTX it can
/// (compute_XY on X.Y and newer, compute_XYa on X.Y only). Returns 0 when nothing in the list runs there and -1 when
/// the list cannot be read (CMake's "native", "all", "all-major", or an empty list).
inline int cuda_code_arch(std::string_view archs, int major, int minor) {
  const int cc = 10 * major + minor;
  int best_sass = 0, best_ptx = 0;
  bool read_any = false;
  while (!archs.empty()) {
    const std::size_t cut = archs.find_first_of(",;");
    std::string_view entry = archs.substr(0, cut);
    archs = cut == std::string_view::npos ? std::string_view{} : archs.substr(cut + 1);
    if (entry.empty()) continue;
    bool sass = true, ptx = true;
    if (const std::size_t dash = entry.find('-'); dash != std::string_view::npos) {
      const std::string_view kind = entry.substr(dash + 1);
      entry = entry.substr(0, dash);
      if (kind == "real") ptx = false;
      else if (kind == "virtual") sass = false;
      else return -1;
    }
    int arch = 0;
    std::size_t i = 0;
    for (; i < entry.size() && entry[i] >= '0' && entry[i] <= '9'; ++i) arch = 10 * arch + (entry[i] - '0');
    const std::string_view suffix = entry.substr(i);
    if (i == 0 || arch < 10 || (suffix != "" && suffix != "a" && suffix != "f")) return -1;
    read_any = true;
    const bool same_major = arch / 10 == major;
    const bool sass_runs = suffix == "a" ? arch == cc : same_major && arch % 10 <= minor;
    const bool ptx_runs = suffix == "a" ? arch == cc : suffix == "f" ? same_major && arch <= cc : arch <= cc;
    if (sass && sass_runs && arch > best_sass) best_sass = arch;
    if (ptx && ptx_runs && arch > best_ptx) best_ptx = arch;
  }
  if (!read_any) return -1;
  return best_sass > 0 ? best_sass : best_ptx;
}

/// Whether the code the driver picks on a device of compute capability `major`.`minor` from a build for `archs` is
/// sm_90a code (SASS or PTX), the only target with the wgmma instructions: the device is 9.0 and the list's best
/// code there is a "90a" entry. Conservative where the pick is not documented: false when the list also has plain
/// sm_90 code of the same kind (SASS or PTX) or cannot be read.
inline bool cuda_code_is_sm90a(std::string_view archs, int major, int minor) {
  if (major != 9 || minor != 0 || cuda_code_arch(archs, major, minor) != 90) return false;
  bool sass_a = false, sass_plain = false, ptx_a = false, ptx_plain = false;
  while (!archs.empty()) {
    const std::size_t cut = archs.find_first_of(",;");
    std::string_view entry = archs.substr(0, cut);
    archs = cut == std::string_view::npos ? std::string_view{} : archs.substr(cut + 1);
    bool sass = true, ptx = true;
    if (const std::size_t dash = entry.find('-'); dash != std::string_view::npos) {
      sass = entry.substr(dash + 1) == "real";
      ptx = !sass;
      entry = entry.substr(0, dash);
    }
    if (entry == "90a") {
      sass_a = sass_a || sass;
      ptx_a = ptx_a || ptx;
    } else if (entry == "90" || entry == "90f") {
      sass_plain = sass_plain || sass;
      ptx_plain = ptx_plain || ptx;
    }
  }
  // cuda_code_arch gave 90: the driver runs SASS for 9.0 where the list has some, else compiles PTX
  return (sass_a || sass_plain) ? sass_a && !sass_plain : ptx_a && !ptx_plain;
}

}  // namespace fuseops::detail
