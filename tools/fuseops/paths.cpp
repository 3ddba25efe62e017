#include "paths.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "fuseops/error.h"

namespace fuseops::cli {

namespace {

/// One step along a chain of symbolic links: where `p` is a link (whose target can be read), `p` becomes its target
/// (relative to the link's directory) and the answer is true; else `p` stays and the answer is false.
bool follow_link(std::filesystem::path& p) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(p, ec))) return false;
  const fs::path target = fs::read_symlink(p, ec);
  if (ec) return false;
  p = target.is_absolute() ? target : p.parent_path() / target;
  return true;
}

constexpr int kMaxLinks = 40;  ///< links followed at most (a loop ends there, as the kernel's ELOOP)

/// The normalised absolute path that writing to `path` reaches: symbolic links followed, also one whose target does
/// not exist yet (writing through it creates the target), then the existing part canonicalised.
std::filesystem::path written_path(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  for (int hop = 0; hop < kMaxLinks && follow_link(p); ++hop) {
  }
  return std::filesystem::weakly_canonical(p, ec);
}

/// Where `path` names an open file descriptor (a name in /proc/<pid>/fd or /proc/<pid>/task/<tid>/fd, its
/// directory's symbolic links resolved: /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N, a link to one of these
/// or to such a directory): its number for one of this process's descriptors, -1 for another process's; -2 for any
/// other path. Such a path is written through the descriptor, not by opening the file its link shows: a rename over
/// that file, or an open that truncates it, would lose what the descriptor's owner (a shell's `2>> log`) wrote and
/// writes.
int open_descriptor(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto digits = [](const std::string& t) {
    return !t.empty() && t.size() <= 9 && t.find_first_not_of("0123456789") == std::string::npos;
  };
  auto descriptor = [&](const fs::path& name) {
    const std::string file = name.filename().string();
    if (!digits(file)) return -2;
    std::error_code dec;
    const fs::path dir = fs::canonical(name.parent_path(), dec);  // /proc/self -> /proc/<pid>, /dev/fd -> ...
    if (dec) return -2;
    std::vector<std::string> parts;
    for (const fs::path& part : dir.relative_path()) parts.push_back(part.string());
    const bool fd_dir = (parts.size() == 3 || (parts.size() == 5 && parts[2] == "task" && digits(parts[3]))) &&
                        parts[0] == "proc" && digits(parts[1]) && parts.back() == "fd";
    if (!fd_dir) return -2;
    return parts[1] == std::to_string(::getpid()) ? std::stoi(file) : -1;
  };
  fs::path p = fs::absolute(path, ec);
  for (int hop = 0; hop <= kMaxLinks; ++hop) {
    const int fd = descriptor(p);
    if (fd != -2 || !follow_link(p)) return fd;
  }
  return -2;
}

/// An output that is the standard output's file, pipe or terminal (the tables go there: they would interleave), or
/// the standard error's file or pipe by another name than a descriptor's (--json err.log 2>> err.log: renamed over,
/// the log would lose its lines and the later messages; /dev/stderr is written through the descriptor) is an error.
/// A device such as /dev/null may be both.
void check_not_a_stream(const FileArg& out) {
  struct stat of {};
  if (::stat(out.path.c_str(), &of) != 0) return;  // not there yet: neither stream's file
  auto is_stream_file = [&of](int stream, struct stat& ss) {
    return ::fstat(stream, &ss) == 0 && (S_ISREG(ss.st_mode) || S_ISFIFO(ss.st_mode)) && ss.st_dev == of.st_dev &&
           ss.st_ino == of.st_ino;
  };
  struct stat so {};
  const bool same_file_or_pipe = is_stream_file(STDOUT_FILENO, so);
  // stdout's terminal: by its device number, or /dev/tty, the controlling terminal
  const bool tty = S_ISCHR(so.st_mode) && S_ISCHR(of.st_mode) && ::isatty(STDOUT_FILENO) == 1;
  const bool same_terminal = tty && (so.st_rdev == of.st_rdev || written_path(out.path) == "/dev/tty");
  if (same_file_or_pipe || same_terminal) {
    throw Error(ErrorKind::invalid_argument,
                out.option + ": " + escaped_text(out.path) + " is " +
                    (same_terminal ? "the terminal of the standard output" : "the standard output") +
                    ", which the tables are printed to; give another path");
  }
  struct stat se {};
  if (is_stream_file(STDERR_FILENO, se) && open_descriptor(out.path) < 0) {
    throw Error(ErrorKind::invalid_argument, out.option + ": " + escaped_text(out.path) +
                                                 " is the standard error's file, which messages are written to; "
                                                 "name it /dev/stderr to write through the descriptor, or give "
                                                 "another path");
  }
}

