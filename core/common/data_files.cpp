// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/data_files.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "common/data_kinds.h"

namespace ptw::core {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  const auto e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

bool exists(const std::string& path, bool folder) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) == folder;
}

constexpr const char* kMnistFiles = "train-images-idx3-ubyte and train-labels-idx1-ubyte";

}  // namespace

std::vector<std::string> splitCsvLine(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) out.push_back(trim(cell));
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

std::string missingColumnMessage(const std::string& field, const std::string& column, const std::string& path,
                                 const std::vector<std::string>& columns) {
  std::string list;
  for (const auto& c : columns) list += (list.empty() ? "" : ", ") + c;
  return field + ": column \"" + column + "\" is not in " + path + " (columns: " + list + "); set " + field +
         " to one of them";
}

std::string dataFileProblem(const DataSpec& data) {
  const DataKindInfo* kind = findDataKind(data.kind);
  if (kind && kind->kind == DataKind::Mnist) {
    if (!exists(data.path, true))
      return "data.path: " + data.path + " is not a folder; set data.path to the folder that holds " + kMnistFiles;
    for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"})
      if (!exists(data.path + "/" + name, false))
        return "data.path: " + data.path + " has no " + name + "; set data.path to the folder that holds " +
               kMnistFiles;
    return "";
  }
  if (!kind || kind->kind != DataKind::Csv) return "";
  // A relative data.path is read from the profile's folder (loadProfile resolves it).
  if (exists(data.path, true)) return "data.path: " + data.path + " is a folder; set data.path to a CSV file";
  if (!exists(data.path, false))
    return "data.path: " + data.path + " does not exist; set data.path to an existing CSV file";
  std::ifstream in(data.path);
  std::string header;
  if (!in || !std::getline(in, header)) return "";  // the worker says what is wrong with the file itself
  const std::vector<std::string> columns = splitCsvLine(header);
  auto has = [&](const std::string& c) {
    for (const auto& x : columns)
      if (x == c) return true;
    return false;
  };
  if (!has(data.target)) return missingColumnMessage("data.target", data.target, data.path, columns);
  for (const auto& f : data.features)
    if (!has(f)) return missingColumnMessage("data.features", f, data.path, columns);
  return "";
}

}  // namespace ptw::core
