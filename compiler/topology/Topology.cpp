#include "compiler/topology/Topology.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <charconv>

#include "ir/support/ClosestNames.h"

namespace precast {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Figures shared by every topology of a generation.
struct Generation {
  std::string platform;
  int64_t memory_bytes = 0;
  std::map<std::string, double> peak_flops;
  double ici_bytes_per_second = 0, dcn_bytes_per_second_per_host = 0;
  std::string memory_source, flops_source, bandwidth_source;
};

Error table_error(const std::filesystem::path& path, const YAML::Node& node,
                  const std::string& what) {
  return usage_error(path.string() + ":" + std::to_string(node.Mark().line + 1) + ": " + what);
}

Generation read_generation(const YAML::Node& node) {
  Generation g;
  g.platform = node["platform"] ? node["platform"].as<std::string>() : "cpu";
  g.memory_bytes = static_cast<int64_t>(node["memory_gib"].as<double>() * kGiB);
  for (auto it = node["peak_tflops"].begin(); it != node["peak_tflops"].end(); ++it) {
    g.peak_flops[it->first.as<std::string>()] = it->second.as<double>() * 1e12;
  }
  g.ici_bytes_per_second = node["ici_gbytes_per_second"].as<double>() * 1e9;
  g.dcn_bytes_per_second_per_host = node["dcn_gbytes_per_second_per_host"].as<double>() * 1e9;
  g.memory_source = node["memory_source"].as<std::string>();
  g.flops_source = node["flops_source"].as<std::string>();
  g.bandwidth_source = node["bandwidth_source"].as<std::string>();
  return g;
}

void apply_generation(Topology& t, const std::string& generation, const Generation& g) {
  t.generation = generation;
  t.platform = g.platform;
  t.memory_bytes_per_device = g.memory_bytes;
  t.peak_flops_per_device = g.peak_flops;
  t.ici_bytes_per_second_per_device = g.ici_bytes_per_second;
  t.dcn_bytes_per_second_per_host = g.dcn_bytes_per_second_per_host;
  t.memory_source = g.memory_source;
  t.flops_source = g.flops_source;
  t.bandwidth_source = g.bandwidth_source;
}

std::vector<int64_t> int_list(const YAML::Node& node) {
  std::vector<int64_t> out;
  for (const YAML::Node& item : node) out.push_back(item.as<int64_t>());
  return out;
}

// "v5:4x4x4" -> {4, 4, 4}
std::vector<int64_t> shape_of(const std::string& topology_name) {
  std::vector<int64_t> shape;
  std::string dims = topology_name.substr(topology_name.find(':') + 1);
  size_t start = 0;
  while (start <= dims.size()) {
    size_t end = dims.find('x', start);
    if (end == std::string::npos) end = dims.size();
    shape.push_back(std::stoll(dims.substr(start, end - start)));
    start = end + 1;
  }
  return shape;
}

// One row of the `tpu:` map: [generation, topology_name, chip_config_name, chips_per_host_bounds,
// chips_per_host, chips, devices_per_slice, devices_per_chip, hosts_per_slice, wrap].
Topology read_tpu_row(const std::string& name, const YAML::Node& row,
                      const std::map<std::string, Generation>& generations) {
  Topology t;
  t.name = name;
  std::string generation = row[0].as<std::string>();
  apply_generation(t, generation, generations.at(generation));
  t.topology_name = row[1].as<std::string>();
  t.physical_shape = shape_of(t.topology_name);
  t.chips_per_host_bounds = int_list(row[3]);
  t.chips_per_host = row[4].as<int64_t>();
  t.chips = row[5].as<int64_t>();
  t.devices_per_slice = row[6].as<int64_t>();
  t.devices_per_chip = row[7].as<int64_t>();
  t.hosts_per_slice = row[8].as<int64_t>();
  for (const YAML::Node& w : row[9]) t.wrap.push_back(w.as<bool>());
  return t;
}

Topology gpu_host(const std::string& name, const YAML::Node& entry,
                  const std::map<std::string, Generation>& generations) {
  Topology t;
  t.name = name;
  std::string generation = entry["generation"].as<std::string>();
  apply_generation(t, generation, generations.at(generation));
  int64_t devices = entry["devices_per_host"].as<int64_t>();
  t.topology_name = fmt::format("{}:{}", generation, devices);
  t.physical_shape = {devices};
  t.chips = t.devices_per_slice = t.chips_per_host = devices;
  t.chips_per_host_bounds = {devices};
  t.hosts_per_slice = 1;
  t.wrap = {false};
  return t;
}

Expected<int64_t> cpu_device_count(std::string_view name) {
  if (name == "cpu") return int64_t{1};
  std::string_view digits = name.substr(4);
  int64_t n = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size() || n < 1) {
    return usage_error("Invalid compile topology: " + std::string(name) +
                       ". cpu targets are named cpu-N with N >= 1 devices, e.g. cpu-4.");
  }
  return n;
}

}  // namespace

