// SPDX-License-Identifier: GPL-3.0-or-later
// A ptw-worker's own answer to "where are you": the frames of every thread, with function
// names, written to a file the launcher reads (Note [Native stacks]).
//
// Note [Native stacks]
// gdb takes seconds of a core to read LibTorch's symbols before it prints a frame, so a
// worker answers for itself. It catches stacksSignal() (the one Python command programs dump
// their stacks on, Note [Python stacks] in common/command.h): the handler, run in whichever
// thread the launcher's kill() reached, only wakes a thread of the worker's own through a
// pipe. That thread sends the signal to every other thread with tgkill; there the handler
// takes the thread's return addresses with backtrace() (libgcc's unwinder, loaded before the
// first signal, with glibc's lock-free _dl_find_object: nothing in it takes a lock or
// allocates) and writes them to a second pipe in one write, whole. The answering thread then
// names the addresses (dladdr and the C++ demangler; the worker exports its own functions)
// and writes gdb's layout (Thread N, #k 0x... in function from object, thread 1 the main
// one, listed last) to a new file renamed over nativeStacksFile(), where StackCollector reads it. A
// thread that does not answer within a second (the signal blocked) is named as such. The
// launcher falls back to gdb when the file does not come in time (the answering thread
// stuck on a lock another thread holds forever). A rank on another host is asked over its
// control line (Note [Remote ranks] in launch/ssh_starter.h) and writes to the run folder
// the hosts share. Nothing runs while nobody asks: the answering thread sleeps in read().
// The handler is installed with SA_RESTART, so the calls it interrupts are resumed.
#pragma once

#include <string>

namespace ptw::engine {

class NativeStacks {
 public:
  /// Installs the handler and starts the answering thread, which writes to `file`. Once per
  /// process; later calls do nothing. Throws ptw::Error when the pipes cannot be made.
  static void install(const std::string& file);
  /// Asks for this process's stacks, as the signal does (a remote rank's control line).
  /// Async-signal-safe; nothing when not installed.
  static void request();
};

}  // namespace ptw::engine
