// The environment's switches and measurement knobs.
#include "core/env.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "fuseops/error.h"

namespace fuseops::detail {

bool env_switched_off(const char* name) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, "0") == 0;
}

bool parse_decimal(const char* text, uint64_t* value) {
  if (*text == '\0') return false;
  uint64_t n = 0;
  for (const char* c = text; *c != '\0'; ++c) {
    const auto d = static_cast<uint64_t>(*c - '0');
    if (*c < '0' || *c > '9' || n > (UINT64_MAX - d) / 10) return false;
    n = 10 * n + d;
  }
  *value = n;
  return true;
}

int64_t env_count(const char* name, int64_t most) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return -1;
  uint64_t n = 0;
  if (!parse_decimal(v, &n) || n > static_cast<uint64_t>(most)) {
    throw Error(ErrorKind::invalid_argument, std::string(name) + ": expected a decimal count from 0 to " +
                                                 std::to_string(most) + ", got \"" + v + "\"");
  }
  return static_cast<int64_t>(n);
}

}  // namespace fuseops::detail
