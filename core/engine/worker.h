// The worker process: one rank of a run. Reads the resolved profile, joins the process
// group, trains, and speaks the record protocol (common/record.h) on stdout; logs and
// errors go to stderr. Exit codes: 0 done (or stopped on request), 1 training failed,
// 2 bad arguments or profile.
#pragma once

namespace ptw::engine {

int workerMain(int argc, char** argv);

}  // namespace ptw::engine
