// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/native_stacks.h"

#include <cxxabi.h>
#include <dirent.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/command.h"
#include "common/error.h"

namespace ptw::engine {
namespace {

constexpr int kDepth = 62;  // frames a thread: a message stays under PIPE_BUF, so it is written whole
// The handler's own frame and the signal trampoline's, above the interrupted function.
constexpr int kHandlerFrames = 2;

// One thread's frames, as the handler writes them.
struct Frames {
  std::int64_t generation;  // the request it answers: a late answer to an earlier one is dropped
  std::int32_t tid;
  std::int32_t count;
  void* pcs[kDepth];
};
static_assert(sizeof(Frames) <= PIPE_BUF);
constexpr std::size_t kFramesHead = offsetof(Frames, pcs);

int g_request[2] = {-1, -1};  // the handler wakes the answering thread
int g_frames[2] = {-1, -1};   // each thread's frames to the answering thread
pid_t g_pid = 0;
std::atomic<std::int64_t> g_generation{0};
std::string g_file;

pid_t threadId() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

// A request comes from another process (kill) or from request(); a tgkill from this
// process is the answering thread asking this thread for its frames.
void onStacksSignal(int, siginfo_t* info, void*) {
  const int saved = errno;
  if (info && info->si_code == SI_TKILL && info->si_pid == g_pid) {
    Frames f{};
    f.generation = g_generation.load(std::memory_order_relaxed);
    f.tid = threadId();
    f.count = ::backtrace(f.pcs, kDepth);
    [[maybe_unused]] ssize_t n = ::write(g_frames[1], &f, kFramesHead + sizeof(void*) * f.count);
  } else {
    NativeStacks::request();
  }
  errno = saved;
}

std::string readSmall(const std::string& path) {
  std::string text;
  if (FILE* f = std::fopen(path.c_str(), "re")) {
    char buf[256];
    const std::size_t n = std::fread(buf, 1, sizeof buf, f);
    text.assign(buf, n);
    std::fclose(f);
  }
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

std::vector<pid_t> threadsBut(pid_t self) {
  std::vector<pid_t> out;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d)) {
      const long tid = std::strtol(e->d_name, nullptr, 10);
      if (tid > 0 && tid != self) out.push_back(static_cast<pid_t>(tid));
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Every other thread's frames, asked with tgkill and read from the pipe for at most `wait`.
std::map<pid_t, Frames> collectFrames(const std::vector<pid_t>& threads, std::chrono::milliseconds wait) {
  const std::int64_t generation = g_generation.fetch_add(1, std::memory_order_relaxed) + 1;
  std::size_t asked = 0;
  for (pid_t tid : threads) asked += ::syscall(SYS_tgkill, g_pid, tid, core::stacksSignal()) == 0 ? 1 : 0;
  std::map<pid_t, Frames> got;
  std::string buf;
  const auto until = std::chrono::steady_clock::now() + wait;
  while (got.size() < asked) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count();
    pollfd p{g_frames[0], POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) {
      if (left <= 0 || errno != EINTR) break;
      continue;
    }
    char chunk[PIPE_BUF];
    const ssize_t n = ::read(g_frames[0], chunk, sizeof chunk);
    if (n > 0) buf.append(chunk, static_cast<std::size_t>(n));
    while (buf.size() >= kFramesHead) {  // whole messages: each was one write
      Frames f{};
      std::memcpy(&f, buf.data(), kFramesHead);
      const std::size_t size = kFramesHead + sizeof(void*) * static_cast<std::size_t>(std::clamp(f.count, 0, kDepth));
      if (buf.size() < size) break;
      std::memcpy(&f, buf.data(), size);
      buf.erase(0, size);
      if (f.generation == generation) got[f.tid] = f;
    }
  }
  return got;
}

// "#3  0x000055d0a1b2c3d4 in ptw::engine::Trainer::run(std::atomic<bool>&) from /usr/bin/ptw-worker"
std::string frameLine(int index, void* pc) {
  // A return address points after its call: the call itself is a byte before.
  const auto at = reinterpret_cast<std::uintptr_t>(pc) - (index > 0 ? 1 : 0);
  Dl_info info{};
  std::string name = "??", object;
  if (::dladdr(reinterpret_cast<void*>(at), &info) != 0) {
    if (info.dli_fname) object = info.dli_fname;
    if (info.dli_sname) {
      int status = -1;
      char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
      name = status == 0 && demangled ? demangled : info.dli_sname;
      std::free(demangled);
    }
  }
  char address[32];
  std::snprintf(address, sizeof address, "0x%016llx",
                static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(pc)));
  return "#" + std::to_string(index) + "  " + address + " in " + name + (object.empty() ? "" : " from " + object) +
         "\n";
}

std::string threadSection(int number, pid_t tid, const Frames* f) {
  std::string text = "Thread " + std::to_string(number) + " (LWP " + std::to_string(tid) + " \"" +
                     readSmall("/proc/self/task/" + std::to_string(tid) + "/comm") + "\"):\n";
  if (!f) return text + "(did not answer within 1 s: the stacks signal is blocked in this thread)\n";
  for (int i = kHandlerFrames; i < f->count; ++i) text += frameLine(i - kHandlerFrames, f->pcs[i]);
  return text;
}

// Writes the frames of every thread but this one to g_file, whole (a new file renamed over it).
void answer() {
  const pid_t self = threadId();
  const auto threads = threadsBut(self);
  const auto got = collectFrames(threads, std::chrono::seconds(1));
  // Numbered and ordered as gdb's "thread apply all bt": the main thread is thread 1 and comes
  // last, so that readers match threads the same way whoever took them (Note [Shared frames]).
  std::vector<pid_t> order;
  if (std::find(threads.begin(), threads.end(), g_pid) != threads.end()) order.push_back(g_pid);
  for (pid_t tid : threads)
    if (tid != g_pid) order.push_back(tid);
  std::string text;
  for (std::size_t i = order.size(); i-- > 0;) {
    const auto it = got.find(order[i]);
    text += threadSection(static_cast<int>(i) + 1, order[i], it == got.end() ? nullptr : &it->second);
  }
  const std::string part = g_file + ".part";
  const int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  bool whole = true;
  for (std::size_t at = 0; at < text.size() && whole;) {
    const ssize_t n = ::write(fd, text.data() + at, text.size() - at);
    whole = n > 0 || (n < 0 && errno == EINTR);
    at += n > 0 ? static_cast<std::size_t>(n) : 0;
  }
  whole = ::close(fd) == 0 && whole;
  if (!whole || ::rename(part.c_str(), g_file.c_str()) != 0) ::unlink(part.c_str());
}

// The answering thread: asleep in read() until a request comes; no signal reaches it.
void answerRequests() {
  ::pthread_setname_np(::pthread_self(), "ptw-stacks");  // its own line in the stacks and in top
  sigset_t all;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
  char buf[64];
  for (;;) {
    const ssize_t n = ::read(g_request[0], buf, sizeof buf);  // several requests at once are one
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    answer();
  }
}

}  // namespace

void NativeStacks::install(const std::string& file) {
  static std::once_flag once;
  std::call_once(once, [&file] {
    PTW_CHECK(::pipe2(g_request, O_CLOEXEC | O_NONBLOCK) == 0 && ::pipe2(g_frames, O_CLOEXEC | O_NONBLOCK) == 0,
              "cannot make the pipes of the native stacks: ", std::strerror(errno));
    // The answering thread waits in read(): its end blocks; the handlers' never do.
    ::fcntl(g_request[0], F_SETFL, 0);
    g_pid = ::getpid();
    g_file = file;
    void* warm[4];
    ::backtrace(warm, 4);  // loads libgcc's unwinder now, not in the first handler
    std::thread(answerRequests).detach();
    struct sigaction sa {};
    sa.sa_sigaction = onStacksSignal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ::sigaction(core::stacksSignal(), &sa, nullptr);
  });
}

void NativeStacks::request() {
  if (g_request[1] < 0) return;
  const char c = 1;
  [[maybe_unused]] ssize_t n = ::write(g_request[1], &c, 1);
}

}  // namespace ptw::engine
