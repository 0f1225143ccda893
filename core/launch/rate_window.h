// SPDX-License-Identifier: GPL-3.0-or-later
// A rate smoothed over the last seconds of records: the progress line's samples/s.
#pragma once

#include <deque>

namespace ptw::core {

/// Samples over time inside steps, summed over the records that arrived in the last
/// `windowS` seconds. A rank that sends its steps in groups (Note [Step groups]) sends a
/// fast group and a slow one in turn; a single group's rate jumps by an order of magnitude,
/// the window's does not.
/// Example: RateWindow w(3.0); w.add(now, samples, busyS); w.rate()
class RateWindow {
 public:
  explicit RateWindow(double windowS = 3.0) : m_windowS(windowS) {}

  /// A record that arrived at `atS` (seconds on any steady clock), of `samples` samples
  /// trained in `busyS` seconds inside steps.
  void add(double atS, double samples, double busyS);
  /// Samples per second inside steps over the window; 0 before any record.
  double rate() const;

 private:
  struct Entry {
    double atS;
    double samples;
    double busyS;
  };
  double m_windowS;
  std::deque<Entry> m_entries;
  double m_samples = 0;
  double m_busyS = 0;
};

}  // namespace ptw::core
