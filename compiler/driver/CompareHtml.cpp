#include "compiler/driver/CompareHtml.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string_view>
#include <utility>
#include <vector>

namespace precast {
namespace {

using Series = std::vector<std::pair<double, double>>;

constexpr const char* kColourA = "#1f5fbf";
constexpr const char* kColourB = "#e8590c";

std::string escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
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

// A tick spacing of 1, 2 or 5 times a power of ten giving about five ticks over `range`.
double tick_spacing(double range) {
  double rough = range / 5;
  double power = std::pow(10.0, std::floor(std::log10(rough)));
  double fraction = rough / power;
  double nice = fraction < 1.5 ? 1 : fraction < 3.5 ? 2 : fraction < 7.5 ? 5 : 10;
  return nice * power;
}

struct Axis {
  double low, high, spacing;
  int decimals;
};

// The axis over [low, high], widened to whole tick spacings (a single value gets a range);
// `whole` axes (steps) tick at integers only.
Axis make_axis(double low, double high, bool whole) {
  if (high - low < 1e-12 * std::max(1.0, std::fabs(high))) {
    double pad = whole ? 1.0 : std::max(std::fabs(high) * 0.05, 0.5);
    low -= pad;
    high += pad;
  }
  Axis axis;
  axis.spacing = tick_spacing(high - low);
  if (whole) axis.spacing = std::max(axis.spacing, 1.0);
  axis.low = std::floor(low / axis.spacing) * axis.spacing;
  axis.high = std::ceil(high / axis.spacing) * axis.spacing;
  axis.decimals = std::max(0, static_cast<int>(-std::floor(std::log10(axis.spacing) + 1e-9)));
  return axis;
}

std::vector<double> ticks(const Axis& axis) {
  std::vector<double> values;
  int64_t first = std::llround(axis.low / axis.spacing);
  int64_t last = std::llround(axis.high / axis.spacing);
  for (int64_t i = first; i <= last; ++i) values.push_back(static_cast<double>(i) * axis.spacing);
  return values;
}

// One line chart: both runs' series over step, with axes, ticks, labels and a legend.
std::string chart_svg(const std::string& title, const std::string& y_label, const Series& a,
                      const Series& b) {
  constexpr double kWidth = 720, kHeight = 340, kLeft = 80, kRight = 24, kTop = 40, kBottom = 56;
  const double plot_width = kWidth - kLeft - kRight, plot_height = kHeight - kTop - kBottom;
  std::string svg = fmt::format(
      "<svg class=\"chart\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" role=\"img\" "
      "aria-label=\"{2}\">\n<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"#ffffff\"/>\n"
      "<text x=\"{3}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{2}</text>\n",
      kWidth, kHeight, escape(title), kLeft);
  if (a.empty() && b.empty()) {
    return svg + fmt::format(
                     "<text x=\"{}\" y=\"{}\" font-size=\"14\">neither run recorded "
                     "this</text>\n</svg>\n",
                     kLeft + 20, kTop + plot_height / 2);
  }
  double x_low = INFINITY, x_high = -INFINITY, y_low = INFINITY, y_high = -INFINITY;
  for (const Series* s : {&a, &b}) {
    for (const auto& [x, y] : *s) {
      x_low = std::min(x_low, x);
      x_high = std::max(x_high, x);
      if (std::isfinite(y)) {
        y_low = std::min(y_low, y);
        y_high = std::max(y_high, y);
      }
    }
  }
  if (!std::isfinite(y_low)) y_low = y_high = 0;
  Axis x_axis = make_axis(x_low, x_high, true), y_axis = make_axis(y_low, y_high, false);
  auto px = [&](double x) {
    return kLeft + (x - x_axis.low) / (x_axis.high - x_axis.low) * plot_width;
  };
  auto py = [&](double y) {
    return kTop + plot_height - (y - y_axis.low) / (y_axis.high - y_axis.low) * plot_height;
  };
  // Grid, ticks and tick labels.
  for (double t : ticks(y_axis)) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#e4e4e4\"/>"
        "<line x1=\"{3:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{1:.1f}\" stroke=\"#333333\"/>"
        "<text x=\"{4:.1f}\" y=\"{5:.1f}\" font-size=\"12\" text-anchor=\"end\">{6:.{7}f}</text>\n",
        kLeft, py(t), kLeft + plot_width, kLeft - 5, kLeft - 8, py(t) + 4, t, y_axis.decimals);
  }
  for (double t : ticks(x_axis)) {
    double bottom = kTop + plot_height;
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#333333\"/>"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" font-size=\"12\" text-anchor=\"middle\">{4:.{5}f}"
        "</text>\n",
        px(t), bottom, bottom + 5, bottom + 19, t, x_axis.decimals);
  }
  // Axes and their names.
  svg += fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#333333\"/>"
      "<line x1=\"{0}\" y1=\"{2}\" x2=\"{3}\" y2=\"{2}\" stroke=\"#333333\"/>\n"
      "<text x=\"{4}\" y=\"{5}\" font-size=\"13\" text-anchor=\"middle\">step</text>\n"
      "<text x=\"18\" y=\"{6}\" font-size=\"13\" text-anchor=\"middle\" "
      "transform=\"rotate(-90 18 {6})\">{7}</text>\n",
      kLeft, kTop, kTop + plot_height, kLeft + plot_width, kLeft + plot_width / 2, kHeight - 10,
      kTop + plot_height / 2, escape(y_label));
  // The curves, with a dot per step when there are few.
  for (const auto& [series, colour] : {std::pair(&a, kColourA), std::pair(&b, kColourB)}) {
    std::string points;
    for (const auto& [x, y] : *series) {
      if (std::isfinite(y)) points += fmt::format("{:.2f},{:.2f} ", px(x), py(y));
    }
    if (!points.empty()) points.pop_back();
    svg +=
        fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2.5\" points=\"{}\"/>\n",
                    colour, points);
    if (series->size() <= 60) {
      for (const auto& [x, y] : *series) {
        if (!std::isfinite(y)) continue;
        svg += fmt::format("<circle cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"3\" fill=\"{}\"/>", px(x),
                           py(y), colour);
      }
      svg += "\n";
    }
  }
  // Legend, on the title's line above the plot, where no curve runs.
  double legend_x = kLeft + plot_width - 150, legend_y = 12;
  svg += fmt::format(
      "<rect x=\"{0:.1f}\" y=\"{1:.1f}\" width=\"22\" height=\"10\" fill=\"{2}\"/>"
      "<text x=\"{3:.1f}\" y=\"{4:.1f}\" font-size=\"13\">run A</text>"
      "<rect x=\"{5:.1f}\" y=\"{1:.1f}\" width=\"22\" height=\"10\" fill=\"{6}\"/>"
      "<text x=\"{7:.1f}\" y=\"{4:.1f}\" font-size=\"13\">run B</text>\n",
      legend_x, legend_y, kColourA, legend_x + 28, legend_y + 10, legend_x + 80, kColourB,
      legend_x + 108);
  return svg + "</svg>\n";
}

