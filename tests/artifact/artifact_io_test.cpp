// The .pcx file: byte layout, round trips, every damaged-file message, and the atomic write.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "compiler/artifact/ArtifactIo.h"
#include "tests/artifact/ArtifactFixtures.h"

namespace precast::artifact {
namespace {

using fixtures::full_artifact;
using fixtures::read_bytes;
using fixtures::ScratchDirectory;
using fixtures::write_bytes;

std::string encoded(const Artifact& artifact) {
  Expected<std::string> bytes = encode_artifact(artifact);
  EXPECT_TRUE(bytes.ok()) << (bytes.ok() ? "" : bytes.error().message());
  return bytes.ok() ? *bytes : std::string();
}

template <typename Int>
Int field(const std::string& bytes, size_t offset) {
  Int value;
  std::memcpy(&value, bytes.data() + offset, sizeof(value));
  return value;
}

template <typename Int>
void set_field(std::string& bytes, size_t offset, Int value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(value));
}

// A well-formed header (correct length and checksum) around any payload: reaches the decoder.
std::string frame(const std::string& payload) {
  std::string file = encoded(Artifact{}).substr(0, kHeaderBytes);
  set_field<uint64_t>(file, kPayloadBytesOffset, payload.size());
  Sha256Digest digest = sha256(payload);
  std::memcpy(file.data() + kChecksumOffset, digest.data(), digest.size());
  return file + payload;
}

std::string step_path(const ScratchDirectory& dir) {
  return (dir.path() / "step.pcx").string();
}

// Writes `bytes` as a file and reads it back; the read must fail.
Error read_failure(const ScratchDirectory& dir, const std::string& bytes) {
  std::filesystem::path path = dir.path() / "step.pcx";
  write_bytes(path, bytes);
  Expected<Artifact> result = read_artifact(path);
  EXPECT_FALSE(result.ok());
  return result.ok() ? Error(ExitCode::kSuccess, "read succeeded") : result.error();
}

void expect_incompatible(const Error& error, const std::string& expected_message) {
  EXPECT_EQ(error.code(), ExitCode::kIncompatible) << error.message();
  EXPECT_EQ(error.exit_code(), 4);
  EXPECT_EQ(error.message(), expected_message);
}

// ----------------------------------------------------------------------------- layout, trips

TEST(ArtifactLayout, HeaderFieldsAtDocumentedOffsets) {
  std::string bytes = encoded(full_artifact());
  ASSERT_GT(bytes.size(), kHeaderBytes);
  EXPECT_EQ(bytes.substr(0, 8), std::string("PRECAST\0", 8));
  EXPECT_EQ(field<uint32_t>(bytes, 8), 4u);
  EXPECT_EQ(field<uint32_t>(bytes, 12), 0x01020304u);
  EXPECT_EQ(field<uint64_t>(bytes, 16), bytes.size() - 56);
  Sha256Digest digest = sha256(std::string_view(bytes).substr(56));
  EXPECT_EQ(bytes.substr(24, 32), std::string(digest.begin(), digest.end()));
}

TEST(ArtifactRoundTrip, InMemoryEveryFieldEqual) {
  const Artifact original = full_artifact();
  std::string bytes = encoded(original);
  Expected<ArtifactFile> decoded = decode_artifact(bytes, "step.pcx");
  ASSERT_TRUE(decoded.ok()) << decoded.error().message();
  EXPECT_EQ(decoded->artifact, original);
  EXPECT_EQ(decoded->file_bytes, bytes.size());
  EXPECT_EQ(decoded->header.format_version, kFormatVersion);
  EXPECT_EQ(decoded->header.payload_bytes, bytes.size() - kHeaderBytes);
  EXPECT_EQ(decoded->header.payload_sha256, sha256(std::string_view(bytes).substr(kHeaderBytes)));
}

// Field-by-field as well, so a failure names the field rather than "artifacts differ".
TEST(ArtifactRoundTrip, ThroughFileFieldByField) {
  ScratchDirectory dir("roundtrip");
  const Artifact original = full_artifact();
  std::filesystem::path path = dir.path() / "step.pcx";
  Status written = write_artifact(original, path);
  ASSERT_TRUE(written.ok()) << written.error().message();
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"step.pcx"});

  Expected<Artifact> read = read_artifact(path);
  ASSERT_TRUE(read.ok()) << read.error().message();
  const Artifact& a = *read;
  EXPECT_EQ(a.compiler_version, "0.1.0");
  EXPECT_EQ(a.key, original.key);
  EXPECT_EQ(a.key.mesh[1].name, "fsdp");
  EXPECT_EQ(a.signature.inputs, original.signature.inputs);
  EXPECT_EQ(a.signature.outputs, original.signature.outputs);
  EXPECT_EQ(a.signature.outputs[1].aliased_input, 1);
  EXPECT_EQ(a.signature.inputs[3].shape, std::vector<int64_t>{});
  EXPECT_EQ(a.plan, original.plan);
  ASSERT_EQ(a.program.size(), 5u);
  for (size_t i = 0; i < a.program.size(); ++i) EXPECT_EQ(a.program[i], original.program[i]) << i;
  EXPECT_EQ(a.program[4].float_params, (std::vector<double>{-1.5e-300, 3.25}));
  EXPECT_EQ(a.program[1].int_params, (std::vector<int64_t>{2048, 512, 128, 0, 1}));
  EXPECT_EQ(a.program[1].op, "dot_general");
  EXPECT_EQ(a.program[1].scope, "decoder/layers_0/mlp/wi");
  EXPECT_EQ(a.object_code, original.object_code);
  EXPECT_EQ(a.ir_text, original.ir_text);
  EXPECT_EQ(a.report_text, original.report_text);
  EXPECT_EQ(a.config, original.config);
  EXPECT_EQ(a.config[2].phase, ConfigPhase::kRun);
}

