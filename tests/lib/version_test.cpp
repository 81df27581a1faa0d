#include "haltpoll/version.hpp"

#include <catch2/catch.hpp>

#include <string>

TEST_CASE("library and header agree on the version") {
  CHECK(std::string(haltpoll::version_string()) == HALTPOLL_VERSION_STRING);
  CHECK(std::string(HALTPOLL_VERSION_STRING) ==
        std::to_string(haltpoll::version_major) + "." + std::to_string(haltpoll::version_minor) + "." +
            std::to_string(haltpoll::version_patch));
}
