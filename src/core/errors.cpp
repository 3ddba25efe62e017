// Error records, check_errors(), debug mode, version.
#include <climits>
#include <cctype>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <utility>

#include "core/dispatch.h"
#include "core/index_check.h"
#include "core/validate.h"
#include "cuda/device_error.h"
#include "fuseops/error.h"
#include "fuseops/version.h"

#ifndef FUSEOPS_VERSION_STRING
#define FUSEOPS_VERSION_STRING "0.0.0"
#endif

namespace fuseops {

const char* version() { return FUSEOPS_VERSION_STRING; }

#if !defined(FUSEOPS_WITH_CUDA)
bool built_with_cuda() { return false; }
int cuda_device_count() { return 0; }
#endif

namespace detail {
bool debug_value_on(const char* value) {
  std::string v(value);
  const auto first = v.find_first_not_of(" \t\n\r\f\v");
  if (first == std::string::npos) return false;  // empty or blank
  v = v.substr(first, v.find_last_not_of(" \t\n\r\f\v") - first + 1);
  std::string lower(v);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "false" || lower == "off" || lower == "no") return false;
  // a decimal zero ("0", "00", "+0", "-0", "0.0", ".0", "0e5") is off; any other text or number is on. Checked by
  // hand: strtod would follow the host's LC_NUMERIC and underflow 1e-400 to 0.
  const std::size_t sign = (v[0] == '+' || v[0] == '-') ? 1 : 0, e = v.find_first_of("eE");
  const std::string mantissa = v.substr(sign, e == std::string::npos ? std::string::npos : e - sign);
  const bool zero = mantissa.find('0') != std::string::npos && mantissa.find_first_not_of("0.") == std::string::npos &&
                    mantissa.find('.') == mantissa.rfind('.');
  if (!zero || e == std::string::npos) return !zero;
  const std::size_t digits = e + 1 + ((e + 1 < v.size() && (v[e + 1] == '+' || v[e + 1] == '-')) ? 1 : 0);
  return digits == v.size() || v.find_first_not_of("0123456789", digits) != std::string::npos;  // [+-] digits
}
}  // namespace detail

bool debug_mode() {
  static const bool on = [] {
    const char* v = std::getenv("FUSEOPS_DEBUG");
    return v != nullptr && detail::debug_value_on(v);
  }();
  return on;
}

namespace detail {
namespace {
std::mutex g_sites_mutex;
struct Site {
  std::string op, arg, rule;
};
std::deque<Site> g_sites;  // index + 1 = site id; deque keeps c_str() stable
std::mutex g_host_mutex;
DeviceErrorRecord g_host_record{0u, 0u, ULLONG_MAX};
}  // namespace

uint32_t error_site(const char* op, const char* arg, const char* rule) {
  std::lock_guard<std::mutex> lock(g_sites_mutex);
  for (std::size_t i = 0; i < g_sites.size(); ++i) {
    if (g_sites[i].op == op && g_sites[i].arg == arg && g_sites[i].rule == (rule ? rule : "")) {
      return static_cast<uint32_t>(i + 1);
    }
  }
  g_sites.push_back(Site{op, arg, rule ? rule : ""});
  return static_cast<uint32_t>(g_sites.size());
}

const char* error_site_op(uint32_t site) {
  std::lock_guard<std::mutex> lock(g_sites_mutex);
  return site >= 1 && site <= g_sites.size() ? g_sites[site - 1].op.c_str() : "unknown op";
}

const char* error_site_arg(uint32_t site) {
  std::lock_guard<std::mutex> lock(g_sites_mutex);
  return site >= 1 && site <= g_sites.size() ? g_sites[site - 1].arg.c_str() : "unknown argument";
}

std::string error_site_message(uint32_t site, unsigned long long index) {
  std::string rule;
  {
    std::lock_guard<std::mutex> lock(g_sites_mutex);
    if (site >= 1 && site <= g_sites.size()) rule = g_sites[site - 1].rule;
  }
  return std::string(error_site_op(site)) + ": " + error_site_arg(site) + ": value out of range at index " +
         std::to_string(index) + (rule.empty() ? "" : " (" + rule + ")");
}

DeviceErrorRecord* host_error_record() { return &g_host_record; }

void record_host_error(uint32_t site, int64_t index) {
  std::lock_guard<std::mutex> lock(g_host_mutex);
  if (g_host_record.site == 0u) g_host_record.site = site;
  if (g_host_record.site == site && static_cast<unsigned long long>(index) < g_host_record.index) {
    g_host_record.index = static_cast<unsigned long long>(index);
  }
}

void raise_recorded_in_debug(bool recorded) {
  if (recorded && debug_mode()) check_errors(-1);
}

namespace {
DeviceErrorRecord take_host_record() {
  std::lock_guard<std::mutex> lock(g_host_mutex);
  DeviceErrorRecord r = g_host_record;
  g_host_record = DeviceErrorRecord{0u, 0u, ULLONG_MAX};
  return r;
}
}  // namespace

void check_index_range(const char* op, const char* arg, TensorView values, int64_t bound, Stream stream) {
  check_dtype(op, arg, values, {DType::i32, DType::i64});
  const Device device = common_device(op, {{arg, &values}});
  if (values.rank != 1) fail_argument(op, arg, "rank 1 [N]", values.shape_str());
  const uint32_t site = error_site(op, arg);
  if (values.numel() == 0) return;
  if (backend_for(op, device) == Backend::cuda) {
#if defined(FUSEOPS_WITH_CUDA)
    cuda::check_index_range(site, values, bound, device.index, stream.handle);
#else
    (void)stream;
#endif
    return;
  }
  for (int64_t i = 0; i < values.shape[0]; ++i) {
    const int64_t off = i * values.strides[0];
    const int64_t v = values.dtype == DType::i32 ? static_cast<const int32_t*>(values.data)[off]
                                                 : static_cast<const int64_t*>(values.data)[off];
    if (v < 0 || v >= bound) record_host_error(site, i);
  }
  raise_recorded_in_debug(true);
}

}  // namespace detail

namespace {
void check_device_argument(const char* op, int device) {
  if (device < -1) {
    detail::fail_argument(op, "device", "-1 (every device that ran an op) or a CUDA device ordinal >= 0",
                          std::to_string(device));
  }
}
}  // namespace

void check_errors(int device) {
  check_device_argument("check_errors", device);
  const detail::DeviceErrorRecord host = detail::take_host_record();
  if (host.site != 0u) {
    throw Error(ErrorKind::device_value,
                detail::error_site_message(host.site, host.index) + " (first bad index recorded on cpu)");
  }
#if defined(FUSEOPS_WITH_CUDA)
  detail::cuda_check_errors(device);
#else
  (void)device;
#endif
}

void clear_errors(int device) {
  check_device_argument("clear_errors", device);
  (void)detail::take_host_record();
#if defined(FUSEOPS_WITH_CUDA)
  detail::cuda_clear_errors(device);
#else
  (void)device;
#endif
}

}  // namespace fuseops
