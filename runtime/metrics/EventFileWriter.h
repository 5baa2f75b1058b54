// Role: a TensorBoard event file of scalars. Each record is TFRecord-framed (uint64 length,
// masked CRC-32C of the length, the bytes, masked CRC-32C of the bytes, little-endian) around a
// serialized Event (tensorboard_event.proto); the first record carries file_version
// "brain.Event:2", each later one a step's scalars as one Summary.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/support/Error.h"

namespace precast::runtime {

using Scalars = std::vector<std::pair<std::string, double>>;

class EventFileWriter {
 public:
  // Creates `directory` and, in it, events.out.tfevents.<unix seconds>.<host name> (with
  // .<pid>.<n> appended should that name exist), and writes the file_version record. Errors
  // (exit 1) name the file and the reason.
  static Expected<std::unique_ptr<EventFileWriter>> create(const std::string& directory);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // One Event: `scalars` as simple_value (float) summaries of `step`, stamped `wall_time` (unix
  // seconds). Each record goes out in one write, so a killed run leaves whole records.
  Status write_scalars(int64_t step, double wall_time, const Scalars& scalars);
  const std::string& path() const { return path_; }

  // The TFRecord framing of `data` (exposed for tests).
  static std::string frame_record(const std::string& data);

 private:
  EventFileWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  Status write_record(const std::string& data);
  std::string path_;
  int fd_ = -1;
};

// Seconds since the unix epoch, as TensorBoard's wall_time.
double unix_time_seconds();

}  // namespace precast::runtime
