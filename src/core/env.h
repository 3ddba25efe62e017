// The environment's switches and measurement knobs (README, "The switches below").
#pragma once

#include <cstdint>

namespace fuseops::detail {

/// Reads `text` as a decimal count into `value`: digits only, leading zeros decimal ("010" is 10). False, `value`
/// untouched, for an empty text, any other character (a sign, a space, "0x10", "1e3") or a value above 2^64 - 1.
bool parse_decimal(const char* text, uint64_t* value);

/// Whether the environment sets variable `name` to exactly "0" (the switches FUSEOPS_PDL, FUSEOPS_ROPE_DECODE,
/// FUSEOPS_MOE_ALIGN_SMALL, ...; callers read it once and cache the answer).
bool env_switched_off(const char* name);

/// The count that environment variable `name` holds (the measurement knobs FUSEOPS_MOE_ALIGN_WIDE,
/// FUSEOPS_MOE_ALIGN_SMALL_BLOCKS, FUSEOPS_MOE_ROUTE_WIDE_OWN): -1 when it is unset or empty, else its value, read as
/// decimal digits only (leading zeros are decimal). Throws Error(invalid_argument) naming the variable when the value
/// has any other character (a sign, a space, "64abc", "0x10") or is greater than `most` (>= 0).
int64_t env_count(const char* name, int64_t most);

}  // namespace fuseops::detail
