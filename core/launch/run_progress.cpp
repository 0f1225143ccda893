// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/run_progress.h"

#include <algorithm>

#include "launch/step_file_reader.h"

namespace ptw::core {

RunProgress::RunProgress(const std::string& runsDir, std::int64_t runId)
    : m_path(runsDir + "/runs.blocks/" + std::to_string(runId)) {}

RunProgress::~RunProgress() = default;

bool RunProgress::poll() {
  if (!m_file) {
    auto file = std::make_unique<StepFileReader>(m_path);
    if (!file->isOpen()) return false;
    m_file = std::move(file);
  }
  m_file->forEachBlock(m_pos, [this](const BlockHeader& b) {
    auto& last = m_last.try_emplace(b.rank, b.lastStep).first->second;
    last = std::max(last, b.lastStep);
    m_pos = b.end();
    return true;
  });
  const std::int64_t now = step();
  const auto at = std::chrono::steady_clock::now();
  if (now > m_seenStep) {
    if (m_seenStep >= 0) m_rate = (now - m_seenStep) / std::chrono::duration<double>(at - m_seenAt).count();
    m_seenStep = now;
    m_seenAt = at;
  } else if (at - m_seenAt > std::chrono::seconds(5)) {
    m_rate = 0;  // no step for a while: a stalled run, or one waiting
  }
  return true;
}

std::int64_t RunProgress::step() const {
  if (m_last.empty()) return -1;
  std::int64_t lowest = m_last.begin()->second;
  for (const auto& [rank, s] : m_last) lowest = std::min(lowest, s);
  return lowest;
}

}  // namespace ptw::core
