// Role: the run-time data keys of a run (dataset_type, dataset_path, packing, shuffling,
// num_epoch), parsed from the resolved config; errors name the key, the value and the fix.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "ir/support/Error.h"

namespace precast::data {

struct DataSettings {
  std::string type = "synthetic";  // synthetic | tokens | text
  std::string path;                // dataset_path: files, directories or globs, comma-separated
  bool packing = true;
  bool shuffle = true;        // enable_data_shuffling
  uint32_t shuffle_seed = 0;  // data_shuffle_seed
  int64_t num_epoch = 1;
  bool add_bos = true, add_eos = true;  // dataset_type=text only: BOS / EOS around each document
};

// From a resolved config (key -> printed value). A key the config lacks keeps its default (an
// artifact compiled before the key existed). Errors (exit 2): another dataset_type (MaxText's
// tfds, hf, grain: not supported yet), tokens or text without dataset_path, num_epoch < 1.
Expected<DataSettings> data_settings(const std::map<std::string, std::string>& config);

}  // namespace precast::data
