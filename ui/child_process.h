// SPDX-License-Identifier: GPL-3.0-or-later
// Helper processes a widget starts (the device probe, the preflight check).
#pragma once

#include <QObject>
#include <QProcess>

namespace ptw::ui {

/// For a widget's destructor: a helper still running is killed, and its finished() is
/// disconnected first so it cannot reach the half-destroyed widget.
inline void stopChildProcess(QProcess* process, QObject* owner) {
  if (!process) return;
  process->disconnect(owner);
  process->kill();
  process->waitForFinished(2000);
}

}  // namespace ptw::ui
