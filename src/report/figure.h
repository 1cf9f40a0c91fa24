// Figures as three files: NAME.dat (the data, gnuplot blocks), NAME.gp (a small gnuplot script that reads
// it) and NAME.svg (rendered by gnuplot when it is installed). Without gnuplot the data and script are still
// written, and render() says so, so a user can render later or plot the .dat with anything else.
#pragma once

#include <string>
#include <vector>

#include "core/files.h"

namespace tdyn {

struct Series {
  std::string label;
  std::vector<std::vector<double>> columns;  // equal-length columns: x, y (and more for `using`)
  std::string style = "lines";               // gnuplot "with" clause: "lines", "points pt 7 ps 0.5", "image", ...
  std::string using_spec = {};               // gnuplot "using"; default "1:2" (or "1:2:3" for image)
};

struct Figure {
  std::string name;  // file stem
  std::string title, xlabel, ylabel;
  std::vector<std::string> settings;  // extra gnuplot lines, e.g. "set size ratio -1", "set logscale y"
  std::vector<Series> series;
  int width = 640, height = 480;
};

struct FigureFiles {
  std::vector<std::string> written;  // file names relative to the directory
  bool rendered = false;
  std::string note;  // why it was not rendered, if it was not
};

// Writes the figure into `dir` and renders it if gnuplot is available.
FigureFiles write_figure(const fs::path& dir, const Figure& figure);

bool gnuplot_available();

}  // namespace tdyn
