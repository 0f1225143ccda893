// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/data_kinds.h"

#include "common/error.h"

namespace ptw::core {
namespace {

DataKindInfo row(DataKind kind, const char* name) {
  DataKindInfo info;
  info.kind = kind;
  info.name = name;
  return info;
}

// A kind read from data.path, which names `pathHint`.
DataKindInfo fileRow(DataKind kind, const char* name, const char* pathHint) {
  DataKindInfo info = row(kind, name);
  info.readsFiles = true;
  info.pathHint = pathHint;
  return info;
}

}  // namespace

const std::vector<DataKindInfo>& dataKinds() {
  static const std::vector<DataKindInfo> table = [] {
    std::vector<DataKindInfo> t;
    t.push_back(row(DataKind::SyntheticRegression, "synthetic-regression"));

    DataKindInfo blobs = row(DataKind::SyntheticClassification, "synthetic-classification");
    blobs.classification = true;
    t.push_back(blobs);

    DataKindInfo csv = fileRow(DataKind::Csv, "csv", "the file");
    csv.readsTask = true;
    csv.readsColumns = true;
    t.push_back(csv);

    DataKindInfo mnist = fileRow(DataKind::Mnist, "mnist", "the folder holding the IDX files");
    mnist.folder = true;
    mnist.classification = true;
    t.push_back(mnist);

    DataKindInfo cifar = fileRow(DataKind::Cifar10, "cifar10", "the folder holding data_batch_*.bin");
    cifar.folder = true;
    cifar.images = true;
    cifar.classification = true;
    t.push_back(cifar);

    DataKindInfo imageFolder =
        fileRow(DataKind::ImageFolder, "image-folder", "the root folder (one subfolder per class)");
    imageFolder.folder = true;
    imageFolder.images = true;
    imageFolder.classification = true;
    t.push_back(imageFolder);

    DataKindInfo npy = fileRow(DataKind::Npy, "npy", "the features' .npy file");
    npy.images = true;
    npy.readsTask = true;
    npy.readsLabelsFile = true;
    t.push_back(npy);
    return t;
  }();
  return table;
}

const DataKindInfo* findDataKind(const std::string& name) {
  for (const auto& k : dataKinds())
    if (k.name == name) return &k;
  return nullptr;
}

const DataKindInfo& dataKindOf(const DataSpec& data) {
  if (const DataKindInfo* k = findDataKind(data.kind)) return *k;
  std::string known;
  for (const auto& k : dataKinds()) known += (known.empty() ? "" : ", ") + k.name;
  PTW_FAIL("data.kind: expected one of ", known, ", got \"", data.kind, "\"");
}

}  // namespace ptw::core
