// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/network.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace ptw::core {

std::vector<NetworkInterface> networkInterfaces() {
  std::vector<NetworkInterface> found;
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return found;
  for (const ifaddrs* a = all; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || !(a->ifa_flags & IFF_UP)) continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text)) found.push_back({a->ifa_name, text});
  }
  ::freeifaddrs(all);
  return found;
}

namespace {

// One attempt at listening on `port` of every address of `family`; 0 or the errno.
int tryListen(int family, int& port) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  const int on = 1, off = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_storage addr{};
  socklen_t len = 0;
  if (family == AF_INET6) {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);  // IPv4 too, through mapped addresses
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&addr);
    a6->sin6_family = AF_INET6;
    a6->sin6_addr = in6addr_any;
    a6->sin6_port = htons(static_cast<std::uint16_t>(port));
    len = sizeof *a6;
  } else {
    auto* a4 = reinterpret_cast<sockaddr_in*>(&addr);
    a4->sin_family = AF_INET;
    a4->sin_addr.s_addr = htonl(INADDR_ANY);
    a4->sin_port = htons(static_cast<std::uint16_t>(port));
    len = sizeof *a4;
  }
  int err = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, 1) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    err = errno;
  else
    port = ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                    : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  ::close(fd);
  return err;
}

}  // namespace

// Note [Rendezvous port check]
// Rank 0's TCPStore (LibTorch 1.13, c10d/socket.cpp) listens with SO_REUSEADDR on the
// wildcard address: IPv6 first, dual-stack, and IPv4 where that fails. The check does the
// same, so it passes exactly where the store can open the port: a port left in TIME_WAIT by
// an earlier run passes, one that another program listens on fails.
std::string listenProblem(int& port) {
  int tried = port;
  const int v6 = tryListen(AF_INET6, tried);
  if (v6 == 0) {
    port = tried;
    return "";
  }
  tried = port;
  const int v4 = tryListen(AF_INET, tried);
  if (v4 == 0) {
    port = tried;
    return "";
  }
  return std::strerror(v4);  // the store's last try; a host without IPv6 fails IPv6 for that alone
}

}  // namespace ptw::core