TEST(ArtifactRoundTrip, DefaultArtifact) {
  Expected<ArtifactFile> decoded = decode_artifact(encoded(Artifact{}), "empty.pcx");
  ASSERT_TRUE(decoded.ok()) << decoded.error().message();
  EXPECT_EQ(decoded->artifact, Artifact{});
}

TEST(ArtifactRoundTrip, EncodingIsDeterministic) {
  EXPECT_EQ(encoded(full_artifact()), encoded(full_artifact()));
}

TEST(ArtifactRoundTrip, OverwritesAnExistingFile) {
  ScratchDirectory dir("overwrite");
  std::filesystem::path path = dir.path() / "step.pcx";
  Artifact first = full_artifact();
  Artifact second = full_artifact();
  second.compiler_version = "0.2.0";
  second.object_code.resize(10);
  ASSERT_TRUE(write_artifact(first, path).ok());
  ASSERT_TRUE(write_artifact(second, path).ok());
  Expected<Artifact> read = read_artifact(path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, second);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"step.pcx"});
}

TEST(ArtifactRoundTrip, ReadHeaderOnlyGivesVersionAndKey) {
  ScratchDirectory dir("head");
  std::filesystem::path path = dir.path() / "step.pcx";
  ASSERT_TRUE(write_artifact(full_artifact(), path).ok());
  Expected<ArtifactHead> head = read_header_only(path);
  ASSERT_TRUE(head.ok()) << head.error().message();
  EXPECT_EQ(head->compiler_version, "0.1.0");
  EXPECT_EQ(head->key, full_artifact().key);
  EXPECT_EQ(head->file_bytes, std::filesystem::file_size(path));
  EXPECT_EQ(head->header.payload_bytes, head->file_bytes - kHeaderBytes);
}

