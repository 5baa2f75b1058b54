// Progress of long work (compilation by stage, LLVM kernels counted) on standard error: on an
// interactive terminal one line rewritten in place, at most every 100 ms, cleared at the end; on
// anything else (CI, a file) one plain line per stage and nothing per item.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace precast {

class Progress {
 public:
  explicit Progress(std::string_view command)
      : command_(command), terminal_(isatty(STDERR_FILENO) == 1) {}
  ~Progress() { finish(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `done` of `total` items of `stage` (total 0: a stage without items); an empty stage: the
  // work is over (finish()).
  void report(std::string_view stage, int64_t done, int64_t total) {
    if (stage.empty()) {
      finish();
      stage_.clear();
      return;
    }
    bool new_stage = stage != stage_;
    if (new_stage) {
      stage_ = stage;
      stage_start_ = std::chrono::steady_clock::now();
    }
    if (!terminal_) {
      if (new_stage) {
        std::fprintf(stderr, "%s: %s\n", command_.c_str(),
                     total > 0 ? fmt::format("{} ({})", stage_, total).c_str() : stage_.c_str());
      }
      return;
    }
    auto now = std::chrono::steady_clock::now();
    if (!new_stage && done != total && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    std::string line = total > 0 ? fmt::format("{}: {} {}/{}", command_, stage_, done, total)
                                 : fmt::format("{}: {}...", command_, stage_);
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
    drawn_ = true;
  }

  // Clears the terminal line (nothing to do otherwise).
  void finish() {
    if (terminal_ && drawn_) {
      std::fprintf(stderr, "\r\033[K");
      std::fflush(stderr);
    }
    drawn_ = false;
  }

 private:
  std::string command_;
  bool terminal_;
  bool drawn_ = false;
  std::string stage_;
  std::chrono::steady_clock::time_point stage_start_, last_draw_;
};

}  // namespace precast
