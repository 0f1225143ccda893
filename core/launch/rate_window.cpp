// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/rate_window.h"

namespace ptw::core {

void RateWindow::add(double atS, double samples, double busyS) {
  if (!(busyS > 0) || !(samples >= 0)) return;  // an empty or corrupt record says nothing of the rate
  m_entries.push_back({atS, samples, busyS});
  m_samples += samples;
  m_busyS += busyS;
  // Keep at least the newest record, so a rank slower than the window still shows its rate.
  while (m_entries.size() > 1 && m_entries.front().atS < atS - m_windowS) {
    m_samples -= m_entries.front().samples;
    m_busyS -= m_entries.front().busyS;
    m_entries.pop_front();
  }
}

double RateWindow::rate() const { return m_busyS > 0 ? m_samples / m_busyS : 0; }

}  // namespace ptw::core
