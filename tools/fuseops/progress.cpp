#include "progress.h"

#include <unistd.h>

namespace fuseops::cli {

Progress::Progress(std::size_t total, bool enabled, std::FILE* out)
    : total_(total), enabled_(enabled), out_(out), start_(std::chrono::steady_clock::now()) {}

bool Progress::on_terminal(bool quiet) { return !quiet && isatty(fileno(stdout)) == 1; }

std::string Progress::line(std::size_t done, std::size_t total, double seconds, const std::string& label) {
  const long s = static_cast<long>(seconds);
  char buf[96];
  std::snprintf(buf, sizeof buf, "[%zu/%zu] %ld:%02ld elapsed", done, total, s / 60, s % 60);
  std::string out = buf;
  if (!label.empty()) out += "  " + label;
  if (out.size() > 100) out = out.substr(0, 97) + "...";  // one line on an ordinary terminal
  return out;
}

void Progress::show(std::size_t done, const std::string& label) {
  if (!enabled_) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(out_, "\r\033[K%s", line(done, total_, s, label).c_str());
  std::fflush(out_);
  shown_ = true;
}

void Progress::clear() {
  if (!enabled_ || !shown_) return;
  std::fprintf(out_, "\r\033[K");
  std::fflush(out_);
  shown_ = false;
}

}  // namespace fuseops::cli
