#include "tools/precast/MpiTrainLaunch.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <thread>

namespace precast {
namespace {

namespace fs = std::filesystem;

// "--mca btl tcp,self --host 'a b'": split on spaces, single or double quotes keep spaces.
Expected<std::vector<std::string>> split_arguments(const std::string& text) {
  std::vector<std::string> out;
  std::string current;
  bool any = false;
  char quote = 0;
  for (char c : text) {
    if (quote != 0) {
      if (c == quote) {
        quote = 0;
      } else {
        current += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      any = true;
    } else if (c == ' ' || c == '\t') {
      if (any || !current.empty()) out.push_back(current);
      current.clear();
      any = false;
    } else {
      current += c;
    }
  }
  if (quote != 0) {
    return usage_error(fmt::format(
        "--mpirun-args=\"{}\": a {} quote is not closed; quote each argument that holds spaces",
        text, quote == '\'' ? "single" : "double"));
  }
  if (any || !current.empty()) out.push_back(current);
  return out;
}

}  // namespace

MpirunHost this_mpirun_host() {
  auto is_one = [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && std::strcmp(value, "1") == 0;
  };
  MpirunHost host;
  host.root = geteuid() == 0;
  host.root_allowed_by_env =
      is_one("OMPI_ALLOW_RUN_AS_ROOT") && is_one("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM");
  host.cores = std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
  return host;
}

std::vector<std::string> mpirun_host_flags(const MpirunHost& host, int64_t ranks,
                                           const std::vector<std::string>& user_args) {
  auto given = [&](const std::string& flag) {
    return std::find(user_args.begin(), user_args.end(), flag) != user_args.end();
  };
  std::vector<std::string> flags;
  if (host.root && !host.root_allowed_by_env && !given("--allow-run-as-root")) {
    flags.push_back("--allow-run-as-root");
  }
  if (ranks > host.cores && !given("--oversubscribe")) flags.push_back("--oversubscribe");
  return flags;
}

std::string find_precast_run(const std::string& fallback) {
  if (const char* given = std::getenv("PRECAST_RUN"); given != nullptr && *given != '\0') {
    return given;
  }
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path beside = self.parent_path() / "precast-run";
    if (fs::exists(beside, ec)) return beside.string();
  }
  return fallback;
}

std::vector<std::string> mpirun_command(const MpiTrainLaunch& launch) {
  std::vector<std::string> argv{launch.mpirun};
  Expected<std::vector<std::string>> extra = split_arguments(launch.mpirun_args);
  std::vector<std::string> user_args = extra.ok() ? *extra : std::vector<std::string>{};
  std::vector<std::string> flags = mpirun_host_flags(launch.host, launch.ranks, user_args);
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), user_args.begin(), user_args.end());
  argv.insert(argv.end(), {"-np", std::to_string(launch.ranks), launch.precast_run,
                           launch.config_file, "compiled_trainstep_file=" + launch.artifact});
  argv.insert(argv.end(), launch.overrides.begin(), launch.overrides.end());
  argv.push_back("--gemm=" + launch.gemm);
  return argv;
}

Expected<int> run_mpirun(const MpiTrainLaunch& launch, std::ostream& log) {
  Expected<std::vector<std::string>> split = split_arguments(launch.mpirun_args);
  if (!split.ok()) return split.error();
  std::vector<std::string> argv = mpirun_command(launch);
  log << fmt::format("Launching {} ranks: {}\n", launch.ranks, fmt::join(argv, " ")) << std::flush;
  std::vector<char*> pointers;
  for (std::string& a : argv) pointers.push_back(a.data());
  pointers.push_back(nullptr);
  pid_t child = fork();
  if (child < 0) {
    return Error(ExitCode::kFailure,
                 fmt::format("cannot start {}: {}", launch.mpirun, std::strerror(errno)));
  }
  if (child == 0) {
    execvp(pointers[0], pointers.data());
    // Only reached when mpirun could not be started.
    std::string message = fmt::format(
        "precast: error: cannot run {}: {}; install Debian's openmpi-bin or set PRECAST_MPIRUN "
        "to mpirun's path\n",
        launch.mpirun, std::strerror(errno));
    ssize_t ignored = write(STDERR_FILENO, message.data(), message.size());
    (void)ignored;
    _exit(static_cast<int>(ExitCode::kUsage));
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) {
      return Error(ExitCode::kFailure,
                   fmt::format("waiting for {}: {}", launch.mpirun, std::strerror(errno)));
    }
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

}  // namespace precast