/// Ignores SIGPIPE while an output is written, so that a pipe whose reader has gone is a failed write of that
/// output (exit 1, the other outputs still written), not the end of the run (the standard output keeps SIGPIPE).
class PipeSignalIgnored {
 public:
  PipeSignalIgnored() : old_(std::signal(SIGPIPE, SIG_IGN)) {}
  ~PipeSignalIgnored() { std::signal(SIGPIPE, old_); }
  PipeSignalIgnored(const PipeSignalIgnored&) = delete;
  PipeSignalIgnored& operator=(const PipeSignalIgnored&) = delete;

 private:
  void (*old_)(int);
};

}  // namespace

bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  const fs::path pa = written_path(a), pb = written_path(b);
  return !pa.empty() && pa == pb;  // empty: unresolvable (a link loop, no access): left to the write to report
}

void check_distinct_files(const std::vector<FileArg>& inputs, const std::vector<FileArg>& outputs) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const FileArg& out = outputs[i];
    if (out.path.empty()) continue;
    auto clash = [&](const FileArg& other, const char* what) {
      if (other.path.empty() || !same_file(out.path, other.path)) return;
      throw Error(ErrorKind::invalid_argument, out.option + ": " + escaped_text(out.path) + " is the same file as the " + what + " " +
                                                   other.option + " " + escaped_text(other.path) + "; give another path");
    };
    for (const FileArg& in : inputs) clash(in, "input");
    check_not_a_stream(out);
    for (std::size_t j = 0; j < i; ++j) clash(outputs[j], "output");
  }
}

