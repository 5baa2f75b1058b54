// Sha256Streams: every kernel this CPU supports against the FIPS 180-4 / NIST example vectors,
// and against libcrypto's SHA-256 (artifact::sha256, an independent implementation) on streams
// of different lengths fed in pieces that straddle block boundaries, with 1 to 20 streams (the
// sixteen-lane kernel with full, partly empty and too few lanes).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/artifact/Sha256.h"
#include "runtime/checkpoint/Sha256Streams.h"

namespace precast::checkpoint {
namespace {

std::vector<Sha256Kernel> supported_kernels() {
  std::vector<Sha256Kernel> out;
  for (Sha256Kernel k : {Sha256Kernel::kPortable, Sha256Kernel::kShaNi, Sha256Kernel::kAvx512x16}) {
    if (sha256_kernel_supported(k)) out.push_back(k);
  }
  return out;
}

// Deterministic bytes: a 64-bit LCG's high byte.
std::string pseudo_random_bytes(size_t n, uint64_t seed) {
  std::string out(n, '\0');
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (char& c : out) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    c = static_cast<char>(x >> 56);
  }
  return out;
}

TEST(Sha256Streams, PortableKernelIsAlwaysSupported) {
  EXPECT_TRUE(sha256_kernel_supported(Sha256Kernel::kPortable));
  EXPECT_TRUE(sha256_kernel_supported(best_sha256_kernel()));
}

TEST(Sha256Streams, NistVectorsEveryKernel) {
  const std::vector<std::pair<std::string, std::string>> vectors = {
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
       "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
       "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
      {std::string(1'000'000, 'a'),
       "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"}};
  for (Sha256Kernel kernel : supported_kernels()) {
    // Sixteen copies of each vector: every lane of the wide kernel gives the same digest.
    for (const auto& [message, hex] : vectors) {
      Sha256Streams streams(16, kernel);
      streams.update(std::vector<std::string_view>(16, message));
      for (const artifact::Sha256Digest& d : streams.finish()) {
        EXPECT_EQ(artifact::to_hex(d), hex) << sha256_kernel_name(kernel) << " " << message.size();
      }
    }
  }
}

TEST(Sha256Streams, MatchesLibcryptoOnUnequalStreamsInPieces) {
  for (Sha256Kernel kernel : supported_kernels()) {
    for (size_t count : {1, 7, 8, 16, 20}) {
      // Stream i: 5000 + 997 * i bytes (no two alike, most not a whole number of blocks).
      std::vector<std::string> messages;
      for (size_t i = 0; i < count; ++i) messages.push_back(pseudo_random_bytes(5000 + 997 * i, i));
      Sha256Streams streams(count, kernel);
      // Pieces of 0, 1, 63, 64, 65, ... bytes: block boundaries fall everywhere.
      const size_t piece_sizes[] = {0, 1, 63, 64, 65, 1000, 4096, 3, 128, 70000};
      std::vector<size_t> offset(count, 0);
      for (size_t round = 0;; ++round) {
        std::vector<std::string_view> pieces(count);
        bool any = false;
        for (size_t i = 0; i < count; ++i) {
          size_t n = piece_sizes[(round + i) % std::size(piece_sizes)];
          n = std::min(n, messages[i].size() - offset[i]);
          pieces[i] = std::string_view(messages[i]).substr(offset[i], n);
          offset[i] += n;
          any = any || offset[i] < messages[i].size();
        }
        streams.update(pieces);
        if (!any) break;
      }
      std::vector<artifact::Sha256Digest> digests = streams.finish();
      ASSERT_EQ(digests.size(), count);
      for (size_t i = 0; i < count; ++i) {
        EXPECT_EQ(artifact::to_hex(digests[i]), artifact::to_hex(artifact::sha256(messages[i])))
            << sha256_kernel_name(kernel) << " streams " << count << " stream " << i;
      }
    }
  }
}

TEST(Sha256Streams, EqualPiecesOfSixteenStreamsMatchLibcrypto) {
  // The checkpoint writer's pattern: sixteen files advanced by the same 4 MiB-sized chunk.
  const size_t chunk = size_t{1} << 16;
  std::vector<std::string> files;
  for (size_t i = 0; i < 16; ++i)
    files.push_back(pseudo_random_bytes(3 * chunk + 64 * i + 5, 100 + i));
  for (Sha256Kernel kernel : supported_kernels()) {
    Sha256Streams streams(16, kernel);
    for (size_t at = 0; at < files.back().size(); at += chunk) {
      std::vector<std::string_view> pieces;
      for (const std::string& f : files) {
        pieces.push_back(at < f.size() ? std::string_view(f).substr(at, chunk)
                                       : std::string_view());
      }
      streams.update(pieces);
    }
    std::vector<artifact::Sha256Digest> digests = streams.finish();
    for (size_t i = 0; i < files.size(); ++i) {
      EXPECT_EQ(artifact::to_hex(digests[i]), artifact::to_hex(artifact::sha256(files[i])))
          << sha256_kernel_name(kernel) << " file " << i;
    }
  }
}

}  // namespace
}  // namespace precast::checkpoint
