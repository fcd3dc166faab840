#include "transport/tcp/address.hpp"

#include "common/config.hpp"
#include "common/logging.hpp"

#include <chorus/error.hpp>

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

namespace chorus::transport::tcp {

bool interface_matches(const std::string& name, const std::string& spec) {
  if (spec.empty()) return true;
  bool exclude = false, exact = false;
  std::string list = spec;
  if (list.front() == '^') exclude = true, list.erase(0, 1);
  if (!list.empty() && list.front() == '=') exact = true, list.erase(0, 1);
  bool match = false;
  std::size_t start = 0;
  while (start <= list.size()) {
    const auto comma = list.find(',', start);
    const std::string item = list.substr(start, comma == std::string::npos ? comma : comma - start);
    if (!item.empty() && (exact ? name == item : name.rfind(item, 0) == 0)) match = true;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return exclude ? !match : match;
}

net::SocketAddress choose_local_address() {
  if (const char* addr = config::raw(config::Variable::socket_addr); addr && *addr)
    return net::resolve(addr, 0, "CHORUS_SOCKET_ADDR");
  const char* ifname_env = config::raw(config::Variable::socket_ifname);
  const std::string spec = ifname_env ? ifname_env : "";
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0)
    throw Error(ErrorCode::transport_error, "getifaddrs: " + net::errno_text(errno));
  std::optional<net::SocketAddress> best;
  int best_score = -1;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    const std::string name = i->ifa_name;
    if (family == AF_INET6 &&
        IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr))
      continue;  // would need a scope id on every peer
    const bool loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    int score;
    if (!spec.empty()) {
      if (!interface_matches(name, spec)) continue;
      score = family == AF_INET ? 2 : 1;
    } else {
      const bool virtual_if = name.rfind("docker", 0) == 0 || name.rfind("veth", 0) == 0 ||
                              name.rfind("virbr", 0) == 0 || name.rfind("br-", 0) == 0;
      score = loopback ? 0 : virtual_if ? 1 : (family == AF_INET ? 3 : 2);
    }
    if (score > best_score) {
      net::SocketAddress a;
      a.length = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      std::memcpy(&a.storage, i->ifa_addr, a.length);
      best = a, best_score = score;
    }
  }
  freeifaddrs(list);
  if (!best) {
    if (!spec.empty())
      throw Error(ErrorCode::invalid_argument,
                  "CHORUS_SOCKET_IFNAME='" + spec + "' matches no interface that is up");
    return net::resolve("127.0.0.1", 0, "loopback");
  }
  best->set_port(0);
  return *best;
}

int socket_buffer_bytes(int configured) {
  if (const char* env = config::raw(config::Variable::socket_buffer); env && *env) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (*end == '\0' && v >= 0 && v <= (1L << 30)) return static_cast<int>(v);
    log::warn("CHORUS_SOCKET_BUFFER='{}' is not a byte count; using {}", env, configured);
  }
  return configured;
}

void tune_socket(int fd, int buffer) {
  if (buffer > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer);
  }
}

}  // namespace chorus::transport::tcp
