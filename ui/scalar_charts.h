// SPDX-License-Identifier: GPL-3.0-or-later
// ScalarCharts: a chart per named scalar a run reports (a command run's accuracy, grad_norm,
// ...), each a MetricChart named "scalar:NAME" with a line per rank and, for several ranks,
// their mean, emphasized as on the loss chart. A chart is made when the first value of a new
// name arrives; the charts sit two abreast in a scroll area, by name.
#pragma once

#include <QString>
#include <QStringList>
#include <QWidget>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ui/live_panel.h"
#include "ui/metric_chart.h"

class QGridLayout;

namespace ptw::ui {

class ScalarCharts : public QWidget, public LivePanel {
  Q_OBJECT
 public:
  /// More names than this are stored but not charted: each chart is a plot of its own.
  static constexpr int kMaxCharts = 64;
  /// The real points of one scalar, for zooming into the past (RunStore::series "scalar:NAME").
  using DetailProviders = std::function<MetricChart::DetailProvider(const std::string& name)>;

  explicit ScalarCharts(QWidget* parent = nullptr);

  void setDetailProviders(DetailProviders providers) { m_providers = std::move(providers); }
  /// Removes every chart; the next run's ranks are named `series` ("rank 0", ...).
  void reset(const QStringList& series);
  void reset(const LiveRun& run) override { reset(run.names); }
  /// One value of `name` from `rank` at `step`; makes the name's chart when it is new.
  void add(std::string_view name, int rank, std::int64_t step, double value);
  /// Adds the named scalars among the records.
  void add(RecordSpan records) override;
  /// Drops every point past `step` (a restart replays from there).
  void truncateAfter(std::int64_t step) override;
  void refresh() override;
  void fit() override;
  void readStoreFrom(LiveStore& store) override;
  void setSmoothing(double weight);
  void setIgnoreOutliers(bool on);
  void setHighlighted(int series);

  int count() const { return static_cast<int>(m_charts.size()); }
  /// The chart of `name`, or null.
  MetricChart* chart(const QString& name) const;

 signals:
  /// A chart for a new name was made.
  void chartAdded(const QString& name);
  /// `name` is the first name past kMaxCharts: it and any later are not charted.
  void tooMany(const QString& name);

 private:
  struct Chart {
    MetricChart* chart = nullptr;
    int mean = -1;  ///< the mean's series, or -1 for one rank
    /// Steps some ranks have reported, awaiting the others: the sum and the count so far.
    std::map<std::int64_t, std::pair<double, int>> open;
    std::int64_t doneStep = -1;  ///< the latest step whose mean is drawn
  };
  Chart* make(const QString& name);
  void relayout();

  QGridLayout* m_grid = nullptr;
  QStringList m_series;
  std::map<QString, Chart> m_charts;  ///< by name, so laid out in name order
  DetailProviders m_providers;
  double m_smoothing = 0;
  bool m_ignoreOutliers = false;
  int m_highlighted = -1;
  bool m_tooManySaid = false;
};

}  // namespace ptw::ui
