// The registry of every configuration key Precast accepts: its type, default, phase (baked into
// an artifact at compile time, or a run-time input) and a one-line doc. One table, in code.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "compiler/config/ConfigValue.h"

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

  ConfigValue default_value() const;
};

// All keys, sorted by name.
const std::vector<KeySpec>& key_registry();
// nullptr when the key is unknown.
const KeySpec* find_key(std::string_view name);

std::string_view key_type_name(KeyType type);
std::string_view key_phase_name(KeyPhase phase);

// Converts `value` to the key's type as pydantic's lax mode would (int -> float, integral float
// -> int, scalar -> string, "None" -> none for nullable keys). Returns false when impossible.
bool coerce_to_key_type(const KeySpec& spec, ConfigValue& value);

// Mesh axes that have ici_<axis>_parallelism / dcn_<axis>_parallelism keys, as the keys name
// them ("pipeline" is the mesh axis `stage`).
const std::vector<std::string_view>& parallelism_key_axes();
// The mesh axis a parallelism key axis drives: "pipeline" -> "stage", others unchanged.
std::string_view mesh_axis_of(std::string_view key_axis);

// The registry as a base config file: every settable key with its default, phase and doc.
std::string registry_as_yaml();
// The registry as an aligned table for `precast keys`.
std::string registry_as_table();

}  // namespace precast
