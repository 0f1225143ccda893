#include "ui/gui_main.h"

#include <QApplication>
#include <QMessageBox>

#include "common/error.h"
#include "ui/main_window.h"

namespace ptw::ui {

int guiMain(int argc, char** argv, const std::string& profilePath, const std::vector<std::string>& overrides,
            const std::string& runsDir) {
  QApplication app(argc, argv);
  QApplication::setApplicationName(QStringLiteral("ptw"));
  QApplication::setOrganizationName(QStringLiteral("ptw"));
  MainWindow window;
  window.setRunsDirectory(QString::fromStdString(runsDir));
  try {
    core::Profile p = profilePath.empty() ? core::defaultProfile() : core::loadProfile(profilePath);
    window.setProfile(core::applyOverrides(p, overrides));
  } catch (const Error& e) {
    QMessageBox::warning(&window, QObject::tr("Cannot open profile"), QString::fromStdString(e.what()));
  }
  window.show();
  return app.exec();
}

}  // namespace ptw::ui
