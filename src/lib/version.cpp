#include "haltpoll/version.hpp"

namespace haltpoll {

const char* version_string() noexcept { return HALTPOLL_VERSION_STRING; }

}  // namespace haltpoll
