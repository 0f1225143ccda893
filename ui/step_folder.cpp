// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/step_folder.h"

#include <cmath>
#include <utility>

namespace ptw::ui {

StepFolder::Open& StepFolder::openOf(int rank) {
  const std::size_t i = static_cast<std::size_t>(rank);
  if (i >= m_open.size()) m_open.resize(i + 1);
  return m_open[i];
}

void StepFolder::closeAll(std::vector<core::Record>& out) {
  for (Open& o : m_open)
    if (o.record.group.count > 0) {
      out.push_back(o.record);
      o.record.group = core::StepGroup{};
    }
}

// Note [Attached history in groups]
void StepFolder::fold(std::vector<core::Record>& batch) {
  m_out.clear();
  m_out.reserve(batch.size() / 8 + 16);
  for (const core::Record& r : batch) {
    if (r.kind != core::Record::Kind::Step || r.step.rank < 0) {
      closeAll(m_out);
      m_out.push_back(r);
      continue;
    }
    const core::StepRecord& s = r.step;
    Open& o = openOf(s.rank);
    core::StepGroup& g = o.record.group;
    const bool diverges = !o.diverged && core::isReportedLoss(s.loss) && !std::isfinite(s.loss);
    if (diverges) o.diverged = true;
    if (g.count > 0 && (s.step >= o.windowEnd || s.step <= o.record.step.step || diverges)) {
      m_out.push_back(o.record);
      g = core::StepGroup{};
    }
    if (g.count == 0) {
      const std::int64_t span = core::stepGroupSpan(s.step);
      o.windowEnd = s.step - s.step % span + span;
      o.record.kind = core::Record::Kind::Group;
    }
    g.add(s);
    o.record.step = s;
  }
  closeAll(m_out);
  batch.swap(m_out);
}

}  // namespace ptw::ui
