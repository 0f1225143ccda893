// SPDX-License-Identifier: GPL-3.0-or-later
// Entry point of the windowed workbench, called by app/ptw_main.cpp.
#pragma once

#include <string>
#include <vector>

namespace ptw::ui {

/// Example: GuiOptions{}.profilePath = "resources/profiles/seed-ddp.json";
struct GuiOptions {
  std::string profilePath = "";
  std::vector<std::string> overrides = {};
  std::string runsDir = "";
  std::vector<std::string> workerArgs = {};  ///< appended to every worker's command line (--worker-arg)
  bool start = false;                        ///< start the run as soon as the window is up
  std::string screenshotPath = "";           ///< save the window here `screenshotAfterS` into the run, then quit
  double screenshotAfterS = 3.0;
};

int guiMain(int argc, char** argv, const GuiOptions& options);

}  // namespace ptw::ui