Expected<TopologyTable> TopologyTable::load(const std::filesystem::path& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path.string());
  } catch (const YAML::BadFile&) {
    return usage_error("topology table '" + path.string() +
                       "' cannot be read. Set PRECAST_CONFIG_DIR to the folder holding "
                       "topologies.yml.");
  } catch (const YAML::Exception& e) {
    return usage_error(path.string() + ":" + std::to_string(e.mark.line + 1) + ":" +
                       std::to_string(e.mark.column + 1) + ": malformed YAML: " + e.msg);
  }
  TopologyTable table;
  std::string section = "generations";
  std::string entry;
  YAML::Node current = root;
  try {
    std::map<std::string, Generation> generations;
    for (auto it = root["generations"].begin(); it != root["generations"].end(); ++it) {
      entry = it->first.as<std::string>();
      current.reset(it->second);
      generations[entry] = read_generation(it->second);
    }
    section = "tpu";
    for (auto it = root["tpu"].begin(); it != root["tpu"].end(); ++it) {
      entry = it->first.as<std::string>();
      current.reset(it->second);
      if (it->second.size() != 10) {
        return table_error(path, it->second,
                           "tpu entry '" + entry + "' needs 10 fields, has " +
                               std::to_string(it->second.size()) + ".");
      }
      table.topologies_.push_back(read_tpu_row(entry, it->second, generations));
    }
    section = "gpu";
    for (auto it = root["gpu"].begin(); it != root["gpu"].end(); ++it) {
      entry = it->first.as<std::string>();
      current.reset(it->second);
      table.topologies_.push_back(gpu_host(entry, it->second, generations));
      for (const YAML::Node& alias : it->second["aliases"]) {
        table.index_[alias.as<std::string>()] = table.topologies_.size() - 1;
      }
    }
    section = "cpu";
    entry = "cpu";
    current.reset(root["cpu"]);
    apply_generation(table.cpu_template_, "cpu", read_generation(root["cpu"]));
  } catch (const std::out_of_range&) {
    return table_error(
        path, current,
        section + " entry '" + entry + "' names a generation the file does not define.");
  } catch (const YAML::Exception& e) {
    return table_error(path, current,
                       section + " entry '" + entry +
                           "' is missing a field or has a value of the wrong type (" + e.msg +
                           ").");
  }
  for (size_t i = 0; i < table.topologies_.size(); ++i) table.index_[table.topologies_[i].name] = i;
  return table;
}

Expected<Topology> TopologyTable::find(std::string_view name) const {
  if (auto it = index_.find(name); it != index_.end()) return topologies_[it->second];
  if (name == "cpu" || name.substr(0, 4) == "cpu-") {
    PRECAST_ASSIGN_OR_RETURN(int64_t devices, cpu_device_count(name));
    Topology t = cpu_template_;
    t.name = "cpu-" + std::to_string(devices);
    t.topology_name = "cpu:" + std::to_string(devices);
    t.physical_shape = {devices};
    t.chips_per_host_bounds = {devices};
    t.wrap = {false};
    t.chips = t.devices_per_slice = t.chips_per_host = devices;
    t.hosts_per_slice = 1;
    return t;
  }
  std::vector<std::string> names;
  for (const auto& [known, index] : index_) names.push_back(known);
  names.push_back("cpu-N");
  std::vector<std::string> close = closest_names(name, names, 4);
  return usage_error("Invalid compile topology: " + std::string(name) + ". Did you mean " +
                     quoted_alternatives(close) + "? `precast topologies` lists all " +
                     std::to_string(names.size()) + ".");
}

std::string format_topology_table(const TopologyTable& table) {
  std::string out = fmt::format("{:<12} {:<8} {:>7} {:>6} {:>5}  {:<16} {:<14} {:>9} {:>12}\n",
                                "name", "platform", "devices", "chips", "hosts", "topology", "wrap",
                                "GiB/dev", "TFLOP/s/dev");
  auto row = [&](const Topology& t, const std::string& devices) {
    std::string wrap;
    for (bool w : t.wrap) wrap += w ? 'T' : 'F';
    auto peak = t.peak_flops_per_device.find("bfloat16");
    double tflops = peak == t.peak_flops_per_device.end() ? 0 : peak->second / 1e12;
    out += fmt::format("{:<12} {:<8} {:>7} {:>6} {:>5}  {:<16} {:<14} {:>9.2f} {:>12.1f}\n", t.name,
                       t.platform, devices, t.chips, t.hosts_per_slice, t.topology_name, wrap,
                       static_cast<double>(t.memory_bytes_per_device) / kGiB, tflops);
  };
  for (const Topology& t : table.all()) row(t, std::to_string(t.devices_per_slice));
  Expected<Topology> cpu = table.find("cpu-1");
  if (cpu.ok()) {
    Topology t = *cpu;
    t.name = "cpu-N";
    t.topology_name = "cpu:N";
    t.chips = 0;
    row(t, "N");
  }
  out += "GPU hosts take more hosts with compile_topology_num_slices; cpu-N is any N >= 1.\n";
  return out;
}

}  // namespace precast
