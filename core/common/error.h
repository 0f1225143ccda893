// SPDX-License-Identifier: GPL-3.0-or-later
// The project's one error type and the check macro that raises it.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace ptw {

/// Every failure ptw reports to a user is an Error: the message says what was
/// expected, what was found, and what to do.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace ptw

/// PTW_CHECK(cond, "hyper.lr: must be > 0, got ", lr) throws ptw::Error when cond is false.
#define PTW_CHECK(cond, ...)                                             \
  do {                                                                   \
    if (!(cond)) throw ::ptw::Error(::ptw::detail::concat(__VA_ARGS__)); \
  } while (false)

#define PTW_FAIL(...) throw ::ptw::Error(::ptw::detail::concat(__VA_ARGS__))
