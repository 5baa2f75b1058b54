// Reading and writing `.pcx` files: a fixed header written by hand (magic, format version,
// byte-order marker, payload length, SHA-256 of the payload) around a Boost.Serialization
// binary archive of the Artifact. README.md in this folder gives the layout byte by byte.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "compiler/artifact/Artifact.h"
#include "compiler/artifact/Sha256.h"
#include "ir/support/Error.h"

namespace precast::artifact {

inline constexpr std::array<char, 8> kMagic = {'P', 'R', 'E', 'C', 'A', 'S', 'T', '\0'};
// Bump when the payload's field list or meaning changes; readers accept only their own.
// 2: Step::collective (typed collective steps). 3: Step::op and Step::scope (profiles).
// 4: Artifact::entry_points (eval_step, sample_step).
inline constexpr uint32_t kFormatVersion = 4;
// Written in the writer's native order; a reader on the other byte order sees 0x04030201.
inline constexpr uint32_t kByteOrderMarker = 0x01020304;

// Byte offsets of the header fields; the payload starts at kHeaderBytes.
inline constexpr size_t kMagicOffset = 0;
inline constexpr size_t kFormatVersionOffset = 8;
inline constexpr size_t kByteOrderOffset = 12;
inline constexpr size_t kPayloadBytesOffset = 16;
inline constexpr size_t kChecksumOffset = 24;
inline constexpr size_t kHeaderBytes = 56;

// The header fields a valid file carries (the magic and marker are the constants above).
struct FileHeader {
  uint32_t format_version = kFormatVersion;
  uint64_t payload_bytes = 0;
  Sha256Digest payload_sha256{};
};

// A whole artifact file: what `precast inspect` shows and the runtime loads.
struct ArtifactFile {
  FileHeader header;
  uint64_t file_bytes = 0;
  Artifact artifact;
};

// What read_header_only returns: enough to decide compatibility without decoding the rest.
struct ArtifactHead {
  FileHeader header;
  uint64_t file_bytes = 0;
  std::string compiler_version;
  CompatibilityKey key;
};

// The complete file contents (header + payload). Fails with kInternal if the artifact breaks
// a schema rule (find_schema_violation): that is a compiler bug, not a user error.
Expected<std::string> encode_artifact(const Artifact& artifact);

// Checks magic, byte order, version, length and checksum, in that order, before any Boost
// code sees the payload; then decodes it. `file_name` only labels messages. Every failure is
// kIncompatible with a message naming the file, the problem and what to do.
Expected<ArtifactFile> decode_artifact(std::string_view file_bytes, const std::string& file_name);

// Writes to a temporary file in the target's directory, fsyncs it, renames it over `path`
// and fsyncs the directory, so readers see the old file or the new one, never a partial one.
// On failure the temporary is removed and the error is kFailure (kInternal for a schema
// violation, kUsage for a path without a file name).
Status write_artifact(const Artifact& artifact, const std::filesystem::path& path);

// Reads and decodes a file. A missing or unreadable path is kUsage; everything wrong with the
// contents is kIncompatible (see decode_artifact).
Expected<ArtifactFile> read_artifact_file(const std::filesystem::path& path);
Expected<Artifact> read_artifact(const std::filesystem::path& path);

// Verifies the header and the checksum (streaming the payload, without holding it) and decodes
// only the compiler version and the compatibility key, which the payload stores first.
Expected<ArtifactHead> read_header_only(const std::filesystem::path& path);

}  // namespace precast::artifact
