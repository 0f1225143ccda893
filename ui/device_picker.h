// SPDX-License-Identifier: GPL-3.0-or-later
// DevicePicker: the devices this machine has, as LibTorch sees them (asked of
// `ptw-worker --devices`, so the GUI never links LibTorch): the CPU with its cores, memory
// and the OpenBLAS kernels ranks train with (Note [BLAS kernels]), each CUDA GPU with its
// name, memory and current use. The user ticks the CPU (and sets ranks or lanes) or GPUs;
// the picker reports the device and the count.
#pragma once

#include <QString>
#include <QWidget>

#include <cstdint>
#include <vector>

class QCheckBox;
class QProcess;
class QLabel;
class QSpinBox;
class QVBoxLayout;

namespace ptw::ui {

class DevicePicker : public QWidget {
  Q_OBJECT
 public:
  struct Device {
    QString kind;  ///< cpu | cuda
    int index = 0;
    QString name;
    int cores = 0;
    qint64 memoryBytes = 0;
    qint64 usedBytes = 0;
    QString openblasCore;  ///< cpu: the OpenBLAS kernels ranks train with ("" when not OpenBLAS)
  };
  explicit DevicePicker(QWidget* parent = nullptr);
  ~DevicePicker() override;

  /// Parses `ptw-worker --devices` output (JSON lines).
  static std::vector<Device> parseDevices(const QByteArray& jsonLines);
  /// Lists `devices` and shows the last select() among them.
  void setDevices(const std::vector<Device>& devices);
  const std::vector<Device>& devices() const { return m_devices; }

  /// Shows the profile's choice: `device` cpu with `ranks`, or the GPUs in `gpus`
  /// (strategy.gpus), or when that is empty cuda:0 to cuda:ranks-1.
  void select(const QString& device, int ranks, const std::vector<std::int64_t>& gpus = {});
  QString device() const;
  int ranks() const;
  /// The ticked GPUs' indices in ascending order, as strategy.gpus: empty when they are
  /// cuda:0 to cuda:n-1. (A profile may list them in another order; ticking reorders them.)
  std::vector<std::int64_t> gpus() const;
  /// True until `ptw-worker --devices` has answered (or failed): while it runs, and while it
  /// waits for a run to end.
  bool probing() const { return !m_listed; }
  /// While held, the probe waits (one in flight is stopped and asked again later). Note
  /// [Device probe waits for runs].
  void setProbeHeld(bool held);
  /// "world size 4 · global batch 64"
  void setSummary(const QString& text);

 signals:
  void changed();

 private:
  void rebuild();
  void startProbe();
  /// The line under the devices when no GPU is listed: none found, or not yet asked.
  void updateNoGpuNote();
  std::vector<Device> m_devices;
  QVBoxLayout* m_rows;
  QCheckBox* m_cpu = nullptr;
  QSpinBox* m_cpuRanks = nullptr;
  struct GpuBox {
    int index;  ///< cuda:index
    QCheckBox* box;
  };
  std::vector<GpuBox> m_gpus;
  struct Selection {
    QString device = "cpu";
    int ranks = 1;
    std::vector<std::int64_t> gpus;
  };
  Selection m_selected;  ///< the last select(), shown again once the worker has listed the GPUs
  QLabel* m_summary;
  QLabel* m_noGpu = nullptr;  ///< shown while no GPU is listed
  QProcess* m_probe = nullptr;
  bool m_listed = false;  ///< the worker has answered, or cannot
  bool m_probeHeld = false;
  bool m_updating = false;
};

}  // namespace ptw::ui
