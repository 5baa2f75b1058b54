// The `.pcx` framing and its Boost.Serialization payload. The header is checked completely
// (magic, byte order, version, length, checksum) before Boost reads a byte of the payload, so a
// damaged or foreign file is reported precisely instead of surfacing as an archive exception.
#include "compiler/artifact/ArtifactIo.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <boost/archive/binary_iarchive.hpp>
#include <boost/archive/binary_oarchive.hpp>
#include <boost/serialization/level.hpp>
#include <boost/serialization/string.hpp>
#include <boost/serialization/tracking.hpp>
#include <boost/serialization/vector.hpp>

// ---------------------------------------------------------------------------------------------
// Boost.Serialization of the schema. Found by argument-dependent lookup, so these templates
// live in the schema's namespace. Our own header carries the format version, so the structs are
// serialized as bare member lists (no per-class version or tracking records, see the macros
// below): the payload is then a plain sequence of fields that README.md can describe.

namespace precast::artifact {

// Reads or writes each field in order (Boost's `archive & field`, folded).
template <class Archive, class... Fields>
void serialize_in_order(Archive& archive, Fields&... field) {
  (archive & ... & field);
}

template <class Archive>
void serialize(Archive& archive, MeshAxis& axis, unsigned /*version*/) {
  serialize_in_order(archive, axis.name, axis.size);
}

template <class Archive>
void serialize(Archive& archive, CompatibilityKey& key, unsigned /*version*/) {
  serialize_in_order(archive, key.target_triple, key.cpu_features, key.topology_name, key.mesh,
                     key.num_devices, key.ir_hash);
}

template <class Archive>
void serialize(Archive& archive, TensorSignature& tensor, unsigned /*version*/) {
  serialize_in_order(archive, tensor.name, tensor.shape, tensor.dtype, tensor.sharding,
                     tensor.aliased_input, tensor.role, tensor.init, tensor.same_as_output);
}

template <class Archive>
void serialize(Archive& archive, Signature& signature, unsigned /*version*/) {
  serialize_in_order(archive, signature.inputs, signature.outputs);
}

template <class Archive>
void serialize(Archive& archive, PlannedBuffer& buffer, unsigned /*version*/) {
  serialize_in_order(archive, buffer.value_name, buffer.offset, buffer.bytes, buffer.live_start,
                     buffer.live_end, buffer.category);
}

template <class Archive>
void serialize(Archive& archive, BufferPlan& plan, unsigned /*version*/) {
  serialize_in_order(archive, plan.arena_bytes, plan.alignment, plan.buffers, plan.argument_bytes,
                     plan.output_bytes, plan.alias_bytes, plan.temp_bytes);
}

template <class Archive>
void serialize(Archive& archive, BufferRef& ref, unsigned /*version*/) {
  serialize_in_order(archive, ref.space, ref.index_or_offset, ref.bytes);
}

template <class Archive>
void serialize(Archive& archive, Collective& collective, unsigned /*version*/) {
  serialize_in_order(archive, collective.kind, collective.reduction, collective.mesh_axes,
                     collective.replica_groups, collective.shift, collective.dimensions,
                     collective.dtype, collective.bytes);
}

template <class Archive>
void serialize(Archive& archive, Step& step, unsigned /*version*/) {
  serialize_in_order(archive, step.kind, step.symbol, step.buffers, step.int_params,
                     step.float_params, step.collective, step.op, step.scope);
}

template <class Archive>
void serialize(Archive& archive, ConfigEntry& entry, unsigned /*version*/) {
  serialize_in_order(archive, entry.key, entry.value, entry.phase);
}

template <class Archive>
void serialize(Archive& archive, EntryPoint& entry, unsigned /*version*/) {
  serialize_in_order(archive, entry.name, entry.signature, entry.plan, entry.program,
                     entry.object_code, entry.ir_text);
}

}  // namespace precast::artifact

