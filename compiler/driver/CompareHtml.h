// `precast compare --html report.html`: the comparison as one self-contained page — the table,
// the config keys that differ, and the loss and step-time curves of both runs as inline SVG
// (axes, ticks, legend). No scripts, fonts, styles or images from anywhere else.
#pragma once

#include <string>

#include "compiler/driver/Compare.h"

namespace precast {

std::string comparison_html(const Comparison& comparison);

}  // namespace precast
