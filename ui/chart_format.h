// SPDX-License-Identifier: GPL-3.0-or-later
// How the window writes numbers and places legends, in tables and on chart axes alike:
// numbers read as numbers (1,148 or 1.15M, never 1.14795e+06 or 1·10^6), axes that count
// ranks or workers tick at whole numbers, and legends sit beside the data, not on it.
#pragma once

#include <QSharedPointer>
#include <QString>

#include <cstdint>
#include <map>
#include <memory>

class QCPAxisTicker;
class QCustomPlot;

namespace ptw::ui {

/// A value for a table cell: thousands separators up to a million ("11,480"), then k/M/G
/// with three significant digits ("1.15M"); below 1000, `significant` digits ("0.0123");
/// "–" for what is not a number.
QString readableNumber(double value, int significant = 4);

/// A value for an axis label: short, with k/M/G ("250k", "1.5M"), "0.25" below 1000.
QString compactNumber(double value);

/// A linear axis ticker whose labels are compactNumber(); with `wholeNumbers`, ticks only at
/// whole numbers (for axes that count steps, ranks or workers).
QSharedPointer<QCPAxisTicker> readableTicker(bool wholeNumbers = false);
/// Where a script's own step counter differs from ptw's step (Note [Stretches of steps] in
/// common/command.h): the first step of each stretch, and its offset (step - own counter).
using StepStretches = std::map<std::int64_t, std::int64_t>;
/// readableTicker(true) for a step axis whose ticks also name the script's own counter, on a
/// second line, where `stretches` says it differs from ptw's step.
QSharedPointer<QCPAxisTicker> stepTicker(std::shared_ptr<const StepStretches> stretches);
/// The same on a logarithmic axis: "1", "10", "100", "1k".
QSharedPointer<QCPAxisTicker> readableLogTicker();

/// Moves the plot's legend out of the axis rect into a row of its own above it, its entries
/// side by side, so no legend covers a point or a bar.
void placeLegendAbove(QCustomPlot* plot);
/// Wraps a legend placed above into as many rows as its entries need to fit the plot's width
/// whole, at most six to a row: a narrow chart's entries are never cut short.
void wrapLegendToWidth(QCustomPlot* plot);

}  // namespace ptw::ui
