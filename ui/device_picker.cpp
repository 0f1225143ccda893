// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/device_picker.h"

#include <QCheckBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QProcess>
#include <QSpinBox>
#include <QTimer>
#include <QVBoxLayout>

#include <algorithm>
#include <thread>

#include "common/worker_invocation.h"
#include "launch/launcher.h"
#include "ui/child_process.h"

namespace ptw::ui {
namespace {
QString gib(qint64 bytes) { return QString::number(static_cast<double>(bytes) / (1 << 30), 'f', 1) + " GiB"; }
}  // namespace

DevicePicker::DevicePicker(QWidget* parent) : QWidget(parent), m_rows(new QVBoxLayout), m_summary(new QLabel(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addLayout(m_rows);
  m_summary->setObjectName("devices.summary");
  layout->addWidget(m_summary);
  // Until the worker answers: the CPU as Qt sees it.
  Device cpu;
  cpu.kind = "cpu";
  cpu.name = "CPU";
  cpu.cores = static_cast<int>(std::thread::hardware_concurrency());
  setDevices({cpu});
  QTimer::singleShot(0, this, [this] { setProbeHeld(m_probeHeld); });  // unless a run holds it by then
}

// Note [Device probe waits for runs]
// `ptw-worker --devices` loads LibTorch to list the devices: seconds of CPU, more where
// OpenBLAS makes it start twice (Note [BLAS kernels]). A window opened with --start, or
// Start pressed at once, would run it beside the new run's ranks, and ranks that own every
// core lose whatever CPU another process takes. So the window holds
// the probe while a run or a sweep trains: it starts when they end, and one already running
// when they start is stopped and asked again then. Until it answers, the picker lists the
// CPU as Qt sees it; the run itself goes by its profile, not by the picker's list.
void DevicePicker::setProbeHeld(bool held) {
  m_probeHeld = held;
  if (held && m_probe) {
    stopChildProcess(m_probe, this);
    m_probe->deleteLater();
    m_probe = nullptr;
  }
  if (!held && !m_listed && !m_probe) startProbe();
  updateNoGpuNote();
}

void DevicePicker::updateNoGpuNote() {
  if (!m_noGpu) return;
  m_noGpu->setText(m_listed      ? tr("No CUDA device visible to LibTorch.")
                   : m_probeHeld ? tr("CUDA devices are listed when the run ends (listing them would take a core "
                                      "from its ranks).")
                                 : tr("Looking for CUDA devices…"));
}

void DevicePicker::startProbe() {
  auto* probe = m_probe = new QProcess(this);
  connect(probe, &QProcess::finished, this, [this, probe](int code, QProcess::ExitStatus) {
    m_probe = nullptr;
    m_listed = true;
    if (code == 0) {
      auto found = parseDevices(probe->readAllStandardOutput());
      if (!found.empty()) setDevices(found);
    }
    updateNoGpuNote();
    probe->deleteLater();
  });
  connect(probe, &QProcess::errorOccurred, this, [this, probe](QProcess::ProcessError error) {
    if (error != QProcess::FailedToStart) return;  // else finished() follows
    m_probe = nullptr;                             // no worker to ask: the CPU as Qt sees it stays
    m_listed = true;
    updateNoGpuNote();
    probe->deleteLater();
  });
  core::WorkerInvocation devices(core::Launcher::defaultWorkerPath());
  devices.devices = true;
  QStringList args;
  for (const auto& a : devices.flags()) args << QString::fromStdString(a);
  probe->start(QString::fromStdString(devices.program), args);
}

DevicePicker::~DevicePicker() { stopChildProcess(m_probe, this); }

std::vector<DevicePicker::Device> DevicePicker::parseDevices(const QByteArray& jsonLines) {
  std::vector<Device> out;
  for (const auto& found : core::parseDevices(jsonLines.toStdString())) {
    Device d;
    d.kind = QString::fromStdString(found.kind);
    d.index = found.index;
    d.name = QString::fromStdString(found.name);
    d.cores = found.cores;
    d.memoryBytes = found.memoryBytes;
    d.usedBytes = found.usedBytes;
    d.openblasCore = QString::fromStdString(found.openblasCore);
    out.push_back(d);
  }
  return out;
}

void DevicePicker::setDevices(const std::vector<Device>& devices) {
  m_devices = devices;
  rebuild();
  select(m_selected.device, m_selected.ranks, m_selected.gpus);  // the profile's choice, with these devices
}

void DevicePicker::rebuild() {
  while (auto* item = m_rows->takeAt(0)) {
    if (auto* w = item->widget()) w->deleteLater();
    if (auto* l = item->layout()) {
      while (auto* inner = l->takeAt(0)) {
        if (inner->widget()) inner->widget()->deleteLater();
        delete inner;
      }
    }
    delete item;
  }
  m_gpus.clear();
  m_cpu = nullptr;
  m_noGpu = nullptr;
  for (const auto& d : m_devices) {
    if (d.kind == "cpu") {
      auto* row = new QHBoxLayout;
      // Memory comes with the worker's list; Qt's own knows the cores only.
      m_cpu = new QCheckBox(d.memoryBytes > 0 ? tr("CPU: %1 cores, %2").arg(d.cores).arg(gib(d.memoryBytes))
                                              : tr("CPU: %1 cores").arg(d.cores),
                            this);
      m_cpu->setObjectName("device.cpu");
      m_cpuRanks = new QSpinBox(this);
      m_cpuRanks->setObjectName("device.cpu.ranks");
      m_cpuRanks->setRange(1, 255);
      m_cpuRanks->setToolTip(tr("CPU ranks (DDP), lanes (DataParallel) or workers (pool)"));
      row->addWidget(m_cpu);
      row->addWidget(new QLabel(tr("ranks"), this));
      row->addWidget(m_cpuRanks);
      m_rows->addLayout(row);
      if (!d.openblasCore.isEmpty()) {  // what CPU ranks multiply matrices with (Note [BLAS kernels])
        auto* kernels = new QLabel(tr("OpenBLAS %1 kernels").arg(d.openblasCore), this);
        kernels->setObjectName("device.cpu.blas");
        kernels->setEnabled(false);
        m_rows->addWidget(kernels);
      }
      connect(m_cpu, &QCheckBox::toggled, this, [this](bool on) {
        if (m_updating) return;
        m_updating = true;
        if (on)
          for (const auto& g : m_gpus) g.box->setChecked(false);
        m_updating = false;
        emit changed();
      });
      connect(m_cpuRanks, qOverload<int>(&QSpinBox::valueChanged), this, [this] {
        if (!m_updating) emit changed();
      });
    } else {
      auto* box = new QCheckBox(
          tr("cuda:%1: %2, %3 (%4 in use)").arg(d.index).arg(d.name, gib(d.memoryBytes), gib(d.usedBytes)), this);
      box->setObjectName(QStringLiteral("device.cuda.%1").arg(d.index));
      m_gpus.push_back({d.index, box});
      m_rows->addWidget(box);
      connect(box, &QCheckBox::toggled, this, [this](bool on) {
        if (m_updating) return;
        m_updating = true;
        if (on && m_cpu) m_cpu->setChecked(false);
        m_updating = false;
        emit changed();
      });
    }
  }
  if (m_gpus.empty()) {
    m_noGpu = new QLabel(this);
    m_noGpu->setObjectName("device.noGpu");
    m_noGpu->setEnabled(false);
    m_noGpu->setWordWrap(true);
    m_rows->addWidget(m_noGpu);
    updateNoGpuNote();
  }
}

void DevicePicker::select(const QString& device, int ranks, const std::vector<std::int64_t>& gpus) {
  m_selected = {device, ranks, gpus};
  m_updating = true;
  const bool cuda = device == "cuda" && !m_gpus.empty();
  if (m_cpu) m_cpu->setChecked(!cuda);
  if (m_cpuRanks) m_cpuRanks->setValue(std::max(1, ranks));
  for (const auto& g : m_gpus) {
    const bool listed = gpus.empty() ? g.index < ranks : std::find(gpus.begin(), gpus.end(), g.index) != gpus.end();
    g.box->setChecked(cuda && listed);
  }
  m_updating = false;
}

std::vector<std::int64_t> DevicePicker::gpus() const {
  std::vector<std::int64_t> ticked;
  for (const auto& g : m_gpus)
    if (g.box->isChecked()) ticked.push_back(g.index);
  for (std::size_t i = 0; i < ticked.size(); ++i)
    if (ticked[i] != static_cast<std::int64_t>(i)) return ticked;
  return {};  // cuda:0 to cuda:n-1, the default
}

QString DevicePicker::device() const {
  for (const auto& g : m_gpus)
    if (g.box->isChecked()) return "cuda";
  return "cpu";
}

int DevicePicker::ranks() const {
  int gpus = 0;
  for (const auto& g : m_gpus) gpus += g.box->isChecked() ? 1 : 0;
  if (gpus > 0) return gpus;
  return m_cpuRanks ? m_cpuRanks->value() : 1;
}

void DevicePicker::setSummary(const QString& text) { m_summary->setText(text); }

}  // namespace ptw::ui
