// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/gui_main.h"

#include <malloc.h>

#include <QApplication>
#include <QIcon>
#include <QTimer>

#include "common/error.h"
#include "common/version.h"
#include "ui/main_window.h"
#include "ui/run_controller.h"

namespace ptw::ui {

int guiMain(int argc, char** argv, const GuiOptions& options) {
  // The supervisor's thread decodes every record into batches of a few MB that the window
  // takes about once a second and hands back. Freed, such a block would go back to the
  // kernel (above glibc's mmap threshold, or trimmed off the top of a heap) and the next
  // batch fault every page of it in again, each fault costly under virtualisation. Kept in
  // the heap, it is reused as it is.
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 256 << 20);
  QApplication app(argc, argv);
  QApplication::setApplicationName(QStringLiteral("ptw"));
  QApplication::setOrganizationName(QStringLiteral("ptw"));
  QApplication::setApplicationVersion(QString::fromUtf8(kVersion));
  // The desktop entry's id: how a Wayland compositor finds the window's icon and name.
  QGuiApplication::setDesktopFileName(QString::fromUtf8(kAppId));
  QApplication::setWindowIcon(QIcon::fromTheme(QString::fromUtf8(kAppId)));
  MainWindow window;
  window.setRunsDirectory(QString::fromStdString(options.runsDir));
  window.controller()->setWorkerArgs(options.workerArgs);
  // A file given is the window's file (its name in the title, Save writes it back); --set
  // changes to it show as unsaved. What cannot be opened or applied is said in the window, in
  // the words headless uses, and --start then starts nothing.
  bool ready = options.profilePath.empty() || window.openProfile(QString::fromStdString(options.profilePath));
  if (ready && !options.overrides.empty()) {
    try {
      window.setProfile(core::applyOverrides(window.profile(), options.overrides));
    } catch (const Error& e) {
      window.showProblem(QString::fromStdString(e.what()));
      ready = false;
    }
  }
  window.show();
  if ((options.start && ready) || !options.screenshotPath.empty())
    QTimer::singleShot(0, &window, &MainWindow::startRun);
  if (!options.screenshotPath.empty()) {
    window.setConfirmations(false);
    const QString path = QString::fromStdString(options.screenshotPath);
    QTimer::singleShot(static_cast<int>(options.screenshotAfterS * 1000), &window, [&window, path] {
      const bool ok = window.grab().save(path);
      std::fprintf(ok ? stdout : stderr, ok ? "ptw: screenshot saved to %s\n" : "ptw: cannot write %s\n",
                   path.toLocal8Bit().constData());
      window.stopRun();
      QObject::connect(window.controller(), &RunController::finished, qApp, &QApplication::quit);
      if (!window.controller()->isRunning()) QApplication::quit();
    });
  }
  return app.exec();
}

}  // namespace ptw::ui
