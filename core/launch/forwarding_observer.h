// SPDX-License-Identifier: GPL-3.0-or-later
// ForwardingObserver: a LaunchObserver that passes every callback on to an inner one. A
// wrapper (the supervisor's store, the run session's final metrics) derives from it,
// overrides only the callbacks it acts on, and calls the base to pass them on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launch/launcher.h"

namespace ptw::core {

/// Example: void Counting::onRecords(std::vector<Record>& b) { n += b.size(); ForwardingObserver::onRecords(b); }
class ForwardingObserver : public LaunchObserver {
 public:
  explicit ForwardingObserver(LaunchObserver& inner) : m_inner(inner) {}

  void onStarted(int port, const std::vector<int>& pids) override { m_inner.onStarted(port, pids); }
  /// The inner observer may take the batch (LaunchObserver::onRecords): a wrapper reads it first.
  void onRecords(std::vector<Record>& batch) override { m_inner.onRecords(batch); }
  void onLog(int rank, const std::string& line) override { m_inner.onLog(rank, line); }
  void onRankExit(const RankExit& exit) override { m_inner.onRankExit(exit); }
  void onRestart(int attempt, std::int64_t step) override { m_inner.onRestart(attempt, step); }
  void onHosts(const std::vector<std::string>& rankHosts) override { m_inner.onHosts(rankHosts); }

 private:
  LaunchObserver& m_inner;
};

}  // namespace ptw::core