std::string table_html(const Comparison& c) {
  std::string html =
      "<table>\n<thead><tr><th></th><th>A</th><th>B</th><th>B &minus; A</th><th></th></tr>"
      "</thead>\n<tbody>\n";
  for (const ComparisonRow& row : c.rows) {
    std::string word = verdict_word(row.verdict);
    html += fmt::format(
        "<tr><th scope=\"row\">{}</th><td>{}</td><td>{}</td><td>{}</td><td class=\"{}\">{}</td>"
        "</tr>\n",
        escape(row.name), escape(row.a), escape(row.b), escape(row.difference), word, word);
  }
  return html + "</tbody>\n</table>\n";
}

std::string config_html(const Comparison& c) {
  if (!c.configs_compared) return "<p>Config: " + escape(c.config_note) + "</p>\n";
  if (c.config_differences.empty()) return "<p>Config keys that differ: none</p>\n";
  std::string html = fmt::format(
      "<h2>Config keys that differ ({})</h2>\n<table>\n<thead><tr><th>key</th><th>A</th>"
      "<th>B</th></tr></thead>\n<tbody>\n",
      c.config_differences.size());
  for (const ConfigDifference& d : c.config_differences) {
    html += fmt::format("<tr><th scope=\"row\">{}</th><td>{}</td><td>{}</td></tr>\n", escape(d.key),
                        escape(d.a ? *d.a : "(absent)"), escape(d.b ? *d.b : "(absent)"));
  }
  return html + "</tbody>\n</table>\n";
}

}  // namespace

std::string comparison_html(const Comparison& c) {
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>precast compare</title>\n<style>\n"
      "body { font-family: sans-serif; color: #222222; background: #ffffff; margin: 24px; }\n"
      "table { border-collapse: collapse; margin: 8px 0 20px 0; }\n"
      "th, td { border: 1px solid #cccccc; padding: 4px 10px; text-align: right; }\n"
      "th[scope=row] { text-align: left; font-weight: normal; }\n"
      ".improvement { color: #1b7f2a; } .regression { color: #c0262d; }\n"
      ".changed { color: #a06000; } .same { color: #777777; }\n"
      ".swatch-a { color: " +
      std::string(kColourA) + "; } .swatch-b { color: " + kColourB +
      "; }\n</style>\n</head>\n<body>\n<h1>precast compare</h1>\n";
  html += fmt::format(
      "<p><b class=\"swatch-a\">A</b>: {}<br><b class=\"swatch-b\">B</b>: {}<br>Window: {}; means "
      "leave out each run's first step (MaxText's step 0 includes compilation).</p>\n",
      escape(c.a_label), escape(c.b_label), escape(c.window_text));
  html += table_html(c);
  html += config_html(c);
  html += "<h2>Curves</h2>\n";
  html += chart_svg("Loss", "loss", c.a_curves.loss, c.b_curves.loss);
  html += chart_svg("Step time (steps after the first)", "seconds per step", c.a_curves.seconds,
                    c.b_curves.seconds);
  return html + "</body>\n</html>\n";
}

}  // namespace precast
