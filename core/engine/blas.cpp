// SPDX-License-Identifier: GPL-3.0-or-later
// Note [BLAS threads]
// LibTorch on Debian does its matrix products in whichever libblas.so.3 the system
// selects. OpenBLAS (installed by packaging/install-deps.sh, several times faster than
// the reference BLAS) keeps a thread pool of its own sized to every core and unaware of
// set_num_threads: two ranks on two cores would run four GEMM threads against each other.
// A rank sizes it like LibTorch's own pool (setBlasThreads).
//
// Note [BLAS kernels]
// OpenBLAS picks its kernels when it loads, from a table of CPU models. A CPU newer than
// the OpenBLAS release does not appear there, and OpenBLAS then falls back to its Prescott
// kernels, plain SSE3: Debian 12's OpenBLAS 0.3.21 does so on Intel's family 6 model 207
// (5th-generation Xeon), where a compute-bound rank then trains several times slower than
// with the AVX-512 kernels the CPU supports (BENCHMARKS.md). Told a kernel set by
// OPENBLAS_CORETYPE, OpenBLAS uses it. The variable is read when the library loads, before
// main, so a worker that finds OpenBLAS fell back on a CPU with AVX or later sets it and
// executes itself again; it does this only when the user has not set the variable, and says
// so on its log.
#include "engine/blas.h"

#include <dlfcn.h>
#include <strings.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ptw::engine {

CpuFeatures cpuFeatures() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx = __builtin_cpu_supports("avx");
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#endif
  return f;
}

void setBlasThreads(int threads) {
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
}

std::string openblasCore() {
  using CoreName = char* (*)();
  auto coreName = reinterpret_cast<CoreName>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const char* name = coreName ? coreName() : nullptr;
  return name ? name : "";
}

std::string betterOpenblasCore(std::string_view core, const CpuFeatures& cpu) {
  if (core.size() != std::strlen("prescott") || ::strncasecmp(core.data(), "prescott", core.size()) != 0) return "";
  if (cpu.avx512) return "SkylakeX";
  if (cpu.avx2) return "Haswell";
  if (cpu.avx) return "Sandybridge";
  return "";
}

void rerunWithBetterBlasKernels(char** argv, const std::string& who) {
  if (std::getenv("OPENBLAS_CORETYPE")) return;  // the user's choice, or this is the run again
  const std::string core = openblasCore();
  const std::string better = betterOpenblasCore(core, cpuFeatures());
  if (better.empty()) return;
  std::fprintf(stderr,
               "%s OpenBLAS does not know this CPU and fell back to its %s kernels; running with "
               "OPENBLAS_CORETYPE=%s, the kernels this CPU supports (set OPENBLAS_CORETYPE to choose)\n",
               who.c_str(), core.c_str(), better.c_str());
  // Executed by the file /proc/self/exe links to, not by the link: the kernel names a process
  // after the file it executes, and ranks keep the name ptw-worker (ps, and the searches for
  // left-over workers).
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    ::setenv("OPENBLAS_CORETYPE", better.c_str(), 1);
    ::execv(self, argv);
  }
  std::fprintf(stderr, "%s could not run again (%s); training with OpenBLAS's %s kernels\n", who.c_str(),
               std::strerror(errno), core.c_str());
  ::unsetenv("OPENBLAS_CORETYPE");
}

}  // namespace ptw::engine
