// Entry point of the windowed workbench, called by app/ptw_main.cpp.
#pragma once

#include <string>
#include <vector>

namespace ptw::ui {

int guiMain(int argc, char** argv, const std::string& profilePath, const std::vector<std::string>& overrides,
            const std::string& runsDir);

}  // namespace ptw::ui