TEST(ArtifactRoundTrip, ReadHeaderOnlyStillVerifiesTheChecksum) {
  ScratchDirectory dir("head-damaged");
  std::string bytes = encoded(full_artifact());
  bytes[bytes.size() - 3] ^= 0x01;  // far past the key
  std::filesystem::path path = dir.path() / "step.pcx";
  write_bytes(path, bytes);
  Expected<ArtifactHead> head = read_header_only(path);
  ASSERT_FALSE(head.ok());
  EXPECT_EQ(head.error().code(), ExitCode::kIncompatible);
  EXPECT_NE(head.error().message().find("checksum mismatch"), std::string::npos);
}

// ----------------------------------------------------------------------------- damaged files

TEST(ArtifactDamage, EmptyFile) {
  ScratchDirectory dir("empty");
  Error error = read_failure(dir, "");
  expect_incompatible(error, (dir.path() / "step.pcx").string() +
                                 " is empty (0 bytes), not a Precast artifact; recompile with "
                                 "`precast compile`");
}

TEST(ArtifactDamage, TruncatedInsideTheHeader) {
  ScratchDirectory dir("truncated-header");
  std::string bytes = encoded(full_artifact());
  const std::string path = (dir.path() / "step.pcx").string();
  // 3: inside the magic; 10: inside the version; 20: inside the length; 55: last checksum byte.
  for (size_t keep : {3u, 8u, 10u, 20u, 55u}) {
    Error error = read_failure(dir, bytes.substr(0, keep));
    expect_incompatible(error, path +
                                   " is truncated: the fixed header needs 56 bytes, the file "
                                   "has " +
                                   std::to_string(keep) +
                                   "; the file is damaged; recompile with `precast compile`");
  }
}

TEST(ArtifactDamage, TruncatedInsideThePayload) {
  ScratchDirectory dir("truncated-payload");
  std::string bytes = encoded(full_artifact());
  const size_t payload = bytes.size() - kHeaderBytes;
  const std::string path = (dir.path() / "step.pcx").string();
  for (size_t found : {size_t{0}, size_t{1}, size_t{100}, payload / 2, payload - 1}) {
    Error error = read_failure(dir, bytes.substr(0, kHeaderBytes + found));
    expect_incompatible(error, path + " is truncated: expected " + std::to_string(payload) +
                                   " bytes of payload at offset 56, found " +
                                   std::to_string(found) +
                                   "; the file is damaged; recompile with `precast compile`");
  }
}

TEST(ArtifactDamage, TrailingBytes) {
  ScratchDirectory dir("trailing");
  std::string bytes = encoded(full_artifact());
  const size_t payload = bytes.size() - kHeaderBytes;
  Error error = read_failure(dir, bytes + "xyz");
  expect_incompatible(error, step_path(dir) + " has 3 unexpected bytes after its " +
                                 std::to_string(payload) + "-byte payload (file is " +
                                 std::to_string(bytes.size() + 3) + " bytes, expected " +
                                 std::to_string(bytes.size()) +
                                 "); the file is damaged; recompile with `precast compile`");
}

TEST(ArtifactDamage, FlippedPayloadByteIsAChecksumMismatch) {
  ScratchDirectory dir("flipped-payload");
  std::string bytes = encoded(full_artifact());
  std::string stored = to_hex(sha256(std::string_view(bytes).substr(kHeaderBytes)));
  bytes[kHeaderBytes + 200] ^= 0x10;
  std::string computed = to_hex(sha256(std::string_view(bytes).substr(kHeaderBytes)));
  ASSERT_NE(stored, computed);
  Error error = read_failure(dir, bytes);
  expect_incompatible(error, step_path(dir) + ": checksum mismatch: the header stores SHA-256 " +
                                 stored + ", the payload hashes to " + computed +
                                 "; the file is damaged; recompile with `precast compile`");
}

