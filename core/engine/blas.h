// SPDX-License-Identifier: GPL-3.0-or-later
// The BLAS under LibTorch: how many threads it runs (Note [BLAS threads]) and which kernels
// it multiplies matrices with (Note [BLAS kernels]).
// Plain C++: no LibTorch.
#pragma once

#include <string>
#include <string_view>

namespace ptw::engine {

/// The x86 instruction sets OpenBLAS picks its kernels by, as this CPU and OS support them.
struct CpuFeatures {
  bool avx = false;
  bool avx2 = false;    ///< with FMA, as the Haswell kernels need
  bool avx512 = false;  ///< F, BW, DQ and VL, as the SkylakeX kernels need
};
CpuFeatures cpuFeatures();

/// Note [BLAS threads]: sizes OpenBLAS's thread pool, when the BLAS is OpenBLAS.
void setBlasThreads(int threads);

/// The kernel set OpenBLAS runs ("SkylakeX", "Haswell", "Prescott", ...), or "" when the BLAS
/// LibTorch calls is not OpenBLAS.
std::string openblasCore();

/// The OPENBLAS_CORETYPE a rank should run with when OpenBLAS chose `core` on a CPU with
/// `cpu`, or "" to keep OpenBLAS's choice: set only when OpenBLAS fell back to Prescott
/// (plain SSE3) on a CPU with AVX or later, the instruction sets ranked as OpenBLAS ranks them.
std::string betterOpenblasCore(std::string_view core, const CpuFeatures& cpu);

/// Note [BLAS kernels]: when OPENBLAS_CORETYPE is unset and betterOpenblasCore() names a
/// kernel set, sets it and executes this program again with `argv` (the same process, so
/// its descriptors and parent see nothing change). Returns when there is nothing to do or
/// the exec failed (then the worker goes on with OpenBLAS's choice). `who` starts the line
/// that says so on stderr ("[rank 1]").
void rerunWithBetterBlasKernels(char** argv, const std::string& who);

}  // namespace ptw::engine
