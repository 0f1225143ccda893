// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/attach_dialog.h"

#include <QDialogButtonBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

#include "common/error.h"
#include "launch/follow_source.h"

namespace ptw::ui {

AttachDialog::AttachDialog(const QString& runsDir, core::HostsSpec hosts, QWidget* parent)
    : QDialog(parent), m_hosts(std::move(hosts)) {
  setWindowTitle(tr("Attach to Run"));
  setObjectName("attachDialog");
  auto* layout = new QVBoxLayout(this);
  auto* row = new QHBoxLayout;
  m_dir = new QLineEdit(runsDir, this);
  m_dir->setObjectName("attachRunsDir");
  m_dir->setPlaceholderText(tr("a runs directory here, or HOST:DIR on another host (through ssh)"));
  auto* listButton = new QPushButton(tr("&List"), this);
  listButton->setObjectName("attachList");
  row->addWidget(new QLabel(tr("Runs directory:"), this));
  row->addWidget(m_dir, 1);
  row->addWidget(listButton);
  layout->addLayout(row);
  m_table = new QTableWidget(0, 5, this);
  m_table->setObjectName("attachRuns");
  m_table->setHorizontalHeaderLabels({tr("id"), tr("name"), tr("strategy"), tr("world"), tr("started (UTC)")});
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::SingleSelection);
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_table->horizontalHeader()->setStretchLastSection(true);
  layout->addWidget(m_table, 1);
  m_problem = new QLabel(this);
  m_problem->setObjectName("attachProblem");
  m_problem->setWordWrap(true);
  layout->addWidget(m_problem);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  buttons->button(QDialogButtonBox::Ok)->setText(tr("&Attach"));
  layout->addWidget(buttons);
  connect(listButton, &QPushButton::clicked, this, &AttachDialog::list);
  connect(m_dir, &QLineEdit::returnPressed, this, &AttachDialog::list);
  connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  connect(m_table, &QTableWidget::cellDoubleClicked, this, &QDialog::accept);
  resize(640, 360);
}

void AttachDialog::list() {
  m_rows.clear();
  m_table->setRowCount(0);
  m_problem->clear();
  try {
    m_rows = core::listRuns(runsDir().toStdString(), m_hosts, true);
  } catch (const Error& e) {
    m_problem->setText(QString::fromStdString(e.what()));
    return;
  }
  if (m_rows.empty()) m_problem->setText(tr("No run of %1 is running.").arg(runsDir()));
  m_table->setRowCount(static_cast<int>(m_rows.size()));
  for (int i = 0; i < static_cast<int>(m_rows.size()); ++i) {
    const auto& r = m_rows[static_cast<std::size_t>(i)];
    const QStringList cells = {QString::number(r.id), QString::fromStdString(r.name),
                               QString::fromStdString(r.strategy), QString::number(r.world),
                               QString::fromStdString(r.startedAt)};
    for (int c = 0; c < cells.size(); ++c) m_table->setItem(i, c, new QTableWidgetItem(cells[c]));
  }
  if (!m_rows.empty()) m_table->selectRow(static_cast<int>(m_rows.size()) - 1);  // the newest
}

QString AttachDialog::runsDir() const { return m_dir->text().trimmed(); }

QString AttachDialog::problem() const { return m_problem->text(); }

core::RunRow AttachDialog::chosen() const {
  const int row = m_table->currentRow();
  return row >= 0 && row < static_cast<int>(m_rows.size()) ? m_rows[static_cast<std::size_t>(row)] : core::RunRow{};
}

}  // namespace ptw::ui
