# Cross build for arm64 with Debian's g++-aarch64-linux-gnu. Libraries and headers come from
# Debian multiarch (:arm64 -dev packages under /usr/lib/aarch64-linux-gnu and
# /usr/include/aarch64-linux-gnu), so no x86 objects can be linked in; the architecture-independent
# headers in /usr/include (Boost, nlohmann-json, CLI11, Catch2) are shared, which is what multiarch is for.
# Tests run under qemu-user through CMAKE_CROSSCOMPILING_EMULATOR.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

find_program(HALTPOLL_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64 REQUIRED)
# -L /: the loader and libc come from the multiarch libc6:arm64 (matching the :arm64 -dev packages);
# the cross toolchain's own libc in /usr/aarch64-linux-gnu can be a different build, and mixing the
# two makes pthread_create hang under qemu.
set(CMAKE_CROSSCOMPILING_EMULATOR "${HALTPOLL_QEMU_AARCH64};-L;/")

# Programs from the host; libraries only for the target architecture (multiarch dirs are searched
# through CMAKE_LIBRARY_ARCHITECTURE); headers and CMake packages from both.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(CMAKE_IGNORE_PATH /usr/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/cmake /usr/include/x86_64-linux-gnu)
