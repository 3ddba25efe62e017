// fuseops public API: errors.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace fuseops {

/// What kind of failure an Error reports. Bindings map `invalid_argument` and `device_value` to Python's
/// ValueError and the others to RuntimeError.
enum class ErrorKind : int {
  invalid_argument = 0,  ///< a host-checkable argument is wrong (rank, shape, dtype, device, alias, value)
  device_value = 1,      ///< a value that lives on the device was out of range (reported by check_errors())
  unsupported = 2,       ///< a valid request this build or machine cannot serve (no GPU, arch not built)
  device_failure = 3,    ///< a CUDA call failed
};

/// The one exception type of the library. The message names the argument, what was expected and what was
/// given, e.g. "silu_and_mul: input: expected an even last dim 2*d >= 2, got 7 in [4, 7]".
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

/// A text argument as fuseops messages quote it: in double quotes, with quotes and backslashes escaped, a newline as
/// \n and other control bytes and bytes past ASCII as \xNN, so that a message is one printable line whatever the
/// caller passed (a NUL would cut it short where it is printed as a C string). Inline: the bindings use it as well,
/// compiled with their own C++ ABI.
inline std::string quoted_text(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c >= 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

/// Raises a bad device-resident value that an op recorded (a malformed cu_seqlens, an out-of-range
/// ssm_state_indices / num_accepted_tokens / topk_ids / positions / masked_m value, ...) as an Error of kind
/// `device_value` naming the op, the argument and an index, then clears the record. A record keeps the first (op,
/// argument) recorded since the last check and, of that pair, the smallest bad index over every call since then (one
/// call's first bad index when only one call recorded): to tie an index to its call, check after each call. Ops never
/// raise these themselves (unless FUSEOPS_DEBUG is on, see debug_mode()): they return normally, having skipped or
/// clamped the bad entries as their docs say (e.g. leaving the affected output rows unwritten), so the caller must
/// call check_errors() to learn about them. This holds for every backend, in every build:
///  - CPU tensors: the CPU backend records the value in a host-side record while the op runs; check_errors() raises
///    it first (whatever `device` is), with "(first bad index recorded on cpu)". Also in a build without CUDA.
///  - CUDA tensors: the kernels record on the device without synchronising; check_errors() synchronises with
///    `device` (or every device that has run an op, when `device` < 0) and raises the record. In a build without
///    CUDA there are no CUDA records.
/// Never called by ops themselves, so ops stay free of host synchronisation and capturable in CUDA graphs; the CPU
/// backend behaves the same way so that code written against one backend checks errors correctly on the other.
/// The records are per process (one for the CPU backend, one per CUDA device), not per thread or stream: when several
/// threads run ops at once, one thread's check_errors() raises and clears whatever any of them recorded first, so such
/// callers serialise their op-and-check sequences (or check from one thread) to attribute an error to its call.
/// `device` below -1: Error(invalid_argument) naming it. A device that has run no op (or is not there) has no record.
void check_errors(int device = -1);

/// Clears any recorded device error without raising it (the CPU record, and `device`'s or, for -1, every device's).
/// `device` below -1: Error(invalid_argument).
void clear_errors(int device = -1);

/// True when the environment variable FUSEOPS_DEBUG is set to a non-zero value (not empty or blank, not a decimal zero
/// such as 0, 00, +0 or 0.0, not false / off / no in any case; read once per process): every op then synchronises
/// its stream after launch and calls check_errors(), so a bad device value or a kernel fault surfaces at the
/// op that caused it.
bool debug_mode();

}  // namespace fuseops
