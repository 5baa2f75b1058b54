#include "runtime/data/SyntheticPosition.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

namespace precast::data {

std::string synthetic_position_json(uint32_t shuffle_seed, int64_t next_step) {
  return fmt::format(
      "{{\"dataset_type\": \"synthetic\", \"data_shuffle_seed\": {}, "
      "\"next_step\": {}}}",
      shuffle_seed, next_step);
}

Status check_synthetic_position(const checkpoint::JsonValue& saved, uint32_t shuffle_seed) {
  if (saved.kind == checkpoint::JsonValue::Kind::kNull) return Status::success();
  std::vector<std::string> differences;
  const checkpoint::JsonValue* type = saved.find("dataset_type");
  std::string saved_type = type != nullptr && type->kind == checkpoint::JsonValue::Kind::kString
                               ? type->text
                               : std::string("unknown");
  if (saved_type != "synthetic") {
    differences.push_back(fmt::format("dataset_type {} (this run: synthetic)", saved_type));
  } else if (const checkpoint::JsonValue* seed = saved.find("data_shuffle_seed")) {
    int64_t saved_seed = 0;
    if (!seed->as_int(saved_seed)) {
      differences.push_back(
          fmt::format("data_shuffle_seed {} (this run: {})", seed->text, shuffle_seed));
    } else if (saved_seed != static_cast<int64_t>(shuffle_seed)) {
      differences.push_back(
          fmt::format("data_shuffle_seed {} (this run: {})", saved_seed, shuffle_seed));
    }
  }
  if (differences.empty()) return Status::success();
  return Error(ExitCode::kIncompatible,
               fmt::format("the checkpoint's data position belongs to another dataset: {}; "
                           "resume with the data the run started with, or start a new run "
                           "(another run_name or checkpoint_dir)",
                           fmt::join(differences, ", ")));
}

}  // namespace precast::data
