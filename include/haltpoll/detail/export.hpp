// HALTPOLL_EXPORT: marks the few library variables whose identity matters across shared-object
// boundaries (one per process, whatever -fvisibility a build of the library or its user chose).
#pragma once

#define HALTPOLL_EXPORT __attribute__((visibility("default")))
