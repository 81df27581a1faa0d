#include <haltpoll/version.hpp>

#include <cstdio>
#include <cstring>

int main() {
  if (std::strcmp(haltpoll::version_string(), HALTPOLL_VERSION_STRING) != 0) return 1;
  std::printf("haltpoll %s\n", haltpoll::version_string());
  return 0;
}
