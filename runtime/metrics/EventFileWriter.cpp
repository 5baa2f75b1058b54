#include "runtime/metrics/EventFileWriter.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "runtime/metrics/Crc32c.h"
#include "tensorboard_event.pb.h"  // generated from runtime/metrics/tensorboard_event.proto

namespace precast::runtime {
namespace {

namespace fs = std::filesystem;

void append_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

double unix_time_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string EventFileWriter::frame_record(const std::string& data) {
  std::string record;
  record.reserve(data.size() + 16);
  append_le(record, data.size(), 8);
  append_le(record, masked_crc32c(record.data(), 8), 4);
  record += data;
  append_le(record, masked_crc32c(data.data(), data.size()), 4);
  return record;
}

Expected<std::unique_ptr<EventFileWriter>> EventFileWriter::create(const std::string& directory) {
  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec) {
    return Error(ExitCode::kFailure,
                 fmt::format("tensorboard_dir={}: cannot create it: {}; choose another "
                             "base_output_directory or set enable_tensorboard=false",
                             directory, ec.message()));
  }
  auto seconds = static_cast<int64_t>(unix_time_seconds());
  fs::path path =
      fs::path(directory) / fmt::format("events.out.tfevents.{}.{}", seconds, host_name());
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  // Another writer this second (another run in the same folder, or this process again): as
  // TensorFlow does, the process id and a counter make the name unique.
  const fs::path first = path;
  for (int n = 1; fd < 0 && errno == EEXIST && n <= 1000; ++n) {
    path = first;
    path += fmt::format(".{}.{}", getpid(), n);
    fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  }
  if (fd < 0) {
    return Error(ExitCode::kFailure,
                 fmt::format("tensorboard_dir={}: cannot create {}: {}; choose another "
                             "base_output_directory or set enable_tensorboard=false",
                             directory, path.string(), std::strerror(errno)));
  }
  std::unique_ptr<EventFileWriter> writer(new EventFileWriter(path.string(), fd));
  tensorboard::Event event;
  event.set_wall_time(unix_time_seconds());
  event.set_step(0);
  event.set_file_version("brain.Event:2");
  PRECAST_RETURN_IF_ERROR(writer->write_record(event.SerializeAsString()));
  return writer;
}

EventFileWriter::~EventFileWriter() {
  if (fd_ >= 0) {
    fsync(fd_);
    close(fd_);
  }
}

Status EventFileWriter::write_scalars(int64_t step, double wall_time, const Scalars& scalars) {
  tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  return write_record(event.SerializeAsString());
}

Status EventFileWriter::write_record(const std::string& data) {
  std::string record = frame_record(data);
  size_t done = 0;
  while (done < record.size()) {
    ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Error(ExitCode::kFailure,
                   fmt::format("{}: write failed: {}", path_, std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  return Status::success();
}

}  // namespace precast::runtime
