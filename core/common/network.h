// SPDX-License-Identifier: GPL-3.0-or-later
// What this machine's network offers a run across hosts: its interfaces, for the window's
// hosts.interface picker, and whether a port can be opened for the rendezvous, for the check
// a host runs before a run (`ptw-worker --check-port`, docs/multihost.md). POSIX only.
#pragma once

#include <string>
#include <vector>

namespace ptw::core {

/// An interface that is up with an IPv4 address; one entry per address.
struct NetworkInterface {
  std::string name;  ///< "eth1", as hosts.interface and GLOO_SOCKET_IFNAME name it
  std::string ipv4;  ///< "10.0.0.5"
};

/// This machine's interfaces that are up and have an IPv4 address, in the order the kernel
/// lists them (loopback included). Empty when they cannot be read.
std::vector<NetworkInterface> networkInterfaces();

/// Opens `port` (0: any free port) for listening on every interface, IPv6 and IPv4, as
/// LibTorch 1.13's TCPStore does for the rendezvous (Note [Rendezvous port check]), then
/// closes it. "" when it could, `port` then set to the port opened; else the reason
/// (strerror: "Address already in use", "Permission denied").
std::string listenProblem(int& port);

}  // namespace ptw::core
