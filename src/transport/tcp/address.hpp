// Where the TCP transport listens and how its sockets are tuned:
// CHORUS_SOCKET_ADDR, CHORUS_SOCKET_IFNAME (NCCL_SOCKET_IFNAME's syntax),
// CHORUS_SOCKET_BUFFER.
#pragma once

#include "common/socket.hpp"

#include <string>

namespace chorus::transport::tcp {

// Whether interface `name` matches `spec`: a comma list of prefixes; "^"
// first excludes them, "=" first matches names exactly; empty matches all.
bool interface_matches(const std::string& name, const std::string& spec);
// CHORUS_SOCKET_ADDR, else the first address of the interfaces
// CHORUS_SOCKET_IFNAME names, else the first up, non-loopback, non-virtual
// interface (IPv4 first), else loopback; port 0.
net::SocketAddress choose_local_address();
// CHORUS_SOCKET_BUFFER when set and valid, else `configured`.
int socket_buffer_bytes(int configured);
// SO_SNDBUF/SO_RCVBUF = `buffer` when > 0.
void tune_socket(int fd, int buffer);

}  // namespace chorus::transport::tcp