#define PRECAST_ARTIFACT_PLAIN_SERIALIZATION(T)                                               \
  BOOST_CLASS_IMPLEMENTATION(precast::artifact::T, boost::serialization::object_serializable) \
  BOOST_CLASS_TRACKING(precast::artifact::T, boost::serialization::track_never)

PRECAST_ARTIFACT_PLAIN_SERIALIZATION(MeshAxis)
PRECAST_ARTIFACT_PLAIN_SERIALIZATION(CompatibilityKey)
PRECAST_ARTIFACT_PLAIN_SERIALIZATION(TensorSignature)
PRECAST_ARTIFACT_PLAIN_SERIALIZATION(Signature)
PRECAST_ARTIFACT_PLAIN_SERIALIZATION(PlannedBuffer)
PRECAST_ARTIFACT_PLAIN_SERIALIZATION(BufferPlan)
PRECAST_ARTIFACT_PLAIN_SERIALIZATION(BufferRef)
PRECAST_ARTIFACT_PLAIN_SERIALIZATION(Collective)
PRECAST_ARTIFACT_PLAIN_SERIALIZATION(Step)
PRECAST_ARTIFACT_PLAIN_SERIALIZATION(ConfigEntry)
PRECAST_ARTIFACT_PLAIN_SERIALIZATION(EntryPoint)

#undef PRECAST_ARTIFACT_PLAIN_SERIALIZATION