void check_writable(const char* option, const std::string& path, bool given) {
  if (!given) return;
  if (path.empty()) throw Error(ErrorKind::invalid_argument, std::string(option) + ": expected a file path, got \"\"");
  // "-" is not the standard output: fuseops writes each of its outputs to a file (and its tables to stdout)
  if (path == "-") {
    throw Error(ErrorKind::invalid_argument,
                std::string(option) + ": expected a file path, got \"-\" (this output is written to a file, not to "
                                      "the standard output; ./- is a file named -)");
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  // a name of one of this process's descriptors: its access mode, not an open of the file its link shows (which
  // the descriptor's permissions need not allow, and which a socket refuses)
  const int descriptor = open_descriptor(path);
  if (descriptor >= 0) {
    const int flags = ::fcntl(descriptor, F_GETFL);
    if (flags < 0) {
      throw Error(ErrorKind::invalid_argument,
                  std::string(option) + ": cannot write " + escaped_text(path) + " (" + std::strerror(errno) + ")");
    }
    if ((flags & O_ACCMODE) == O_RDONLY) {
      throw Error(ErrorKind::invalid_argument, std::string(option) + ": cannot write " + escaped_text(path) + ": descriptor " +
                                                   std::to_string(descriptor) + " is open for reading only");
    }
    return;
  }
  // a named pipe is not opened to try it: that would block without a reader, or give the reader its end of file
  if (fs::is_fifo(path, ec)) return;
  const bool existed = fs::exists(path, ec);  // the file written to (through a symbolic link: its target)
  {
    errno = 0;
    std::ofstream f(path, std::ios::app);
    if (!f) {
      throw Error(ErrorKind::invalid_argument, std::string(option) + ": cannot write " + escaped_text(path) +
                                                   (errno ? std::string(" (") + std::strerror(errno) + ")" : ""));
    }
  }
  if (!existed) {  // remove what was made: the link's target, never the link itself
    const fs::path made = fs::is_symlink(fs::symlink_status(path, ec)) ? fs::canonical(path, ec) : fs::path(path);
    if (!ec) fs::remove(made, ec);
  }
}

namespace {

// The temporary file being written, for the signal handler below (a run stopped by Ctrl-C during a write leaves none).
char g_temporary[4096] = {0};

extern "C" void remove_temporary_and_reraise(int sig) {
  if (g_temporary[0] != 0) ::unlink(g_temporary);  // async-signal-safe
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

void write_text_file(const std::string& option, const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  const PipeSignalIgnored pipe_signal_ignored;
  auto fail = [&](const std::string& what) {
    throw WriteError(option + ": cannot write " + escaped_text(path) + ": " + what +
                     (errno ? std::string(" (") + std::strerror(errno) + ")" : ""));
  };
  // Where to write: a regular file (new or not; through symbolic links, their target) through a temporary file in its
  // directory (a short name of its own, so that a long file name still has one), renamed over it once every byte is
  // written, so that a failed write leaves no partial file and keeps an earlier one whole; a device or a pipe
  // (/dev/null, a named pipe, /dev/stdout of a terminal) and a name of an open descriptor (/dev/stderr, /dev/fd/N:
  // their file stays the descriptor's) in place, as where no temporary file can be made (a directory that is not
  // writable), where a failed write removes the partial regular file (not a descriptor's).
  std::error_code ec;
  const fs::path target = written_path(path);
  const fs::file_status st = fs::status(target, ec);
  const bool existed = fs::exists(st);
  const int descriptor = open_descriptor(path);
  const bool regular = (!existed || fs::is_regular_file(st)) && descriptor == -2;
  std::string out = path;
  std::FILE* f = nullptr;
  using Handler = void (*)(int);
  Handler old_int = SIG_DFL, old_term = SIG_DFL;
  if (regular) {
    out = (target.parent_path() / (".fuseops-" + std::to_string(::getpid()) + ".tmp")).string();
    if (out.size() < sizeof g_temporary) {
      std::memcpy(g_temporary, out.c_str(), out.size() + 1);
      old_int = std::signal(SIGINT, remove_temporary_and_reraise);
      old_term = std::signal(SIGTERM, remove_temporary_and_reraise);
      f = std::fopen(out.c_str(), "wb");
    }
  }
  auto done_with_temporary = [&] {
    if (g_temporary[0] == 0) return;
    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
    g_temporary[0] = 0;
  };
  const bool in_place = f == nullptr;
  if (in_place) {
    done_with_temporary();
    out = path;
    errno = 0;
    if (descriptor >= 0) {  // at the descriptor's offset, its flags and file untouched (fdopen "w" does not truncate)
      const int copy = ::dup(descriptor);
      f = copy < 0 ? nullptr : ::fdopen(copy, "wb");
      if (f == nullptr && copy >= 0) ::close(copy);
    } else {
      f = std::fopen(out.c_str(), descriptor == -1 ? "ab" : "wb");  // another process's descriptor: appended to
    }
    if (f == nullptr) fail("cannot open it");
  }
  errno = 0;
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int saved = errno;
  const bool closed = std::fclose(f) == 0;  // the buffered bytes reach the file here
  int reason = written ? errno : saved;
  if (!in_place && existed) fs::permissions(out, st.permissions(), ec);  // the earlier file's mode (e.g. 0600)
  errno = 0;
  const bool renamed = written && closed && (in_place || std::rename(out.c_str(), target.c_str()) == 0);
  if (written && closed) reason = errno;  // the rename's
  if (!renamed && !in_place) fs::remove(out, ec);  // the temporary file
  done_with_temporary();
  if (renamed) return;
  errno = reason;
  if (in_place) {
    const bool removed = regular && fs::remove(target, ec);
    errno = reason;
    fail(removed ? "the file was incomplete and is removed" : "the file is incomplete");
  }
  fail(existed ? "nothing was written, the earlier file is kept" : "nothing was written");
}

void write_outputs(const std::vector<std::function<void()>>& writes) {
  std::string failed;
  for (const auto& write : writes) {
    try {
      write();
    } catch (const WriteError& e) {
      failed += (failed.empty() ? "" : "; ") + std::string(e.what());
    }
  }
  if (!failed.empty()) throw WriteError(failed);
}

std::string read_input_file(const char* option, const std::string& path, const std::string& why_small) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(ErrorKind::invalid_argument, std::string(option) + ": cannot read " + escaped_text(path));
  constexpr std::size_t kMaxInputBytes = std::size_t{16} << 20;
  std::string text;
  char piece[1 << 16];
  while (f.read(piece, sizeof piece) || f.gcount() > 0) {
    text.append(piece, static_cast<std::size_t>(f.gcount()));
    if (text.size() > kMaxInputBytes) {
      throw Error(ErrorKind::invalid_argument,
                  std::string(option) + ": " + escaped_text(path) + " is larger than 16 MiB; " + why_small);
    }
  }
  return text;
}

TextPlace place_in_text(const std::string& text, std::size_t at) {
  const std::size_t line_start = text.rfind('\n', at);
  TextPlace p;
  p.line = static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
  p.column = static_cast<int>(line_start == std::string::npos ? at : at - line_start - 1);
  return p;
}

std::string place_text(const std::string& path, TextPlace p) {
  return escaped_text(path) + ":" + std::to_string(p.line + 1) + ":" + std::to_string(p.column + 1);
}

void check_no_nul_byte(const std::string& text, const std::string& kind,
                       const std::function<std::string(TextPlace)>& where) {
  const std::size_t nul = text.find('\0');
  if (nul == std::string::npos) return;
  throw Error(ErrorKind::invalid_argument,
              where(place_in_text(text, nul)) + "the file contains a NUL byte: expected a " + kind + " text file");
}

void flush_stdout() {
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    throw WriteError(std::string("writing the standard output failed") +
                     (errno ? std::string(" (") + std::strerror(errno) + ")" : ""));
  }
}

}  // namespace fuseops::cli
