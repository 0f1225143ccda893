// SPDX-License-Identifier: GPL-3.0-or-later
// RunProgress: where a running run is, for the Runs tab: its live step and rate, read from the
// headers of the blocks its ranks append to its step file (Note [Step blocks] in run_store.h),
// past where the last look ended. Only reads, and reads no record: a look costs the headers
// written since the last, whatever the run's length.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace ptw::core {

class StepFileReader;

/// Example: RunProgress progress("runs", 7); if (progress.poll()) show(progress.step(), progress.stepsPerS());
class RunProgress {
 public:
  RunProgress(const std::string& runsDir, std::int64_t runId);
  ~RunProgress();
  RunProgress(const RunProgress&) = delete;
  RunProgress& operator=(const RunProgress&) = delete;

  /// Reads the headers of the blocks written since the last call; false while the run has
  /// no step file (not started, or its records already packed into chunks).
  bool poll();
  /// The last step every rank that reported has reached (-1: none yet).
  std::int64_t step() const;
  /// Steps a second between the last two polls that saw the step move; 0 before.
  double stepsPerS() const { return m_rate; }

 private:
  std::string m_path;
  std::unique_ptr<StepFileReader> m_file;
  long long m_pos = 0;
  std::map<int, std::int64_t> m_last;  ///< each rank's last step
  std::int64_t m_seenStep = -1;
  std::chrono::steady_clock::time_point m_seenAt;
  double m_rate = 0;
};

}  // namespace ptw::core