namespace precast::artifact {
namespace {

constexpr std::string_view kDamagedAdvice = "the file is damaged; recompile with `precast compile`";

Error incompatible(std::string message) {
  return Error(ExitCode::kIncompatible, std::move(message));
}

// ---------------------------------------------------------------------------------------------
// Payload fields. The compiler version and the key come first so read_header_only can stop
// after them. `ArtifactRef` is Artifact (reading) or const Artifact (writing).

template <class Archive, class ArtifactRef>
void serialize_head_fields(Archive& archive, ArtifactRef& artifact) {
  serialize_in_order(archive, artifact.compiler_version, artifact.key);
}

template <class Archive, class ArtifactRef>
void serialize_all_fields(Archive& archive, ArtifactRef& artifact) {
  serialize_head_fields(archive, artifact);
  serialize_in_order(archive, artifact.signature, artifact.plan, artifact.program,
                     artifact.object_code, artifact.ir_text, artifact.report_text, artifact.config,
                     artifact.setup_text, artifact.model_tflops_per_device,
                     artifact.tokens_per_device, artifact.entry_points);
}

// A read-only std::streambuf over bytes we already hold, so Boost decodes without a copy
// (std::ispanstream is C++23). The get area is never written through.
class ByteViewBuffer : public std::streambuf {
 public:
  explicit ByteViewBuffer(std::string_view bytes) {
    char* begin = const_cast<char*>(bytes.data());
    setg(begin, begin, begin + bytes.size());
  }
  size_t unread() const { return static_cast<size_t>(egptr() - gptr()); }
};

std::string encode_payload(const Artifact& artifact) {
  std::ostringstream out(std::ios::binary);
  {
    boost::archive::binary_oarchive archive(out);
    serialize_all_fields(archive, artifact);
  }  // the archive flushes on destruction
  return std::move(out).str();
}

// Boost reports a foreign or skewed payload by throwing; callers get an Error instead. Only a
// payload whose checksum matched gets here, i.e. one some writer produced deliberately; a
// crafted file is out of scope because loading an artifact runs its object code anyway.
template <class Decode>
Status decode_with_boost(std::streambuf& buffer, const std::string& file_name, Decode decode) {
  try {
    boost::archive::binary_iarchive archive(buffer);
    decode(archive);
  } catch (const std::exception& e) {
    return incompatible(fmt::format(
        "{}: the payload passed its checksum but could not be decoded ({}); it was written by an "
        "incompatible Precast or Boost build; recompile with this build's `precast compile`",
        file_name, e.what()));
  } catch (...) {
    return incompatible(fmt::format(
        "{}: the payload passed its checksum but could not be decoded; recompile with this "
        "build's `precast compile`",
        file_name));
  }
  return Status::success();
}

Expected<Artifact> decode_payload(std::string_view payload, const std::string& file_name) {
  Artifact artifact;
  ByteViewBuffer buffer(payload);
  PRECAST_RETURN_IF_ERROR(decode_with_boost(
      buffer, file_name, [&](auto& archive) { serialize_all_fields(archive, artifact); }));
  if (buffer.unread() != 0) {
    return incompatible(fmt::format("{}: {} bytes of the payload follow its last field; {}",
                                    file_name, buffer.unread(), kDamagedAdvice));
  }
  if (std::optional<std::string> violation = find_schema_violation(artifact)) {
    return incompatible(fmt::format("{}: {}; {}", file_name, *violation, kDamagedAdvice));
  }
  return artifact;
}

// ---------------------------------------------------------------------------------------------
// The fixed header. Integers are native-endian; the byte-order marker tells readers which.

template <typename Int>
void store(std::string& bytes, size_t offset, Int value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(value));
}

template <typename Int>
Int load(std::string_view bytes, size_t offset) {
  Int value;
  std::memcpy(&value, bytes.data() + offset, sizeof(value));
  return value;
}

std::string encode_header(uint64_t payload_bytes, const Sha256Digest& digest) {
  std::string header(kHeaderBytes, '\0');
  std::memcpy(header.data() + kMagicOffset, kMagic.data(), kMagic.size());
  store(header, kFormatVersionOffset, kFormatVersion);
  store(header, kByteOrderOffset, kByteOrderMarker);
  store(header, kPayloadBytesOffset, payload_bytes);
  std::memcpy(header.data() + kChecksumOffset, digest.data(), digest.size());
  return header;
}

// "7f 45 4c 46 (\x7fELF)": hex plus a printable rendering, so a user recognises the format.
std::string describe_bytes(std::string_view bytes) {
  std::string hex, text;
  for (char c : bytes) {
    auto byte = static_cast<unsigned char>(c);
    hex += fmt::format("{}{:02x}", hex.empty() ? "" : " ", byte);
    text += (byte >= 0x20 && byte < 0x7f) ? fmt::format("{}", c) : fmt::format("\\x{:02x}", byte);
  }
  return fmt::format("{} (\"{}\")", hex, text);
}

Status check_magic(std::string_view head, const std::string& file_name) {
  if (head.empty()) {
    return incompatible(fmt::format(
        "{} is empty (0 bytes), not a Precast artifact; recompile with `precast compile`",
        file_name));
  }
  std::string_view expected(kMagic.data(), std::min(head.size(), kMagic.size()));
  std::string_view found = head.substr(0, expected.size());
  if (found == expected) return Status::success();
  return incompatible(fmt::format(
      "{} is not a Precast artifact: it starts with {}, an artifact starts with {}; pass a .pcx "
      "file written by `precast compile`",
      file_name, describe_bytes(found),
      describe_bytes(std::string_view(kMagic.data(), kMagic.size()))));
}

Status check_header_fields(std::string_view head, const std::string& file_name) {
  auto marker = load<uint32_t>(head, kByteOrderOffset);
  if (marker != kByteOrderMarker) {
    return incompatible(fmt::format(
        "{}: byte-order mismatch: the marker reads 0x{:08x}, this machine expects 0x{:08x}; the "
        "file was written on a machine with a different byte order (or is damaged); recompile "
        "with `precast compile` for this machine",
        file_name, marker, kByteOrderMarker));
  }
  auto version = load<uint32_t>(head, kFormatVersionOffset);
  if (version != kFormatVersion) {
    return incompatible(fmt::format(
        "{}: unsupported format version {} ({} than this build's); this build reads version {}; "
        "recompile with this build's `precast compile`",
        file_name, version, version < kFormatVersion ? "older" : "newer", kFormatVersion));
  }
  return Status::success();
}

Status check_length(uint64_t payload_bytes, uint64_t file_bytes, const std::string& file_name) {
  uint64_t found = file_bytes - kHeaderBytes;
  if (found < payload_bytes) {
    return incompatible(
        fmt::format("{} is truncated: expected {} bytes of payload at offset {}, found {}; {}",
                    file_name, payload_bytes, kHeaderBytes, found, kDamagedAdvice));
  }
  if (found > payload_bytes) {
    return incompatible(fmt::format(
        "{} has {} unexpected bytes after its {}-byte payload (file is {} bytes, expected {}); {}",
        file_name, found - payload_bytes, payload_bytes, file_bytes, kHeaderBytes + payload_bytes,
        kDamagedAdvice));
  }
  return Status::success();
}

// Everything but the checksum: `head` is the file's first bytes (all of them if the file is
// shorter than the header), `file_bytes` its full size.
Expected<FileHeader> parse_header(std::string_view head, uint64_t file_bytes,
                                  const std::string& file_name) {
  PRECAST_RETURN_IF_ERROR(check_magic(head, file_name));
  if (head.size() < kHeaderBytes) {
    return incompatible(
        fmt::format("{} is truncated: the fixed header needs {} bytes, the file has {}; {}",
                    file_name, kHeaderBytes, head.size(), kDamagedAdvice));
  }
  PRECAST_RETURN_IF_ERROR(check_header_fields(head, file_name));
  FileHeader header;
  header.format_version = load<uint32_t>(head, kFormatVersionOffset);
  header.payload_bytes = load<uint64_t>(head, kPayloadBytesOffset);
  std::memcpy(header.payload_sha256.data(), head.data() + kChecksumOffset,
              header.payload_sha256.size());
  PRECAST_RETURN_IF_ERROR(check_length(header.payload_bytes, file_bytes, file_name));
  return header;
}

Status check_checksum(const FileHeader& header, const Sha256Digest& computed,
                      const std::string& file_name) {
  if (computed == header.payload_sha256) return Status::success();
  return incompatible(fmt::format(
      "{}: checksum mismatch: the header stores SHA-256 {}, the payload hashes to {}; {}",
      file_name, to_hex(header.payload_sha256), to_hex(computed), kDamagedAdvice));
}

// ---------------------------------------------------------------------------------------------
// Files.

Error open_error(const std::filesystem::path& path, std::string_view reason) {
  return usage_error(fmt::format(
      "cannot read artifact {}: {}; check the path, or create the file with `precast compile`",
      path.string(), reason));
}

Status check_readable_file(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) return open_error(path, "no such file");
  if (!std::filesystem::is_regular_file(status)) return open_error(path, "not a regular file");
  return Status::success();
}

