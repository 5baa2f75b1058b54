// Role: `precast tokenize`: text files to one token file with the byte-level tokenizer, one
// document per separator-delimited entry (or per file), and the unigram entropy of the result.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/support/Error.h"
#include "runtime/data/TokenFile.h"

namespace precast::data {

struct TokenizeReport {
  int64_t files = 0;
  int64_t documents = 0;
  int64_t tokens = 0;
  // The entropy of the unigram distribution of the predicted tokens (every token but each
  // document's first, as the loss counts them): what a model that ignores context can reach.
  double entropy_bits = 0;
  double entropy_nats = 0;
};

// The byte-level tokens of `text`'s documents (split_documents with `separator`).
TokenDocuments tokenize_text(const std::string& text, const std::string& separator);

// The unigram entropy of the tokens a model is trained to predict (see TokenizeReport).
void unigram_entropy(const TokenDocuments& documents, double& bits, double& nats);

// Reads `inputs` (files, directories or globs, as dataset_path), tokenizes each and writes one
// token file `output` atomically. Errors: an input that does not exist or matches nothing (exit
// 2), a write failure (exit 1); nothing is written then.
Expected<TokenizeReport> tokenize_files(const std::vector<std::string>& inputs,
                                        const std::string& output, const std::string& separator);

}  // namespace precast::data
