// SPDX-License-Identifier: GPL-3.0-or-later
// The window's colours: one per series (ranks, overlaid runs), and the marks for a failure
// and for a highlighted difference.
#pragma once

#include <QColor>

namespace ptw::ui {

/// Colour of series `i` (ranks, overlaid runs): ten distinct hues, repeating.
inline QColor seriesColor(int i) {
  static const QColor colors[] = {
      QColor(31, 119, 180), QColor(255, 127, 14),  QColor(44, 160, 44),   QColor(214, 39, 40),  QColor(148, 103, 189),
      QColor(140, 86, 75),  QColor(227, 119, 194), QColor(127, 127, 127), QColor(188, 189, 34), QColor(23, 190, 207)};
  return colors[(i % 10 + 10) % 10];
}

inline QColor failureColor() { return QColor(176, 0, 32); }       ///< text of a failed rank or run
inline QColor highlightColor() { return QColor(255, 236, 153); }  ///< background of a differing cell

}  // namespace ptw::ui