TEST(ArtifactDamage, FlippedChecksumByteIsAChecksumMismatch) {
  ScratchDirectory dir("flipped-checksum");
  std::string bytes = encoded(full_artifact());
  bytes[kChecksumOffset + 31] ^= 0x01;
  Error error = read_failure(dir, bytes);
  EXPECT_EQ(error.code(), ExitCode::kIncompatible);
  EXPECT_NE(error.message().find(": checksum mismatch: the header stores SHA-256 "),
            std::string::npos)
      << error.message();
}

TEST(ArtifactDamage, FlippedMagicByte) {
  ScratchDirectory dir("flipped-magic");
  std::string bytes = encoded(full_artifact());
  bytes[1] = 'X';
  Error error = read_failure(dir, bytes);
  expect_incompatible(error, step_path(dir) +
                                 " is not a Precast artifact: it starts with 50 58 45 43 41 53 54 "
                                 "00 (\"PXECAST\\x00\"), an artifact starts with 50 52 45 43 41 "
                                 "53 54 00 (\"PRECAST\\x00\"); pass a .pcx file written by "
                                 "`precast compile`");
}

TEST(ArtifactDamage, ForeignFileShowsItsFirstBytes) {
  ScratchDirectory dir("elf");
  Error error = read_failure(dir, std::string("\x7f"
                                              "ELF\x02\x01\x01\x00 and more",
                                              20));
  EXPECT_EQ(error.code(), ExitCode::kIncompatible);
  EXPECT_NE(error.message().find("it starts with 7f 45 4c 46 02 01 01 00 (\"\\x7fELF\\x02\\x01"
                                 "\\x01\\x00\")"),
            std::string::npos)
      << error.message();
}

TEST(ArtifactDamage, ShortForeignFileIsNotCalledTruncated) {
  ScratchDirectory dir("short-foreign");
  Error error = read_failure(dir, "hi\n");
  EXPECT_EQ(error.code(), ExitCode::kIncompatible);
  EXPECT_NE(error.message().find("is not a Precast artifact: it starts with 68 69 0a"),
            std::string::npos)
      << error.message();
}

TEST(ArtifactDamage, NewerFormatVersion) {
  ScratchDirectory dir("version");
  std::string bytes = encoded(full_artifact());
  set_field<uint32_t>(bytes, kFormatVersionOffset, kFormatVersion + 1);
  Error error = read_failure(dir, bytes);
  expect_incompatible(error, step_path(dir) +
                                 ": unsupported format version 5 (newer than this build's); "
                                 "this build reads version 4; recompile with this build's "
                                 "`precast compile`");
}

// Version 3 had no entry points besides the train step (version 2 no op and scope in its
// steps, version 1 no typed collectives either): refused, naming both versions, before Boost
// reads its (differently laid out) payload.
TEST(ArtifactDamage, OlderFormatVersion) {
  ScratchDirectory dir("old-version");
  std::string bytes = encoded(full_artifact());
  set_field<uint32_t>(bytes, kFormatVersionOffset, 3);
  Error error = read_failure(dir, bytes);
  expect_incompatible(error, step_path(dir) +
                                 ": unsupported format version 3 (older than this build's); "
                                 "this build reads version 4; recompile with this build's "
                                 "`precast compile`");
}

TEST(ArtifactSchema, CollectiveStepsAreChecked) {
  Artifact a = full_artifact();
  ASSERT_FALSE(find_schema_violation(a).has_value());
  Step& step = a.program[3];
  ASSERT_EQ(step.kind, StepKind::kCollective);
  step.collective.reduction = Reduction::kNone;
  EXPECT_EQ(find_schema_violation(a).value_or(""),
            "step 3 (collective): reduce_scatter with reduction none");
  step.collective.reduction = Reduction::kMax;
  step.collective.kind = CollectiveKind::kAllToAll;
  EXPECT_NE(find_schema_violation(a).value_or("").find("all_to_all with reduction max"),
            std::string::npos);
  step.collective.reduction = Reduction::kNone;
  EXPECT_EQ(find_schema_violation(a).value_or(""),
            "step 3 (collective): all_to_all takes 2 dimension(s), not 1");
  step.collective.kind = static_cast<CollectiveKind>(9);
  EXPECT_EQ(find_schema_violation(a).value_or(""), "step 3 (collective): unknown collective kind 9");
}

