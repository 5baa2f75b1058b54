// The registry of every configuration key Precast accepts: every key of MaxText's base.yml plus
// Precast's own, each with its type, default, phase (baked into an artifact at compile time, or a
// run-time input), support status and a one-line doc. One table, in code (two files:
// KeyRegistry.cpp for the keys Precast implements, MaxTextCompatibilityKeys.cpp for the rest).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "compiler/config/ConfigValue.h"
#include "ir/support/Error.h"

namespace precast {

enum class KeyType {
  kBool,
  kInt,
  kFloat,
  kString,
  kStringList,  // ['silu', 'linear']
  kIntList,
  kAxisRules,    // [['embed', ['fsdp', 'tensor']], ['layers', 'stage'], ...]
  kStringLists,  // [['data', 'fsdp', ...]] (data_sharding)
  kAny,          // any YAML value (MaxText keys typed as unions or mappings; mappings kept as text)
};

// What Precast does with a key.
enum class KeyStatus {
  kImplemented,   // does what it says
  kNoEffect,      // accepted for MaxText compatibility; changes nothing Precast computes or reports
  kNotSupported,  // a feature Precast lacks: the default is accepted, any other value refused
};

enum class KeyPhase {
  kCompileTime,  // shapes, dtypes, model dims, mesh, rules, remat, optimizer type, target
  kRunTime,      // steps, schedule values, optimizer scalars, seeds, paths, logging, checkpoints
};

struct KeySpec {
  std::string_view name;
  KeyType type;
  KeyPhase phase;
  std::string_view default_yaml;  // the default, as YAML text (parsed once by default_value())
  std::string_view doc;
  bool derived = false;   // computed from other keys; setting it is an error
  bool nullable = false;  // None is a valid value
  KeyStatus status = KeyStatus::kImplemented;
  // MaxText's default where Precast's deliberately differs (YAML text; empty = the same), e.g.
  // enable_checkpointing: Precast writes checkpoints only when asked, so its default is false.
  std::string_view maxtext_default_yaml = {};
  // A key Precast implements for some values only: those values (besides the default),
  // space-separated, e.g. profiler: "trace"; any other is refused as "not supported yet".
  // Empty: every value of the key's type works.
  std::string_view implemented_values = {};

  ConfigValue default_value() const;
  // MaxText's default: maxtext_default_yaml when set, else the default.
  ConfigValue maxtext_default_value() const;
};

// All keys, sorted by name.
const std::vector<KeySpec>& key_registry();
// nullptr when the key is unknown.
const KeySpec* find_key(std::string_view name);

std::string_view key_type_name(KeyType type);
std::string_view key_phase_name(KeyPhase phase);
// "implemented", "accepted; no effect on the plan", "not supported yet".
std::string_view key_status_name(KeyStatus status);
// The short form `precast keys` prints in its table: "yes", "no effect", "not yet".
std::string_view key_status_short_name(KeyStatus status);

// A YAML node as the key's value: config_value_from_yaml, except that a mapping given to a key of
// type kAny is kept as its flow-style text ("{}").
ConfigValue config_value_from_key_yaml(const KeySpec& spec, const YAML::Node& node);

// Converts `value` to the key's type as pydantic's lax mode would (int -> float, integral float
// -> int, scalar -> string, "None" -> none for nullable keys). Returns false when impossible.
bool coerce_to_key_type(const KeySpec& spec, ConfigValue& value);

// Mesh axes that have ici_<axis>_parallelism / dcn_<axis>_parallelism keys, as the keys name
// them ("pipeline" is the mesh axis `stage`).
const std::vector<std::string_view>& parallelism_key_axes();
// The mesh axis a parallelism key axis drives: "pipeline" -> "stage", others unchanged.
std::string_view mesh_axis_of(std::string_view key_axis);

// A key with status kNotSupported set to a value other than its default: "<key> is not supported
// yet" with the value, where it came from, the key's doc and the fix. Success otherwise.
Status check_key_supported(const KeySpec& spec, const ConfigValue& value,
                           const std::string& origin);

// The registry as a base config file: every settable key with its default, phase, status and doc.
std::string registry_as_yaml();
// The registry as an aligned table for `precast keys`.
std::string registry_as_table();

}  // namespace precast
