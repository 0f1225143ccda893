// SPDX-License-Identifier: GPL-3.0-or-later
// What two ranks in lock-step can reach on this machine before they exchange anything, set
// against DDP over shared memory: the mlp workload of tests/bench/bench_ddp.sh (MLP
// 784-512-512-10, batch 128 a rank, SGD momentum 0.9, one thread a rank), trained by ptw's
// own Trainer in processes of this program, four ways, alternated in every round:
//   single    one process, ptw Single                          (the denominator: 2 x single)
//   apart     two processes, ptw Single each, at the same time   (what two cores give)
//   lockstep  two processes, ptw Single each, meeting at a shared-memory barrier after backward
//             and after the optimizer, where DDP's sharded step meets (Note [Sharded SGD step]),
//             exchanging nothing                                   (what waiting for each other costs)
//   ddp       two processes, ptw DDP over shared memory            (what ptw's DDP reaches)
// and prints each one's samples/s (throughput as ptw reports it: warm-up left out) and the
// ratios paired within each round: apart, lockstep and ddp over 2 x single (scaling
// efficiency), lockstep / apart (what waiting for each other costs) and ddp / lockstep (what
// the exchange costs on top of it). A case that fails ends the program with status 1.
//
//   build/bin/bench_lockstep [rounds=5] [steps=600]
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/profile.h"
#include "common/shm_names.h"
#include "engine/blas.h"
#include "engine/shm_segment.h"
#include "engine/strategy.h"
#include "engine/trainer.h"
#include "launch/throughput.h"

using namespace ptw;

namespace {

core::Profile mlpProfile(const std::string& kind, long steps) {
  core::Profile p = core::applyOverrides(
      core::defaultProfile(),
      {"model.kind=mlp", "model.in_features=784", "model.hidden=[512,512]", "model.out_features=10",
       "data.kind=synthetic-classification", "data.samples=8192", "hyper.batch_size=128", "hyper.momentum=0.9",
       "hyper.lr=0.01", "hyper.max_steps=" + std::to_string(steps), "run.threads_per_rank=1",
       "strategy.ranks=" + std::string(kind == "ddp" ? "2" : "1"),
       "strategy.kind=" + std::string(kind == "ddp" ? "ddp" : "single"), "strategy.backend=shm"});
  return p;
}

// Single's step, meeting the other rank after backward and after the optimizer: lock-step
// without an exchange.
class LockstepSingle final : public engine::Strategy {
 public:
  LockstepSingle(const std::string& name, int rank) : m_rank(rank), m_name(name) {}
  engine::BatchPlan plan(const core::Profile& p, std::int64_t samples) const override {
    return engine::shardPlan(p, samples, 0, 1);
  }
  void attach(engine::Model&) override {
    m_segment = std::make_shared<engine::ShmSegment>(m_name, m_rank, 2, 64, std::chrono::milliseconds(60000));
    m_segment->barrier();
    m_segment->unlink();
  }
  bool reduce(engine::Model&, engine::StepState&) override {
    m_segment->barrier();
    return m_localStop;
  }
  void optimizerStep(torch::optim::Optimizer& optimizer, double clipNorm) override {
    Strategy::optimizerStep(optimizer, clipNorm);
    m_segment->barrier();
  }

