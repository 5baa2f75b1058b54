// Role: the global batches of a run from a corpus: documents in a per-epoch shuffled order
// (data_shuffle_seed), packed several to a row (packing=true) or one per row (packing=false),
// with MaxText's segment ids and positions, and the iterator position a checkpoint saves.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/support/Error.h"
#include "runtime/checkpoint/JsonValue.h"
#include "runtime/data/TokenFile.h"

namespace precast::data {

// Where the next row starts: document `document` of epoch `epoch`'s order, token `offset` in it.
struct DataPosition {
  int64_t epoch = 0;
  int64_t document = 0;
  int64_t offset = 0;
  bool operator==(const DataPosition&) const = default;
};

// One global batch, [rows, length] row-major, the six arrays in the step's order: inputs,
// inputs_position, inputs_segmentation, targets, targets_position, targets_segmentation.
struct GlobalBatch {
  int64_t rows = 0, length = 0;
  std::array<std::vector<int32_t>, 6> arrays;
};

struct BatchOptions {
  bool packing = true;
  bool shuffle = true;
  uint32_t shuffle_seed = 0;
  int64_t num_epoch = 1;
  uint32_t pad = 0;  // the token id padding positions hold
};

// Rows are filled from the document stream, each document's tokens as the file holds them
// (BOS ... EOS for `precast tokenize`). The target of a token is the next token of its document
// (MaxText's shift, within the document): a document of n tokens gives n - 1 targets; its last
// token, and padding, have targets_segmentation 0 (excluded from the loss, so total_weights
// counts the real targets). Segment ids are 1, 2, ... per document piece in the row, positions
// restart at 0 for each piece, targets_position = inputs_position.
// packing=true: a document that does not fit in what is left of the row starts the next row
// (the rest is padding: segment 0); one longer than a whole row is split into row-sized pieces,
// the iterator's offset saying where the next piece starts. packing=false: one document per row,
// truncated to the row, the rest padding.
// When the last epoch's documents run out the remaining rows are padding and exhausted() is true.
class BatchBuilder {
 public:
  BatchBuilder(const TokenDocuments* documents, BatchOptions options);

  void build(GlobalBatch& batch);
  bool exhausted() const { return position_.epoch >= options_.num_epoch; }
  const DataPosition& position() const { return position_; }
  // Errors (exit 4): a position outside this corpus (another dataset).
  Status set_position(const DataPosition& position);

  // The training documents of `epoch` in the order they are read.
  const std::vector<uint32_t>& order(int64_t epoch);

 private:
  // Writes one row at `row` of `batch` from the stream; advances position_.
  void fill_row(GlobalBatch& batch, int64_t row);
  void next_document();

  const TokenDocuments* documents_;
  BatchOptions options_;
  DataPosition position_;
  int64_t order_epoch_ = -1;
  std::vector<uint32_t> order_;
};

// The position as the "data" object of a checkpoint's metadata.json: dataset_type, the corpus's
// document and token counts and shuffle seed (what a resume must agree with), epoch, document,
// offset, the next step and "files": each source file's path, bytes and CRC-32C
// (documents.sources, Fingerprint.h).
std::string position_json(const std::string& dataset_type, const TokenDocuments& documents,
                          uint32_t shuffle_seed, const DataPosition& position, int64_t next_step);
// The position saved by position_json, checked against this run's dataset. Errors (exit 4) name
// each field that differs and the value of both; with the same counts, each file whose content
// fingerprint differs, with both fingerprints (a checkpoint without "files" is not compared).
Expected<DataPosition> parse_position(const checkpoint::JsonValue& data,
                                      const std::string& dataset_type,
                                      const TokenDocuments& documents, uint32_t shuffle_seed);

}  // namespace precast::data