Expected<std::ifstream> open_for_reading(const std::filesystem::path& path) {
  PRECAST_RETURN_IF_ERROR(check_readable_file(path));
  std::ifstream in(path, std::ios::binary);
  if (!in) return open_error(path, std::strerror(errno));
  return in;
}

uint64_t stream_size(std::ifstream& in) {
  in.seekg(0, std::ios::end);
  auto size = static_cast<uint64_t>(in.tellg());
  in.seekg(0, std::ios::beg);
  return size;
}

Expected<std::string> read_bytes(std::ifstream& in, uint64_t count,
                                 const std::filesystem::path& path) {
  std::string bytes(count, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(count));
  if (static_cast<uint64_t>(in.gcount()) != count) {
    return Error(ExitCode::kFailure,
                 fmt::format("cannot read artifact {}: read {} of {} bytes (did the file change "
                             "while it was read?)",
                             path.string(), in.gcount(), count));
  }
  return bytes;
}

// Hashes `count` bytes from the stream's current position in fixed chunks.
Expected<Sha256Digest> hash_stream(std::ifstream& in, uint64_t count,
                                   const std::filesystem::path& path) {
  constexpr uint64_t kChunkBytes = uint64_t{1} << 20;
  Sha256 hasher;
  std::vector<char> chunk(kChunkBytes);
  while (count > 0) {
    uint64_t take = std::min(count, kChunkBytes);
    in.read(chunk.data(), static_cast<std::streamsize>(take));
    if (static_cast<uint64_t>(in.gcount()) != take) {
      return Error(ExitCode::kFailure,
                   fmt::format("cannot read artifact {}: it ended early (did the file change "
                               "while it was read?)",
                               path.string()));
    }
    hasher.update(chunk.data(), take);
    count -= take;
  }
  return hasher.finish();
}

