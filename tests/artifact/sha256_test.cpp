// SHA-256 against the FIPS 180-4 / NIST example vectors.
#include <gtest/gtest.h>

#include <string>

#include "compiler/artifact/Sha256.h"

namespace precast::artifact {
namespace {

TEST(Sha256, Abc) {
  EXPECT_EQ(to_hex(sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, EmptyMessage) {
  EXPECT_EQ(to_hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256, TwoBlockMessage448Bits) {
  EXPECT_EQ(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, Message896Bits) {
  EXPECT_EQ(to_hex(sha256("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
                          "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu")),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(Sha256, OneMillionA) {
  EXPECT_EQ(to_hex(sha256(std::string(1'000'000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, OneMillionAFedInOddChunks) {
  Sha256 hasher;
  const std::string chunk(997, 'a');  // a prime, so chunks straddle every block boundary
  size_t left = 1'000'000;
  while (left > 0) {
    size_t take = std::min(left, chunk.size());
    hasher.update(chunk.data(), take);
    left -= take;
  }
  EXPECT_EQ(to_hex(hasher.finish()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Messages of 55, 56 and 64 bytes hit the three padding cases (length fits in this block,
// needs one more block, block exactly full); byte-at-a-time must agree with one shot.
TEST(Sha256, PaddingBoundariesAgreeAcrossUpdateSizes) {
  for (size_t length : {55u, 56u, 63u, 64u, 65u, 119u, 120u}) {
    std::string message(length, 'x');
    Sha256 hasher;
    for (char c : message) hasher.update(&c, 1);
    EXPECT_EQ(hasher.finish(), sha256(message)) << length;
  }
}

// Reference digests from coreutils' sha256sum.
TEST(Sha256, PaddingBoundaryDigests) {
  EXPECT_EQ(to_hex(sha256(std::string(55, 'x'))),
            "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072");
  EXPECT_EQ(to_hex(sha256(std::string(56, 'x'))),
            "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e");
  EXPECT_EQ(to_hex(sha256(std::string(64, 'x'))),
            "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c");
}

}  // namespace
}  // namespace precast::artifact
