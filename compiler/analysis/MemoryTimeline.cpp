#include "compiler/analysis/MemoryTimeline.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/analysis/Bytes.h"

namespace precast {
namespace {

std::string format_gib(int64_t bytes) {
  return fmt::format("{:.2f} GiB", to_gib(bytes));
}

constexpr size_t kCategories = static_cast<size_t>(MemoryCategory::kCount);

const char* const kColors[kCategories] = {
    "#4e79a7",  // parameters
    "#a0cbe8",  // optimizer state
    "#bab0ac",  // batch and scalars
    "#f28e2b",  // gradients
    "#59a14f",  // activations kept for backward
    "#8cd17d",  // recomputation scratch
    "#e15759",  // logits and loss
    "#76b7b2",  // collective buffers
    "#d4a6c8",  // other temporaries
};

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

}  // namespace

MemoryTimeline memory_timeline(const MemoryPlan& plan, size_t columns) {
  size_t n = std::max<size_t>(plan.num_ops, 1);
  std::vector<std::vector<int64_t>> delta(kCategories, std::vector<int64_t>(n + 2, 0));
  for (const Buffer& b : plan.buffers) {
    if (b.offset < 0 && !b.output) continue;
    size_t start = static_cast<size_t>(std::max(b.start, 0));
    size_t end = std::min(static_cast<size_t>(std::max(b.end, b.start)), n - 1);
    delta[static_cast<size_t>(b.category)][start] += b.bytes;
    delta[static_cast<size_t>(b.category)][end + 1] -= b.bytes;
  }
  MemoryTimeline t;
  // Arguments not overwritten by an output: all of them (donated outputs reuse their buffers).
  std::vector<int64_t> base(kCategories, 0);
  for (size_t c = 0; c < plan.argument_by_category.size() && c < kCategories; ++c) {
    base[c] = plan.argument_by_category[c];
    t.arguments += base[c];
  }
  columns = std::max<size_t>(1, std::min(columns, n));
  t.bytes.assign(kCategories, std::vector<int64_t>(columns, 0));
  std::vector<int64_t> live(kCategories, 0);
  size_t column = 0;
  int64_t column_best = -1;
  for (size_t i = 0; i < n; ++i) {
    size_t col = i * columns / n;
    if (col != column) {
      column = col;
      column_best = -1;
    }
    if (t.positions.size() <= col) t.positions.push_back(static_cast<int64_t>(i));
    int64_t total = t.arguments;
    for (size_t c = 0; c < kCategories; ++c) {
      live[c] += delta[c][i];
      total += live[c];
    }
    if (total > column_best) {
      column_best = total;
      for (size_t c = 0; c < kCategories; ++c) t.bytes[c][col] = base[c] + live[c];
    }
    if (total > t.peak_bytes) {
      t.peak_bytes = total;
      t.peak_position = static_cast<int32_t>(i);
    }
  }
  return t;
}

std::string memory_timeline_svg(const MemoryPlan& plan, const std::string& title) {
  MemoryTimeline t = memory_timeline(plan);
  const double width = 1100, height = 560, left = 80, right = 300, top = 50, bottom = 60;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  size_t columns = t.positions.size();
  double max_bytes = static_cast<double>(std::max<int64_t>(t.peak_bytes, 1)) * 1.05;
  auto x_of = [&](size_t col) {
    return left + plot_w * (columns <= 1 ? 0.0 : static_cast<double>(col) / (columns - 1));
  };
  auto y_of = [&](double bytes) { return top + plot_h * (1.0 - bytes / max_bytes); };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"28\" font-size=\"16\">{3}</text>\n",
      width, height, left, escape(title));
  // Stacked areas, bottom-up in category order.
  std::vector<double> lower(columns, 0.0);
  for (size_t c = 0; c < kCategories; ++c) {
    bool any = std::any_of(t.bytes[c].begin(), t.bytes[c].end(), [](int64_t b) { return b > 0; });
    if (!any) continue;
    std::vector<double> upper(columns);
    for (size_t j = 0; j < columns; ++j) upper[j] = lower[j] + static_cast<double>(t.bytes[c][j]);
    std::string points;
    for (size_t j = 0; j < columns; ++j)
      points += fmt::format("{:.1f},{:.1f} ", x_of(j), y_of(upper[j]));
    for (size_t j = columns; j-- > 0;)
      points += fmt::format("{:.1f},{:.1f} ", x_of(j), y_of(lower[j]));
    svg +=
        fmt::format("<polygon points=\"{}\" fill=\"{}\" stroke=\"none\"/>\n", points, kColors[c]);
    lower = upper;
  }
  // Axes and ticks.
  svg += fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/>\n"
      "<line x1=\"{0}\" y1=\"{2}\" x2=\"{3}\" y2=\"{2}\" stroke=\"black\"/>\n",
      left, top, top + plot_h, left + plot_w);
  for (int k = 0; k <= 4; ++k) {
    double bytes = max_bytes * k / 4;
    svg += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n"
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n",
        left - 6, y_of(bytes) + 4, format_gib(static_cast<int64_t>(bytes)), left, y_of(bytes),
        left + plot_w, y_of(bytes));
  }
  svg += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">schedule position (op, of {})"
      "</text>\n",
      left + plot_w / 2, height - 20, plan.num_ops);
  // The peak.
  double px = left + plot_w * (plan.num_ops <= 1 ? 0.0
                                                 : static_cast<double>(t.peak_position) /
                                                       static_cast<double>(plan.num_ops - 1));
  svg += fmt::format(
      "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"black\" "
      "stroke-dasharray=\"4 3\"/>\n"
      "<text x=\"{3:.1f}\" y=\"{4:.1f}\">peak {5} at op {6}</text>\n",
      px, top, top + plot_h, px + 4, y_of(static_cast<double>(t.peak_bytes)) - 6,
      format_gib(t.peak_bytes), t.peak_position);
  // Legend with each category's bytes at the peak.
  double ly = top + 10;
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-weight=\"bold\">at the peak</text>\n",
                     left + plot_w + 20, ly);
  for (size_t c = kCategories; c-- > 0;) {
    int64_t at_peak = c < plan.argument_by_category.size() ? plan.argument_by_category[c] : 0;
    if (c < plan.peak_by_category.size()) at_peak += plan.peak_by_category[c];
    if (at_peak == 0) continue;
    ly += 22;
    svg += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"14\" height=\"14\" fill=\"{}\"/>\n"
        "<text x=\"{:.1f}\" y=\"{:.1f}\">{}: {}</text>\n",
        left + plot_w + 20, ly - 11, kColors[c], left + plot_w + 40, ly,
        escape(std::string(category_name(static_cast<MemoryCategory>(c)))), format_gib(at_peak));
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace precast
