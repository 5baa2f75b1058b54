// Role: the documents a run trains on, read from dataset_path (token files or text files),
// checked against the artifact's vocab_size, split into training and held-out documents.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/support/Error.h"
#include "runtime/data/DataSettings.h"
#include "runtime/data/TokenFile.h"

namespace precast::data {

// Every kEvalEvery-th document (index % kEvalEvery == kEvalEvery - 1, counted over the
// non-empty documents in file order) is held out for evaluation and never trained on: 5%.
inline constexpr int64_t kEvalEvery = 20;

struct Corpus {
  TokenDocuments train;            // the training documents, in file order
  int64_t held_out_documents = 0;  // the evaluation documents (kEvalEvery)
  TokenDocuments held_out;         // their tokens, in file order (runtime/eval reads them)
  int64_t skipped_empty = 0;       // documents without tokens (or text) are not trained on
  std::vector<std::string> files;
  uint32_t pad = 0;  // the id padding positions hold (the files' pad id, else 0)
};

// The files `dataset_path` names, in order: each comma-separated entry is a file, a directory
// (its regular files sorted by name; for token files only *.tokens) or a glob (its matches
// sorted). Errors (exit 2): an entry that does not exist, a glob matching nothing, a directory
// without such files.
Expected<std::vector<std::string>> dataset_files(const std::string& dataset_path, bool tokens_only);

// Reads the dataset (settings.type tokens or text) for a model of `vocab_size`. Errors (exit 2)
// name the file and byte offset: a bad token file (TokenFile.h), a token id >= vocab_size, text
// with vocab_size < 259 (the byte tokenizer's ids), no training document at all.
Expected<Corpus> load_corpus(const DataSettings& settings, int64_t vocab_size);

// Reads eval_dataset_path (settings.path; settings.type tokens or text) for evaluation: every
// non-empty document is an evaluation document (Corpus::held_out), none is trained on. Errors as
// load_corpus's (exit 2, naming the file), and a dataset without any document.
Expected<Corpus> load_eval_corpus(const DataSettings& settings, int64_t vocab_size);

// One line for the log: files, documents trained on and held out, tokens.
std::string describe(const Corpus& corpus);

}  // namespace precast::data
