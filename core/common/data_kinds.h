// SPDX-License-Identifier: GPL-3.0-or-later
// The table of data kinds: what each value of data.kind reads and holds, in one place.
// Profile validation, the check of data files, makeDataset (engine/workload.cpp) and the
// editor's fields that apply read this table instead of comparing names. Plain C++: no
// LibTorch, no Qt.
//
// Adding a data kind is a row here, its loader in makeDataset and its documentation
// (docs/architecture.md).
#pragma once

#include <string>
#include <vector>

#include "common/profile.h"

namespace ptw::core {

/// data.kind, parsed (dataKindOf).
enum class DataKind { SyntheticRegression, SyntheticClassification, Csv, Mnist, Cifar10, ImageFolder, Npy };

/// One data kind. Example: DataKindInfo{}.name = "csv";
struct DataKindInfo {
  DataKind kind = DataKind::SyntheticRegression;
  std::string name = "";  ///< data.kind
  /// Read from data.path; else generated from data.seed and data.noise.
  bool readsFiles = false;
  bool folder = false;  ///< data.path is a folder, not a file
  /// Images, to which normalisation and augmentation apply (data.mean, data.std,
  /// data.crop_padding, data.flip).
  bool images = false;
  /// A classification whatever data.task says (cross-entropy; validation reports an accuracy).
  bool classification = false;
  bool readsTask = false;        ///< data.task says whether it is a classification
  bool readsColumns = false;     ///< data.features and data.target name its columns
  bool readsLabelsFile = false;  ///< its labels are in data.labels_path
  /// What data.path must name, said when it is empty: "csv needs " + pathHint.
  std::string pathHint = "";
};

/// Every data kind, in the order the editor lists them (the default first).
const std::vector<DataKindInfo>& dataKinds();
/// The row named `name`, or nullptr.
const DataKindInfo* findDataKind(const std::string& name);
/// The row of data.kind. Throws ptw::Error, as validation words it, when there is none:
/// `data.kind: expected one of synthetic-regression, ..., got "parquet"`.
const DataKindInfo& dataKindOf(const DataSpec& data);

}  // namespace ptw::core