// Removes the temporary file unless the write was committed, whatever path leaves the writer.
class TemporaryFile {
 public:
  TemporaryFile(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  ~TemporaryFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }

  int fd() const { return fd_; }
  const std::filesystem::path& path() const { return path_; }
  // Closes the descriptor, reporting the error close() can return on some file systems.
  bool close() {
    int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0;
  }
  void commit() { committed_ = true; }

 private:
  int fd_;
  std::filesystem::path path_;
  bool committed_ = false;
};

Error write_error(const std::filesystem::path& target, std::string_view step, int error_number) {
  return Error(ExitCode::kFailure,
               fmt::format("cannot write artifact {}: {} failed: {}; check that the directory "
                           "exists, is writable and has free space",
                           target.string(), step, std::strerror(error_number)));
}

// A fresh name beside the target: hidden, with the process id and a counter, so concurrent
// writers (threads or processes) never share a temporary.
Expected<std::unique_ptr<TemporaryFile>> create_temporary(const std::filesystem::path& directory,
                                                          const std::filesystem::path& target) {
  static std::atomic<uint64_t> counter{0};
  constexpr int kAttempts = 100;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    std::filesystem::path path =
        directory /
        fmt::format(".{}.tmp.{}.{}", target.filename().string(), ::getpid(), counter.fetch_add(1));
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return std::make_unique<TemporaryFile>(fd, path);
    if (errno != EEXIST) return write_error(target, "creating a temporary file", errno);
  }
  return write_error(target, "creating a temporary file", EEXIST);
}

Status write_all(int fd, std::string_view bytes, const std::filesystem::path& target) {
  while (!bytes.empty()) {
    ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) return write_error(target, "writing", errno);
    bytes.remove_prefix(static_cast<size_t>(written));
  }
  return Status::success();
}

// Makes the rename itself durable. File systems that cannot sync a directory say EINVAL.
Status sync_directory(const std::filesystem::path& directory, const std::filesystem::path& target) {
  int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return write_error(target, "opening its directory to sync it", errno);
  int result = ::fsync(fd);
  int error_number = errno;
  ::close(fd);
  if (result != 0 && error_number != EINVAL) {
    return write_error(target,
                       "syncing its directory (the file is complete but may not "
                       "survive a power loss)",
                       error_number);
  }
  return Status::success();
}

Status rename_over(const TemporaryFile& temp, const std::filesystem::path& target) {
  if (::rename(temp.path().c_str(), target.c_str()) == 0) return Status::success();
  if (errno == EISDIR || errno == ENOTEMPTY || errno == EEXIST) {
    return Error(ExitCode::kFailure,
                 fmt::format("cannot write artifact {}: it is a directory; give a file path such "
                             "as {}",
                             target.string(), (target / "step.pcx").string()));
  }
  return write_error(target, "renaming the temporary file over it", errno);
}

