// SPDX-License-Identifier: GPL-3.0-or-later
// What is checked of the data files a profile names before any rank starts, and the
// messages that the launcher's check and the worker's reader share, so that a missing file
// or column reads the same whichever finds it.
#pragma once

#include <string>
#include <vector>

#include "common/profile.h"

namespace ptw::core {

/// The cells of one CSV line, trimmed; a trailing comma ends in an empty cell.
std::vector<std::string> splitCsvLine(const std::string& line);

/// `field` (data.target, data.features) names `column`, which the header of `path` lacks:
/// one line listing the columns it has.
std::string missingColumnMessage(const std::string& field, const std::string& column, const std::string& path,
                                 const std::vector<std::string>& columns);

/// For the kinds read from disk (csv, mnist): "" when data.path is there and, for csv, its
/// header line holds data.target and every data.features column; else one line naming the
/// field and what to do. Reads a csv's first line only. "" for the other kinds.
std::string dataFileProblem(const DataSpec& data);

}  // namespace ptw::core
