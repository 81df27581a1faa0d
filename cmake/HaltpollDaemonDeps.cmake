# Third-party packages of the daemon and the client, all from Debian 12 (see docs/design.md).
find_package(Boost 1.74 REQUIRED)                 # Asio (header-only)
find_package(fmt REQUIRED)                        # formatting (also spdlog's)
find_package(spdlog REQUIRED)                     # logging
find_package(CLI11 REQUIRED)                      # command lines
find_package(nlohmann_json 3.10 REQUIRED)         # config, varlink JSON
# libsystemd has no CMake package; find it directly so that cross builds need no pkg-config setup.
find_path(SYSTEMD_INCLUDE_DIR systemd/sd-daemon.h REQUIRED)
find_library(SYSTEMD_LIBRARY systemd REQUIRED)
if(NOT TARGET haltpoll_systemd)
  add_library(haltpoll_systemd INTERFACE)
  target_include_directories(haltpoll_systemd INTERFACE ${SYSTEMD_INCLUDE_DIR})
  target_link_libraries(haltpoll_systemd INTERFACE ${SYSTEMD_LIBRARY})
endif()
