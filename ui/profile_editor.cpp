#include "ui/profile_editor.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QProcess>
#include <QPushButton>
#include <QTemporaryFile>
#include <QToolButton>
#include <QVBoxLayout>

#include <set>

#include "common/strategies.h"
#include "launch/launcher.h"
#include "ui/child_process.h"
#include "ui/device_picker.h"

namespace ptw::ui {
namespace {

const QString kListSeparator = QStringLiteral(", ");  ///< how an array field's items are shown
const QStringList kFileFields = {"model.path", "data.path", "data.labels_path", "run.resume_from"};

QString kindOf(const std::string& json) {
  if (json.empty()) return "string";
  if (json[0] == '"') return "string";
  if (json == "true" || json == "false") return "bool";
  if (json[0] == '[') return "array";
  return json.find_first_of(".eE") != std::string::npos ? "double" : "int";
}

QString groupOf(const QString& path) {
  if (path == "name") return QObject::tr("Profile");
  if (path.startsWith("model.")) return QObject::tr("Model");
  if (path.startsWith("data.")) return QObject::tr("Data");
  if (path.startsWith("strategy.")) return QObject::tr("Strategy and devices");
  if (path.startsWith("hyper.")) return QObject::tr("Hyperparameters");
  return QObject::tr("Run, checkpoints and restarts");
}

// Whether a field means anything for the kinds the profile has chosen; one that does not
// is hidden, so the form shows what this run will read.
bool applies(const QString& path, const core::Profile& p) {
  const auto& d = p.data;
  const bool synthetic = d.kind.rfind("synthetic", 0) == 0;
  if (path == "data.path") return !synthetic;
  if (path == "data.labels_path") return d.kind == "npy";
  if (path == "data.mean" || path == "data.std" || path == "data.crop_padding" || path == "data.flip")
    return d.kind == "cifar10" || d.kind == "image-folder" || d.kind == "npy";
  if (path == "data.features" || path == "data.target") return d.kind == "csv";
  if (path == "data.task") return d.kind == "csv" || d.kind == "npy";
  if (path == "data.seed" || path == "data.noise") return synthetic;
  if (path == "model.hidden" || path == "model.activation") return p.model.kind == "mlp";
  if (path == "model.path") return p.model.kind == "torchscript";
  if (path == "strategy.pool_mode") return p.strategy.kind == "pool";
  if (path == "strategy.backend" || path == "strategy.bucket_mb") return p.strategy.kind == "ddp";
  if (path == "strategy.gpus") return p.strategy.device == "cuda";
  if (path == "hyper.momentum" || path == "hyper.nesterov") return p.hyper.optimizer == "sgd";
  if (path == "hyper.step_size" || path == "hyper.gamma") return p.hyper.schedule == "step";
  return true;
}

// The profile's help line as plain text: the Markdown backticks are for the manual.
QString helpFor(const QString& path) {
  const auto& help = core::fieldHelp();
  const auto it = help.find(path.toStdString());
  return it == help.end() ? QString() : QString::fromStdString(it->second).remove('`');
}

}  // namespace

ProfileEditor::ProfileEditor(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  QMap<QString, QFormLayout*> forms;
  for (const auto& [pathStd, json] : core::profileFields(core::defaultProfile())) {
    const QString path = QString::fromStdString(pathStd);
    const QString group = groupOf(path);
    if (!forms.contains(group)) {
      auto* box = new QGroupBox(group, this);
      forms[group] = new QFormLayout(box);
      forms[group]->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
      layout->addWidget(box);
      if (group == tr("Strategy and devices")) {
        m_devices = new DevicePicker(box);
        forms[group]->addRow(tr("Devices"), m_devices);
        connect(m_devices, &DevicePicker::changed, this, [this] {
          if (m_filling) return;
          m_filling = true;
          if (auto* c = qobject_cast<QComboBox*>(field("strategy.device"))) c->setCurrentText(m_devices->device());
          if (auto* e = qobject_cast<QLineEdit*>(field("strategy.ranks")))
            e->setText(QString::number(m_devices->ranks()));
          if (auto* e = qobject_cast<QLineEdit*>(field("strategy.gpus"))) {
            QStringList listed;
            for (std::int64_t g : m_devices->gpus()) listed << QString::number(g);
            e->setText(listed.join(kListSeparator));
          }
          m_filling = false;
          collect();
          emit edited();
        });
      }
    }
    const QString kind = kindOf(json);
    m_kinds[path] = kind;
    QWidget* editor = nullptr;
    QWidget* row = nullptr;
    const auto choices = core::fieldChoices(pathStd);
    if (!choices.empty()) {
      auto* c = new QComboBox(this);
      for (const auto& choice : choices) {
        c->addItem(QString::fromStdString(choice));
        if (const core::StrategyInfo* s = pathStd == "strategy.kind" ? core::findStrategy(choice) : nullptr)
          c->setItemData(c->count() - 1, QString::fromStdString(s->label), Qt::ToolTipRole);  // its label
      }
      connect(c, &QComboBox::currentTextChanged, this, [this] {
        if (!m_filling) {
          collect();
          emit edited();
        }
      });
      editor = c;
    } else if (kind == "bool") {
      auto* c = new QCheckBox(this);
      connect(c, &QCheckBox::toggled, this, [this] {
        if (!m_filling) {
          collect();
          emit edited();
        }
      });
      editor = c;
    } else {
      auto* e = new QLineEdit(this);
      if (kind == "array") e->setPlaceholderText(tr("comma-separated, e.g. 64, 64"));
      connect(e, &QLineEdit::textChanged, this, [this] {
        if (!m_filling) {
          collect();
          emit edited();
        }
      });
      editor = e;
      if (kFileFields.contains(path)) {
        auto* box = new QWidget(this);
        auto* h = new QHBoxLayout(box);
        h->setContentsMargins(0, 0, 0, 0);
        h->addWidget(e);
        auto* browse = new QToolButton(box);
        browse->setText(QStringLiteral("…"));
        browse->setToolTip(tr("Choose a file or folder"));
        connect(browse, &QToolButton::clicked, this, [this, e, path] {
          const auto& kind = m_profile.data.kind;
          const bool folder = kind == "mnist" || kind == "cifar10" || kind == "image-folder";
          QString chosen = path == "data.path" && folder
                               ? QFileDialog::getExistingDirectory(this, tr("Folder with the data"), e->text())
                               : QFileDialog::getOpenFileName(this, tr("Choose %1").arg(path), e->text());
          if (!chosen.isEmpty()) e->setText(chosen);
        });
        h->addWidget(browse);
        row = box;
      }
    }
    editor->setObjectName(path);
    m_fields[path] = editor;
    const QString label = path.contains('.') ? path.section('.', 1) : path;
    auto* labelWidget = new QLabel(label, this);
    labelWidget->setToolTip(helpFor(path));
    editor->setStatusTip(helpFor(path));  // the field's tooltip is kept for its error
    forms[groupOf(path)]->addRow(labelWidget, row ? row : editor);
    m_rows[path] = {forms[groupOf(path)], row ? row : editor};
    if (path == "data.val_fraction") {
      auto* check = new QPushButton(tr("Check workload"), this);
      check->setObjectName("preflight");
      check->setToolTip(tr("Load the model and the data in a worker and show their shapes"));
      m_preflight = new QLabel(this);
      m_preflight->setObjectName("preflightResult");
      m_preflight->setWordWrap(true);
      connect(check, &QPushButton::clicked, this, &ProfileEditor::runPreflight);
      forms[groupOf(path)]->addRow(check, m_preflight);
    }
  }
  m_summary = new QLabel(this);
  m_summary->setObjectName("profileErrors");
  m_summary->setWordWrap(true);
  m_summary->setStyleSheet("color: #b00020");
  layout->addWidget(m_summary);
  layout->addStretch(1);
  setProfile(core::defaultProfile());
}

ProfileEditor::~ProfileEditor() { stopChildProcess(m_preflightProcess, this); }

void ProfileEditor::setProfile(const core::Profile& profile) {
  m_filling = true;
  for (const auto& [pathStd, json] : core::profileFields(profile)) {
    const QString path = QString::fromStdString(pathStd);
    QWidget* w = m_fields.value(path);
    const QString kind = m_kinds.value(path);
    const QJsonDocument doc = QJsonDocument::fromJson(QByteArray::fromStdString("[" + json + "]"));
    const QJsonValue v = doc.array().at(0);
    if (auto* c = qobject_cast<QComboBox*>(w))
      c->setCurrentText(v.toString());
    else if (auto* b = qobject_cast<QCheckBox*>(w))
      b->setChecked(v.toBool());
    else if (auto* e = qobject_cast<QLineEdit*>(w)) {
      if (kind == "string")
        e->setText(v.toString());
      else if (kind == "array") {
        QStringList parts;
        for (const auto& x : v.toArray())
          parts << (x.isString() ? x.toString() : QString::number(x.toDouble(), 'g', 17));
        e->setText(parts.join(kListSeparator));
      } else {
        e->setText(QString::fromStdString(json));
      }
    }
  }
  m_filling = false;
  collect();  // and the device picker from it
}

void ProfileEditor::setFieldText(const QString& path, const QString& text) {
  QWidget* w = m_fields.value(path);
  if (auto* c = qobject_cast<QComboBox*>(w))
    c->setCurrentText(text);
  else if (auto* b = qobject_cast<QCheckBox*>(w))
    b->setChecked(text == "true");
  else if (auto* e = qobject_cast<QLineEdit*>(w))
    e->setText(text);
}

QString ProfileEditor::textOf(const QString& path) const {
  QWidget* w = m_fields.value(path);
  if (auto* c = qobject_cast<QComboBox*>(w)) return c->currentText();
  if (auto* b = qobject_cast<QCheckBox*>(w)) return b->isChecked() ? "true" : "false";
  if (auto* e = qobject_cast<QLineEdit*>(w)) return e->text().trimmed();
  return {};
}

// Builds the JSON document the fields describe and reads it field by field.
void ProfileEditor::collect() {
  QJsonObject root;
  for (auto it = m_fields.begin(); it != m_fields.end(); ++it) {
    const QString& path = it.key();
    const QString kind = m_kinds.value(path);
    const QString text = textOf(path);
    QJsonValue value;
    if (kind == "string") {
      value = text;
    } else if (kind == "bool") {
      value = text == "true";
    } else if (kind == "array") {
      // "64, 64" or "x1, x2": numbers where they parse, else strings; the reader says which fit.
      QJsonArray items;
      for (const QString& part : text.split(',', Qt::SkipEmptyParts)) {
        bool isNumber = false;
        const double number = part.trimmed().toDouble(&isNumber);
        items.append(isNumber ? QJsonValue(number) : QJsonValue(part.trimmed()));
      }
      value = items;
    } else {
      // Numbers as typed: what does not parse stays a string, so the reader reports
      // "expected a number, got "abc"" at the field.
      QJsonDocument doc = QJsonDocument::fromJson(("[" + text + "]").toUtf8());
      value = doc.isArray() && doc.array().size() == 1 ? doc.array().at(0) : QJsonValue(text);
    }
    if (path.contains('.')) {
      const QString section = path.section('.', 0, 0), name = path.section('.', 1);
      QJsonObject obj = root.value(section).toObject();
      obj[name] = value;
      root[section] = obj;
    } else {
      root[path] = value;
    }
  }
  m_errors.clear();
  m_profile = core::parseProfileFields(QJsonDocument(root).toJson().toStdString(), m_errors);
  markErrors();
  showApplicable();
  if (m_devices) {
    m_devices->setSummary(tr("world size %1 · global batch %2")
                              .arg(core::reportingRanks(m_profile))
                              .arg(static_cast<qint64>(m_profile.hyper.batchSize) * m_profile.hyper.accumulate *
                                   core::trainingRanks(m_profile)));
    if (!m_filling) {
      m_filling = true;
      m_devices->select(QString::fromStdString(m_profile.strategy.device), m_profile.strategy.ranks,
                        m_profile.strategy.gpus);
      m_filling = false;
    }
  }
}

void ProfileEditor::showApplicable() {
  std::set<QString> wrong;
  for (const auto& e : m_errors) wrong.insert(QString::fromStdString(e.path));
  for (auto it = m_rows.begin(); it != m_rows.end(); ++it) {
    // A field with an error stays in sight, or the user could not fix it.
    const bool shown = applies(it.key(), m_profile) || wrong.count(it.key());
    it.value().form->setRowVisible(it.value().widget, shown);
  }
}

void ProfileEditor::markErrors() {
  QMap<QString, QStringList> byField;
  QStringList general;
  for (const auto& e : m_errors) {
    const QString path = QString::fromStdString(e.path);
    if (m_fields.contains(path))
      byField[path] << QString::fromStdString(e.message);
    else
      general << QString::fromStdString(e.text());
  }
  for (auto it = m_fields.begin(); it != m_fields.end(); ++it) {
    const bool bad = byField.contains(it.key());
    it.value()->setStyleSheet(bad ? "border: 2px solid #b00020" : "");
    it.value()->setToolTip(bad ? byField[it.key()].join("\n") : QString());
  }
  QStringList all;
  for (const auto& e : m_errors) all << QString::fromStdString(e.text());
  m_summary->setText(all.join("\n"));
  (void)general;
}

void ProfileEditor::runPreflight() {
  if (!m_errors.empty()) {
    m_preflight->setText(tr("Fix the marked fields first."));
    emit preflightFinished(false, m_preflight->text());
    return;
  }
  if (m_preflightProcess) return;  // one at a time
  auto* file = new QTemporaryFile(this);
  if (!file->open()) {
    m_preflight->setText(tr("Cannot write a temporary profile."));
    return;
  }
  file->write(QByteArray::fromStdString(core::toJson(m_profile)));
  file->close();
  m_preflight->setText(tr("Loading the model and the data…"));
  m_preflightProcess = new QProcess(this);
  connect(m_preflightProcess, &QProcess::finished, this, [this, file](int code, QProcess::ExitStatus) {
    QString text;
    bool ok = code == 0;
    if (ok) {
      auto o = QJsonDocument::fromJson(m_preflightProcess->readAllStandardOutput()).object();
      auto dims = [](const QJsonValue& v) {
        QStringList parts;
        for (const auto& x : v.toArray()) parts << QString::number(x.toInt());
        return "[" + parts.join(", ") + "]";
      };
      text = tr("OK: input %1 → output %2 per sample; %3 training, %4 validation samples; %5 parameters")
                 .arg(dims(o["input"]), dims(o["output"]))
                 .arg(o["train_samples"].toInt())
                 .arg(o["val_samples"].toInt())
                 .arg(o["parameters"].toInt());
    } else {
      text = QString::fromUtf8(m_preflightProcess->readAllStandardError()).trimmed();
      if (text.startsWith("error: ")) text = text.mid(7);
    }
    m_preflight->setText(text);
    m_preflight->setStyleSheet(ok ? "" : "color: #b00020");
    m_preflightProcess->deleteLater();
    m_preflightProcess = nullptr;
    file->deleteLater();
    emit preflightFinished(ok, text);
  });
  // A worker that cannot be started never finishes: say why, and let the next check run.
  connect(m_preflightProcess, &QProcess::errorOccurred, this, [this, file](QProcess::ProcessError error) {
    if (error != QProcess::FailedToStart) return;
    const QString text = tr("Cannot start the worker program %1: %2; build ptw-worker or set PTW_WORKER")
                             .arg(m_preflightProcess->program(), m_preflightProcess->errorString());
    m_preflight->setText(text);
    m_preflight->setStyleSheet("color: #b00020");
    m_preflightProcess->deleteLater();
    m_preflightProcess = nullptr;
    file->deleteLater();
    emit preflightFinished(false, text);
  });
  m_preflightProcess->start(QString::fromStdString(core::Launcher::defaultWorkerPath()),
                            {"--preflight", "--profile", file->fileName()});
}

}  // namespace ptw::ui
