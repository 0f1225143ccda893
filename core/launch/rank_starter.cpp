#include "launch/rank_starter.h"

namespace ptw::core {

RankCommand LocalStarter::command(int /*rank*/, const std::vector<std::string>& workerArgs) const {
  RankCommand c;
  c.argv = workerArgs;
  c.argv.insert(c.argv.end(), {"--records", "3"});  // the record pipe (launcher.cpp, kRecordFd)
  return c;
}

}  // namespace ptw::core
