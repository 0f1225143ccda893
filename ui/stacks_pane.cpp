// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/stacks_pane.h"

#include <QApplication>
#include <QClipboard>
#include <QDesktopServices>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QTreeWidget>
#include <QTreeWidgetItemIterator>
#include <QUrl>
#include <QVBoxLayout>

#include <algorithm>
#include <functional>

#include "common/error.h"
#include "ui/palette.h"

namespace ptw::ui {
namespace {

QTreeWidgetItem* addRow(QTreeWidgetItem* parent, StacksPane::Row row, int rank, const QString& text) {
  auto* item = new QTreeWidgetItem(parent, {text});
  item->setData(0, StacksPane::kRowRole, static_cast<int>(row));
  item->setData(0, StacksPane::kRankRole, rank);
  return item;
}

QTreeWidgetItem* addFrame(QTreeWidgetItem* parent, const core::StackFrame& f, int rank) {
  auto* item = addRow(parent, StacksPane::Row::Frame, rank, QString::fromStdString(f.describe()));
  item->setToolTip(0, QString::fromStdString(f.line).trimmed());
  return item;
}

StacksPane::Row rowOf(const QTreeWidgetItem* item) {
  return static_cast<StacksPane::Row>(item->data(0, StacksPane::kRowRole).toInt());
}

int depthOf(const QTreeWidgetItem* item) {
  int depth = 0;
  for (auto* p = item->parent(); p; p = p->parent()) ++depth;
  return depth;
}

}  // namespace

StacksPane::StacksPane(QWidget* parent) : QDockWidget(tr("Stacks"), parent) {
  setObjectName("stacksPane");
  auto* body = new QWidget(this);
  auto* layout = new QVBoxLayout(body);
  m_headline = new QLabel(body);
  m_headline->setObjectName("stacksHeadline");
  m_headline->setWordWrap(true);
  m_headline->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(m_headline);
  m_busy = new QProgressBar(body);
  m_busy->setRange(0, 0);  // busy: how long the ranks take is not known
  m_busy->hide();
  layout->addWidget(m_busy);
  auto* tools = new QHBoxLayout;
  m_filter = new QLineEdit(body);
  m_filter->setObjectName("stacksFilter");
  m_filter->setPlaceholderText(tr("Filter frames (function or file)"));
  m_filter->setClearButtonEnabled(true);
  m_copy = new QPushButton(tr("Copy"), body);
  m_copy->setObjectName("stacksCopy");
  m_copy->setToolTip(tr("Copy the whole stacks file; Ctrl+C copies the selected rows"));
  m_open = new QPushButton(tr("Open File"), body);
  m_open->setObjectName("stacksOpen");
  tools->addWidget(m_filter, 1);
  tools->addWidget(m_copy);
  tools->addWidget(m_open);
  layout->addLayout(tools);
  m_tree = new QTreeWidget(body);
  m_tree->setObjectName("stacksTree");
  m_tree->setHeaderHidden(true);
  m_tree->setSelectionMode(QAbstractItemView::ExtendedSelection);
  m_tree->setUniformRowHeights(true);
  m_tree->header()->setStretchLastSection(true);
  layout->addWidget(m_tree, 1);
  setWidget(body);
  for (QWidget* w : {static_cast<QWidget*>(m_tree), static_cast<QWidget*>(m_filter), body}) w->installEventFilter(this);
  connect(m_filter, &QLineEdit::textChanged, this, &StacksPane::setFilter);
  connect(m_copy, &QPushButton::clicked, this, [this] { QApplication::clipboard()->setText(m_text); });
  connect(m_open, &QPushButton::clicked, this,
          [this] { QDesktopServices::openUrl(QUrl::fromLocalFile(QFileInfo(m_path).absoluteFilePath())); });
  showMessage(
      tr("Every rank's stacks show here: taken when a rank stalls, or on request (Show Stacks) while a "
         "run goes on."));
}

bool StacksPane::showFile(const QString& path) {
  try {
    m_file = core::readStacksFile(path.toStdString());
  } catch (const Error& e) {
    showMessage(QString::fromStdString(e.what()));
    return false;
  }
  QString text;
  for (const auto& s : m_file.sections) text += QString::fromStdString(s.text);
  m_text = QString::fromStdString(m_file.title) + "\n\n" + text;
  m_path = path;
  m_busy->hide();
  m_headline->setText(QString::fromStdString(m_file.title) + "\n" + path);
  m_copy->setEnabled(true);
  m_open->setEnabled(true);
  m_filter->setEnabled(true);
  fill();
  return true;
}

void StacksPane::showWaiting(const QString& text) {
  showMessage(text);
  m_busy->show();
}

void StacksPane::showMessage(const QString& text) {
  m_file = core::StacksFile{};
  m_path.clear();
  m_text.clear();
  m_tree->clear();
  m_busy->hide();
  m_headline->setText(text);
  m_copy->setEnabled(false);
  m_open->setEnabled(false);
  m_filter->setEnabled(false);
}

QString StacksPane::headline() const { return m_headline->text(); }
bool StacksPane::isWaiting() const { return !m_busy->isHidden(); }

// The rank that is behind first, the rest in the file's order.
void StacksPane::fill() {
  m_tree->clear();
  std::vector<const core::StackSection*> order;
  for (const auto& s : m_file.sections) order.push_back(&s);
  std::stable_partition(order.begin(), order.end(), [this](auto* s) { return s->rank == m_file.behind; });
  for (const auto* s : order) addRank(*s);
  setFilter(m_filter->text());
}

void StacksPane::addRank(const core::StackSection& s) {
  QString head = tr("rank %1 (pid %2").arg(s.rank).arg(s.pid);
  if (!s.host.empty()) head += tr(", host %1").arg(QString::fromStdString(s.host));
  head += ")";
  if (s.sameAs >= 0)
    head += tr(": same frames as rank %1").arg(s.sameAs);
  else if (!s.kind.empty())
    head += tr(": %1 frames").arg(QString::fromStdString(s.kind));
  auto* rank = new QTreeWidgetItem(m_tree, {head});
  rank->setData(0, kRowRole, static_cast<int>(Row::Rank));
  rank->setData(0, kRankRole, s.rank);
  if (s.rank == m_file.behind) {
    rank->setText(0, head + tr("  ◀ behind"));
    QFont bold = rank->font(0);
    bold.setBold(true);
    rank->setFont(0, bold);
    rank->setForeground(0, failureColor());
  }
  if (!s.note.empty()) addRow(rank, Row::Note, s.rank, QString::fromStdString(s.note));
  for (const auto& t : s.threads)
    addThread(s.threads.size() > 1
                  ? addRow(rank, Row::Thread, s.rank,
                           QString::fromStdString(t.process.empty() ? t.header : t.process + " " + t.header))
                  : rank,
              t, s.rank);
  rank->setExpanded(true);
}

// The frames where this rank differs, innermost first; then the ones every rank shares, folded.
void StacksPane::addThread(QTreeWidgetItem* parent, const core::StackThread& t, int rank) {
  parent->setExpanded(true);
  const std::size_t own = t.frames.size() - t.shared;
  for (std::size_t i = 0; i < own; ++i) addFrame(parent, t.frames[i], rank);
  if (t.shared == 0) return;
  auto* shared = addRow(parent, Row::Shared, rank,
                        t.shared == 1 ? tr("1 frame shared by all ranks")
                                      : tr("%1 frames shared by all ranks").arg(static_cast<int>(t.shared)));
  shared->setForeground(0, palette().color(QPalette::Disabled, QPalette::Text));
  for (std::size_t i = own; i < t.frames.size(); ++i) addFrame(shared, t.frames[i], rank);
  shared->setExpanded(false);
}

void StacksPane::setFilter(const QString& text) {
  if (m_filter->text() != text) m_filter->setText(text);  // comes back here
  // Whether `item` or a row below it holds the text; rows without are hidden, folded rows
  // with a match are opened.
  std::function<bool(QTreeWidgetItem*)> show = [&](QTreeWidgetItem* item) {
    bool any = false;
    for (int i = 0; i < item->childCount(); ++i) any = show(item->child(i)) || any;
    const bool match =
        text.isEmpty() || (rowOf(item) == Row::Frame && item->text(0).contains(text, Qt::CaseInsensitive));
    item->setHidden(!(match || any));
    if (rowOf(item) == Row::Shared) item->setExpanded(!text.isEmpty() && any);
    return match || any;
  };
  for (int i = 0; i < m_tree->topLevelItemCount(); ++i) show(m_tree->topLevelItem(i));
}

QString StacksPane::selectedText() const {
  QStringList lines;
  // In the tree's order, not the order they were selected in.
  for (QTreeWidgetItemIterator it(m_tree, QTreeWidgetItemIterator::Selected); *it; ++it)
    lines << QString(2 * depthOf(*it), ' ') + (*it)->text(0);
  return lines.join('\n');
}

void StacksPane::copySelection() const {
  const QString text = selectedText();
  QApplication::clipboard()->setText(text.isEmpty() ? m_text : text);
}

bool StacksPane::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() == QEvent::KeyPress) {
    auto* key = static_cast<QKeyEvent*>(event);
    if (key->key() == Qt::Key_Escape) {
      close();
      return true;
    }
    if (watched == m_tree && key->matches(QKeySequence::Copy)) {
      copySelection();
      return true;
    }
  }
  return QDockWidget::eventFilter(watched, event);
}

}  // namespace ptw::ui
