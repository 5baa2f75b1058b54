// Role: synthetic data's entry in a checkpoint's metadata.json ("data"), and the check that a
// synthetic run resumes only a checkpoint of synthetic data drawn with the same seed (a
// checkpoint of a token or text run, or of another data_shuffle_seed, would continue training on
// other data without a word).
#pragma once

#include <cstdint>
#include <string>

#include "ir/support/Error.h"
#include "runtime/checkpoint/JsonValue.h"

namespace precast::data {

// {"dataset_type": "synthetic", "data_shuffle_seed": S, "next_step": N}.
std::string synthetic_position_json(uint32_t shuffle_seed, int64_t next_step);

// Ok when the checkpoint's data position (`saved`, metadata.json's "data") is synthetic data's
// with `shuffle_seed` (a position without a seed, as older saves wrote, is accepted, and so is a
// checkpoint with no "data" at all: those predate datasets, when all data was synthetic).
// Otherwise an Error (exit 4) naming each difference with both values, as
// data::parse_position does for token and text data.
Status check_synthetic_position(const checkpoint::JsonValue& saved, uint32_t shuffle_seed);

}  // namespace precast::data
