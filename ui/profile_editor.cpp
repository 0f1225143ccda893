// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/profile_editor.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QImage>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QPixmap>
#include <QPlainTextEdit>
#include <QProcess>
#include <QPushButton>
#include <QRegularExpression>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTemporaryFile>
#include <QTextBlock>
#include <QTextCursor>
#include <QTextDocument>
#include <QToolButton>
#include <QVBoxLayout>

#include <set>

#include "common/data_kinds.h"
#include "common/launcher_kinds.h"
#include "common/network.h"
#include "common/strategies.h"
#include "common/worker_invocation.h"
#include "launch/launcher.h"
#include "ui/child_process.h"
#include "ui/device_picker.h"

namespace ptw::ui {
namespace {

const QString kListSeparator = QStringLiteral(", ");  ///< how an array field's items are shown
/// Fields with a Browse… button beside them, and whether it picks a folder.
const QMap<QString, bool> kBrowseFields = {{"model.path", false},       {"data.path", false},
                                           {"data.labels_path", false}, {"run.resume_from", false},
                                           {"command.program", false},  {"command.cwd", true}};
/// The one hyperparameter ptw itself reads in a command run: the steps it shows progress and an
/// ETA against, and takes a warm-up of out of throughput. The others reach the program only
/// through a template, and are shown when one names them (Note [Fields that apply]).
const QStringList kCommandReads = {"hyper.max_steps"};
/// Run options only ptw's own engine reads; a command run's program ignores them.
const QStringList kEngineRunFields = {"run.threads_per_rank", "run.loader_threads", "run.eval_every",
                                      "run.checkpoint_every", "run.resume_from",    "run.metrics"};

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
  if (path.startsWith("command.")) return QObject::tr("Command");
  return QObject::tr("Run, checkpoints and restarts");
}

/// The field an error's path names: "command.args[1]" is command.args's, item 1.
QString fieldOf(const QString& errorPath) { return errorPath.section('[', 0, 0); }
int itemOf(const QString& errorPath) {
  return errorPath.contains('[') ? errorPath.section('[', 1).section(']', 0, 0).toInt() : -1;
}

// A column of the row of the profile's data kind, strategy or launcher in its table; false
// for a kind not in its table, of which no field applies.
bool dataKindHas(const core::Profile& p, bool core::DataKindInfo::*column) {
  const core::DataKindInfo* row = core::findDataKind(p.data.kind);
  return row && row->*column;
}
bool strategyHas(const core::Profile& p, bool core::StrategyInfo::*column) {
  const core::StrategyInfo* row = core::findStrategy(p.strategy.kind);
  return row && row->*column;
}
bool launcherHas(const core::Profile& p, bool core::LauncherInfo::*column) {
  const core::LauncherInfo* row = core::findLauncher(p.hosts.launcher);
  return row && row->*column;
}

bool imageData(const core::Profile& p) { return dataKindHas(p, &core::DataKindInfo::images); }

bool runsCommand(const core::Profile& p) { return strategyHas(p, &core::StrategyInfo::runsCommand); }

bool readsBackend(const core::Profile& p) {
  const core::StrategyInfo* row = core::findStrategy(p.strategy.kind);
  return row && !row->backends.empty();
}

bool readsSshOptions(const core::Profile& p) { return launcherHas(p, &core::LauncherInfo::readsSshOptions); }

// Note [Fields that apply]
// Whether a field means anything for the kinds the profile has chosen: a field is shown when
// every rule whose path matches it holds (a path ending in '.' matches a whole section), or
// when a template of the command names it ({hyper.momentum} makes hyper.momentum a knob of
// the run). One that does not apply is hidden, so the form shows what this run will read. A
// command run (strategy.kind command) runs the user's program: ptw's model, data, optimizer,
// hyperparameters (but hyper.max_steps) and engine options mean nothing to it unless a
// template passes them on, its command section everything.
struct ApplyRule {
  const char* path;
  bool (*holds)(const QString& path, const core::Profile& p);
};
const ApplyRule kApplyRules[] = {
    {"data.path", [](const QString&, const core::Profile& p) { return core::readsDataFiles(p.data); }},
    {"data.labels_path",
     [](const QString&, const core::Profile& p) { return dataKindHas(p, &core::DataKindInfo::readsLabelsFile); }},
    {"data.mean", [](const QString&, const core::Profile& p) { return imageData(p); }},
    {"data.std", [](const QString&, const core::Profile& p) { return imageData(p); }},
    {"data.crop_padding", [](const QString&, const core::Profile& p) { return imageData(p); }},
    {"data.flip", [](const QString&, const core::Profile& p) { return imageData(p); }},
    {"data.features",
     [](const QString&, const core::Profile& p) { return dataKindHas(p, &core::DataKindInfo::readsColumns); }},
    {"data.target",
     [](const QString&, const core::Profile& p) { return dataKindHas(p, &core::DataKindInfo::readsColumns); }},
    {"data.task",
     [](const QString&, const core::Profile& p) { return dataKindHas(p, &core::DataKindInfo::readsTask); }},
    {"data.seed", [](const QString&, const core::Profile& p) { return !core::readsDataFiles(p.data); }},
    {"data.noise", [](const QString&, const core::Profile& p) { return !core::readsDataFiles(p.data); }},
    {"model.hidden", [](const QString&, const core::Profile& p) { return p.model.kind == "mlp"; }},
    {"model.activation", [](const QString&, const core::Profile& p) { return p.model.kind == "mlp"; }},
    {"model.path", [](const QString&, const core::Profile& p) { return p.model.kind == "torchscript"; }},
    {"strategy.pool_mode",
     [](const QString&, const core::Profile& p) { return strategyHas(p, &core::StrategyInfo::readsPoolMode); }},
    {"strategy.backend", [](const QString&, const core::Profile& p) { return readsBackend(p); }},
    {"strategy.bucket_mb",
     [](const QString&, const core::Profile& p) { return strategyHas(p, &core::StrategyInfo::readsBucketMb); }},
    // A command's program picks its own GPU (LOCAL_RANK); ptw passes strategy.gpus on only
    // through a template. strategy.device stays: ptw checks for a GPU before a cuda run.
    {"strategy.gpus",
     [](const QString&, const core::Profile& p) { return p.strategy.device == "cuda" && !runsCommand(p); }},
    {"hyper.momentum", [](const QString&, const core::Profile& p) { return p.hyper.optimizer == "sgd"; }},
    {"hyper.nesterov", [](const QString&, const core::Profile& p) { return p.hyper.optimizer == "sgd"; }},
    {"hyper.step_size", [](const QString&, const core::Profile& p) { return p.hyper.schedule == "step"; }},
    {"hyper.gamma", [](const QString&, const core::Profile& p) { return p.hyper.schedule == "step"; }},
    {"model.", [](const QString&, const core::Profile& p) { return !runsCommand(p); }},
    {"data.", [](const QString&, const core::Profile& p) { return !runsCommand(p); }},
    {"hyper.",
     [](const QString& path, const core::Profile& p) { return !runsCommand(p) || kCommandReads.contains(path); }},
    {"run.",
     [](const QString& path, const core::Profile& p) { return !runsCommand(p) || !kEngineRunFields.contains(path); }},
    {"command.", [](const QString&, const core::Profile& p) { return runsCommand(p); }},
    // Where the ranks run: the launcher always, the rest for ranks on other hosts, how to reach
    // them through ssh for the ssh launcher only.
    {"hosts.",
     [](const QString& path, const core::Profile& p) { return path == "hosts.launcher" || core::ranksMayBeRemote(p); }},
    {"hosts.ssh_user", [](const QString&, const core::Profile& p) { return readsSshOptions(p); }},
    {"hosts.ssh_port", [](const QString&, const core::Profile& p) { return readsSshOptions(p); }},
    {"hosts.ssh_identity", [](const QString&, const core::Profile& p) { return readsSshOptions(p); }},
    {"hosts.ssh_config", [](const QString&, const core::Profile& p) { return readsSshOptions(p); }},
    {"hosts.alive_interval_s", [](const QString&, const core::Profile& p) { return readsSshOptions(p); }},
};

// The fields the command's templates name ({hyper.lr} in an argument, the environment or the folder).
std::set<QString> templatedFields(const core::Profile& p) {
  std::set<QString> named;
  if (!runsCommand(p)) return named;
  static const QRegularExpression templ(QStringLiteral("\\{([A-Za-z_][A-Za-z0-9_]*\\.[A-Za-z0-9_]+)\\}"));
  std::vector<std::string> texts = p.command.args;
  texts.insert(texts.end(), p.command.env.begin(), p.command.env.end());
  texts.push_back(p.command.cwd);
  for (const auto& text : texts)
    for (auto it = templ.globalMatch(QString::fromStdString(text)); it.hasNext();) named.insert(it.next().captured(1));
  return named;
}

bool applies(const QString& path, const core::Profile& p, const std::set<QString>& templated) {
  if (templated.count(path)) return true;
  for (const auto& rule : kApplyRules) {
    const QString rulePath = QString::fromLatin1(rule.path);
    const bool matches = rulePath.endsWith('.') ? path.startsWith(rulePath) : path == rulePath;
    if (matches && !rule.holds(path, p)) return false;
  }
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
  QMap<QString, QFormLayout*> forms;  // by group
  for (const auto& [pathStd, json] : core::profileFields(core::defaultProfile())) {
    const QString path = QString::fromStdString(pathStd);
    const QString group = groupOf(path);
    if (!forms.contains(group)) {
      QFormLayout* form = addGroup(path, layout, forms);
      forms[group] = form;
    }
    addField(path, json, forms.value(group));
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

void ProfileEditor::fieldEdited() {
  if (!m_filling) {
    collect();
    emit edited();
  }
}

// The group box of the section `path` opens, in `layout`, and its form.
QFormLayout* ProfileEditor::addGroup(const QString& path, QVBoxLayout* layout,
                                     const QMap<QString, QFormLayout*>& forms) {
  const QString group = groupOf(path);
  auto* box = new QGroupBox(group, this);
  box->setObjectName("group." + (path.contains('.') ? path.section('.', 0, 0) : path));
  auto* form = new QFormLayout(box);
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  // What a command run runs comes right after its strategy (the sections' order puts it last).
  if (path.startsWith("command."))
    layout->insertWidget(layout->indexOf(forms.value(tr("Strategy and devices"))->parentWidget()) + 1, box);
  else
    layout->addWidget(box);
  if (group == tr("Strategy and devices")) addDevicePicker(form, box);
  return form;
}

// The device picker, first in the strategy's group: a pick sets strategy.device, ranks and gpus.
void ProfileEditor::addDevicePicker(QFormLayout* form, QWidget* box) {
  m_devices = new DevicePicker(box);
  form->addRow(tr("Devices"), m_devices);
  connect(m_devices, &DevicePicker::changed, this, [this] {
    if (m_filling) return;
    m_filling = true;
    if (auto* c = qobject_cast<QComboBox*>(field("strategy.device"))) c->setCurrentText(m_devices->device());
    if (auto* e = qobject_cast<QLineEdit*>(field("strategy.ranks"))) e->setText(QString::number(m_devices->ranks()));
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

// The row of field `path` (its value `json` in the default profile) in `form`: its label, with
// the field's help as tooltip, and its editor.
void ProfileEditor::addField(const QString& path, const std::string& json, QFormLayout* form) {
  const QString kind = kindOf(json);
  m_kinds[path] = kind;
  QWidget* row = nullptr;
  QWidget* editor = buildFieldEditor(path, kind, row);
  editor->setObjectName(path);
  m_fields[path] = editor;
  const QString label = path.contains('.') ? path.section('.', 1) : path;
  auto* labelWidget = new QLabel(label, this);
  labelWidget->setToolTip(helpFor(path));
  editor->setStatusTip(helpFor(path));  // the field's tooltip is kept for its error
  form->addRow(labelWidget, row ? row : editor);
  m_rows[path] = {form, row ? row : editor};
  if (path == "data.val_fraction") addPreflightRows(form);
}

// The editor of field `path` of `kind` (kindOf); `row` is set where the form holds a box
// around it (command.env's buttons, a Browse… button).
QWidget* ProfileEditor::buildFieldEditor(const QString& path, const QString& kind, QWidget*& row) {
  const auto choices = core::fieldChoices(path.toStdString());
  if (!choices.empty()) return buildChoiceBox(path, choices);
  if (kind == "bool") {
    auto* c = new QCheckBox(this);
    connect(c, &QCheckBox::toggled, this, &ProfileEditor::fieldEdited);
    return c;
  }
  if (path == "command.args") return buildArgsEditor();
  if (path == "command.env") {
    row = buildEnvTable();
    return m_env;
  }
  if (path == "hosts.interface") return buildInterfacePicker();
  auto* e = new QLineEdit(this);
  if (kind == "array") e->setPlaceholderText(tr("comma-separated, e.g. 64, 64"));
  connect(e, &QLineEdit::textChanged, this, &ProfileEditor::fieldEdited);
  if (kBrowseFields.contains(path)) row = buildBrowseRow(path, e);
  return e;
}

// An enumerated field: its choices, each strategy and launcher with its label as tooltip.
QComboBox* ProfileEditor::buildChoiceBox(const QString& path, const std::vector<std::string>& choices) {
  auto* c = new QComboBox(this);
  for (const auto& choice : choices) {
    c->addItem(QString::fromStdString(choice));
    std::string label;
    if (const core::StrategyInfo* s = path == "strategy.kind" ? core::findStrategy(choice) : nullptr) label = s->label;
    if (const core::LauncherInfo* l = path == "hosts.launcher" ? core::findLauncher(choice) : nullptr) label = l->label;
    if (!label.empty()) c->setItemData(c->count() - 1, QString::fromStdString(label), Qt::ToolTipRole);
  }
  connect(c, &QComboBox::currentTextChanged, this, &ProfileEditor::fieldEdited);
  return c;
}

// command.args: one argument a line, taken as typed: an argument may hold spaces, commas or nothing.
QPlainTextEdit* ProfileEditor::buildArgsEditor() {
  m_args = new QPlainTextEdit(this);
  m_args->setPlaceholderText(tr("one argument a line, e.g.\ntrain.py\n--lr\n{hyper.lr}"));
  m_args->setLineWrapMode(QPlainTextEdit::NoWrap);
  m_args->setTabChangesFocus(true);
  m_args->setFixedHeight(7 * m_args->fontMetrics().lineSpacing() + 12);
  connect(m_args, &QPlainTextEdit::textChanged, this, &ProfileEditor::fieldEdited);
  return m_args;
}

// `e` with a Browse… button beside it, which picks a file, or a folder for a folder field and
// for data.path of a data kind read from a folder.
QWidget* ProfileEditor::buildBrowseRow(const QString& path, QLineEdit* e) {
  auto* box = new QWidget(this);
  auto* h = new QHBoxLayout(box);
  h->setContentsMargins(0, 0, 0, 0);
  h->addWidget(e);
  auto* browse = new QToolButton(box);
  browse->setObjectName(path + ".browse");
  browse->setText(tr("Browse…"));
  browse->setToolTip(kBrowseFields.value(path) ? tr("Choose a folder") : tr("Choose a file"));
  connect(browse, &QToolButton::clicked, this, [this, e, path] {
    const bool folderData = dataKindHas(m_profile, &core::DataKindInfo::folder);
    const bool folder = kBrowseFields.value(path) || (path == "data.path" && folderData);
    QString chosen = folder ? QFileDialog::getExistingDirectory(this, tr("Choose %1").arg(path), e->text())
                            : QFileDialog::getOpenFileName(this, tr("Choose %1").arg(path), e->text());
    if (!chosen.isEmpty()) e->setText(chosen);
  });
  h->addWidget(browse);
  return box;
}

// The workload check (Check workload, its result, and a check of image data's sample images).
void ProfileEditor::addPreflightRows(QFormLayout* form) {
  auto* check = new QPushButton(tr("Check workload"), this);
  m_preflightButton = check;
  check->setObjectName("preflight");
  check->setToolTip(tr("Load the model and the data in a worker and show their shapes"));
  m_preflight = new QLabel(this);
  m_preflight->setObjectName("preflightResult");
  m_preflight->setWordWrap(true);
  connect(check, &QPushButton::clicked, this, &ProfileEditor::runPreflight);
  form->addRow(check, m_preflight);
  // Image data: training images as the model gets them (augmented), normalisation undone.
  m_preflightImages = new QLabel(this);
  m_preflightImages->setObjectName("preflightImages");
  m_preflightImages->setToolTip(
      tr("Training images after augmentation (data.crop_padding, data.flip), with data.mean and data.std "
         "undone, spread over the training set"));
  m_preflightImages->hide();
  form->addRow(QString(), m_preflightImages);
}

// hosts.interface: this machine's interfaces with their IPv4 addresses to pick from (core
// lists them), the empty choice, or a name typed as it is on the hosts, which may name their
// interfaces otherwise. Picking an item writes its name alone into the field.
QComboBox* ProfileEditor::buildInterfacePicker() {
  auto* c = new QComboBox(this);
  c->setEditable(true);
  c->setInsertPolicy(QComboBox::NoInsert);
  c->setCompleter(nullptr);  // a name typed stays as typed, not completed to an item
  // Note [Gloo interface] (core/engine/compat_c10d.h): without one, Gloo takes the address the
  // host's name resolves to.
  const QString none = tr("(none: Gloo uses the address each host's name resolves to)");
  c->lineEdit()->setPlaceholderText(none);
  c->addItem(none, QString());
  for (const auto& i : core::networkInterfaces())
    c->addItem(QString::fromStdString(i.name) + QStringLiteral(" — ") + QString::fromStdString(i.ipv4),
               QString::fromStdString(i.name));
  connect(c, &QComboBox::activated, c, [c](int index) { c->setEditText(c->itemData(index).toString()); });
  connect(c, &QComboBox::currentTextChanged, this, [this] {
    if (!m_filling) {
      collect();
      emit edited();
    }
  });
  return c;
}

// command.env: a KEY and a VALUE column, a row an entry, with buttons to add and remove rows.
QWidget* ProfileEditor::buildEnvTable() {
  auto* box = new QWidget(this);
  auto* v = new QVBoxLayout(box);
  v->setContentsMargins(0, 0, 0, 0);
  m_env = new QTableWidget(0, 2, box);
  m_env->setHorizontalHeaderLabels({tr("KEY"), tr("VALUE")});
  m_env->horizontalHeader()->setStretchLastSection(true);
  m_env->verticalHeader()->setVisible(false);
  m_env->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_env->setFixedHeight(5 * m_env->fontMetrics().lineSpacing() + 24);
  v->addWidget(m_env);
  auto* buttons = new QHBoxLayout;
  auto* add = new QToolButton(box);
  add->setObjectName("command.env.add");
  add->setText(tr("Add"));
  add->setToolTip(tr("Add a variable"));
  auto* remove = new QToolButton(box);
  remove->setObjectName("command.env.remove");
  remove->setText(tr("Remove"));
  remove->setToolTip(tr("Remove the selected variables"));
  buttons->addWidget(add);
  buttons->addWidget(remove);
  buttons->addStretch(1);
  v->addLayout(buttons);
  connect(m_env, &QTableWidget::itemChanged, this, [this] {
    if (!m_filling) {
      collect();
      emit edited();
    }
  });
  connect(add, &QToolButton::clicked, this, [this] {
    m_filling = true;  // an empty row is no entry yet: nothing changes until a key is typed
    const int row = m_env->rowCount();
    m_env->insertRow(row);
    m_env->setItem(row, 0, new QTableWidgetItem);
    m_env->setItem(row, 1, new QTableWidgetItem);
    m_filling = false;
    m_env->setCurrentCell(row, 0);
    m_env->editItem(m_env->item(row, 0));
  });
  connect(remove, &QToolButton::clicked, this, [this] {
    std::set<int> rows;
    for (const auto& index : m_env->selectionModel()->selectedIndexes()) rows.insert(index.row());
    if (rows.empty() && m_env->currentRow() >= 0) rows.insert(m_env->currentRow());
    if (rows.empty()) return;
    for (auto it = rows.rbegin(); it != rows.rend(); ++it) m_env->removeRow(*it);
    collect();
    emit edited();
  });
  return box;
}

void ProfileEditor::setEnvEntries(const QStringList& entries) {
  m_env->setRowCount(0);
  for (const QString& entry : entries) {
    const int row = m_env->rowCount();
    m_env->insertRow(row);
    // "KEY=VALUE" at its first '='; an entry without one is all key, so that its error shows.
    const int eq = entry.indexOf('=');
    m_env->setItem(row, 0, new QTableWidgetItem(eq < 0 ? entry : entry.left(eq)));
    m_env->setItem(row, 1, new QTableWidgetItem(eq < 0 ? QString() : entry.mid(eq + 1)));
  }
}

QStringList ProfileEditor::envEntries(std::vector<int>* rows) const {
  QStringList entries;
  if (rows) rows->clear();
  for (int row = 0; row < m_env->rowCount(); ++row) {
    const QString key = m_env->item(row, 0) ? m_env->item(row, 0)->text() : QString();
    const QString value = m_env->item(row, 1) ? m_env->item(row, 1)->text() : QString();
    if (key.isEmpty() && value.isEmpty()) continue;  // a row just added
    entries << key + "=" + value;
    if (rows) rows->push_back(row);
  }
  return entries;
}

QStringList ProfileEditor::argsList() const {
  QString text = m_args->toPlainText();
  if (text.endsWith('\n')) text.chop(1);  // a last line ended, not an empty argument
  return text.isEmpty() ? QStringList() : text.split('\n');
}

void ProfileEditor::setProfile(const core::Profile& profile) {
  m_filling = true;
  for (const auto& [pathStd, json] : core::profileFields(profile)) {
    const QString path = QString::fromStdString(pathStd);
    QWidget* w = m_fields.value(path);
    const QString kind = m_kinds.value(path);
    const QJsonDocument doc = QJsonDocument::fromJson(QByteArray::fromStdString("[" + json + "]"));
    const QJsonValue v = doc.array().at(0);
    if (auto* c = qobject_cast<QComboBox*>(w)) {
      // A choice the box does not offer (a hidden strategy, Note [Synthetic ranks]) is shown
      // as the profile has it, not replaced by the first one offered.
      if (!c->isEditable() && !v.toString().isEmpty() && c->findText(v.toString()) < 0) c->addItem(v.toString());
      c->setCurrentText(v.toString());
    } else if (auto* b = qobject_cast<QCheckBox*>(w))
      b->setChecked(v.toBool());
    else if (w == m_args || w == m_env) {
      QStringList items;
      for (const auto& x : v.toArray()) items << x.toString();
      if (w == m_args)
        m_args->setPlainText(items.join('\n'));
      else
        setEnvEntries(items);
    } else if (auto* e = qobject_cast<QLineEdit*>(w)) {
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
  else if (w == m_args)
    m_args->setPlainText(text);
  else if (w == m_env) {
    m_filling = true;
    setEnvEntries(text.isEmpty() ? QStringList() : text.split('\n'));
    m_filling = false;
    collect();
    emit edited();
  }
}

QString ProfileEditor::textOf(const QString& path) const {
  QWidget* w = m_fields.value(path);
  if (auto* c = qobject_cast<QComboBox*>(w)) {
    // An item of the interface picker ("eth1 — 10.0.0.5") stands for its name.
    const int item = c->isEditable() ? c->findText(c->currentText()) : -1;
    return item >= 0 ? c->itemData(item).toString() : c->currentText().trimmed();
  }
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
    if (path == "command.args" || path == "command.env") {
      // Strings as typed, one an item; never split anywhere else.
      value = QJsonArray::fromStringList(path == "command.args" ? argsList() : envEntries(&m_envRows));
    } else if (kind == "string") {
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
    // A command's program sets its own batch: the world size is all ptw knows of it.
    m_devices->setSummary(runsCommand(m_profile)
                              ? tr("world size %1").arg(core::reportingRanks(m_profile))
                              : tr("world size %1 · global batch %2")
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
  for (const auto& e : m_errors) wrong.insert(fieldOf(QString::fromStdString(e.path)));
  const std::set<QString> templated = templatedFields(m_profile);
  QMap<QFormLayout*, bool> anyShown;
  for (auto it = m_rows.begin(); it != m_rows.end(); ++it) {
    // A field with an error stays in sight, or the user could not fix it.
    const bool shown = applies(it.key(), m_profile, templated) || wrong.count(it.key());
    it.value().form->setRowVisible(it.value().widget, shown);
    anyShown[it.value().form] |= shown;
  }
  // A group none of whose fields apply goes whole (a command run's model and data).
  for (auto it = anyShown.begin(); it != anyShown.end(); ++it) it.key()->parentWidget()->setVisible(it.value());
  // The workload check loads ptw's model and data, which a command run has none of.
  if (m_preflightButton) {
    const bool engine = !runsCommand(m_profile);
    auto* form = m_rows.value("data.val_fraction").form;
    form->setRowVisible(m_preflightButton, engine);
  }
}

void ProfileEditor::markErrors() {
  QMap<QString, QStringList> byField;
  QStringList general;
  std::map<int, QString> badArgs, badEnv;  // item -> its message
  for (const auto& e : m_errors) {
    const QString path = QString::fromStdString(e.path), field = fieldOf(path);
    const QString message = QString::fromStdString(e.message);
    if (!m_fields.contains(field)) {
      general << QString::fromStdString(e.text());
      continue;
    }
    // An item's error names the item: "args[1]: {hyper.lrr} names no profile field".
    const int item = itemOf(path);
    byField[field] << (item >= 0 ? path.section('.', 1) + ": " + message : message);
    if (item >= 0 && field == "command.args") badArgs[item] = message;
    if (item >= 0 && field == "command.env") badEnv[item] = message;
  }
  for (auto it = m_fields.begin(); it != m_fields.end(); ++it) {
    const bool bad = byField.contains(it.key());
    it.value()->setStyleSheet(bad ? "border: 2px solid #b00020" : "");
    it.value()->setToolTip(bad ? byField[it.key()].join("\n") : QString());
  }
  m_summary->setText([this] {
    QStringList all;
    for (const auto& e : m_errors) all << QString::fromStdString(e.text());
    return all.join("\n");
  }());
  (void)general;
  if (!m_args || !m_env) return;  // still being built
  // The wrong argument's line and the wrong variable's row, marked within their field.
  QList<QTextEdit::ExtraSelection> lines;
  for (const auto& [item, message] : badArgs) {
    QTextEdit::ExtraSelection line;
    line.cursor = QTextCursor(m_args->document()->findBlockByNumber(item));
    line.format.setBackground(QColor(176, 0, 32, 40));
    line.format.setProperty(QTextFormat::FullWidthSelection, true);
    lines << line;
  }
  m_args->setExtraSelections(lines);
  const bool wasFilling = m_filling;
  m_filling = true;  // colouring cells is no edit
  for (int row = 0; row < m_env->rowCount(); ++row)
    for (int c = 0; c < 2; ++c)
      if (auto* cell = m_env->item(row, c)) {
        cell->setBackground(QBrush());
        cell->setToolTip(QString());
      }
  for (const auto& [item, message] : badEnv) {
    if (item < 0 || item >= static_cast<int>(m_envRows.size())) continue;
    for (int c = 0; c < 2; ++c)
      if (auto* cell = m_env->item(m_envRows[static_cast<std::size_t>(item)], c)) {
        cell->setBackground(QColor(176, 0, 32, 40));
        cell->setToolTip(message);
      }
  }
  m_filling = wasFilling;
}

void ProfileEditor::runPreflight() {
  if (runsCommand(m_profile)) {
    m_preflight->setText(
        tr("A command run trains with its own program: ptw has no model or data of its own to check."));
    emit preflightFinished(false, m_preflight->text());
    return;
  }
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
  m_preflightImages->hide();
  m_preflightImages->clear();
  if (!m_samplesDir) m_samplesDir = std::make_unique<QTemporaryDir>();
  const QString samples = m_samplesDir->isValid() ? m_samplesDir->filePath("samples.png") : QString();
  QFile::remove(samples);
  m_preflightProcess = new QProcess(this);
  connect(m_preflightProcess, &QProcess::finished, this, [this, file, samples](int code, QProcess::ExitStatus) {
    QString text;
    bool ok = code == 0;
    if (ok) {
      auto o = QJsonDocument::fromJson(m_preflightProcess->readAllStandardOutput()).object();
      auto dims = [](const QJsonValue& v) {
        QStringList parts;
        for (const auto& x : v.toArray()) parts << QString::number(x.toInt());
        return parts.size() == 3 ? parts.join(QStringLiteral("×")) : "[" + parts.join(", ") + "]";  // C×H×W
      };
      text = tr("OK: input %1 → output %2 per sample; %3 training, %4 validation samples; %5 parameters")
                 .arg(dims(o["input"]), dims(o["output"]))
                 .arg(o["train_samples"].toInt())
                 .arg(o["val_samples"].toInt())
                 .arg(o["parameters"].toInt());
      const int images = o["sample_images"].toInt();
      QImage grid;
      if (images > 0 && grid.load(samples)) {
        // Small images are enlarged by whole pixels, up to about 256 pixels across.
        const int scale = std::max(1, 256 / std::max(1, grid.width()));
        m_preflightImages->setPixmap(QPixmap::fromImage(grid.scaled(grid.size() * scale)));
        m_preflightImages->show();
        text += tr("; %1 training images after augmentation:").arg(images);
      }
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
  core::WorkerInvocation check(core::Launcher::defaultWorkerPath());
  check.preflight = true;
  check.profile = file->fileName().toStdString();
  check.samples = samples.toStdString();
  QStringList args;
  for (const auto& a : check.flags()) args << QString::fromStdString(a);
  m_preflightProcess->start(QString::fromStdString(check.program), args);
}

}  // namespace ptw::ui
