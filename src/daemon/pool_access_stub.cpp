// Built instead of pool_access.cpp while the library has no WorkerPool: no pool, no probes.
#include "pool_access.hpp"

namespace haltpolld {

std::unique_ptr<PoolAccess> make_pool_access(haltpoll::WorkerPool*) { return nullptr; }

}  // namespace haltpolld