TEST(ArtifactDamage, SwappedByteOrderMarker) {
  ScratchDirectory dir("byte-order");
  std::string bytes = encoded(full_artifact());
  set_field<uint32_t>(bytes, kByteOrderOffset, 0x04030201u);
  // A file from the other byte order has every integer swapped, the version included; the
  // marker is checked first so the message names the real cause.
  set_field<uint32_t>(bytes, kFormatVersionOffset, 0x01000000u);
  Error error = read_failure(dir, bytes);
  expect_incompatible(error, step_path(dir) +
                                 ": byte-order mismatch: the marker reads 0x04030201, this "
                                 "machine expects 0x01020304; the file was written on a machine "
                                 "with a different byte order (or is damaged); recompile with "
                                 "`precast compile` for this machine");
}

TEST(ArtifactDamage, UndecodablePayloadWithValidChecksum) {
  ScratchDirectory dir("garbage");
  Error error = read_failure(dir, frame("this is not a boost archive at all"));
  EXPECT_EQ(error.code(), ExitCode::kIncompatible);
  EXPECT_EQ(error.message().rfind(step_path(dir) + ": the payload passed its checksum but could "
                                                   "not be decoded (",
                                  0),
            0u)
      << error.message();
  EXPECT_NE(error.message().find("recompile with this build's `precast compile`"),
            std::string::npos);
}

TEST(ArtifactDamage, ArchiveCutShortWithValidChecksum) {
  ScratchDirectory dir("cut-archive");
  std::string payload = encoded(full_artifact()).substr(kHeaderBytes);
  for (size_t keep : {size_t{10}, size_t{60}, payload.size() / 2, payload.size() - 1}) {
    Error error = read_failure(dir, frame(payload.substr(0, keep)));
    EXPECT_EQ(error.code(), ExitCode::kIncompatible) << keep;
    EXPECT_NE(error.message().find("the payload passed its checksum but could not be decoded"),
              std::string::npos)
        << keep << ": " << error.message();
  }
}

TEST(ArtifactDamage, BytesAfterTheLastFieldWithValidChecksum) {
  ScratchDirectory dir("extra-archive");
  std::string payload = encoded(full_artifact()).substr(kHeaderBytes);
  Error error = read_failure(dir, frame(payload + "12345"));
  expect_incompatible(error, step_path(dir) +
                                 ": 5 bytes of the payload follow its last field; the file is "
                                 "damaged; recompile with `precast compile`");
}

TEST(ArtifactDamage, MissingFileIsAUsageError) {
  ScratchDirectory dir("missing");
  Expected<Artifact> result = read_artifact(dir.path() / "nope.pcx");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error().code(), ExitCode::kUsage);
  EXPECT_EQ(result.error().message(),
            "cannot read artifact " + (dir.path() / "nope.pcx").string() +
                ": no such file; check the path, or create the file with `precast compile`");
  EXPECT_EQ(read_header_only(dir.path() / "nope.pcx").error().code(), ExitCode::kUsage);
}

TEST(ArtifactDamage, DirectoryIsAUsageError) {
  ScratchDirectory dir("read-directory");
  Expected<Artifact> result = read_artifact(dir.path());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error().code(), ExitCode::kUsage);
  EXPECT_NE(result.error().message().find(": not a regular file;"), std::string::npos);
}