Status write_file_atomically(const std::filesystem::path& target, std::string_view bytes) {
  if (!target.has_filename()) {
    return usage_error(
        fmt::format("cannot write artifact '{}': the path names no file; give a "
                    "path such as out/step.pcx",
                    target.string()));
  }
  std::filesystem::path directory = target.has_parent_path() ? target.parent_path() : ".";
  PRECAST_ASSIGN_OR_RETURN(std::unique_ptr<TemporaryFile> temp,
                           create_temporary(directory, target));
  PRECAST_RETURN_IF_ERROR(write_all(temp->fd(), bytes, target));
  if (::fsync(temp->fd()) != 0) return write_error(target, "syncing", errno);
  if (!temp->close()) return write_error(target, "closing", errno);
  PRECAST_RETURN_IF_ERROR(rename_over(*temp, target));
  temp->commit();
  return sync_directory(directory, target);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public entry points.

Expected<std::string> encode_artifact(const Artifact& artifact) {
  if (std::optional<std::string> violation = find_schema_violation(artifact)) {
    return internal_error("refusing to write an invalid artifact: " + *violation);
  }
  std::string payload;
  try {
    payload = encode_payload(artifact);
  } catch (const std::exception& e) {
    return internal_error(fmt::format("serializing the artifact failed: {}", e.what()));
  }
  return encode_header(payload.size(), sha256(payload)) + payload;
}

Expected<ArtifactFile> decode_artifact(std::string_view file_bytes, const std::string& file_name) {
  std::string_view head = file_bytes.substr(0, kHeaderBytes);
  PRECAST_ASSIGN_OR_RETURN(FileHeader header, parse_header(head, file_bytes.size(), file_name));
  std::string_view payload = file_bytes.substr(kHeaderBytes);
  PRECAST_RETURN_IF_ERROR(check_checksum(header, sha256(payload), file_name));
  PRECAST_ASSIGN_OR_RETURN(Artifact artifact, decode_payload(payload, file_name));
  return ArtifactFile{header, file_bytes.size(), std::move(artifact)};
}

Status write_artifact(const Artifact& artifact, const std::filesystem::path& path) {
  PRECAST_ASSIGN_OR_RETURN(std::string bytes, encode_artifact(artifact));
  return write_file_atomically(path, bytes);
}

Expected<ArtifactFile> read_artifact_file(const std::filesystem::path& path) {
  PRECAST_ASSIGN_OR_RETURN(std::ifstream in, open_for_reading(path));
  PRECAST_ASSIGN_OR_RETURN(std::string bytes, read_bytes(in, stream_size(in), path));
  return decode_artifact(bytes, path.string());
}

Expected<Artifact> read_artifact(const std::filesystem::path& path) {
  PRECAST_ASSIGN_OR_RETURN(ArtifactFile file, read_artifact_file(path));
  return std::move(file.artifact);
}

Expected<ArtifactHead> read_header_only(const std::filesystem::path& path) {
  PRECAST_ASSIGN_OR_RETURN(std::ifstream in, open_for_reading(path));
  uint64_t file_bytes = stream_size(in);
  PRECAST_ASSIGN_OR_RETURN(std::string head,
                           read_bytes(in, std::min<uint64_t>(file_bytes, kHeaderBytes), path));
  const std::string file_name = path.string();
  PRECAST_ASSIGN_OR_RETURN(FileHeader header, parse_header(head, file_bytes, file_name));
  PRECAST_ASSIGN_OR_RETURN(Sha256Digest computed, hash_stream(in, header.payload_bytes, path));
  PRECAST_RETURN_IF_ERROR(check_checksum(header, computed, file_name));

  // Boost reads only as far as the head fields, straight from the file.
  in.seekg(static_cast<std::streamoff>(kHeaderBytes));
  ArtifactHead result{header, file_bytes, {}, {}};
  PRECAST_RETURN_IF_ERROR(decode_with_boost(*in.rdbuf(), file_name, [&](auto& archive) {
    Artifact head_fields;
    serialize_head_fields(archive, head_fields);
    result.compiler_version = std::move(head_fields.compiler_version);
    result.key = std::move(head_fields.key);
  }));
  return result;
}

}  // namespace precast::artifact
