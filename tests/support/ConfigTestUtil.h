// Helpers for config tests: temporary config trees and loading with derived keys.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "compiler/config/Config.h"
#include "compiler/config/DerivedKeys.h"
#include "compiler/config/ModelSpec.h"

namespace precast::testing {

inline std::filesystem::path source_dir() {
  return PRECAST_SOURCE_DIR;
}
inline std::filesystem::path base_yml() {
  return source_dir() / "configs" / "base.yml";
}

// A fresh directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("precast_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::create_directories(path_ / "models");
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    std::filesystem::path p = path_ / name;
    std::ofstream(p) << text;
    return p;
  }

 private:
  std::filesystem::path path_;
  static inline int counter_ = 0;
};

inline Expected<Config> load(const std::filesystem::path& file,
                             std::vector<std::string> overrides = {}) {
  ConfigRequest request;
  request.config_file = file;
  request.overrides = std::move(overrides);
  request.read_environment = false;
  return load_config(request);
}

// Loads and derives for `devices` devices; fails the test on error.
inline Config load_derived(const std::filesystem::path& file, std::vector<std::string> overrides,
                           int64_t devices) {
  Expected<Config> config = load(file, std::move(overrides));
  EXPECT_TRUE(config.ok()) << (config.ok() ? "" : config.error().message());
  if (!config.ok()) return Config();
  Status status = derive_keys(*config, devices);
  EXPECT_TRUE(status.ok()) << (status.ok() ? "" : status.error().message());
  return *config;
}

// base.yml with `overrides`, derived for `devices` devices: its ModelSpec and BatchSpec (a failure
// fails the test and yields defaults).
struct ModelAndBatch {
  ModelSpec model;
  BatchSpec batch;
};
inline ModelAndBatch load_model(std::vector<std::string> overrides, int64_t devices = 1) {
  Config config = load_derived(base_yml(), std::move(overrides), devices);
  Expected<ModelSpec> model = model_spec_from_config(config);
  EXPECT_TRUE(model.ok()) << (model.ok() ? "" : model.error().message());
  return {model.ok() ? *model : ModelSpec(), batch_spec_from_config(config)};
}

// The supported model configs shipped in configs/models (unsupported.yml excluded), sorted.
inline std::vector<std::string> shipped_models() {
  std::vector<std::string> names;
  for (const auto& entry :
       std::filesystem::directory_iterator(source_dir() / "configs" / "models")) {
    std::string stem = entry.path().stem().string();
    if (entry.path().extension() == ".yml" && stem != "unsupported") names.push_back(stem);
  }
  std::sort(names.begin(), names.end());
  return names;
}

inline std::string error_of(const Expected<Config>& config) {
  return config.ok() ? "<no error>" : config.error().message();
}

}  // namespace precast::testing