TEST(ArtifactDamage, ReadHeaderOnlyReportsTheSameHeaderErrors) {
  ScratchDirectory dir("head-errors");
  std::string bytes = encoded(full_artifact());
  std::filesystem::path path = dir.path() / "step.pcx";
  write_bytes(path, bytes.substr(0, kHeaderBytes + 7));
  Expected<ArtifactHead> head = read_header_only(path);
  ASSERT_FALSE(head.ok());
  EXPECT_EQ(head.error().code(), ExitCode::kIncompatible);
  EXPECT_NE(head.error().message().find("is truncated: expected"), std::string::npos);
}

// ----------------------------------------------------------------------------- writing

TEST(ArtifactWrite, RefusesASchemaViolationWithoutCreatingAFile) {
  ScratchDirectory dir("schema");
  Artifact artifact = full_artifact();
  artifact.signature.outputs[0].aliased_input = 4;  // there are 4 inputs: 0..3
  Status written = write_artifact(artifact, dir.path() / "step.pcx");
  ASSERT_FALSE(written.ok());
  EXPECT_EQ(written.error().code(), ExitCode::kInternal);
  EXPECT_EQ(written.error().message(),
            "refusing to write an invalid artifact: output 0 ('params.embedding'') aliases input "
            "4, but there are 4 inputs");
  EXPECT_TRUE(dir.entries().empty());
}

TEST(ArtifactWrite, TargetIsADirectoryLeavesNoTemporary) {
  ScratchDirectory dir("target-directory");
  std::filesystem::path target = dir.path() / "out";
  std::filesystem::create_directory(target);
  Status written = write_artifact(full_artifact(), target);
  ASSERT_FALSE(written.ok());
  EXPECT_EQ(written.error().code(), ExitCode::kFailure);
  EXPECT_EQ(written.error().message(), "cannot write artifact " + target.string() +
                                           ": it is a directory; give a file path such as " +
                                           (target / "step.pcx").string());
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out"});
  EXPECT_TRUE(std::filesystem::is_empty(target));
}

TEST(ArtifactWrite, MissingDirectoryFails) {
  ScratchDirectory dir("missing-directory");
  std::filesystem::path target = dir.path() / "no" / "such" / "step.pcx";
  Status written = write_artifact(full_artifact(), target);
  ASSERT_FALSE(written.ok());
  EXPECT_EQ(written.error().code(), ExitCode::kFailure);
  EXPECT_EQ(written.error().message(),
            "cannot write artifact " + target.string() +
                ": creating a temporary file failed: No such file or directory; check that the "
                "directory exists, is writable and has free space");
  EXPECT_TRUE(dir.entries().empty());
}

TEST(ArtifactWrite, PathWithoutFileNameIsAUsageError) {
  ScratchDirectory dir("no-file-name");
  Status written = write_artifact(full_artifact(), dir.path().string() + "/");
  ASSERT_FALSE(written.ok());
  EXPECT_EQ(written.error().code(), ExitCode::kUsage);
  EXPECT_TRUE(dir.entries().empty());
}

// Runs in a death-test child: as root, directory permissions do not stop writes, so the child
// first drops to user and group `nobody` (65534). Exits 0 when the write failed cleanly.
[[noreturn]] void write_into_unwritable_directory(const std::filesystem::path& dir) {
  if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) std::exit(2);
  Status written = write_artifact(full_artifact(), dir / "step.pcx");
  std::fprintf(stderr, "%s\n", written.ok() ? "written" : written.error().message().c_str());
  bool clean = !written.ok() && written.error().code() == ExitCode::kFailure &&
               std::filesystem::is_empty(dir);
  std::exit(clean ? 0 : 1);
}

TEST(ArtifactWrite, UnwritableDirectoryLeavesNoTemporary) {
  ScratchDirectory dir("read-only");
  using std::filesystem::perms;
  std::filesystem::permissions(dir.path(), perms::owner_read | perms::owner_exec |
                                               perms::group_read | perms::group_exec |
                                               perms::others_read | perms::others_exec);
  EXPECT_EXIT(write_into_unwritable_directory(dir.path()), ::testing::ExitedWithCode(0),
              "cannot write artifact .*/step.pcx: creating a temporary file failed: Permission "
              "denied; check that the directory exists, is writable and has free space");
  EXPECT_TRUE(dir.entries().empty());
}

