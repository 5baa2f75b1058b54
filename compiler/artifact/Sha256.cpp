// SHA-256 by OpenSSL's EVP interface (the low-level SHA256_* calls are deprecated in OpenSSL 3).
// A failure inside libcrypto (out of memory, a provider configuration without SHA-256) cannot be
// caused by user input and leaves no digest to return, so it ends the process with a message.
#include "compiler/artifact/Sha256.h"

#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>

namespace precast::artifact {
namespace {

[[noreturn]] void libcrypto_failed(const char* call) {
  std::fprintf(stderr,
               "internal error: OpenSSL's %s failed for SHA-256; check the libcrypto installation "
               "(package libssl3) and any OPENSSL_CONF in the environment\n",
               call);
  std::abort();
}

}  // namespace

Sha256::Sha256() : context_(EVP_MD_CTX_new()) {
  if (context_ == nullptr) libcrypto_failed("EVP_MD_CTX_new");
  if (EVP_DigestInit_ex(context_, EVP_sha256(), nullptr) != 1) {
    libcrypto_failed("EVP_DigestInit_ex");
  }
}

Sha256::~Sha256() {
  EVP_MD_CTX_free(context_);
}

void Sha256::update(const void* data, size_t size) {
  if (size == 0) return;
  if (EVP_DigestUpdate(context_, data, size) != 1) libcrypto_failed("EVP_DigestUpdate");
}

Sha256Digest Sha256::finish() {
  Sha256Digest digest{};
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(context_, digest.data(), &length) != 1 || length != digest.size()) {
    libcrypto_failed("EVP_DigestFinal_ex");
  }
  return digest;
}

Sha256Digest sha256(std::string_view bytes) {
  Sha256 hasher;
  hasher.update(bytes);
  return hasher.finish();
}

std::string to_hex(const Sha256Digest& digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (uint8_t b : digest) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xF]);
  }
  return out;
}

}  // namespace precast::artifact