 private:
  int m_rank;
  std::string m_name;
  std::shared_ptr<engine::ShmSegment> m_segment;
};

// One process of a case: trains, prints its samples/s.
int child(const std::string& kind, int rank, int port, long steps) try {
  torch::set_num_threads(1);
  engine::setBlasThreads(1);  // as a rank does (Note [BLAS threads])
  const core::Profile p = mlpProfile(kind, steps);
  const int world = kind == "ddp" ? 2 : 1;
  std::unique_ptr<engine::Strategy> strategy;
  if (kind == "lockstep")
    strategy = std::make_unique<LockstepSingle>(
        core::sharedSegmentName(port, "lockstep-" + std::to_string(::getppid())), rank);
  else
    strategy = engine::makeStrategy(engine::SyncContext{p, world == 2 ? rank : 0, world, port, ""});
  core::ThroughputMeter meter(p);
  engine::Trainer trainer(engine::TrainerOptions(p, world == 2 ? rank : 0, world), std::move(strategy),
                          [&](const core::Record& r) {
                            if (r.kind == core::Record::Kind::Step) meter.add(r.step);
                          });
  std::atomic<bool> stop{false};
  trainer.run(stop);
  std::printf("%.3f\n", meter.total());
  return 0;
} catch (const std::exception& e) {  // unwinds, so rank 0 removes its segment
  std::fprintf(stderr, "bench_lockstep: %s rank %d: %s\n", kind.c_str(), rank, e.what());
  return 1;
}

// Runs `processes` children of `kind` at once; returns their samples/s summed (0 on failure).
double runCase(const char* self, const std::string& kind, int processes, int port, long steps) {
  std::vector<std::pair<pid_t, int>> kids;
  bool ok = true;
  for (int r = 0; r < processes; ++r) {
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) {
      ok = false;
      break;
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(out[0]);
      ::close(out[1]);
      ok = false;
      break;
    }
    if (pid == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::close(out[0]);
      ::close(out[1]);
      const std::string rank = std::to_string(r), p = std::to_string(port), s = std::to_string(steps);
      ::execl(self, self, "--child", kind.c_str(), rank.c_str(), p.c_str(), s.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(out[1]);
    kids.emplace_back(pid, out[0]);
  }
  double total = 0;
  for (auto [pid, fd] : kids) {  // a child left alone at a barrier gives up after its timeout
    char buf[64] = {};
    const ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ok = ok && n > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    total += n > 0 ? std::atof(buf) : 0;
  }
  return ok ? total : 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  engine::rerunWithBetterBlasKernels(argv, "bench_lockstep:");  // Note [BLAS kernels], inherited by the children
  if (argc == 6 && std::string(argv[1]) == "--child")
    return child(argv[2], std::atoi(argv[3]), std::atoi(argv[4]), std::atol(argv[5]));
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  const long steps = argc > 2 ? std::atol(argv[2]) : 600;
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return 2;
  self[n] = '\0';
  const int port = 20000 + ::getpid() % 20000;  // with the pid in the lock-step segment's name: this run's only
  const char* kinds[] = {"single", "apart", "lockstep", "ddp"};
  std::vector<double> samples[4], apart, lockstep, ddp, lockstepApart, ddpLockstep;
  std::printf("mlp, %ld steps, %d rounds (samples/s: single, apart, lockstep, ddp)\n", steps, rounds);
  for (int round = 0; round < rounds; ++round) {
    for (int k = 0; k < 4; ++k) {
      const std::string kind = kinds[k] == std::string("apart") ? "single" : kinds[k];
      samples[k].push_back(runCase(self, kind, k == 0 ? 1 : 2, port + round * 4 + k, steps));
      if (samples[k].back() <= 0) {
        std::fprintf(stderr, "bench_lockstep: the %s case of round %d failed\n", kinds[k], round + 1);
        return 1;
      }
    }
    const double twoSingles = 2 * samples[0].back();
    apart.push_back(samples[1].back() / twoSingles);
    lockstep.push_back(samples[2].back() / twoSingles);
    ddp.push_back(samples[3].back() / twoSingles);
    lockstepApart.push_back(samples[2].back() / samples[1].back());
    ddpLockstep.push_back(samples[3].back() / samples[2].back());
    std::printf("  round %d: %.0f %.0f %.0f %.0f; / (2 x single): apart %.3f lockstep %.3f ddp %.3f\n", round + 1,
                samples[0].back(), samples[1].back(), samples[2].back(), samples[3].back(), apart.back(),
                lockstep.back(), ddp.back());
    std::fflush(stdout);
  }
  std::printf(
      "medians of the paired ratios: apart / (2 x single) %.3f, lockstep / (2 x single) %.3f, "
      "ddp / (2 x single) %.3f, lockstep / apart %.3f, ddp / lockstep %.3f\n",
      median(apart), median(lockstep), median(ddp), median(lockstepApart), median(ddpLockstep));
  return 0;
}
