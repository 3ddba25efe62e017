// The files a command reads and writes, checked before anything is written: an output must not be an input
// (`chart --from b.json --svg b.json` replaced the results with the chart) nor another output (`--svg x --html x`).
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fuseops::cli {

/// A file named on the command line: the option and the path as given ("" = not given, skipped).
struct FileArg {
  std::string option;
  std::string path;
};

/// Whether two paths name one file: the same file where both exist (symbolic and hard links included), else the same
/// absolute path once normalised (".", "..", and the links of the part that exists resolved).
bool same_file(const std::string& a, const std::string& b);

/// Throws Error (invalid_argument) naming both options when an output is the same file as an input or as an
/// earlier output.
void check_distinct_files(const std::vector<FileArg>& inputs, const std::vector<FileArg>& outputs);

/// The contents of the input file `path`, named by `option` in messages, read in pieces up to 16 MiB: a larger file,
/// /dev/zero or a runaway pipe is an Error (invalid_argument) that ends with `why_small` ("a case file is a short
/// list"), not an endless read or an allocation that fails; a file that cannot be opened is an Error too.
std::string read_input_file(const char* option, const std::string& path, const std::string& why_small);

/// Line and column of byte `at` of an input text, counted from 0 (lines end at LF), as yaml-cpp marks them.
struct TextPlace {
  int line = 0, column = 0;
};
TextPlace place_in_text(const std::string& text, std::size_t at);
/// "path:line:col" of place `p` (counted from 1), the path escaped (escaped_text): where a message puts a fault of an
/// input file (the case files' errors, chart's --from).
std::string place_text(const std::string& path, TextPlace p);

/// Throws Error (invalid_argument) where `text`, the contents of an input text file, has a NUL byte: `where` (given
/// the first one's place) followed by "the file contains a NUL byte: expected a <kind> text file". A text file has
/// none, and the readers would not say so: yaml-cpp reads one as "unknown escape character", nlohmann::json as the end
/// of the input (what followed was silently ignored). The one check of the case files and of chart's --from.
void check_no_nul_byte(const std::string& text, const std::string& kind,
                       const std::function<std::string(TextPlace)>& where);

/// Fails early (before anything runs) if an output path given on the command line (`given`; "" is then an error)
/// cannot be written: throws Error (invalid_argument) naming `option` and the system's reason. A file this made to find
/// out is removed again, so that a run failing later (no case matched, a bad case file) leaves no empty file; a named
/// pipe is not opened to try it.
void check_writable(const char* option, const std::string& path, bool given);

/// An output file that could not be written in full after the run (disk full, file size limit, I/O error): main
/// reports it and exits 1, since the run itself happened (2 is for usage errors, where nothing ran).
class WriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Writes `text` to `path`, whole or not at all: a regular file (new or not; through symbolic links, their target)
/// through a temporary file in its directory, renamed over it at the end (an earlier file is then kept as it was where
/// the write fails, and its mode is kept); a device or a pipe, or a file where no temporary file can be made beside it
/// (a directory that is not writable), in place. Throws WriteError naming `option`, the path and the system's reason
/// where it cannot be written in full.
void write_text_file(const std::string& option, const std::string& path, const std::string& text);

/// Runs every write of `writes` (each calls write_text_file), also after one fails, then throws one WriteError naming
/// every output that failed: one full disk does not silently skip the outputs after it.
void write_outputs(const std::vector<std::function<void()>>& writes);

/// Flushes the standard output and throws WriteError where any of it could not be written (`fuseops list >
/// /dev/full`).
void flush_stdout();

}  // namespace fuseops::cli
