#include "report/figure.h"

#include <cstdlib>
#include <regex>

#include <fmt/format.h>

#include "core/error.h"

namespace tdyn {
namespace {

std::string gp_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string shell_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// gnuplot's SVG terminal shows a `labels hypertext` point's text through a script the page would have to supply;
// a <title> child shows it natively, as a hover tooltip, with no script.
void hypertext_to_titles(const fs::path& svg) {
  static const std::regex hypertext(
      R"re(<g onmousemove="gnuplot_svg\.showHypertext\(evt,'([^']*)'\)" onmouseout="gnuplot_svg\.hideHypertext\(\)"><title> </title>)re");
  const std::string text = read_file(svg);
  const std::string titled = std::regex_replace(text, hypertext, "<g><title>$1</title>");
  if (titled != text) write_file_atomic(svg, titled);
}

}  // namespace

bool gnuplot_available() {
  static const bool found = std::system("command -v gnuplot >/dev/null 2>&1") == 0;
  return found;
}

FigureFiles write_figure(const fs::path& dir, const Figure& fig) {
  std::string data;
  for (size_t s = 0; s < fig.series.size(); ++s) {
    const auto& cols = fig.series[s].columns;
    TDYN_CHECK(!cols.empty());
    data += fmt::format("# series {}: {}\n", s, fig.series[s].label);
    bool image = fig.series[s].style.starts_with("image");
    for (size_t r = 0; r < cols[0].size(); ++r) {
      // gnuplot's image style needs a blank line between scan lines (x changes).
      if (image && r > 0 && cols[0][r] != cols[0][r - 1]) data += '\n';
      for (size_t c = 0; c < cols.size(); ++c) {
        TDYN_CHECK(cols[c].size() == cols[0].size());
        data += fmt::format("{}{:.10g}", c ? " " : "", cols[c][r]);
      }
      data += '\n';
    }
    data += "\n\n";
  }
  std::string dat = fig.name + ".dat", gp = fig.name + ".gp", svg = fig.name + ".svg";
  std::string script = fmt::format(
      "# Renders {svg} from {dat}: gnuplot {gp}\n"
      "set terminal svg size {w},{h} dynamic enhanced font 'sans,11' background rgb 'white'\n"
      "set output {out}\nset title {t} noenhanced\nset xlabel {x} noenhanced\nset ylabel {y} noenhanced\n"
      "set key outside right noenhanced\nset grid\n",
      fmt::arg("svg", svg), fmt::arg("dat", dat), fmt::arg("gp", gp), fmt::arg("w", fig.width), fmt::arg("h", fig.height),
      fmt::arg("out", gp_quoted(svg)), fmt::arg("t", gp_quoted(fig.title)), fmt::arg("x", gp_quoted(fig.xlabel)),
      fmt::arg("y", gp_quoted(fig.ylabel)));
  for (const auto& line : fig.settings) script += line + "\n";
  script += "plot ";
  for (size_t s = 0; s < fig.series.size(); ++s) {
    const auto& ser = fig.series[s];
    bool image = ser.style.starts_with("image");
    std::string use = ser.using_spec.empty() ? (image ? "1:2:3" : "1:2") : ser.using_spec;
    script += fmt::format("{}{} index {} using {} with {} title {}", s ? ", \\\n     " : "", gp_quoted(dat), s, use, ser.style,
                          ser.label.empty() ? "''" : gp_quoted(ser.label));
  }
  script += "\n";
  write_file_atomic(dir / dat, data);
  write_file_atomic(dir / gp, script);
  FigureFiles out{{dat, gp}, false, ""};
  if (!gnuplot_available()) {
    out.note = "gnuplot not found: wrote " + dat + " and " + gp + "; run 'gnuplot " + gp + "' to render";
    return out;
  }
  std::string cmd = fmt::format("cd {} && gnuplot {} >/dev/null 2>&1", shell_quoted(dir.string()), shell_quoted(gp));
  if (std::system(cmd.c_str()) == 0 && fs::exists(dir / svg)) {
    out.rendered = true;
    out.written.push_back(svg);
    hypertext_to_titles(dir / svg);
  } else {
    out.note = "gnuplot failed on " + gp;
  }
  return out;
}

}  // namespace tdyn
