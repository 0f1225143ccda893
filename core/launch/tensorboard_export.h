// SPDX-License-Identifier: GPL-3.0-or-later
// Writing a stored run as TensorBoard event files (`ptw export --format tensorboard`): one
// folder per rank, one scalar series per stored series. docs/export.md says how to open it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ptw::core {

class RunStore;

/// What exportTensorBoard wrote.
struct TensorBoardExport {
  std::vector<std::string> files;  ///< one event file per rank, rank 0 first
  std::int64_t scalars = 0;        ///< scalar events, over every file
};

/// Throws ptw::Error naming `dir` unless an export can be written there: a writable folder, or
/// one that can be made in a writable folder. Creates nothing.
void checkExportFolder(const std::string& dir);

/// Writes run `runId` of `store` as TensorBoard event files under `dir`, created if need be:
/// `dir`/rankN/events.out.tfevents.<run start>.<host>.ptw for every rank that has records
/// (Note [TensorBoard export]). Exporting the same run into the same folder again replaces
/// its files. An unknown run or an unwritable folder throws ptw::Error before anything is
/// written; a write that fails later (a full disk) leaves no partial event file.
TensorBoardExport exportTensorBoard(RunStore& store, std::int64_t runId, const std::string& dir);

}  // namespace ptw::core