// Restores the file-size limit and SIGXFSZ handling however the test exits.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    previous_handler_ = std::signal(SIGXFSZ, SIG_IGN);  // turn the signal into EFBIG
    rlimit limited = saved_;
    limited.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limited);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_handler_);
  }

 private:
  rlimit saved_{};
  void (*previous_handler_)(int) = nullptr;
};

TEST(ArtifactWrite, FailureMidWriteKeepsTheOldFileAndLeavesNoTemporary) {
  ScratchDirectory dir("mid-write");
  std::filesystem::path target = dir.path() / "step.pcx";
  Artifact old_artifact;
  old_artifact.compiler_version = "old";
  ASSERT_TRUE(write_artifact(old_artifact, target).ok());
  const std::string old_bytes = read_bytes(target);

  Status written = [&] {
    FileSizeLimit limit(old_bytes.size() + 100);  // the full artifact is far larger
    return write_artifact(full_artifact(), target);
  }();
  ASSERT_FALSE(written.ok());
  EXPECT_EQ(written.error().code(), ExitCode::kFailure);
  EXPECT_EQ(written.error().message(),
            "cannot write artifact " + target.string() +
                ": writing failed: File too large; check that the directory exists, is writable "
                "and has free space");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"step.pcx"});
  EXPECT_EQ(read_bytes(target), old_bytes);
}


// Format version 4: entry points besides train_step, each with its own signature, plan, program
// and object code, survive the round trip; entry_point_artifact gives one as the artifact a
// runtime loads, and names the entry points present when asked for a missing one.
TEST(ArtifactEntryPoints, RoundTripAndView) {
  ScratchDirectory dir("entry-points");
  Artifact original = full_artifact();
  EntryPoint eval;
  eval.name = std::string(kEvalStepEntry);
  eval.signature.inputs = {original.signature.inputs[0]};
  TensorSignature sum;
  sum.name = "xent_sum";
  sum.dtype = "f32";
  sum.role = "metric";
  eval.signature.outputs = {sum};
  eval.plan.arena_bytes = 4096;
  eval.plan.alignment = 64;
  eval.program = {original.program[0]};
  eval.object_code = {1, 2, 3, 4, 5};
  eval.ir_text = "func @forward() {}\n";
  original.entry_points.push_back(eval);
  std::filesystem::path path = dir.path() / "step.pcx";
  ASSERT_TRUE(write_artifact(original, path).ok());
  Expected<Artifact> read = read_artifact(path);
  ASSERT_TRUE(read.ok()) << read.error().message();
  ASSERT_EQ(read->entry_points.size(), 1u);
  EXPECT_EQ(read->entry_points[0], eval);
  EXPECT_EQ(*read, original);

  Expected<Artifact> view = entry_point_artifact(*read, kEvalStepEntry);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->signature, eval.signature);
  EXPECT_EQ(view->plan, eval.plan);
  EXPECT_EQ(view->program, eval.program);
  EXPECT_EQ(view->object_code, eval.object_code);
  EXPECT_EQ(view->key, original.key);
  Expected<Artifact> train = entry_point_artifact(*read, kTrainStepEntry);
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(*train, original);

  Expected<Artifact> missing = entry_point_artifact(*read, kSampleStepEntry);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), ExitCode::kIncompatible);
  EXPECT_EQ(missing.error().message(),
            "the artifact has no entry point 'sample_step' (it has: train_step, eval_step); "
            "recompile it with sample_tokens > 0 to include it");

  // An entry point may not take train_step's name.
  original.entry_points[0].name = "train_step";
  ASSERT_TRUE(find_schema_violation(original).has_value());
}
}  // namespace
}  // namespace precast::artifact
