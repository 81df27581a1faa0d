// haltpoll version: the single source of truth. CMake reads the three macros below
// (see the top-level CMakeLists.txt); code reads them or haltpoll::version_string().
#pragma once

#define HALTPOLL_VERSION_MAJOR 0
#define HALTPOLL_VERSION_MINOR 1
#define HALTPOLL_VERSION_PATCH 0

#define HALTPOLL_STRINGIFY_(x) #x
#define HALTPOLL_STRINGIFY(x) HALTPOLL_STRINGIFY_(x)
#define HALTPOLL_VERSION_STRING                                                         \
  HALTPOLL_STRINGIFY(HALTPOLL_VERSION_MAJOR)                                            \
  "." HALTPOLL_STRINGIFY(HALTPOLL_VERSION_MINOR) "." HALTPOLL_STRINGIFY(HALTPOLL_VERSION_PATCH)

namespace haltpoll {

inline constexpr int version_major = HALTPOLL_VERSION_MAJOR;
inline constexpr int version_minor = HALTPOLL_VERSION_MINOR;
inline constexpr int version_patch = HALTPOLL_VERSION_PATCH;

// The version the library was built as; compare with HALTPOLL_VERSION_STRING to detect a
// header/library mismatch in a consumer.
const char* version_string() noexcept;

}  // namespace haltpoll
