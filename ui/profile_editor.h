// SPDX-License-Identifier: GPL-3.0-or-later
// ProfileEditor: every field of a profile, grouped (workload, strategy and devices, command,
// hyperparameters, run), built from the profile's own field list so a new field appears
// without UI work. Only the fields that apply to the chosen kinds are shown (data.path for
// csv and mnist, bucket_mb for ddp, the command group and no model or data for a command
// run: Note [Fields that apply]); command.args is edited one argument a line, command.env as
// a KEY/VALUE table, and hosts.interface picked from this machine's interfaces or typed; each
// label's tooltip is the field's help from the profile (core::fieldHelp). Each field's widget
// is named by its path ("hyper.lr"). Invalid values are marked at the field with the reason;
// a preflight check loads the model and data in a worker process and shows their shapes.
#pragma once

#include <QMap>
#include <QString>
#include <QWidget>

#include <memory>
#include <string>
#include <vector>

#include "common/profile.h"

class QComboBox;
class QFormLayout;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QProcess;
class QPushButton;
class QTableWidget;
class QTemporaryDir;
class QVBoxLayout;

namespace ptw::ui {

class DevicePicker;

class ProfileEditor : public QWidget {
  Q_OBJECT
 public:
  explicit ProfileEditor(QWidget* parent = nullptr);
  ~ProfileEditor() override;

  void setProfile(const core::Profile& profile);
  /// What the fields say now; valid only when errors() is empty.
  core::Profile profile() const { return m_profile; }
  const std::vector<core::FieldError>& errors() const { return m_errors; }
  /// The widget of a field ("hyper.lr"), or null.
  QWidget* field(const QString& path) const { return m_fields.value(path); }
  /// Sets a field's value from text as a user would type it: command.args and command.env
  /// take one item a line ("train.py\n--lr", "OMP_NUM_THREADS=1\nSEED=3").
  void setFieldText(const QString& path, const QString& text);
  DevicePicker* devicePicker() const { return m_devices; }

 public slots:
  /// Loads the workload in `ptw-worker --preflight` and shows its shapes (asynchronous).
  void runPreflight();

 signals:
  /// A field changed (not emitted by setProfile).
  void edited();
  void preflightFinished(bool ok, const QString& text);

 private:
  QString textOf(const QString& path) const;
  void collect();
  void markErrors();
  /// Shows the fields that apply to the chosen kinds (data, model, strategy, device,
  /// optimizer, schedule) and hides the rest.
  void showApplicable();
  /// Collects the fields and says so, unless setProfile is filling them.
  void fieldEdited();
  QFormLayout* addGroup(const QString& path, QVBoxLayout* layout, const QMap<QString, QFormLayout*>& forms);
  void addDevicePicker(QFormLayout* form, QWidget* box);
  void addField(const QString& path, const std::string& json, QFormLayout* form);
  QWidget* buildFieldEditor(const QString& path, const QString& kind, QWidget*& row);
  QComboBox* buildChoiceBox(const QString& path, const std::vector<std::string>& choices);
  QPlainTextEdit* buildArgsEditor();
  QWidget* buildBrowseRow(const QString& path, QLineEdit* e);
  void addPreflightRows(QFormLayout* form);
  QWidget* buildEnvTable();
  QComboBox* buildInterfacePicker();
  void setEnvEntries(const QStringList& entries);
  /// command.env's entries, "KEY=VALUE" each; `rows` gets each one's row in the table.
  QStringList envEntries(std::vector<int>* rows = nullptr) const;
  QStringList argsList() const;

  core::Profile m_profile;
  std::vector<core::FieldError> m_errors;
  QMap<QString, QWidget*> m_fields;
  struct Row {
    QFormLayout* form = nullptr;
    QWidget* widget = nullptr;  ///< the field's editor, or the box holding it and its browse button
  };
  QMap<QString, Row> m_rows;
  QMap<QString, QString> m_kinds;  ///< path -> string | bool | int | double | array
  QLabel* m_summary = nullptr;
  QLabel* m_preflight = nullptr;
  QLabel* m_preflightImages = nullptr;          ///< the sample images of a check of image data
  std::unique_ptr<QTemporaryDir> m_samplesDir;  ///< where the worker writes them
  QPushButton* m_preflightButton = nullptr;
  QPlainTextEdit* m_args = nullptr;  ///< command.args, one argument a line
  QTableWidget* m_env = nullptr;     ///< command.env, KEY and VALUE columns
  std::vector<int> m_envRows;        ///< the table row of each command.env entry
  DevicePicker* m_devices = nullptr;
  QProcess* m_preflightProcess = nullptr;
  bool m_filling = false;
};

}  // namespace ptw::ui
