// `--memory-timeline FILE.svg`: live device bytes over the schedule, stacked by category
// (arguments at the bottom, then the temp buffers), with the peak marked. A standalone SVG any
// browser opens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/analysis/BufferAssignment.h"

namespace precast {

// Live bytes per category at each of `columns` evenly spaced stretches of the schedule (the
// maximum within each stretch, so no peak is lost to sampling). Row c is category c.
struct MemoryTimeline {
  std::vector<int64_t> positions;           // first op of each column
  std::vector<std::vector<int64_t>> bytes;  // [category][column]
  int64_t arguments = 0;                    // non-aliased argument bytes, live throughout
  int64_t peak_bytes = 0;                   // arguments + live temp and outputs at the peak
  int32_t peak_position = 0;
};

MemoryTimeline memory_timeline(const MemoryPlan& plan, size_t columns = 1200);

// The picture; `title` names the model and target.
std::string memory_timeline_svg(const MemoryPlan& plan, const std::string& title);

}  // namespace precast
